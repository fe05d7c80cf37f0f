"""How much of the control loop's time is the runtime's own, with a scripted policy.

Prints one JSON line: MuJoCo physics steps/s, control steps/s without rendering, renders/s, loop
steps/s with the expert, and the runtime overhead as a fraction of loop time (everything that is
neither the policy nor the device: loop bookkeeping, and recording in the second figure).

    python benchmarks/loop_overhead.py --episodes 20
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco
import numpy as np

from embodia.agent.loop.episode import run_episode
from embodia.agent.recording.writer import DatasetWriter
from embodia.devices import open_device


def rate(fn, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return n / (time.perf_counter() - t)


def loop_figures(dev, episodes: int, seed: int, recorder=None) -> dict:
    pol = dev.expert()
    results = [run_episode(dev, pol, seed=seed + i, recorder=recorder) for i in range(episodes)]
    steps = sum(r.steps for r in results)
    busy = sum(r.timing["policy_s"] + r.timing["device_s"] + r.timing["overhead_s"] for r in results)
    over = sum(r.timing["overhead_s"] for r in results)
    return {"steps": steps, "successes": sum(bool(r.success) for r in results),
            "steps_per_s": steps / busy, "overhead_frac": over / busy,
            "policy_s": sum(r.timing["policy_s"] for r in results),
            "device_s": sum(r.timing["device_s"] for r in results),
            "record_s": sum(r.timing["record_s"] for r in results)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="sim:twogap-push")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    with open_device(args.device) as dev:
        dev.reset(args.seed)
        physics = rate(lambda: mujoco.mj_step(dev.model, dev.data), 20000)
        zero = np.zeros(dev.embodiment.action_dim, np.float32)
        control = rate(lambda: dev.act(zero), 2000)
        renders = rate(dev.render, 300)
        plain = loop_figures(dev, args.episodes, args.seed)
        with tempfile.TemporaryDirectory() as tmp:
            recorded = loop_figures(dev, args.episodes, args.seed, DatasetWriter(tmp, dev.embodiment))
    print(json.dumps({
        "benchmark": "loop_overhead", "device": args.device, "policy": "expert",
        "episodes": args.episodes, "physics_steps_per_s": round(physics),
        "control_steps_per_s_no_render": round(control), "renders_per_s": round(renders),
        "loop_steps_per_s": round(plain["steps_per_s"], 1),
        "overhead_frac": round(plain["overhead_frac"], 4),
        "loop_steps_per_s_recording": round(recorded["steps_per_s"], 1),
        "overhead_frac_recording": round(recorded["overhead_frac"], 4),
        "successes": plain["successes"],
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
    }))


if __name__ == "__main__":
    main()
