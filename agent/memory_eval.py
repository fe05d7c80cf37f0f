"""Persistent-deployment evaluation of the success memory: memory on vs off over paired streams.

Stream s, episode i runs with seed `seed + s * episodes + i` in every arm, so arms are paired
episode by episode. Each memory arm starts every stream with an empty memory that grows online
from its own verified successes. Because episodes within a stream share the memory they are not
independent; the report therefore adds stream-level differences (sign test and bootstrap over
streams) beside the episode-level Wilson and Newcombe intervals.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .loop import run_episode
from .stats import newcombe, wilson

# arm name -> MemoryConfig overrides (None: memory off); the ablations of the issue
ARMS = {
    "off": None,
    "online": {},
    "no-filter": {"consistency": False},
    "no-mode-selection": {"mode_selection": False},
    "fixed-confidence": {"fixed_confidence": 1.0},
    "replay": {"replay": True},
    "noisy-labels": {},      # 10% of failures reported as successes: failure credit must clean up
}
NOISY_RATE = 0.1


class NoisyLabels:
    """Reports a failed episode as a success with probability `rate` (a faulty success detector)."""

    def __init__(self, policy, rate: float, seed: int):
        self.policy, self.rate, self.rng = policy, rate, np.random.default_rng(seed)
        self.false_positives = 0

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def end_episode(self, success: bool) -> None:
        if not success and self.rng.random() < self.rate:
            success = True
            self.false_positives += 1
        self.policy.end_episode(success)


def arm_factory(policy, namespace: str, seed: int = 0) -> Callable[[str], object]:
    """`make(arm)`: the plain policy for "off", else a policy steered by a fresh memory."""
    from memory import MemoryConfig
    from policies.steered import SteeredPolicy, memory_for
    count = [0]

    def make(arm: str):
        if arm not in ARMS:
            raise ValueError(f"unknown arm {arm!r}; known: {', '.join(ARMS)}")
        if ARMS[arm] is None:
            return policy
        steered = SteeredPolicy(policy, memory_for(policy, MemoryConfig(**ARMS[arm])), namespace=namespace)
        count[0] += 1
        return NoisyLabels(steered, NOISY_RATE, seed + count[0]) if arm == "noisy-labels" else steered
    return make


def _rate(xs) -> dict:
    k, n = int(sum(xs)), len(xs)
    return {"successes": k, "episodes": n, "success_rate": k / n if n else None,
            "wilson95": list(wilson(k, n)) if n else None}


def _sign_test(diffs) -> float:
    """Two-sided exact sign test p-value over non-zero stream differences."""
    pos, neg = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    n = pos + neg
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(0, min(pos, neg) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def _bootstrap(diffs, reps: int = 10000, seed: int = 0) -> list[float]:
    d = np.asarray(diffs, float)
    means = np.random.default_rng(seed).choice(d, size=(reps, len(d))).mean(1)
    return [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]


def evaluate_memory(device, make_arm_policy: Callable[[str], object], *, arms: list[str], streams: int,
                    episodes: int, seed: int = 0, window: int = 10, on_episode=None) -> dict:
    """`make_arm_policy(arm)` returns a fresh policy (with a fresh memory for memory arms)."""
    outcomes = {a: np.zeros((streams, episodes), bool) for a in arms}
    steered = {a: np.zeros((streams, episodes)) for a in arms}
    memstats: dict = {}
    for arm in arms:
        for s in range(streams):
            policy = make_arm_policy(arm)        # a fresh memory per stream
            for i in range(episodes):
                r = run_episode(device, policy, seed=seed + s * episodes + i)
                if r.interrupted:
                    raise KeyboardInterrupt
                outcomes[arm][s, i] = bool(r.success)
                steered[arm][s, i] = r.info.get("policy", {}).get("memory_steered", 0)
                if on_episode:
                    on_episode(arm, s, i, r)
            mem = getattr(policy, "memory", None)
            if mem is not None:
                memstats.setdefault(arm, []).append(mem.stats())
    half = episodes // 2
    report = {"streams": streams, "episodes_per_stream": episodes, "seed": seed, "arms": {}, "comparisons": {}}
    for arm in arms:
        o = outcomes[arm]
        n_win = max(1, episodes // window)
        report["arms"][arm] = {
            **_rate(o.ravel()),
            "second_half": _rate(o[:, half:].ravel()),
            "per_stream": o.mean(1).tolist(),
            "per_stream_second_half": o[:, half:].mean(1).tolist(),
            "learning_curve": [float(o[:, w * window:(w + 1) * window].mean()) for w in range(n_win)],
            "steered_decisions_per_episode": float(steered[arm].mean()),
            "memory_stats_per_stream": memstats.get(arm, []),
        }
    base = "off" if "off" in arms else None
    for arm in arms:
        if base is None or arm == base:
            continue
        a, b = outcomes[arm], outcomes[base]
        row = {}
        for part, sl in (("all", slice(None)), ("second_half", slice(half, None))):
            ka, na = int(a[:, sl].sum()), a[:, sl].size
            kb, nb = int(b[:, sl].sum()), b[:, sl].size
            d, lo, hi = newcombe(ka, na, kb, nb)
            stream_d = (a[:, sl].mean(1) - b[:, sl].mean(1)).tolist()
            row[part] = {"diff": d, "newcombe95": [lo, hi], "per_stream_diff": stream_d,
                         "stream_sign_test_p": _sign_test(stream_d), "stream_bootstrap95": _bootstrap(stream_d),
                         # paired discordant counts (McNemar): arm succeeded where base failed, and back
                         "arm_only": int((a[:, sl] & ~b[:, sl]).sum()),
                         "base_only": int((~a[:, sl] & b[:, sl]).sum())}
        report["comparisons"][f"{arm} - {base}"] = row
    return report


def learning_curve_png(report: dict, path, title: str = "") -> None:
    """Success per window of episodes (mean over streams) for every arm, drawn with Pillow."""
    from PIL import Image, ImageDraw
    W, H, m = 640, 400, 50
    img = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(img)
    d.rectangle([m, m, W - m, H - m], outline="black")
    colors = ["black", "tab:blue", "red", "green", "orange", "purple", "brown"]
    palette = {"tab:blue": (31, 119, 180)}
    for y in (0.0, 0.25, 0.5, 0.75, 1.0):
        yy = H - m - y * (H - 2 * m)
        d.line([m - 4, yy, m, yy], fill="black")
        d.text((8, yy - 6), f"{y:.2f}", fill="black")
    d.text((m, 15), title or "success per window (mean over streams)", fill="black")
    for j, (arm, row) in enumerate(report["arms"].items()):
        curve = row["learning_curve"]
        if not curve:
            continue
        col = palette.get(colors[j % len(colors)], colors[j % len(colors)])
        pts = [(m + (k + 0.5) / len(curve) * (W - 2 * m), H - m - v * (H - 2 * m)) for k, v in enumerate(curve)]
        if len(pts) > 1:
            d.line(pts, fill=col, width=2)
        for x, y in pts:
            d.ellipse([x - 3, y - 3, x + 3, y + 3], fill=col)
        d.text((W - m - 150, m + 8 + 14 * j), f"{arm}: {row['success_rate']:.2f}", fill=col)
    d.text((W // 2 - 60, H - m + 15), "episode window within stream", fill="black")
    img.save(path)
