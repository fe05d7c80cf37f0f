"""Latency of one VLA decision on CPU: backbone forward, DiT sampling (K=10 and K=4), total.

    python benchmarks/decision_latency.py --policy embodia-tiny --repeats 100

Prints one JSON line with p50/p95 in ms at 1 and 2 torch threads, and the DiT's time per Euler step.
Then the same decisions inside the real loop (`run_episode`, as `embodia eval` runs them): policy time
per executed step at 1 and 2 threads, on a quiet machine and beside a busy neighbour process (one
process spinning a core, started and stopped by this script), episodes interleaved thread by thread
on the same seeds (`--in-loop-episodes`, 0 skips it).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np
import torch

from embodia.action_heads import sample
from embodia.agent.loop.factory import make_policy
from embodia.devices import open_device
from embodia.policies.placement import parse_args


def pct(xs) -> dict:
    a = np.asarray(xs) * 1e3
    return {"p50": round(float(np.percentile(a, 50)), 2), "p95": round(float(np.percentile(a, 95)), 2)}


@torch.inference_mode()
def measure(policy, obs, instruction: str, repeats: int) -> dict:
    emb, model = policy.embodiment, policy.model
    state, smask, amask, eid = policy.inputs(emb, obs.state)
    times = {"backbone": [], "dit_k10": [], "dit_k4": [], "total_k10": []}
    for i in range(repeats + 5):
        t0 = time.perf_counter()
        batch = model.backbone.prepare([[obs.images[c.name] for c in emb.cameras]], [emb.prompt()], [instruction])
        ctx, cm = model.context(**batch)
        t1 = time.perf_counter()
        sample(model.head, ctx, state, smask, eid, amask, steps=10, ctx_mask=cm, generator=policy.generator)
        t2 = time.perf_counter()
        sample(model.head, ctx, state, smask, eid, amask, steps=4, ctx_mask=cm, generator=policy.generator)
        t3 = time.perf_counter()
        policy.predict_chunk(obs, instruction)
        t4 = time.perf_counter()
        if i >= 5:   # warm-up
            times["backbone"].append(t1 - t0)
            times["dit_k10"].append(t2 - t1)
            times["dit_k4"].append(t3 - t2)
            times["total_k10"].append(t4 - t3)
    out = {k: pct(v) for k, v in times.items()}
    out["dit_ms_per_euler_step"] = round(float(np.median(times["dit_k10"])) * 1e3 / 10, 3)
    return out


def memory_latency(policy, dev, repeats: int) -> dict:
    """Whole decisions with a success memory (filled from 20 expert successes) vs without.

    The memory steers every decision it can (fixed confidence: tau0 = tau_max), so the figure is
    the cost of a steered decision: retrieval + filter + prior, and fewer Euler steps."""
    from embodia.agent.loop.episode import run_episode
    from embodia.memory import MemoryConfig, make_namespace
    from embodia.policies.robot.steered import SteeredPolicy, memory_for
    steered = SteeredPolicy(policy, memory_for(policy, MemoryConfig(fixed_confidence=1.0)),
                            namespace=make_namespace("b", "b"))
    for s in range(20):
        states, actions = [], []
        run_episode(dev, dev.expert(), seed=1000 + s,
                    on_step=lambda step: states.append(step.obs.state) or actions.append(step.action) and False)
        steered.remember(np.stack(states), np.stack(actions))
    times = {"without_memory": [], "with_memory": []}
    for i in range(repeats + 5):
        obs = dev.reset(i % 20)
        for name, p in (("without_memory", policy), ("with_memory", steered)):
            p.reset(i)
            t0 = time.perf_counter()
            p.act(obs, dev.instruction)
            if i >= 5:
                times[name].append(time.perf_counter() - t0)
    out = {k: pct(v) for k, v in times.items()}
    out["steered_fraction"] = steered.steered / max(1, steered.decisions)
    out["with_over_without_p50"] = round(out["with_memory"]["p50"] / out["without_memory"]["p50"], 3)
    return out


def in_loop(policy, dev, episodes: int) -> dict:
    """Policy time per executed step inside `run_episode` at 1 and 2 threads, episode i on seed i for
    both (their order alternates so drift weighs on both)."""
    from embodia.agent.loop.episode import run_episode
    rows = {t: {"steps": 0, "policy_s": 0.0, "wall_s": 0.0, "successes": 0} for t in (1, 2)}
    for i in range(episodes):
        for threads in ((1, 2) if i % 2 == 0 else (2, 1)):
            torch.set_num_threads(threads)
            t0 = time.perf_counter()
            r = run_episode(dev, policy, seed=i)
            row = rows[threads]
            row["wall_s"] += time.perf_counter() - t0
            row["steps"] += r.steps
            row["policy_s"] += r.timing.get("policy_s", 0.0)
            row["successes"] += int(bool(r.success))
    return {f"threads_{t}": {"episodes": episodes, **{k: round(v, 3) if isinstance(v, float) else v
                                                      for k, v in row.items()},
                             "policy_ms_per_step": round(1e3 * row["policy_s"] / max(1, row["steps"]), 2)}
            for t, row in rows.items()}


def busy_neighbour() -> subprocess.Popen:
    """A process that keeps one core busy (pure Python spin), as another job on the machine would."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="embodia-tiny")
    ap.add_argument("--device", default="sim:twogap-push")
    ap.add_argument("--repeats", type=int, default=100)
    ap.add_argument("--in-loop-episodes", type=int, default=6, help="per thread count and condition")
    args = parse_args(ap)      # with --torch-device / --dtype (embodia.policies.placement)
    with open_device(args.device) as dev:
        obs = dev.reset(0)
        policy = make_policy(args.policy, dev)
        policy.reset(0)
        res = {}
        for threads in (1, 2):
            torch.set_num_threads(threads)
            res[f"threads_{threads}"] = measure(policy, obs, dev.instruction, args.repeats)
        torch.set_num_threads(1)
        res["memory_threads_1"] = memory_latency(policy, dev, args.repeats)
        if args.in_loop_episodes:
            res["in_loop_quiet"] = in_loop(policy, dev, args.in_loop_episodes)
            neighbour = busy_neighbour()
            try:
                time.sleep(0.5)
                res["in_loop_busy_neighbour"] = in_loop(policy, dev, args.in_loop_episodes)
            finally:
                neighbour.kill()
                neighbour.wait()
            res["in_loop_faster"] = {c: min((1, 2), key=lambda t: res[c][f"threads_{t}"]["policy_ms_per_step"])
                                     for c in ("in_loop_quiet", "in_loop_busy_neighbour")}
        bb = policy.model.backbone
        params = sum(p.numel() for p in policy.model.parameters())
    print(json.dumps({"benchmark": "decision_latency", "policy": args.policy, "device": args.device,
                      "params": params, "backbone_hidden": bb.hidden_size, "repeats": args.repeats, **res,
                      "machine": f"{platform.machine()} {os.cpu_count()} cpus, torch {torch.__version__}",
                      "date": time.strftime("%Y-%m-%d")}))


if __name__ == "__main__":
    main()
