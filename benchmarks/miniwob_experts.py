"""MiniWoB++ success of the scripted experts and of the chance baseline, paired by seed, per task.

Each covered task (`embodia.sim.miniwob.EXPERTS`) runs ``--seeds`` episodes with the expert and the
same seeds with `RandomTreePolicy` (a uniform click on a clickable element, or a word typed into a
field; at most ``--chance-steps`` steps), one headless Chromium at a time. Success is MiniWoB's own
(raw reward > 0, within the task's time limit). Per task: k/n with a Wilson 95% interval; the mean
over tasks with its interval (`mean_of_rates`). One JSON line.

    python benchmarks/miniwob_experts.py --seeds 10
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

from embodia.agent.evaluation.stats import mean_of_rates, wilson  # noqa: E402
from embodia.agent.loop.episode import run_episode  # noqa: E402
from embodia.devices import open_device  # noqa: E402
from embodia.sim.miniwob import EXPERTS, RandomTreePolicy  # noqa: E402


def cell(k: int, n: int) -> dict:
    lo, hi = wilson(k, n)
    return {"k": k, "n": n, "rate": round(k / n, 3), "wilson95": [round(lo, 3), round(hi, 3)]}


def run_task(task: str, seeds: range, chance_steps: int) -> dict:
    expert = chance = 0
    t0 = time.perf_counter()
    with open_device(f"sim:miniwob/{task}") as dev:
        for seed in seeds:
            expert += bool(run_episode(dev, dev.expert(), seed=seed).success)
            chance += bool(run_episode(dev, RandomTreePolicy(seed=1), seed=seed, max_steps=chance_steps).success)
    n = len(seeds)
    return {"expert": cell(expert, n), "chance": cell(chance, n), "seconds": round(time.perf_counter() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--chance-steps", type=int, default=6)
    ap.add_argument("--tasks", nargs="*", default=sorted(EXPERTS))
    args = ap.parse_args()
    seeds = range(1000, 1000 + args.seeds)          # seeds the experts were not written on (0-4)
    per = {t: run_task(t, seeds, args.chance_steps) for t in args.tasks}
    mean = {}
    for who in ("expert", "chance"):
        m, lo, hi = mean_of_rates([(per[t][who]["k"], per[t][who]["n"]) for t in per])
        mean[who] = {"mean": round(m, 3), "ci95": [round(lo, 3), round(hi, 3)]}
    print(json.dumps({"benchmark": "miniwob_experts", "date": datetime.date.today().isoformat(),
                      "machine": f"{platform.machine()}, {os.cpu_count()} cpus", "seeds": [seeds.start, seeds.stop],
                      "tasks": len(per), "per_task": per, "mean_over_tasks": mean,
                      "experts_at_least_0.95": sorted(t for t in per if per[t]["expert"]["rate"] >= 0.95)}))


if __name__ == "__main__":
    main()
