"""Small policies that need no model: random actions and replay of recorded actions."""
from __future__ import annotations

import numpy as np

from embodia.devices import Embodiment, Observation, Policy


class RandomPolicy(Policy):
    """Uniform actions within the embodiment's limits (unbounded channels: N(0, 1))."""

    def __init__(self, embodiment: Embodiment):
        self.embodiment = embodiment
        self.reset(None)

    def reset(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, obs: Observation, instruction: str) -> np.ndarray:
        low, high = self.embodiment.action_bounds()
        h = self.embodiment.exec_horizon
        finite = np.isfinite(low) & np.isfinite(high)
        a = self.rng.standard_normal((h, len(low)))
        a[:, finite] = self.rng.uniform(low[finite], high[finite], (h, int(finite.sum())))
        return a.astype(np.float32)


class ReplayPolicy(Policy):
    """Returns recorded actions in order, open loop; an empty chunk once they run out.

    >>> p = ReplayPolicy(np.zeros((3, 2), np.float32), chunk=2)
    >>> [len(p.act(None, "")) for _ in range(3)]
    [2, 1, 0]
    """

    def __init__(self, actions: np.ndarray, chunk: int = 8):
        self.actions = np.asarray(actions, dtype=np.float32)
        self.chunk = chunk
        self.cursor = 0

    def reset(self, seed: int | None = None) -> None:
        self.cursor = 0

    def act(self, obs: Observation, instruction: str) -> np.ndarray:
        out = self.actions[self.cursor:self.cursor + self.chunk]
        self.cursor += len(out)
        return out


def screen_divergence(a: np.ndarray | None, b: np.ndarray | None, size: tuple[int, int] = (96, 64)) -> float:
    """How different two screenshots look, 0 (same) .. 1: mean absolute difference of both images
    shrunk to ``size`` (box filter), so compression noise and sub-pixel shifts barely count while a
    changed dialog does. Missing images count as fully different.

    >>> x = np.zeros((80, 120, 3), np.uint8)
    >>> screen_divergence(x, x), screen_divergence(x, 255 - x)
    (0.0, 1.0)
    """
    if a is None or b is None:
        return 1.0
    from PIL import Image
    small = [np.asarray(Image.fromarray(np.ascontiguousarray(im, dtype=np.uint8)).resize(size, Image.BOX),
                        np.float32) for im in (a, b)]
    return float(np.abs(small[0] - small[1]).mean() / 255.0)


class GuiReplayPolicy(Policy):
    """Returns recorded GuiActions in order, then None (nothing more to do).

    With ``screens`` (the recorded screenshot before each action) and ``stop_on_divergence``, it
    compares the live screen with the recorded one before returning each action and returns None
    instead of an action meant for a screen that is no longer there; ``diverged_at`` says where.
    """

    def __init__(self, actions, screens=None, stop_on_divergence: float | None = None):
        self.actions = list(actions)
        self.screens = screens
        self.stop_on_divergence = stop_on_divergence
        self.reset()

    def reset(self, seed: int | None = None) -> None:
        self.cursor = 0
        self.divergence: list[float] = []
        self.diverged_at: int | None = None

    def act(self, obs: Observation, instruction: str):
        t = self.cursor
        if t >= len(self.actions):
            return None
        if self.screens is not None and t < len(self.screens) and self.screens[t] is not None:
            d = screen_divergence((obs.images or {}).get("screen"), self.screens[t])
            self.divergence.append(d)
            if self.stop_on_divergence is not None and d > self.stop_on_divergence:
                self.diverged_at = t
                return None
        self.cursor += 1
        return self.actions[t]

    def info(self) -> dict:
        out = {"replayed": self.cursor, "of": len(self.actions)}
        if self.divergence:
            out["max_divergence"] = max(self.divergence)
        if self.diverged_at is not None:
            out["diverged_at"] = self.diverged_at
        return out
