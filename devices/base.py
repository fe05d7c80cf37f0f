"""The Device and Policy protocols: what the control loop needs from a body and from a brain."""
from __future__ import annotations

import contextlib
import os
from typing import Any, Protocol, runtime_checkable

import numpy as np

from embodia.devices.embodiment import Embodiment
from embodia.devices.observation import Observation


@contextlib.contextmanager
def environ(**updates: str):
    """Set environment variables for the block (child processes inherit them), then restore each
    one as it was, unset ones unset again."""
    saved = {k: os.environ.get(k) for k in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class DeviceLost(RuntimeError):
    """The device disappeared mid-episode (unplugged, server gone); the episode ends and is saved."""


@runtime_checkable
class Device(Protocol):
    """A body the loop can drive.

    `capabilities` says what it can do, so the runtime asks instead of special-casing classes:
    "render", "state", "success" (simulated; reports success()), "expert" (offers expert()),
    "realtime" (the loop paces steps to embodiment.hz), "deterministic" (same seed + actions ->
    same states), "screenshot", "ui_tree", "text_input", "sandbox" (a simulator: nothing real is
    sent, paid or deleted, so the safety gate allows risky actions, still recording them).
    """

    embodiment: Embodiment
    capabilities: frozenset[str]

    def reset(self, seed: int | None = None) -> Observation: ...
    def observe(self) -> Observation: ...
    def act(self, action) -> Any:
        """Execute one step; return the action actually executed (after clipping)."""
    def close(self) -> None: ...


class SimDevice:
    """Mixin with the defaults every device shares: context manager, instruction, info."""

    capabilities: frozenset[str] = frozenset()
    instruction: str = ""

    def success(self) -> bool:
        raise NotImplementedError(f"{type(self).__name__} cannot verify success")

    def info(self) -> dict:
        """Environment-measured facts about the episode so far (e.g. which gap the puck used)."""
        return {}

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


@runtime_checkable
class Policy(Protocol):
    """`act(obs, instruction)` returns a float32[H, D] chunk (or a GuiAction); `reset` starts an episode."""

    def reset(self, seed: int | None = None) -> None: ...
    def act(self, obs: Observation, instruction: str) -> np.ndarray: ...


def policy_info(policy) -> dict:
    """What the policy says about its episode (e.g. the expert's chosen mode); {} if it says nothing."""
    fn = getattr(policy, "info", None)
    return dict(fn()) if callable(fn) else {}
