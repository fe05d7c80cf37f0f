"""Small policies that need no model: random actions and replay of recorded actions."""
from __future__ import annotations

import numpy as np

from devices import Embodiment, Observation


class RandomPolicy:
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


class ReplayPolicy:
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
