"""The Device base class: everything the runtime asks of a body, with the default each answer has.

The loop, the servers and the fleet call exactly the members `Device` declares and nothing else;
`as_device` adapts a foreign object (any object with an ``embodiment``; a body the loop drives
also has ``reset``, ``observe`` and ``act``) once, where it enters. The brain's side is `embodia.policies.base.Policy`.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any

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


class Device:
    """A body the loop can drive; subclass it and implement ``reset``, ``observe`` and ``act``.

    Every other member has a default, and the runtime (the loop, the MCP server, the fleet) asks
    exactly these, never anything else:

    - ``embodiment``: what the body is (channels, cameras or a screen, control rate).
    - ``capabilities``: what it can do, so the runtime asks instead of special-casing classes:
      "render", "state", "success" (it reports ``success()``), "expert" (offers ``expert()``),
      "realtime" (the loop paces steps to ``embodiment.hz``), "deterministic" (same seed + actions ->
      same states), "screenshot", "ui_tree", "text_input", "sandbox" (a simulator: nothing real is
      sent, paid or deleted, so the safety gate allows risky actions, still recording them),
      "person_input" (it reports a person's own input during a take-over: ``person_start()``,
      ``person_poll()`` and ``person_stop()`` return GuiActions), "frames_on_demand" (``observe(images=False)``
      gives the state without rendering the cameras: the loop asks so between two decisions when
      nothing reads those frames, where rendering is most of a simulator's step).
    - ``instruction``: the task the device poses after ``reset`` ("" when it poses none: the caller
      gives one).
    - ``max_steps``: the episode's length limit the task sets (None: the runtime's default).
    - ``reset(seed)`` -> Observation: a new episode starts.
    - ``observe(images=True)`` -> Observation: what the body sees now; ``images=False`` is asked
      only of a device with the "frames_on_demand" capability (the others need not take it).
    - ``act(action)``: execute one action; returns the action actually executed (after clipping,
      element references resolved). The verb is the device's side of the word the policy uses for
      deciding (ARCHITECTURE.md section 3 says why both keep it).
    - ``step(action, images=True)`` -> (executed, Observation): what the loop calls once per step;
      by default ``act`` then ``observe`` (a device may override it, e.g. to observe and act in one
      round trip).
    - ``done()``: the episode is over by the device's own account (a GUI agent's ``terminate``).
    - ``success()``: the task is achieved (only with the "success" capability).
    - ``expert()``: a scripted policy that solves the task (only with the "expert" capability).
    - ``info()``: facts the environment measured about the episode (e.g. which gap the puck used).
    - ``close()``: release what it holds (a process, a connection, a renderer).
    - ``wait_still(timeout_s)``: wait until the screen stops changing after input that did not come
      from ``act`` (a person's); True once still (a body with nothing to settle is still at once).
    - ``person_start()``, ``person_poll()``, ``person_stop()``: the person's own input during a
      take-over, as GuiActions (only with the "person_input" capability).
    - ``bodies()``: ``{name: world position (x, y, z)}`` of the simulated scene's bodies now, what a
      ``check:`` predicate's ``body.NAME.x`` reads (None: the device has no such scene).

    GUI bodies also declare ``supported`` (the GuiAction types they execute), ``element_fields``
    and ``roles`` (what their UI tree's elements carry; None: not declared, an open set), and
    ``display``: the X display their screen is on, where a person's input is read from the X
    server during a take-over (None: not an X screen).

    A device is a context manager that closes itself:

    >>> import numpy as np
    >>> from embodia.devices import Channel, Observation
    >>> class Still(Device):
    ...     embodiment = Embodiment(name="still", kind="test", actions=(Channel("a", -1, 1),))
    ...     def reset(self, seed=None): return self.observe()
    ...     def observe(self): return Observation(state=np.zeros(1, np.float32))
    ...     def act(self, action): return action
    >>> with Still() as d:
    ...     d.reset(0).state.tolist(), d.done(), d.info(), d.max_steps, d.instruction, d.bodies()
    ([0.0], False, {}, None, '', None)
    >>> executed, obs = Still().step(np.ones(1, np.float32)); executed.tolist(), obs.state.tolist()
    ([1.0], [0.0])
    """

    embodiment: Embodiment
    capabilities: frozenset[str] = frozenset()
    instruction: str = ""
    max_steps: int | None = None
    supported: frozenset[str] | None = None
    element_fields: frozenset[str] | None = None
    roles: frozenset[str] | None = None
    display: str | None = None

    def reset(self, seed: int | None = None) -> Observation:
        raise NotImplementedError(f"{type(self).__name__}.reset")

    def observe(self, images: bool = True) -> Observation:
        raise NotImplementedError(f"{type(self).__name__}.observe")

    def act(self, action) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.act")

    def step(self, action, images: bool = True) -> tuple[Any, Observation]:
        executed = self.act(action)
        if images or "frames_on_demand" not in self.capabilities:
            return executed, self.observe()
        return executed, self.observe(images=False)

    def done(self) -> bool:
        return False

    def success(self) -> bool:
        raise NotImplementedError(f"{type(self).__name__} cannot verify success")

    def expert(self):
        raise NotImplementedError(f"{type(self).__name__} has no scripted expert")

    def info(self) -> dict:
        return {}

    def close(self) -> None:
        pass

    def wait_still(self, timeout_s: float = 1.5) -> bool:
        return True

    def person_start(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} reports no person's input (no \"person_input\" capability)")

    def person_poll(self) -> list:
        raise NotImplementedError(f"{type(self).__name__} reports no person's input (no \"person_input\" capability)")

    def person_stop(self) -> list:
        raise NotImplementedError(f"{type(self).__name__} reports no person's input (no \"person_input\" capability)")

    def bodies(self) -> dict | None:
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class SimDevice(Device):
    """A simulator: a device whose world is computed here (MuJoCo scenes, Meta-World). Nothing beyond
    `Device` yet; the name says what a subclass is, and GUI bodies (`embodia.devices.gui.GuiDevice`)
    are not one even when, like gui-sim, their screen is drawn here."""


class _AdaptedDevice(Device):
    """A duck-typed device (an ``embodiment``, and ``reset``, ``observe``, ``act`` where it is driven)
    seen through the declared members: what it defines is used, the rest keeps `Device`'s defaults
    (a missing ``act`` raises NotImplementedError when asked)."""

    _HOOKS = ("reset", "observe", "act", "step", "done", "success", "expert", "info", "close", "wait_still",
              "person_start", "person_poll", "person_stop", "bodies")
    _FACTS = ("capabilities", "instruction", "max_steps", "supported", "element_fields", "roles", "display")

    def __init__(self, inner):
        self.inner = inner
        self.embodiment = inner.embodiment
        for name in self._HOOKS:
            fn = getattr(inner, name, None)
            if callable(fn):
                setattr(self, name, fn)

    def __getattr__(self, name: str):      # what else the object offers
        return getattr(self.inner, name)


def _read_through(name: str) -> property:
    """The foreign object's own value of a declared fact, read at each use (a new instruction after
    reset is seen), else `Device`'s default."""
    return property(lambda self: getattr(self.inner, name, getattr(Device, name)))


for _name in _AdaptedDevice._FACTS:
    setattr(_AdaptedDevice, _name, _read_through(_name))


def as_device(obj) -> Device:
    """``obj`` itself when it is a `Device`; otherwise an adapter over what it defines. Where a device
    enters the runtime (``open_device``, the loop) this is called once; past it only the declared
    members are asked."""
    if isinstance(obj, Device):
        return obj
    if not hasattr(obj, "embodiment"):
        raise TypeError(f"{type(obj).__name__} is not a device: it has no embodiment")
    return _AdaptedDevice(obj)
