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
    python benchmarks/miniwob_head.py --policy embodia-miniwob --seeds 10 --first-seed 5000 --resume runs/mwh.jsonl

``--resume FILE`` keeps each finished task's line in FILE, so a stopped run goes on where it was. The
JSON line also gives the mean over the tasks of the published suites it covers (``groups``:
Synapse's 48 exemplar tasks, WGE's original set) and, for a bundled checkpoint, its sha256.
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
    ap.add_argument("--resume", type=Path, default=None, help="a file of finished tasks (one JSON line each): "
                    "they are kept, the others run and are appended, so a stopped run goes on where it was")
    args = ap.parse_args()
    unknown = [t for t in args.tasks if t not in EXPERTS]
    if unknown:
        sys.exit(f"miniwob_head: not covered (no expert): {unknown}")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    per = finished(args.resume, args.policy, seeds)
    for t in args.tasks:
        if t not in per:
            per[t] = run_task(t, args.policy, seeds, args.record)
            if args.resume is not None:
                with open(args.resume, "a") as f:
                    f.write(json.dumps({"task": t, "policy": args.policy, "seeds": [seeds.start, seeds.stop],
                                        **per[t]}) + "\n")
        print(f"{t}: {per[t]['head']['k']}/{per[t]['head']['n']}", file=sys.stderr, flush=True)
    per = {t: per[t] for t in args.tasks}
    m, lo, hi = mean_of_rates([(per[t]["head"]["k"], per[t]["head"]["n"]) for t in per])
    print(json.dumps({"benchmark": "miniwob_head", "date": datetime.date.today().isoformat(),
                      "machine": f"{platform.machine()}, {os.cpu_count()} cpus", "policy": args.policy,
                      **bundle_facts(args.policy),
                      "seeds": [seeds.start, seeds.stop], "tasks": len(per), "per_task": per,
                      "mean_over_tasks": {"head": {"mean": round(m, 3), "ci95": [round(lo, 3), round(hi, 3)]}},
                      "groups": {name: group(per, name) for name in ("synapse-exemplars", "wge-original")},
                      "head_at_least_0.8": sorted(t for t in per if per[t]["head"]["rate"] >= 0.8)}))


def finished(path: Path | None, policy: str, seeds: range) -> dict:
    """Tasks a stopped run of the same policy and seeds finished (``--resume``)."""
    if path is None or not path.is_file():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("policy") == policy and row.get("seeds") == [seeds.start, seeds.stop]:
            task = row.pop("task")
            out[task] = {k: v for k, v in row.items() if k not in ("policy", "seeds")}
    return out


def group(per: dict, suite: str) -> dict:
    """The mean over the tasks of a published suite that this run covers, with how many it has."""
    from embodia.sim.miniwob import suite_tasks
    tasks = [t for t in suite_tasks(suite) if t in per]
    if not tasks:
        return {"covered": 0, "of": len(suite_tasks(suite))}
    m, lo, hi = mean_of_rates([(per[t]["head"]["k"], per[t]["head"]["n"]) for t in tasks])
    return {"covered": len(tasks), "of": len(suite_tasks(suite)), "mean": round(m, 3),
            "ci95": [round(lo, 3), round(hi, 3)]}


def bundle_facts(policy: str) -> dict:
    """A bundled checkpoint's recorded sha256 (its bundle.json), to quote beside the figures."""
    from embodia.agent.loop.factory import BUNDLED
    path = BUNDLED.get(policy, Path(policy)) / "bundle.json"
    return {"bundle_sha256": json.loads(path.read_text())["sha256"]} if path.is_file() else {}


if __name__ == "__main__":
    main()
