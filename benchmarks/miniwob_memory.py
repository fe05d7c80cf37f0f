"""MiniWoB++ with the screen memory: memory on vs off on repeated task streams, paired episode by episode.

    python benchmarks/miniwob_memory.py --episodes 10 --jobs 2

A stream is one MiniWoB++ task run again and again with a new seed each episode (episode i of stream s
has seed ``seed + s * episodes + i``, in every arm: the arms meet the same problems, so they are
paired episode by episode). Arm ``off`` is the policy alone; arm ``online`` is the same policy wrapped
in `ScreenMemoryPolicy` (replace mode) with a memory that starts empty at each stream and grows from
the stream's own verified successes; a success is MiniWoB's own (the task's raw reward > 0, within
its time limit). Per task and pooled over the tasks: each arm's rate with its Wilson interval, the
paired 2x2 counts (both, only memory on, only memory off, neither) and Newcombe's paired interval of
the difference (`embodia.agent.evaluation.stats.newcombe_paired`). Stream-level statistics come
from `memory_eval.build_report` per task.

Each finished task is appended to ``--resume FILE`` (JSON lines; the first line names the run), so
the same command after a stop runs only the tasks still missing. ``--jobs N`` runs whole tasks in N
worker processes (one torch thread each; the same outcomes as one process). One JSON line on stdout.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from embodia.agent.evaluation.memory_eval import build_report, rate_of, run_stream, screen_arm_factory
from embodia.agent.evaluation.stats import newcombe_paired, paired_counts
from embodia.agent.evaluation.suite_resume import PartialRun

# ten and more tasks the bundled head meets on MiniWoB: one-click tasks, a choice among
# several targets, forms and typed answers (a stream is one task)
DEFAULT_TASKS = ("click-button", "click-link", "click-test-2", "click-dialog-2", "click-tab", "click-widget",
                 "click-option", "focus-text-2", "click-checkboxes", "enter-text", "login-user",
                 "click-button-sequence")
ARMS = ("off", "online")


def paired(on: list[bool], off: list[bool]) -> dict:
    """The paired comparison of two arms over the same episodes: 2x2 counts, the rates and
    Newcombe's paired 95% interval of on - off.

    >>> r = paired([True, True, False, True], [True, False, False, False])
    >>> r["both"], r["on_only"], r["off_only"], r["neither"], r["diff"]
    (1, 2, 0, 1, 0.5)
    """
    if len(on) != len(off) or not on:
        raise ValueError(f"paired arms need the same non-zero number of episodes, got {len(on)} and {len(off)}")
    both, on_only, off_only, neither = paired_counts(on, off)
    diff, lo, hi = newcombe_paired(both, on_only, off_only, neither)
    return {"both": both, "on_only": on_only, "off_only": off_only, "neither": neither,
            "on": rate_of(both + on_only, len(on)), "off": rate_of(both + off_only, len(on)),
            "diff": round(diff, 4), "newcombe_paired95": [round(lo, 4), round(hi, 4)]}


def run_task(task: str, policy_spec: str, *, streams: int, episodes: int, seed: int, max_steps: int,
             threads: int = 1) -> dict:
    """Both arms on ``streams`` streams of ``task``; the row kept for the report (JSON-able)."""
    from embodia.agent.loop.factory import make_policy
    from embodia.devices import open_device
    t0 = time.perf_counter()
    with open_device(f"sim:miniwob/{task}?max_steps={max_steps}") as dev:
        make = screen_arm_factory(make_policy(policy_spec, dev, threads=threads), dev)
        runs = {(arm, s): run_stream(dev, make, arm, s, episodes=episodes, seed=seed)
                for arm in ARMS for s in range(streams)}
    rep = build_report(runs, arms=list(ARMS), streams=streams, episodes=episodes, seed=seed)
    comp = rep["comparisons"]["online - off"]["all"]
    stats = [runs["online", s]["memory_stats"] or {} for s in range(streams)]
    return {"outcomes": {arm: [o for s in range(streams) for o in runs[arm, s]["outcomes"]] for arm in ARMS},
            "memory_entries": [sum(ns["entries"] for ns in st.values()) for st in stats],
            "steered_decisions_per_episode": rep["arms"]["online"]["steered_decisions_per_episode"],
            "stream_diffs": comp["per_stream_diff"], "seconds": round(time.perf_counter() - t0, 1)}


def _task_in_worker(args: tuple) -> tuple[str, dict]:
    task, kw = args
    return task, run_task(task, **kw)


def run_all(tasks: list[str], policy_spec: str, *, streams: int, episodes: int, seed: int, max_steps: int,
            jobs: int = 1, partial: PartialRun | None = None, on_task=None) -> dict:
    """Every task, finished ones read back from ``partial`` and new ones appended to it; task -> row."""
    done = dict(partial.done) if partial is not None else {}
    todo = [t for t in tasks if t not in done]
    kw = {"policy_spec": policy_spec, "streams": streams, "episodes": episodes, "seed": seed, "max_steps": max_steps}

    def finished(task, row):
        done[task] = row
        if partial is not None:
            partial.add(task, row)
        if on_task:
            on_task(task, row)
    if jobs > 1 and len(todo) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed
        # spawn: a fresh interpreter per worker (no browser or torch pool inherited through fork)
        with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as ex:
            for fut in as_completed([ex.submit(_task_in_worker, (t, kw)) for t in todo]):
                finished(*fut.result())
    else:
        for t in todo:
            finished(t, run_task(t, **kw))
    return {t: done[t] for t in tasks}


def report(rows: dict) -> dict:
    """Per task and pooled: the paired comparison; the mean of the per-task differences beside it."""
    per_task = {t: {**paired(r["outcomes"]["online"], r["outcomes"]["off"]),
                    "steered_decisions_per_episode": round(r["steered_decisions_per_episode"], 3),
                    "memory_entries_per_stream": r["memory_entries"],
                    "seconds": r["seconds"]} for t, r in rows.items()}
    on = [o for r in rows.values() for o in r["outcomes"]["online"]]
    off = [o for r in rows.values() for o in r["outcomes"]["off"]]
    diffs = [p["diff"] for p in per_task.values()]
    return {"per_task": per_task, "pooled": paired(on, off),
            "tasks_better": sum(d > 0 for d in diffs), "tasks_worse": sum(d < 0 for d in diffs),
            "tasks_with_paired_lower_bound_above_0": sorted(t for t, p in per_task.items()
                                                            if p["newcombe_paired95"][0] > 0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="embodia-tiny")
    ap.add_argument("--tasks", nargs="*", default=list(DEFAULT_TASKS))
    ap.add_argument("--streams", type=int, default=1, help="streams per task and arm")
    ap.add_argument("--episodes", type=int, default=10, help="episodes per stream")
    ap.add_argument("--seed", type=int, default=5000, help="first seed (5000+: development seeds)")
    ap.add_argument("--max-steps", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=1, help="tasks in this many worker processes")
    ap.add_argument("--resume", type=Path, help="keep finished tasks here (JSON lines); rerun to go on")
    args = ap.parse_args()
    from embodia.sim.miniwob import list_tasks
    unknown = sorted(set(args.tasks) - set(list_tasks()))
    if unknown or args.episodes < 1 or args.streams < 1 or args.jobs < 1:
        sys.exit(f"miniwob_memory: unknown tasks {unknown}" if unknown else
                 "miniwob_memory: --episodes, --streams and --jobs must be at least 1")
    run = {"benchmark": "miniwob_memory", "policy": args.policy, "tasks": args.tasks, "streams": args.streams,
           "episodes": args.episodes, "seed": args.seed, "max_steps": args.max_steps}
    try:
        partial = PartialRun(args.resume, run) if args.resume else None
    except ValueError as e:
        sys.exit(f"miniwob_memory: {e}")
    resumed, t0 = len(partial.done) if partial else 0, time.perf_counter()

    def on_task(task, row):
        print(f"{task}: on {sum(row['outcomes']['online'])}, off {sum(row['outcomes']['off'])} "
              f"of {len(row['outcomes']['off'])} ({row['seconds']} s)", file=sys.stderr, flush=True)
    rows = run_all(args.tasks, args.policy, streams=args.streams, episodes=args.episodes, seed=args.seed,
                   max_steps=args.max_steps, jobs=args.jobs, partial=partial, on_task=on_task)
    print(json.dumps({**run, **report(rows), "seconds": round(time.perf_counter() - t0, 1),
                      "resumed_tasks": resumed,
                      "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
                      "date": datetime.date.today().isoformat()}))


if __name__ == "__main__":
    main()
