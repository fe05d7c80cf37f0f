"""The Device and Policy protocols: what the control loop needs from a body and from a brain."""
from __future__ import annotations

import contextlib
import os
from typing import Any, Protocol, runtime_checkable

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


class Policy:
    """What the runtime needs from a brain; subclass it and implement ``act``.

    Every other hook has a default that does nothing, and the runtime (the loop, the server, the
    fleet) calls exactly these, never anything else:

    - ``reset(seed)``: a new episode starts (seed its sampler, clear its history).
    - ``instruct(instruction)``: the episode's instruction, told once after ``reset`` (a policy that
      learns from steps it did not decide, such as a person's after a take-over, needs it early).
    - ``act(obs, instruction)``: a float32[H, D] chunk in the body's units, a ``GuiAction``, or None
      (an empty chunk too) when it has nothing more to do.
    - ``observe(obs, executed)``: after every executed step, what the device actually did.
    - ``step_record()``: what the model said at the latest decision (GUI step logs keep it).
    - ``end_episode(success)``: the verified outcome (a success memory stores it or credits a failure).
    - ``hold_episode(label, final_obs)``: the episode ended with an outcome nobody verified (``label``:
      its success label as a dict); a success memory keeps it aside for a person to review, unused.
    - ``info()``: facts about the episode for reports (e.g. the expert's chosen mode).
    - ``close()``: release what it holds (a connection, a process).

    Capabilities the runtime asks about: ``ensemble`` (not None: the policy blends its own chunks into
    single actions, which asynchronous execution must not do again), ``accepts_prefix`` (its
    ``predict_chunk(obs, instruction, prefix=, prefix_weights=)`` continues an unexecuted plan) and
    ``horizon`` (the length of the chunks it returns; None: the embodiment's chunk).

    >>> import numpy as np
    >>> class Still(Policy):
    ...     def act(self, obs, instruction):
    ...         return np.zeros((1, 2), np.float32)
    >>> p = Still(); p.reset(0); p.info(), p.step_record()
    ({}, None)
    """

    ensemble: float | None = None
    accepts_prefix: bool = False
    horizon: int | None = None

    def reset(self, seed: int | None = None) -> None:
        pass

    def instruct(self, instruction: str) -> None:
        pass

    def act(self, obs: Observation, instruction: str):
        raise NotImplementedError(f"{type(self).__name__}.act")

    def observe(self, obs: Observation, executed) -> None:
        pass

    def step_record(self) -> dict | None:
        return None

    def end_episode(self, success: bool) -> None:
        pass

    def hold_episode(self, label: dict, final_obs: Observation | None) -> None:
        pass

    def info(self) -> dict:
        return {}

    def close(self) -> None:
        pass

    def predict_chunk(self, obs: Observation, instruction: str, *, prefix=None, prefix_weights=None):
        raise NotImplementedError(f"{type(self).__name__} does not continue a prefix (accepts_prefix is False)")


class _Adapted(Policy):
    """A duck-typed policy (any object with ``act``, and ``reset``) seen through the declared hooks:
    the hooks it defines are used, the others keep the defaults."""

    _HOOKS = ("reset", "instruct", "observe", "step_record", "end_episode", "hold_episode", "info", "close",
              "predict_chunk")

    def __init__(self, inner):
        self.inner = inner
        for name in self._HOOKS:
            fn = getattr(inner, name, None)
            if callable(fn):
                setattr(self, name, fn)
        self.act = inner.act
        self.ensemble = getattr(inner, "ensemble", None)
        self.accepts_prefix = bool(getattr(inner, "accepts_prefix", False))
        self.horizon = getattr(inner, "horizon", None)

    def __getattr__(self, name: str):      # what else the object offers (e.g. a chat policy's propose)
        return getattr(self.inner, name)


def as_policy(obj) -> Policy:
    """``obj`` itself when it is a ``Policy``; otherwise an adapter over its ``act`` and whatever
    hooks it defines. The loop calls this once at the edge, then only the declared hooks."""
    if isinstance(obj, Policy):
        return obj
    if not callable(getattr(obj, "act", None)):
        raise TypeError(f"{type(obj).__name__} is not a policy: it has no act(obs, instruction)")
    return _Adapted(obj)

