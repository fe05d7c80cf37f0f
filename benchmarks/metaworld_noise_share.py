"""What settles a checkpoint's Meta-World outcome: the task's set-up, the policy's sampling noise,
or the two together. Each task runs a crossed design: set-up seed a (the device's reset) x noise
seed b (the policy's reset), every pair once. One JSON line with, per task and pooled:

* the share of the outcome variance that goes with the set-up, with the noise seed, and with
  neither alone (the pair: a noise that works on this set-up only);
* permutation p-values for the set-up and noise effects (labels shuffled within the other factor);
* ``recall``: how often a noise seed that succeeded on one set-up succeeds on another, beside the
  same figure with the noise labels shuffled (``null``);
* ``seed_memory``: a stream of the set-ups in random order, once with a fresh noise seed per
  episode and once with the runtime's seed recall (the stored successful noise seed with the best
  record), averaged over orders.

A success memory recalls what worked; only the part of the outcome that carries over from one set-up
to the next is recallable under the protocol (a new set-up every episode).

    python benchmarks/metaworld_noise_share.py --policy embodia-mt50 --tasks box-close-v3,lever-pull-v3 \\
        --setups 6 --noises 6 --out /tmp/noise.jsonl

``--out`` keeps one line per episode: a stopped run goes on from there.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")

from embodia.agent.evaluation.suite import Policies, policy_reads, task_uri  # noqa: E402
from embodia.agent.loop.episode import run_episode  # noqa: E402
from embodia.agent.loop.factory import make_device  # noqa: E402
from embodia.policies.placement import parse_args  # noqa: E402

SETUP0, NOISE0 = 200, 1000      # seeds apart from the demos' and the evaluation streams'


class NoiseSeed:
    """``policy`` whose episodes draw their sampling noise from seed ``noise``, whatever the episode's
    seed (which still sets the device up)."""

    def __init__(self, policy, noise: int):
        self.policy, self.noise = policy, noise

    def reset(self, seed=None):
        self.policy.reset(self.noise)

    def __getattr__(self, name):
        return getattr(self.policy, name)


def read_log(out: Path) -> dict:
    """The episodes logged in ``out``: task -> {(a, b): success}."""
    done: dict = {}
    if out.is_file():
        for line in out.read_text().splitlines():
            try:
                r = json.loads(line)
                done.setdefault(r["task"], {})[(r["a"], r["b"])] = bool(r["success"])
            except (ValueError, KeyError):
                continue        # a line a crash cut short: that episode runs again
    return done


def run(policy_spec: str, tasks: list[str], setups: int, noises: int, out: Path) -> dict:
    """Every (task, set-up, noise) episode not yet in ``out``; returns task -> {(a, b): success}."""
    done = read_log(out)
    total = len(tasks) * setups * noises
    n = sum(len(v) for t, v in done.items() if t in tasks)
    policies = Policies(policy_spec, 1)
    for task in tasks:
        pairs = [(a, b) for a in range(SETUP0, SETUP0 + setups) for b in range(NOISE0, NOISE0 + noises)
                 if (a, b) not in done.get(task, {})]
        if not pairs:
            continue
        dev = make_device(task_uri(task, dict(policy_reads(policy_spec), max_steps="500")))
        try:
            policy = policies.for_device(dev)        # a checkpoint: loaded once, bound to each task's body
            for a, b in pairs:
                res = run_episode(dev, NoiseSeed(policy, b), seed=a)
                rec = {"task": task, "a": a, "b": b, "success": bool(res.success), "steps": res.steps}
                with open(out, "a", encoding="utf-8") as f:
                    f.write(json.dumps(rec) + "\n")
                done.setdefault(task, {})[(a, b)] = rec["success"]
                n += 1
                print(f"[{n}/{total}] {task} set-up {a} noise {b}: {'success' if rec['success'] else 'failure'}",
                      file=sys.stderr, flush=True)
        finally:
            dev.close()
    return done


def matrix(cells: dict) -> np.ndarray:
    """float[set-ups, noises] of 0/1 from {(a, b): success}."""
    A, B = sorted({a for a, _ in cells}), sorted({b for _, b in cells})
    return np.array([[float(cells[(a, b)]) for b in B] for a in A])


def components(M: np.ndarray) -> tuple[float, float, float]:
    """The outcome's variance components: set-up (rows), noise seed (columns) and the pair (what
    is left: a noise that works on this set-up only), from the two-way ANOVA with one cell per pair
    (the row and column mean squares corrected for the residual's share; clipped at 0).

    >>> fractions(components(np.array([[1., 1.], [0., 0.]])))      # the set-up decides
    {'setup': 1.0, 'noise': 0.0, 'pair': 0.0}
    >>> fractions(components(np.array([[1., 0.], [0., 1.]])))      # neither alone: the pair decides
    {'setup': 0.0, 'noise': 0.0, 'pair': 1.0}
    """
    p = M.mean()
    resid = M - M.mean(1, keepdims=True) - M.mean(0, keepdims=True) + p
    s2 = float((resid ** 2).sum() / ((M.shape[0] - 1) * (M.shape[1] - 1)))
    rows = max(float(M.mean(1).var(ddof=1)) - s2 / M.shape[1], 0.0)
    cols = max(float(M.mean(0).var(ddof=1)) - s2 / M.shape[0], 0.0)
    return rows, cols, s2


def fractions(parts) -> dict:
    tot = sum(parts)
    return {k: round(v / tot, 3) if tot else None for k, v in zip(("setup", "noise", "pair"), parts)}


def spread(M: np.ndarray, axis: int) -> float:
    """Sum of squared deviations of the totals along ``axis`` (0: per noise seed, 1: per set-up)."""
    t = M.sum(axis=axis)
    return float(((t - t.mean()) ** 2).sum())


def shuffled(M: np.ndarray, axis: int, rng) -> np.ndarray:
    """M with the noise labels shuffled within each set-up (axis 0) or the set-ups within each noise (1)."""
    return np.array([rng.permutation(r) for r in M]) if axis == 0 else np.array([rng.permutation(c) for c in M.T]).T


def recall(M: np.ndarray) -> tuple[float, int]:
    """Successes and tries of a noise seed on the other set-ups after it succeeded on one."""
    k = n = 0
    for col in M.T:
        s = col.sum()
        k += s * (s - 1)
        n += s * (len(col) - 1)
    return float(k), int(n)


def seed_memory(M: np.ndarray, rng, orders: int = 2000) -> tuple[float, float]:
    """Mean successes per stream without and with the runtime's seed recall (`MemoryConfig.recall_seed`:
    `SuccessMemory.recall_seed` picks, `credit_seed` keeps the record)."""
    from embodia.memory import SuccessMemory
    mem = SuccessMemory(None, 1, 1, 1, encoder_id="noise-share", normalizer_hash="-")
    off = on = 0.0
    for _ in range(orders):
        mem.seeds = {}
        for a, b in zip(rng.permutation(M.shape[0]), rng.permutation(M.shape[1])):
            off += M[a, b]
            use = mem.recall_seed("task")
            use = int(b) if use is None else use
            on += M[a, use]
            mem.credit_seed("task", use, bool(M[a, use]))
    return off / orders, on / orders


def analyse(done: dict, rng, perms: int = 2000) -> dict:
    per, pooled = {}, {"parts": [0.0, 0.0, 0.0], "recall": [0.0, 0], "null": [0.0, 0.0],
                       "off": 0.0, "on": 0.0, "setups": 0}
    stat = {"setup": [0.0, np.zeros(perms)], "noise": [0.0, np.zeros(perms)]}
    for task, cells in done.items():
        M = matrix(cells)
        if M.size != len(cells) or min(M.shape) < 2:
            continue
        parts = components(M)
        k, n = recall(M)
        nk = nn = 0.0
        p_set, p_noise = np.zeros(perms), np.zeros(perms)
        for i in range(perms):
            S = shuffled(M, 0, rng)
            kk, n2 = recall(S)
            nk, nn = nk + kk, nn + n2
            p_noise[i] = spread(S, 0)
            p_set[i] = spread(shuffled(M, 1, rng), 1)
        off, on = seed_memory(M, rng)
        per[task] = {"setups": M.shape[0], "noises": M.shape[1], "successes": int(M.sum()),
                     "rate": round(float(M.mean()), 3),
                     "variance_share": fractions(parts),
                     "p_setup": float(np.mean(p_set >= spread(M, 1))),
                     "p_noise": float(np.mean(p_noise >= spread(M, 0))),
                     "recall": round(k / n, 3) if n else None, "null": round(nk / nn, 3) if nn else None,
                     "seed_memory": {"off": round(off / M.shape[0], 3), "on": round(on / M.shape[0], 3)}}
        pooled["parts"] = [x + y for x, y in zip(pooled["parts"], parts)]
        pooled["recall"][0] += k
        pooled["recall"][1] += n
        pooled["null"][0] += nk / perms
        pooled["null"][1] += nn / perms
        pooled["off"] += off
        pooled["on"] += on
        pooled["setups"] += M.shape[0]
        stat["setup"][0] += spread(M, 1)
        stat["setup"][1] += p_set
        stat["noise"][0] += spread(M, 0)
        stat["noise"][1] += p_noise
    return {"tasks": per, "pooled": {
        "variance_share": fractions(pooled["parts"]),
        "p_setup": float(np.mean(stat["setup"][1] >= stat["setup"][0])),
        "p_noise": float(np.mean(stat["noise"][1] >= stat["noise"][0])),
        "recall": round(pooled["recall"][0] / max(pooled["recall"][1], 1), 3),
        "null": round(pooled["null"][0] / max(pooled["null"][1], 1), 3),
        "seed_memory": {"off": round(pooled["off"] / max(pooled["setups"], 1), 3),
                        "on": round(pooled["on"] / max(pooled["setups"], 1), 3),
                        "gain": round((pooled["on"] - pooled["off"]) / max(pooled["setups"], 1), 3)}}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="embodia-mt50")
    ap.add_argument("--tasks", required=True, help="comma-separated Meta-World tasks, e.g. box-close-v3")
    ap.add_argument("--setups", type=int, default=6)
    ap.add_argument("--noises", type=int, default=6)
    ap.add_argument("--out", required=True, help="episode log (JSON lines): a stopped run resumes from it")
    ap.add_argument("--analyse-only", action="store_true", help="read --out, run nothing")
    args = parse_args(ap)      # with --torch-device / --dtype (embodia.policies.placement)
    if args.setups < 2 or args.noises < 2:
        ap.error("--setups and --noises must be at least 2 (a crossed design)")
    tasks = [t for t in args.tasks.split(",") if t]
    out = Path(args.out)
    t0 = time.time()
    done = read_log(out) if args.analyse_only else run(args.policy, tasks, args.setups, args.noises, out)
    done = {t: done[t] for t in tasks if t in done}
    print(json.dumps({"benchmark": "metaworld_noise_share", "policy": args.policy, "setup_seeds": SETUP0,
                      "noise_seeds": NOISE0, **analyse(done, np.random.default_rng(0)),
                      "wall_s": round(time.time() - t0, 1),
                      "machine": f"{platform.machine()} {os.cpu_count()} cpus", "date": time.strftime("%Y-%m-%d")}))


if __name__ == "__main__":
    main()
