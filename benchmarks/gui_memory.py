"""Success memory for screens with `embodia-tiny`'s GUI head: memory on vs off over paired streams.

    python benchmarks/gui_memory.py --streams 5 --episodes 100

The deployment: gui-sim's Settings app (phone) with settings the head never saw in training
(split=test), a new layout every episode (shift=layout: row order, row heights, title alignment,
the two "quick" settings and every switch's state change), and a step budget (``max_steps``,
default 7; the expert needs 2 steps). Which category holds an unfamiliar setting is written on no
screen before the category is opened, so the head looks through categories in screen order and
runs out of steps when the right one comes late. The memory (`ScreenMemoryPolicy`, replace mode)
stores every verified success and, with the slot-value backoff of `ScreenMemoryConfig.values`,
sends the next request for a setting it has found before straight to its category. Stored and
evaluated screens always differ (another instance, another layout);
`replacements_where_a_stored_key_was_identical` counts the replacements whose query key equalled a
stored key (the key ignores geometry, so these are screens with the same texts and states).

Arms (paired: episode i of every arm of a stream has the same seed): ``off`` (the head alone),
``online`` (a fresh memory per stream that grows from the stream's own successes), and
``no-values`` (the same memory with ``values="off"``: slot values only abstracted away). The report
is `embodia.agent.evaluation.memory_eval.build_report`'s (Wilson intervals per arm, all episodes and second half,
Newcombe intervals of the differences, per-stream differences with a sign test and a bootstrap)
beside the chance rate, the memory's replacements and their precision, and the steps per success.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from embodia.agent.evaluation.memory_eval import SCREEN_ARMS, build_report, run_stream, screen_arm_factory
from embodia.agent.loop.factory import make_policy
from embodia.memory.screen import ScreenMemory
from embodia.policies.placement import parse_args
from embodia.sim.gui import GuiSimDevice


class Exact:
    """Counts the replacements made where the query's key equals a stored one (the key reads texts,
    roles and states, not geometry), by wrapping the memory's query."""

    def __init__(self, memory: ScreenMemory):
        self.identical = 0
        inner = memory.query

        def query(*a, **kw):
            r = inner(*a, **kw)
            if not r.empty and r.confidence >= memory.config.replace_confidence:
                self.identical += r.top_similarity >= 1 - 1e-6
            return r
        memory.query = query


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="embodia-tiny")
    ap.add_argument("--streams", type=int, default=5)
    ap.add_argument("--episodes", type=int, default=100, help="per stream and arm")
    ap.add_argument("--seed", type=int, default=80000)
    ap.add_argument("--task", default="turn-on")
    ap.add_argument("--shift", default="layout")
    ap.add_argument("--max-steps", type=int, default=7)
    ap.add_argument("--form", default="phone")
    ap.add_argument("--arms", default=",".join(SCREEN_ARMS))
    args = parse_args(ap)      # with --torch-device / --dtype (embodia.policies.placement)
    torch.manual_seed(0)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if "off" not in arms or any(a not in SCREEN_ARMS for a in arms):
        sys.exit(f"--arms: 'off' and any of {list(SCREEN_ARMS)}")
    dev = GuiSimDevice("settings", task=args.task, split="test", shift=args.shift, form=args.form,
                       max_steps=args.max_steps)
    head = make_policy(args.policy, dev, threads=1)
    exact, policies = {}, {}

    arm_policy = screen_arm_factory(head, dev)

    def make(arm: str, stream: int = 0):
        pol = arm_policy(arm, stream)
        if pol is not head:
            exact[arm, stream], policies[arm, stream] = Exact(pol.memory), pol
        return pol

    chances, t0 = {}, time.perf_counter()

    def on_episode(arm, stream, i, r):
        chances[stream * args.episodes + i] = float(r.info.get("chance", 0.0))
        print(f"\r{arm} stream {stream} episode {i + 1}/{args.episodes}", end="", file=sys.stderr, flush=True)

    runs = {(a, s): run_stream(dev, make, a, s, episodes=args.episodes, seed=args.seed, on_episode=on_episode)
            for a in arms for s in range(args.streams)}
    print(file=sys.stderr)
    rep = build_report(runs, arms=arms, streams=args.streams, episodes=args.episodes, seed=args.seed)
    for a in arms:
        steps = [st for s in range(args.streams) for st, ok in zip(runs[a, s]["steps"], runs[a, s]["outcomes"]) if ok]
        rep["arms"][a]["steps_per_success"] = round(float(np.mean(steps)), 3) if steps else None
        if SCREEN_ARMS[a] is None:
            continue
        tot = [policies[a, s].info() for s in range(args.streams)]
        rep["arms"][a]["memory"] = {
            "replaced_decisions": sum(t["memory_replaced_total"] for t in tot),
            "episodes_with_replacement": sum(t["memory_episodes_replaced_total"] for t in tot),
            "their_successes": sum(t["memory_episodes_replaced_ok_total"] for t in tot),
            "replacements_where_a_stored_key_was_identical": sum(exact[a, s].identical for s in range(args.streams)),
            "entries_per_stream": [len(policies[a, s].memory) for s in range(args.streams)]}
        rep["arms"][a].pop("memory_stats_per_stream", None)
    print(json.dumps({
        "benchmark": "gui_memory", "policy": args.policy,
        "device": f"gui-sim:settings?task={args.task}&split=test&shift={args.shift}&form={args.form}"
                  f"&max_steps={args.max_steps}",
        "mean_chance": float(f"{np.mean(list(chances.values())):.3g}"),
        **rep, "seconds": round(time.perf_counter() - t0, 1),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, torch {torch.__version__}",
        "date": datetime.date.today().isoformat()}))


if __name__ == "__main__":
    main()
