"""The desktop bench's scripted experts on held-out variations: success per task with Wilson intervals.

Starts its own Xvfb (1280x800) and accessibility bus, then runs ``--episodes`` episodes per task of
`embodia.sim.desktop_bench` (galculator, mousepad, gnumeric from Debian) on ``split=test`` through
`embodia`'s loop, the expert reading the AT-SPI tree, the gate allowing only the bench's
``GATE_ALLOW`` (the close-discard tasks click "Discard" / "Don't Save"). One JSON line on stdout.

    python benchmarks/desktop_bench.py --episodes 20
    python benchmarks/desktop_bench.py --episodes 5 --tasks galculator/add,mousepad/save-as
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]      # the tests' Xvfb starter

from embodia.agent.evaluation.stats import wilson  # noqa: E402
from embodia.agent.loop.episode import run_episode  # noqa: E402
from embodia.agent.loop.safety import SafetyGate  # noqa: E402
from embodia.devices.atspi import start_bus  # noqa: E402
from embodia.devices.base import environ  # noqa: E402
from embodia.sim.desktop_bench import GATE_ALLOW, TASKS, app_installed, open_desktop_bench  # noqa: E402


def run_task(target: str, episodes: int, split: str) -> dict:
    ok, steps, secs, errors, tree_ms = 0, [], [], [], []
    with open_desktop_bench(target, split=split, settle=0.5) as dev:
        for seed in range(episodes):
            t0 = time.perf_counter()
            r = run_episode(dev, dev.expert(), seed=seed, gate=SafetyGate(allow=GATE_ALLOW))
            secs.append(time.perf_counter() - t0)
            ok += bool(r.success)
            steps.append(r.steps)
            if dev.tree is not None:
                tree_ms.append(dev.tree.last_ms)
            if r.error or not r.success:
                errors.append({"seed": seed, "error": r.error, "instruction": r.instruction})
    lo, hi = wilson(ok, episodes)
    return {"task": target, "split": split, "episodes": episodes, "successes": ok, "rate": ok / episodes,
            "wilson95": [round(lo, 3), round(hi, 3)], "mean_steps": round(sum(steps) / len(steps), 2),
            "mean_episode_s": round(sum(secs) / len(secs), 2), "multi_step": TASKS[target].multi_step,
            "failures": errors[:3]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--split", default="test", choices=["train", "test"])
    ap.add_argument("--tasks", default="", help="comma-separated app/task (default: all installed)")
    args = ap.parse_args()
    tasks = [t for t in (args.tasks.split(",") if args.tasks else TASKS) if t]
    from gui_fixtures import start_xvfb
    rep = {"benchmark": "desktop_bench", "date": time.strftime("%Y-%m-%d"),
           "machine": f"{platform.machine()}, {os.cpu_count()} cpus", "policy": "scripted expert (AT-SPI tree)",
           "tasks": [], "skipped": []}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        server = start_xvfb(1280, 800, workdir=Path(d))
        with environ(DISPLAY=server.display, XAUTHORITY=server.env["XAUTHORITY"]):
            bus = start_bus(server.display)
            try:
                for t in tasks:
                    if not app_installed(TASKS[t].app):
                        rep["skipped"].append(t)
                        continue
                    rep["tasks"].append(run_task(t, args.episodes, args.split))
                    print(json.dumps(rep["tasks"][-1]), file=sys.stderr, flush=True)
            finally:
                bus.stop()
                server.stop()
    rates = [r["rate"] for r in rep["tasks"]]
    rep["all_tasks_at_least_0.95"] = bool(rates) and min(rates) >= 0.95
    rep["total_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(rep))


if __name__ == "__main__":
    main()
