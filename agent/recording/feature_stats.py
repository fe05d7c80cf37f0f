"""The statistics LeRobot keeps in meta/stats.json (min, max, mean, std, count and quantiles), per
episode and pooled, and the timing summary of an episode."""
from __future__ import annotations

import math

import numpy as np

QUANTILES = (("q01", 0.01), ("q10", 0.10), ("q50", 0.50), ("q90", 0.90), ("q99", 0.99))


IMAGE_STATS_MAX_SIDE = 128  # image stats are taken on frames strided down to about this size


# -- statistics --------------------------------------------------------------------------------------
def vector_stats(x: np.ndarray) -> dict[str, np.ndarray]:
    """min/max/mean/std (population)/count and q01..q99 (numpy 'linear' quantiles) over rows of x."""
    x = np.asarray(x, np.float64)
    out = {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0),
           "count": np.array([len(x)], np.int64)}
    qs = np.quantile(x, [q for _, q in QUANTILES], axis=0)
    out.update({name: qs[k] for k, (name, _) in enumerate(QUANTILES)})
    return out


class ImageStats:
    """Per-channel min/max/mean/std in 0..1 over frames strided down to ~IMAGE_STATS_MAX_SIDE.

    Keeps a 256-bin histogram per channel, so the result is exact for the sampled pixels."""

    _OFFSETS = np.array([0, 256, 512], np.intp)

    def __init__(self, height: int, width: int):
        self.stride = max(1, math.ceil(max(height, width) / IMAGE_STATS_MAX_SIDE))
        self.frames = 0
        self.hist = np.zeros(768, np.int64)

    def add(self, img: np.ndarray) -> None:
        px = img[:: self.stride, :: self.stride].reshape(-1, 3)
        self.hist += np.bincount((px + self._OFFSETS).ravel(), minlength=768)
        self.frames += 1

    def result(self) -> dict[str, np.ndarray]:
        h = self.hist.reshape(3, 256)
        v = np.arange(256, dtype=np.float64)
        n = h.sum(1)
        mean = h @ v / n
        var = np.maximum(h @ (v * v) / n - mean ** 2, 0.0)
        nz = h > 0
        lo = nz.argmax(1)
        hi = 255 - nz[:, ::-1].argmax(1)
        return {"min": lo / 255.0, "max": hi / 255.0, "mean": mean / 255.0, "std": np.sqrt(var) / 255.0,
                "count": np.array([self.frames], np.int64)}


def c11(v) -> list:
    """Per-channel values as LeRobot stores image stats: shape [3][1][1]."""
    return [[[float(x)]] for x in np.asarray(v).ravel()]


def pool_image_stats(rows: list[dict], key: str) -> dict | None:
    """Exact pooled per-channel stats from per-episode rows (same pixels per frame in every episode)."""
    parts = []
    for r in rows:
        c = r.get(f"stats/{key}/count")
        if c:
            get = lambda s: np.asarray(r[f"stats/{key}/{s}"], np.float64).reshape(3)   # noqa: E731
            parts.append((int(c[0]), get("min"), get("max"), get("mean"), get("std")))
    if not parts:
        return None
    n = np.array([p[0] for p in parts], np.float64)
    total = n.sum()
    means = np.stack([p[3] for p in parts])
    sq = np.stack([p[4] ** 2 + p[3] ** 2 for p in parts])
    mean = (n[:, None] * means).sum(0) / total
    std = np.sqrt(np.maximum((n[:, None] * sq).sum(0) / total - mean ** 2, 0.0))
    return {"min": c11(np.min([p[1] for p in parts], 0)), "max": c11(np.max([p[2] for p in parts], 0)),
            "mean": c11(mean), "std": c11(std), "count": [int(total)]}


def timing_summary(timings: list[dict], obs_times: list[float]) -> dict:
    keys = []
    for t in timings:
        keys.extend(k for k, v in t.items() if isinstance(v, (int, float)) and k not in keys)
    out = {}
    series = {k: np.array([t[k] for t in timings if isinstance(t.get(k), (int, float))], np.float64)
              for k in keys}
    if len(obs_times) > 1:
        series["obs_interval_ms"] = np.diff(np.asarray(obs_times, np.float64)) * 1000.0
    for k, v in series.items():
        v = v[np.isfinite(v)]
        if len(v):
            out[k] = {"mean": float(v.mean()), "p95": float(np.percentile(v, 95)),
                      "max": float(v.max()), "n": int(len(v))}
    return out
