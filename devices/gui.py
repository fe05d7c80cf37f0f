"""What every GUI device shares: the embodiment, action dispatch, element references, screen settling.

A GUI device (desktop, Android phone, the GUI simulator) subclasses `GuiDevice` and implements
`_grab()` (an RGB screenshot), `_screen()` (its `Screen`) and `_execute(action, p, q)` for the
action types in its `supported` set; `p` and `q` are the action's point and end point already
converted to physical screen pixels. `act()` refuses what the device cannot do, resolves element
references through the last observed UI tree, taps the target of a `type` action that names
one (element or point) before typing, and handles wait/answer/terminate itself.

UI tree elements are dicts: ``{"index", "role", "text", "desc", "id", "bounds": [x0, y0, x1, y1]
(physical pixels, right/bottom exclusive), "clickable", "password", "focused"}``; any may be absent
except ``index`` and ``bounds``.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from embodia.devices.actions import ActionError, GuiAction
from embodia.devices.base import Device
from embodia.devices.coords import element_point, to_pixels
from embodia.devices.embodiment import Embodiment, Screen
from embodia.devices.observation import Observation

SCREEN = "screen"          # the image key of a GUI observation

# action types every GUI device executes without touching the device
GENERIC = frozenset({"wait", "answer", "terminate"})


def gui_embodiment(name: str, kind: str, screen: Screen, *, convention: str = "") -> Embodiment:
    """A GUI body: no continuous channels, one action per decision, coordinates 0..1000."""
    return Embodiment(name=name, kind=kind, screen=screen, hz=1.0, chunk=1, exec_horizon=1,
                      action_kind="gui", convention=convention or
                      "GuiAction with points normalized to 0..1000 of the screen, x right, y down")


def frame_diff(a: np.ndarray | None, b: np.ndarray | None) -> float:
    """Fraction of pixels that differ between two frames (1.0 when shapes differ or one is missing)."""
    if a is None or b is None or a.shape != b.shape:
        return 1.0
    return float(np.any(a != b, axis=-1).mean()) if a.ndim == 3 else float((a != b).mean())


def settle(grab: Callable[[], np.ndarray], *, timeout_s: float = 2.0, interval_s: float = 0.03,
           threshold: float = 0.0, stable_frames: int = 2, first: np.ndarray | None = None):
    """Wait until the screen stops changing: ``stable_frames`` consecutive grabs differ from each
    other by at most ``threshold`` (fraction of pixels), or ``timeout_s`` passes.

    Returns ``(frame, waited_s, settled)``; the frame is the last one grabbed. Replaces the fixed
    per-step sleeps of other runtimes: a static screen costs one interval, an animation waits.
    """
    t0 = time.perf_counter()
    prev = first if first is not None else grab()
    calm = 0
    while True:
        time.sleep(interval_s)
        cur = grab()
        calm = calm + 1 if frame_diff(prev, cur) <= threshold else 0
        prev = cur
        waited = time.perf_counter() - t0
        if calm >= stable_frames - 1 and calm > 0:
            return cur, waited, True
        if waited >= timeout_s:
            return cur, waited, False


# the element fields every GUI device's tree may carry (the module doc); a device adds its own
ELEMENT_FIELDS = frozenset({"index", "role", "text", "desc", "id", "bounds", "clickable", "password", "focused"})
# fields whose value is true or false (a `check:` predicate comparing one with anything else is refused)
BOOLEAN_FIELDS = frozenset({"clickable", "password", "focused", "checked", "enabled", "editable", "scrollable"})


class GuiDevice(Device):
    """Base of GUI devices; see the module doc for what a subclass implements. ``element_fields``
    names what its UI tree's elements can carry and ``roles`` the roles they can have (None: an open
    set, as Android class names are): a ``check:`` predicate naming anything else is refused before
    the first episode (`embodia.agent.loop.success.check_predicate`)."""

    supported: frozenset[str] = frozenset()
    capabilities = frozenset({"screenshot"})
    element_fields: frozenset[str] = ELEMENT_FIELDS
    roles: frozenset[str] | None = None

    def __init__(self):
        self.last_obs: Observation | None = None
        self.answer: str | None = None       # the last `answer` action's text
        self.status: str | None = None       # set by `terminate`: "success" | "failure"

    # -- to implement ------------------------------------------------------------------------------
    def _grab(self) -> np.ndarray:
        raise NotImplementedError

    def _screen(self) -> Screen:
        raise NotImplementedError

    def _ui_tree(self) -> list | None:
        return None

    def _execute(self, action: GuiAction, p, q) -> None:
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------------------------
    def done(self) -> bool:
        """True once the agent terminated the episode (a ``terminate`` action)."""
        return self.status is not None

    def observe(self) -> Observation:
        img = self._grab()
        screen = self._screen()
        obs = Observation(images={SCREEN: img}, screen=screen, ui_tree=self._ui_tree())
        self.last_obs = obs
        return obs

    def reset(self, seed: int | None = None) -> Observation:
        self.answer, self.status = None, None
        return self.observe()

    def resolve(self, action: GuiAction) -> GuiAction:
        """Fill ``point`` from ``element`` (the centre of that element of the last UI tree)."""
        if action.point is not None or action.element is None:
            return action
        tree = (self.last_obs.ui_tree if self.last_obs is not None else None) or []
        match = [e for e in tree if e.get("index") == action.element]
        if not match:
            raise ActionError(f"GuiAction refers to element {action.element}, which is not in the "
                              f"current UI tree ({len(tree)} elements)")
        screen = self.last_obs.screen or self._screen()
        d = action.to_dict()
        d["point"] = element_point(match[0]["bounds"], screen)
        return GuiAction.from_dict(d)

    def act(self, action) -> GuiAction:
        """Execute one GuiAction; returns it with element references resolved to points."""
        if not isinstance(action, GuiAction):
            raise ActionError(f"{self.embodiment.name!r} executes GuiAction, got {type(action).__name__}")
        if action.type not in self.supported and action.type not in GENERIC:
            raise ActionError(f"{self.embodiment.name!r} cannot {action.type!r}; it supports "
                              f"{sorted(self.supported | GENERIC)}")
        action = self.resolve(action)
        if action.type == "wait":
            time.sleep((action.duration_ms if action.duration_ms is not None else 1000) / 1000.0)
            return action
        if action.type == "answer":
            self.answer = action.text
            return action
        if action.type == "terminate":
            self.status = action.status
            if action.text:                 # a final answer given with the verdict (UI-TARS finished)
                self.answer = action.text
            return action
        screen = self._screen()
        p = to_pixels(action.point, screen) if action.point is not None else None
        q = to_pixels(action.end, screen) if action.end is not None else None
        if action.type == "type" and p is not None:     # type *into* something: focus it first
            if "click" not in self.supported:
                raise ActionError(f"{self.embodiment.name!r} cannot tap a field before typing")
            self._execute(GuiAction("click", point=action.point), p, None)
        self._execute(action, p, q)
        return action

    def wait_still(self, timeout_s: float = 1.5) -> bool:
        """Wait until the screen stops changing (after input that did not come from ``act``, such as
        a person's); False when it was still changing after ``timeout_s``."""
        return settle(self._grab, timeout_s=timeout_s, interval_s=0.025)[2]

    def info(self) -> dict:
        out = {}
        if self.answer is not None:
            out["answer"] = self.answer
        if self.status is not None:
            out["claimed_status"] = self.status
        return out
