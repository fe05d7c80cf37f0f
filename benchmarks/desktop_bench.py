"""The desktop bench's scripted experts on held-out variations: success per task with Wilson intervals.

Starts its own Xvfb (1280x800) and accessibility bus, then runs ``--episodes`` episodes per task of
`embodia.sim.desktop_bench` (galculator, mousepad, gnumeric from Debian) on ``split=test`` through
`embodia`'s loop, the expert reading the AT-SPI tree, the gate allowing only the bench's
``GATE_ALLOW`` (the close-discard tasks click "Discard" / "Don't Save"). One JSON line on stdout.

    python benchmarks/desktop_bench.py --episodes 20
    python benchmarks/desktop_bench.py --episodes 5 --tasks galculator/add,mousepad/save-as

A trained GUI head instead of the expert (``--policy``: a checkpoint folder, e.g. the desktop variant
of `embodia-tiny` that ``embodia train desktop`` writes): success per task
and per application with Wilson intervals, and each task's chance rate: the probability that a
policy drawing uniformly among the head's choices (a clickable element for a click; an element and
a span of the instruction for typing) makes the shortest solution, averaged over the episodes. By
default only the tasks the head can express (`HEAD_TASKS`).

    python benchmarks/desktop_bench.py --policy data/embodia-tiny-desktop --episodes 20

Screen memory on repeated tasks (``--memory-streams S``): per task, S paired streams of
``--memory-episodes`` episodes, memory off and on (a fresh `ScreenMemory` per stream, replace
mode), the same seeds in both arms; ``--repeat K`` makes seed s show the variation of s % K, so each
variation comes back; ``--epsilon P`` makes the policy click a random clickable element with
probability P per step (for a policy that is otherwise perfect on the task), ``--max-steps N`` sets
the step budget (a one-step task with ``--max-steps 1``: a wasted action is a failure). Reports the gain
with its Newcombe 95% interval, per task and pooled.

    python benchmarks/desktop_bench.py --policy data/embodia-tiny-desktop --memory-streams 2 \
        --memory-episodes 10 --repeat 3
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from embodia.agent.evaluation.stats import newcombe, wilson  # noqa: E402
from embodia.agent.loop.episode import run_episode  # noqa: E402
from embodia.agent.loop.safety import SafetyGate  # noqa: E402
from embodia.devices import GuiAction  # noqa: E402
from embodia.devices.atspi import start_bus  # noqa: E402
from embodia.devices.base import environ  # noqa: E402
from embodia.policies.base import Policy  # noqa: E402
from embodia.policies.placement import parse_args  # noqa: E402
from embodia.sim.desktop_bench import GATE_ALLOW, app_installed, open_desktop_bench  # noqa: E402
from embodia.sim.desktop_tasks import TASKS  # noqa: E402


class EpsilonPolicy(Policy):
    """The base policy, except that with probability ``epsilon`` a step clicks a clickable element
    drawn uniformly (the draws seeded by the episode's seed): a policy that is not perfect alone,
    for the memory comparison."""

    def __init__(self, base, epsilon: float):
        self.base, self.epsilon = base, float(epsilon)
        self.rng = random.Random(0)

    def reset(self, seed=None):
        self.rng = random.Random(f"epsilon/{seed}")
        self.base.reset(seed)

    def act(self, obs, instruction=""):
        targets = [e["index"] for e in obs.ui_tree or [] if e.get("clickable")]
        if targets and self.rng.random() < self.epsilon:
            return GuiAction("click", element=self.rng.choice(targets))
        return self.base.act(obs, instruction)

    def info(self):
        return {"epsilon": self.epsilon}


def make_policy_for(spec: str, dev, epsilon: float = 0.0):
    if spec == "expert":
        pol = dev.expert()
    else:
        from embodia.agent.loop.factory import make_policy
        pol = make_policy(spec, dev, threads=1)
    return EpsilonPolicy(pol, epsilon) if epsilon > 0 else pol


def chance_rate(dev, tree: list) -> float:
    """Probability that uniform draws among the head's choices make the task's shortest solution
    (see the module doc); 0.0 for a task without a formula here."""
    from embodia.policies.gui.head_layout import words
    clickable = max(1, sum(bool(e.get("clickable")) for e in tree or []))
    if dev.task.app == "galculator":
        from embodia.sim.desktop_tasks import calc_keys
        return clickable ** -len(calc_keys(dev.slots))
    if dev.target == "mousepad/type":
        n = len(words(dev.instruction))
        return 1.0 / (clickable * n * (n + 1) / 2)
    return 0.0


def run_task(target: str, episodes: int, split: str, policy: str = "expert") -> dict:
    ok, steps, secs, errors, tree_ms, chance = 0, [], [], [], [], []
    with open_desktop_bench(target, split=split, settle=0.5) as dev:
        pol = make_policy_for(policy, dev)            # reset by the loop at every episode
        for seed in range(episodes):
            t0 = time.perf_counter()
            r = run_episode(dev, pol, seed=seed, gate=SafetyGate(allow=GATE_ALLOW),
                            on_step=lambda step: (chance.append(chance_rate(dev, step.obs.ui_tree))
                                                  if step.t == 0 else None))
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
            "chance": float(f"{sum(chance) / max(1, len(chance)):.3g}"), "failures": errors[:3]}


def per_app(rows: list) -> list:
    out = []
    for app in dict.fromkeys(r["task"].split("/")[0] for r in rows):
        mine = [r for r in rows if r["task"].startswith(app + "/")]
        k, n = sum(r["successes"] for r in mine), sum(r["episodes"] for r in mine)
        lo, hi = wilson(k, n)
        out.append({"app": app, "tasks": len(mine), "successes": k, "episodes": n, "rate": round(k / n, 3),
                    "wilson95": [round(lo, 3), round(hi, 3)],
                    "chance": float(f"{sum(r['chance'] for r in mine) / len(mine):.3g}")})
    return out


def memory_task(target: str, policy: str, streams: int, episodes: int, repeat: int, split: str,
                epsilon: float = 0.0, max_steps: int = 0) -> dict:
    """Paired streams, memory off and on (`embodia.agent.evaluation.memory_eval`), on one task."""
    from embodia.agent.evaluation.memory_eval import evaluate_memory, screen_arm_factory
    budget = {"max_steps": max_steps} if max_steps > 0 else {}
    with open_desktop_bench(target, split=split, settle=0.5, repeat=repeat, **budget) as dev:
        base = make_policy_for(policy, dev, epsilon)
        rep = evaluate_memory(dev, screen_arm_factory(base, dev), arms=["off", "online"], streams=streams,
                              episodes=episodes, seed=0)
    arms = {a: {k: rep["arms"][a][k] for k in ("successes", "episodes", "success_rate", "wilson95",
                                                "steered_decisions_per_episode", "per_stream")}
            for a in ("off", "online")}
    cmp = rep["comparisons"]["online - off"]["all"]
    return {"task": target, "epsilon": epsilon, "max_steps": dev.max_steps, "repeat": repeat, "streams": streams,
            "episodes_per_stream": episodes, "arms": arms,
            "gain": cmp["diff"], "newcombe95": cmp["newcombe95"], "on_only": cmp["arm_only"],
            "off_only": cmp["base_only"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--split", default="test", choices=["train", "test"])
    ap.add_argument("--tasks", default="", help="comma-separated app/task (default: all installed; with "
                    "--policy, those the head can express)")
    ap.add_argument("--policy", default="expert", help="expert, or a GUI head checkpoint folder")
    ap.add_argument("--memory-streams", type=int, default=0, help="memory off vs on: paired streams per task")
    ap.add_argument("--memory-episodes", type=int, default=10, help="episodes per memory stream")
    ap.add_argument("--repeat", type=int, default=3, help="variations a memory stream repeats")
    ap.add_argument("--max-steps", type=int, default=0, help="memory runs: the episode's step budget "
                    "(default: the bench's)")
    ap.add_argument("--epsilon", type=float, default=0.0, help="memory runs: the policy clicks a random "
                    "clickable element with this probability per step (a policy that is not perfect alone)")
    args = parse_args(ap)      # with --torch-device / --dtype (embodia.policies.placement)
    from embodia.agent.training.desktop_train import HEAD_TASKS
    default = TASKS if args.policy == "expert" else HEAD_TASKS
    tasks = [t for t in (args.tasks.split(",") if args.tasks else default) if t]
    from embodia.devices.xvfb import start_xvfb
    rep = {"benchmark": "desktop_bench", "date": time.strftime("%Y-%m-%d"),
           "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
           "policy": "scripted expert (AT-SPI tree)" if args.policy == "expert" else args.policy,
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
                    if args.memory_streams:
                        rep.setdefault("memory", []).append(
                            memory_task(t, args.policy, args.memory_streams, args.memory_episodes, args.repeat,
                                        args.split, args.epsilon, args.max_steps))
                        print(json.dumps(rep["memory"][-1]), file=sys.stderr, flush=True)
                        continue
                    rep["tasks"].append(run_task(t, args.episodes, args.split, args.policy))
                    print(json.dumps(rep["tasks"][-1]), file=sys.stderr, flush=True)
            finally:
                bus.stop()
                server.stop()
    if rep["tasks"]:
        rates = [r["rate"] for r in rep["tasks"]]
        rep["per_app"] = per_app(rep["tasks"])
        rep["all_tasks_at_least_0.95"] = min(rates) >= 0.95
    if rep.get("memory"):
        on = sum(m["arms"]["online"]["successes"] for m in rep["memory"])
        off = sum(m["arms"]["off"]["successes"] for m in rep["memory"])
        n = sum(m["arms"]["off"]["episodes"] for m in rep["memory"])
        d, lo, hi = newcombe(on, n, off, n)
        rep["memory_pooled"] = {"on": on, "off": off, "episodes_per_arm": n, "gain": round(d, 4),
                                "newcombe95": [round(lo, 4), round(hi, 4)], "lower_bound_above_0": lo > 0}
    rep["total_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(rep))


if __name__ == "__main__":
    main()
