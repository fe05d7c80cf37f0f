"""Does the success memory help a frozen policy under a persistent shift? Paired streams, memory on
vs off, with the ablations beside the full method; one JSON line.

    python benchmarks/memory_gain.py --shift blocked-left --streams 5 --episodes 100 --seed 40000 \\
        --cache /tmp/mg-cache --plot blocked-left.png          # all arms: about 55 min on 2 cores
    python benchmarks/memory_gain.py --shift heavy --streams 5 --episodes 100 --seed 60000 --arms off,online
    python benchmarks/memory_gain.py --shift blocked-left --streams 5 --episodes 100 --seed 40000 \\
        --arms off,online,noisy-labels,noisy-no-credit,noisy-burst,noisy-burst-no-credit   # false labels
    python benchmarks/memory_gain.py --shift blocked-left --then-shift blocked-right --switch-at 100 \\
        --streams 3 --episodes 200 --seed 70000 --arms online,no-credit                # drift

    # label-source arm: memory fed by embodia-tiny's learned success detector, no oracle in the loop
    python benchmarks/memory_gain.py --shift blocked-left --streams 4 --episodes 60 --seed 90000 \
        --arms off,online,learned --blind
    python benchmarks/memory_gain.py --device 'gui-sim:settings?task=turn-on&split=test&max_steps=7' \
        --shift layout --streams 5 --episodes 100 --seed 80000 --arms off,online,learned --blind

Every stream starts with an empty memory; episode i of stream s has seed SEED + s * EPISODES + i in
every arm. The claim is read off the second half of the streams (after warm-up): per-arm Wilson
intervals, the Newcombe interval of (arm - off), and the per-stream differences with a sign test and
a bootstrap over streams (episodes in one stream share a memory, so they are not independent).
False-label arms (`embodia.agent.evaluation.memory_eval.NOISY`) are also compared with clean labels (`online`) and with
their twin without failure credit, and report the poisoned entries stored and removed, by kind.
Streams run in `--jobs` worker processes (default 2, one torch thread each) with the results of a
single process; `--cache DIR` keeps every finished stream, so an interrupted run resumes.

`learned` (`embodia.agent.evaluation.memory_eval.LABEL_ARMS`) is the memory fed by embodia-tiny's
learned success detector instead of the simulator: only its verified labels reach the memory
(`--success learned`'s threshold rule). With `--blind` neither the `learned` arm nor `off` ever sees
the simulator's check: the loop runs on `NoOracle` (episodes are not stopped when the task is done),
and the detector both ends an episode once it is sure the task is done and labels it
(`memory_eval.arm_loop`); the oracle-fed `online` arm stays as it is, the reference. Every arm is
scored by the simulator's check at the episode's end. `labels` counts what the detector said
against that check (false successes, true successes missed). A `gui-sim:` device runs the screen
memory (`ScreenMemoryPolicy`) instead of the robot one.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import torch

from embodia.agent.evaluation.memory_eval import build_report, learning_curve_png, run_streams_parallel


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="embodia-tiny")
    ap.add_argument("--device", default="sim:twogap-push")
    ap.add_argument("--shift", default="blocked-left")
    ap.add_argument("--streams", type=int, default=5)
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arms", default="off,online,no-filter,no-mode-selection,fixed-confidence,replay,noisy-labels")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (streams run in parallel)")
    ap.add_argument("--cache", default=None, help="directory: each finished stream is saved there and "
                    "skipped by a rerun with the same settings")
    ap.add_argument("--plot", default=None, help="learning-curve PNG")
    ap.add_argument("--then-shift", default=None, help="drift: from episode --switch-at of every stream, "
                    "the device runs under this shift instead (e.g. blocked-right after blocked-left)")
    ap.add_argument("--switch-at", type=int, default=None, help="drift: the first episode under --then-shift")
    ap.add_argument("--blind", action="store_true", help="the off and learned arms never see the simulator's "
                    "check: the learned detector ends their episodes and labels them (online stays the reference)")
    args = ap.parse_args()
    if (args.then_shift is None) != (args.switch_at is None):
        ap.error("--then-shift and --switch-at go together")
    drift = (args.switch_at, args.then_shift) if args.then_shift else None

    t0 = time.perf_counter()
    arms = args.arms.split(",")
    from embodia.devices import open_device
    for shift in (args.shift, args.then_shift) if drift else (args.shift,):
        with open_device(args.device, shift=shift):     # a bad URI or shift fails here, not in a worker
            pass

    def progress(arm, s, res, cached):
        k = sum(res["outcomes"])
        print(f"[{time.perf_counter() - t0:6.0f} s] {arm} stream {s}: {k}/{len(res['outcomes'])}"
              f"{' (cached)' if cached else ''}", file=sys.stderr, flush=True)
    runs = run_streams_parallel(args.device, args.policy, arms=arms, streams=args.streams,
                                episodes=args.episodes, seed=args.seed, shift=args.shift,
                                jobs=args.jobs, threads=args.threads, cache_dir=args.cache,
                                on_stream=progress, drift=drift, blind=args.blind)
    rep = build_report(runs, arms=arms, streams=args.streams, episodes=args.episodes, seed=args.seed)
    if args.plot:
        learning_curve_png(rep, args.plot, title=f"{args.device} shift={args.shift}")
    summary = {arm: {"success": r["success_rate"], "wilson95": r["wilson95"],
                     "second_half": r["second_half"]["success_rate"],
                     "second_half_wilson95": r["second_half"]["wilson95"],
                     "steered_per_episode": r["steered_decisions_per_episode"],
                     "quarters": r["quarters"],
                     **({"labels": r["labels"]} if "labels" in r else {}),
                     **({"poison": r["poison"]} if "poison" in r else {})}
               for arm, r in rep["arms"].items()}
    comps = {name: {"second_half_diff": c["second_half"]["diff"],
                    "second_half_newcombe95": c["second_half"]["newcombe95"],
                    "per_stream_diff": c["second_half"]["per_stream_diff"],
                    "stream_sign_test_p": c["second_half"]["stream_sign_test_p"],
                    "stream_bootstrap95": c["second_half"]["stream_bootstrap95"]}
             for name, c in rep["comparisons"].items()}
    print(json.dumps({"benchmark": "memory_gain", "policy": args.policy, "device": args.device,
                      "shift": args.shift, **({"then_shift": args.then_shift, "switch_at": args.switch_at}
                                              if drift else {}), "streams": args.streams, "episodes": args.episodes,
                      "seed": args.seed, "blind": args.blind, "arms": summary, "comparisons": comps,
                      "memory_stats_last_stream": {a: r["memory_stats_per_stream"][-1:]
                                                   for a, r in rep["arms"].items() if r["memory_stats_per_stream"]},
                      "seconds": round(time.perf_counter() - t0),
                      "machine": f"{platform.machine()} {os.cpu_count()} cpus, torch {torch.__version__}",
                      "date": time.strftime("%Y-%m-%d")}, default=float))


if __name__ == "__main__":
    main()
