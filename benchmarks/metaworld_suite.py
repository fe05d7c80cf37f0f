"""Meta-World's scripted experts on every task of a suite (MT50 by default) under the suite protocol
(500-step episodes, success ends the episode, episode i of every task on seed `seed + i`): success per
task, per difficulty group and overall with Wilson intervals; one JSON line.

    python benchmarks/metaworld_suite.py --episodes 20            # the figure in BENCHMARKS.md
    python benchmarks/metaworld_suite.py --suite mt10 --episodes 3 --table
    python benchmarks/metaworld_suite.py --policy ckpt/embodia-mt50 --episodes 10 --memory-streams 2 \
        --workdir /tmp/mt50-mem        # + memory on vs off over paired streams (stream 0 = the evaluation)
    python benchmarks/metaworld_suite.py --policy embodia-mt50 --episodes 10 --memory-streams 1 \
        --workdir /tmp/mt50-rep1 --query repeat=1      # the same set-up in every episode of a task
    python benchmarks/metaworld_suite.py --policy embodia-mt50 --episodes 10 --seed 20 --memory-streams 4 \
        --workdir /tmp/mt50-offsets --memory-settings '{"key": "offsets", "sigma": 1.0}'   # the offsets key

The same run as `embodia eval --device sim:metaworld/mt50 --policy expert -n 20`; this script adds
the benchmark header and prints the table on stderr with --table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

from embodia.agent.evaluation.suite import PREFIX, PUBLISHED_MT50, parse_suite, run_suite, suite_table  # noqa: E402
from embodia.policies.placement import parse_args  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="mt50")
    ap.add_argument("--policy", default="expert")
    ap.add_argument("--episodes", type=int, default=20, help="episodes per task")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--table", action="store_true", help="also print the table (stderr)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (tasks in parallel)")
    ap.add_argument("--memory-streams", type=int, default=0, help="also memory on vs off over this many paired "
                    "streams (one fresh memory per stream, shared by every task)")
    ap.add_argument("--workdir", default=None, help="with --memory-streams: where the streams' memories go")
    ap.add_argument("--query", default="", help="device query for every task, k=v&... as in a suite URI (e.g. repeat=1: the same "
                    "object and goal set-up in every episode of a task)")
    ap.add_argument("--resume", default=None, help="keep finished tasks of the evaluation in this file; the same "
                    "command after a stop goes on from it (removed once the run is reported)")
    ap.add_argument("--memory-settings", default=None, help="with --workdir: run a copy of the checkpoint (in "
                    "WORKDIR/policy) whose memory.json is this JSON object, e.g. "
                    "'{\"key\": \"offsets\", \"sigma\": 1.0}', or one of its memory.json's profiles by name "
                    "(fixed-setup, ...)")
    args = parse_args(ap)      # with --torch-device / --dtype (embodia.policies.placement)
    if args.memory_streams and not args.workdir:
        ap.error("--memory-streams needs --workdir")
    if args.memory_settings:
        if not args.workdir:
            ap.error("--memory-settings needs --workdir (the checkpoint copy goes there)")
        from embodia.agent.evaluation.suite_memory import with_memory_settings
        try:
            args.policy = with_memory_settings(args.policy, args.memory_settings, Path(args.workdir) / "policy")
        except ValueError as e:          # bad JSON, not a checkpoint, or settings the loader refuses
            ap.error(f"--memory-settings: {e}")
    parsed = parse_suite(f"{PREFIX}{args.suite}?{args.query}")    # read as `embodia eval` reads the URI
    if parsed is None:
        ap.error(f"--suite {args.suite!r}: not a Meta-World suite")
    query = parsed[1] or None

    def progress(label):      # one stderr line per task: a full MT50 run is tens of minutes
        return lambda task, row: print(f"{label}{task}: {row['successes']}/{row['episodes']}", file=sys.stderr,
                                       flush=True)
    rep = run_suite(args.suite, args.policy, episodes=args.episodes, seed=args.seed, jobs=args.jobs, query=query,
                    on_task=progress(""), resume=args.resume,
                    on_resumed=lambda ts: print(f"resuming: {len(ts)} tasks finished by a stopped run",
                                                file=sys.stderr))
    if args.table:
        print(suite_table(rep, published=query is None), file=sys.stderr)   # the paper's protocol only
    out = {"benchmark": "metaworld_suite", "suite": args.suite, "policy": args.policy,
           "episodes_per_task": args.episodes, "seed": args.seed,
           "overall": rep["overall"], "mean_of_groups": rep["mean_of_groups"], "groups": rep["groups"],
           "tasks": {t: {k: r[k] for k in ("group", "successes", "episodes", "success_rate", "wilson95",
                                            "mean_length")} for t, r in rep["tasks"].items()},
           "protocol": rep["protocol"],
           "published_mt50_percent": PUBLISHED_MT50 if args.suite == "mt50" else None,
           "timing": {k: round(v, 3) if isinstance(v, float) else v for k, v in rep["timing"].items()},
           "machine": f"{platform.machine()} {os.cpu_count()} cpus", "date": time.strftime("%Y-%m-%d")}
    if args.memory_streams:
        from embodia.agent.evaluation.suite_memory import suite_memory_gain
        out["memory"] = suite_memory_gain(args.suite, args.policy, episodes=args.episodes, seed=args.seed,
                                          streams=args.memory_streams, workdir=args.workdir, off_reports=[rep],
                                          query=query, on_task=lambda arm, s, t, row: progress(
                                              f"stream {s} memory {arm}: ")(t, row),
                                          on_stream=lambda s, off, on: print(
                                              f"stream {s}: off {off['overall']['success_rate']:.3f}, "
                                              f"on {on['overall']['success_rate']:.3f}", file=sys.stderr))
    print(json.dumps(out))
    if args.resume:
        Path(args.resume).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
