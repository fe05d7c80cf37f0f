"""What rendering only what the policy reads saves: the same suite evaluation (scripted experts, the
same seeds) with the device rendering as a lone task does (one 96x96 camera every step) and rendering
nothing (the expert reads the state only), side by side in one run, task by task in alternating order
so a busy neighbour weighs on both; one JSON line with the wall times and their ratio.

    python benchmarks/metaworld_render_cost.py --episodes 2

The outcomes must match episode for episode (rendering does not touch the physics): the line says so.

With ``--frames``, a policy that reads a camera (a checkpoint) decides every 8 steps: rendering its
camera after every step (what the loop did before "frames_on_demand"; an on_step hook still asks
for every frame) against rendering only the frames a decision reads, on the first ``--tasks`` tasks:

    python benchmarks/metaworld_render_cost.py --frames --policy embodia-mt50 --tasks 4 --episodes 2
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time

os.environ.setdefault("MUJOCO_GL", "egl")

from embodia.agent.evaluation.suite import run_suite  # noqa: E402
from embodia.policies.placement import parse_args  # noqa: E402
from embodia.sim.metaworld import suite_tasks  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="mt50")
    ap.add_argument("--policy", default="expert")
    ap.add_argument("--episodes", type=int, default=2, help="episodes per task and per mode")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--frames", action="store_true",
                    help="every step's frame vs only the decisions' frames, for a policy that reads a camera")
    ap.add_argument("--tasks", type=int, default=4, help="with --frames: the suite's first N tasks")
    args = parse_args(ap)      # with --torch-device / --dtype (embodia.policies.placement)
    if args.frames:
        return frames_between_decisions(args)
    modes = ("default", "policy")
    wall = dict.fromkeys(modes, 0.0)
    steps = dict.fromkeys(modes, 0)
    outcomes = {m: [] for m in modes}
    query = {}
    for i, task in enumerate(suite_tasks(args.suite)):
        for mode in (modes if i % 2 == 0 else modes[::-1]):
            rep = run_suite(args.suite, args.policy, episodes=args.episodes, seed=args.seed, render=mode,
                            tasks=[task])
            wall[mode] += rep["timing"]["wall_s"]
            steps[mode] += rep["timing"]["steps"]
            outcomes[mode] += rep["tasks"][task]["outcomes"]
            query[mode] = rep["protocol"]["device_query"]
    n = len(outcomes["policy"])
    print(json.dumps({
        "benchmark": "metaworld_render_cost", "suite": args.suite, "policy": args.policy,
        "episodes_per_task": args.episodes, "episodes": n, "seed": args.seed,
        "rendering_as_today": {"device_query": query["default"], "wall_s": round(wall["default"], 2),
                               "steps": steps["default"], "episodes_per_s": round(n / wall["default"], 3)},
        "rendering_what_the_policy_reads": {"device_query": query["policy"], "wall_s": round(wall["policy"], 2),
                                            "steps": steps["policy"],
                                            "episodes_per_s": round(n / wall["policy"], 3)},
        "speedup": round(wall["default"] / wall["policy"], 2),
        "same_outcomes": outcomes["default"] == outcomes["policy"],
        "successes": {m: sum(o) for m, o in outcomes.items()},
        "machine": f"{platform.machine()} {os.cpu_count()} cpus", "date": time.strftime("%Y-%m-%d")}))


def frames_between_decisions(args) -> None:
    """The --frames comparison: the same episodes (seeds, policy, device) with every step's frame
    rendered (an on_step hook that reads nothing but asks for them) and with only the decisions'."""
    from embodia.agent.loop.episode import run_episode
    from embodia.agent.loop.factory import make_policy
    from embodia.devices import open_device
    modes = ("every_step", "decisions_only")
    wall = dict.fromkeys(modes, 0.0)
    steps = dict.fromkeys(modes, 0)
    outcomes = {m: [] for m in modes}
    tasks = suite_tasks(args.suite)[:args.tasks]
    for i, task in enumerate(tasks):
        for mode in (modes if i % 2 == 0 else modes[::-1]):
            dev = open_device(f"sim:metaworld/{task}?max_steps=500")
            policy = make_policy(args.policy, dev, threads=1)
            t0 = time.perf_counter()
            for ep in range(args.episodes):
                r = run_episode(dev, policy, seed=args.seed + ep,
                                on_step=(lambda step: False) if mode == "every_step" else None)
                steps[mode] += r.steps
                outcomes[mode].append(bool(r.success))
            wall[mode] += time.perf_counter() - t0
            dev.close()
    n = len(outcomes["every_step"])
    print(json.dumps({
        "benchmark": "metaworld_render_cost", "verb": "frames", "suite": args.suite, "tasks": list(tasks),
        "policy": args.policy, "episodes_per_task": args.episodes, "episodes": n, "seed": args.seed,
        **{m: {"wall_s": round(wall[m], 2), "steps": steps[m], "ms_per_step": round(1e3 * wall[m] / steps[m], 2)}
           for m in modes},
        "speedup": round(wall["every_step"] / wall["decisions_only"], 2),
        "same_outcomes": outcomes["every_step"] == outcomes["decisions_only"],
        "successes": {m: sum(o) for m, o in outcomes.items()},
        "machine": f"{platform.machine()} {os.cpu_count()} cpus", "date": time.strftime("%Y-%m-%d")}))


if __name__ == "__main__":
    main()
