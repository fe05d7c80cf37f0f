"""Asynchronous execution against a policy slower than the control period: control rate, stalls,
and the action jump where one chunk hands over to the next.

    python benchmarks/async_loop.py --episodes 20

The real decision latency of the policy is measured first (one torch thread, as the async loop
runs it) and the control rate is set so that a decision takes `--ratio` control periods (no
latency is added). Then, paced, on the same seeds: sync (replan every step, the loop waits for each
decision), async without smoothing, async with prefix inpainting, async with temporal ensembling.
Jumps are |a_t - a_(t-1)| (L2 over channels, normalized units) at switch steps (the first step a
new chunk drives) and within chunks; the departure at a switch is |a_t - p_t|, p_t the action the
previous chunk had planned for step t (sync: row 1 of the decision before). Prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np
import torch

from embodia.agent.evaluation.stats import wilson
from embodia.agent.loop.asynchronous import run_async
from embodia.agent.loop.episode import run_episode
from embodia.agent.loop.factory import make_policy
from embodia.devices import open_device
from embodia.policies.placement import parse_args

ARMS = (("sync", False, "none"), ("async", True, "none"), ("async_inpaint", True, "inpaint"),
        ("async_ensemble", True, "ensemble"))


def decision_ms(policy, dev, repeats: int = 30) -> float:
    obs = dev.reset(0)
    policy.reset(0)
    times = []
    for i in range(repeats + 5):
        t0 = time.perf_counter()
        policy.act(obs, dev.instruction)
        if i >= 5:
            times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def stats(xs) -> dict | None:
    if len(xs) == 0:
        return None
    a = np.asarray(xs)
    return {"mean": round(float(a.mean()), 4), "p95": round(float(np.percentile(a, 95)), 4)}


class KeepChunks:
    """A policy that keeps the chunks it returns (what the sync loop planned for the next steps)."""

    def __init__(self, policy):
        self.policy, self.chunks = policy, []

    def reset(self, seed=None):
        self.policy.reset(seed)
        self.chunks = []

    def act(self, obs, instruction):
        self.chunks.append(self.policy.act(obs, instruction))
        return self.chunks[-1]


def run_arm(dev, policy, norm, *, async_exec: bool, smooth: str, hz: float, seeds) -> dict:
    rates, at_switch, within, departure, stalls, delays, wins = [], [], [], [], 0, [], []
    policy = policy if async_exec else KeepChunks(policy)
    for seed in seeds:
        sent, acts = [], []
        def listen(step, sent=sent, acts=acts):
            return sent.append(time.perf_counter()) or acts.append(step.action) and False
        loop = dict(loop=run_async, smooth=smooth) if async_exec else dict(loop=run_episode)
        r = loop.pop("loop")(dev, policy, seed=seed, pace=True, hz=hz, on_step=listen, **loop)
        if r.error:
            raise RuntimeError(f"seed {seed}: {r.error}")
        wins.append(bool(r.success))
        rates.append((len(sent) - 1) / (sent[-1] - sent[0]))
        a = np.asarray(norm.normalize(np.stack(acts)))
        jump = np.linalg.norm(np.diff(a, axis=0), axis=1)            # jump[t - 1]: into step t
        info = r.timing.get("async")
        switch = set(info["switch_steps"]) if info else set(range(len(acts)))   # sync: a new chunk every step
        for t in range(1, len(acts)):
            (at_switch if t in switch else within).append(jump[t - 1])
        planned = info["superseded"] if info else [(t, c[1]) for t, c in enumerate(policy.chunks[:-1], 1)]
        departure += [float(np.linalg.norm(a[t] - norm.normalize(np.asarray(p)))) for t, p in planned
                      if t < len(a)]
        if info:
            stalls += info["stall_steps"]
            delays += info["delays"]
    k, n = sum(wins), len(wins)
    return {"achieved_hz": round(float(np.mean(rates)), 2), "rate_frac": round(float(np.mean(rates)) / hz, 3),
            "stall_steps": stalls if async_exec else None,
            "delay_steps": stats(delays),
            "jump_at_switch": stats(at_switch), "jump_within_chunk": stats(within),
            "departure_at_switch": stats(departure),
            "successes": k, "episodes": n, "success_rate": k / n, "wilson95": [round(x, 3) for x in wilson(k, n)]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="embodia-tiny")
    ap.add_argument("--device", default="sim:twogap-push")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--ratio", type=float, default=2.0, help="decision latency / control period")
    args = parse_args(ap)      # with --torch-device / --dtype (embodia.policies.placement)
    torch.set_num_threads(1)
    with open_device(args.device) as dev:
        policy = make_policy(args.policy, dev, threads=1)
        latency = decision_ms(policy, dev)
        hz = round(1e3 * args.ratio / latency, 1)
        norm = policy.norms[dev.embodiment.name]["action"]
        seeds = range(args.episodes)
        arms = {name: run_arm(dev, policy, norm, async_exec=a, smooth=s, hz=hz, seeds=seeds)
                for name, a, s in ARMS}
    print(json.dumps({"benchmark": "async_loop", "device": args.device, "policy": args.policy,
                      "episodes": args.episodes, "decision_ms_p50": round(latency, 2),
                      "latency_set_by": f"control rate: hz = {args.ratio:g} / decision latency (no added latency)",
                      "target_hz": hz, "period_ms": round(1e3 / hz, 2), "arms": arms,
                      "machine": f"{platform.machine()} {os.cpu_count()} cpus, torch {torch.__version__}",
                      "date": time.strftime("%Y-%m-%d")}))


if __name__ == "__main__":
    main()
