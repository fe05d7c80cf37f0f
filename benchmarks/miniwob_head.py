"""MiniWoB++ success of a GUI-head checkpoint on held-out seeds, per task, on every task with a
scripted expert.

The head (e.g. the one `embodia train miniwob` writes, trained on seeds 100000..)
runs ``--seeds`` episodes per task on seeds 1000.., the seeds `benchmarks/miniwob_experts.py`
measures the experts and chance on, so the three are paired by seed. Success is MiniWoB's own (raw
reward > 0 within the task's time limit, at most the device's 15 steps). Per task: k/n with a
Wilson 95% interval and the episodes that ended on an error; the mean over tasks with its interval
(`mean_of_rates`). Every covered task is reported, those whose expert actions the head cannot
express too (named in `embodia.agent.training.miniwob_train`). One JSON line.

    python benchmarks/miniwob_head.py --policy data/embodia-tiny-miniwob --seeds 10
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

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from miniwob_experts import cell

from embodia.agent.evaluation.stats import mean_of_rates
from embodia.agent.loop.episode import run_episode
from embodia.agent.loop.factory import make_policy
from embodia.devices import open_device
from embodia.sim.miniwob import EXPERTS


def run_task(task: str, policy_spec: str, seeds: range, record: Path | None = None) -> dict:
    """The head's episodes of one task; with ``record``, each one's step log under record/<task>
    (what the head saw and did, for `embodia replay`)."""
    from embodia.agent.recording.gui_log import GuiRecorder
    wins = errors = 0
    t0 = time.perf_counter()
    with open_device(f"sim:miniwob/{task}") as dev:
        policy = make_policy(policy_spec, dev, threads=1)
        rec = GuiRecorder(record / task, dev.embodiment) if record is not None else None
        for seed in seeds:
            r = run_episode(dev, policy, seed=seed, recorder=rec,
                            episode_meta={"device": f"sim:miniwob/{task}", "policy": policy_spec} if rec else None)
            wins += bool(r.success)
            errors += r.error is not None
    return {"head": cell(wins, len(seeds)), "errors": errors, "seconds": round(time.perf_counter() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", required=True, help="a checkpoint directory with a GUI head, or a policy spec")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=1000, help="held out: the training demos use 100000..")
    ap.add_argument("--tasks", nargs="*", default=sorted(EXPERTS))
    ap.add_argument("--record", type=Path, default=None, help="also write each episode's step log under DIR/<task>")
    args = ap.parse_args()
    unknown = [t for t in args.tasks if t not in EXPERTS]
    if unknown:
        sys.exit(f"miniwob_head: not covered (no expert): {unknown}")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    per = {}
    for t in args.tasks:
        per[t] = run_task(t, args.policy, seeds, args.record)
        print(f"{t}: {per[t]['head']['k']}/{per[t]['head']['n']}", file=sys.stderr, flush=True)
    m, lo, hi = mean_of_rates([(per[t]["head"]["k"], per[t]["head"]["n"]) for t in per])
    print(json.dumps({"benchmark": "miniwob_head", "date": datetime.date.today().isoformat(),
                      "machine": f"{platform.machine()}, {os.cpu_count()} cpus", "policy": args.policy,
                      "seeds": [seeds.start, seeds.stop], "tasks": len(per), "per_task": per,
                      "mean_over_tasks": {"head": {"mean": round(m, 3), "ci95": [round(lo, 3), round(hi, 3)]}},
                      "head_at_least_0.8": sorted(t for t in per if per[t]["head"]["rate"] >= 0.8)}))


if __name__ == "__main__":
    main()
