"""Actions: continuous chunks checked against the embodiment's limits, and the GUI action schema.

Everything past `check_action` / `GuiAction(...)` may trust the type: a NaN never reaches a
device, an out-of-range value is clipped (continuous) or refused (GUI coordinates).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np


class ActionError(ValueError):
    """An action that must not be executed."""


def check_action(action, embodiment, *, clip: bool = True) -> np.ndarray:
    """Validate one continuous action (shape [D]); refuse NaN/inf, clip to the channel limits.

    >>> from embodia.devices.embodiment import Embodiment, Channel
    >>> e = Embodiment("p", "pusher", actions=(Channel("vx", -1, 1), Channel("vy", -1, 1)))
    >>> check_action([2.0, -0.5], e).tolist()
    [1.0, -0.5]
    """
    a = np.asarray(action, dtype=np.float64)
    if a.shape != (embodiment.action_dim,):
        raise ActionError(f"action for {embodiment.name!r} must have shape ({embodiment.action_dim},) "
                          f"[{', '.join(c.name for c in embodiment.actions)}], got {a.shape}")
    bad = ~np.isfinite(a)
    if bad.any():
        names = [embodiment.actions[i].name for i in np.flatnonzero(bad)]
        raise ActionError(f"refused non-finite action for {embodiment.name!r}: "
                          f"channels {names} are {a[bad].tolist()}")
    low, high = embodiment.action_bounds()
    if clip:
        a = np.clip(a, low, high)
    elif ((a < low) | (a > high)).any():
        raise ActionError(f"action {a.tolist()} outside limits of {embodiment.name!r}")
    return a.astype(np.float32)


def check_chunk(chunk, embodiment) -> np.ndarray:
    """Validate a chunk float32[H, D] (H >= 1); same rules as `check_action`, row by row."""
    c = np.asarray(chunk, dtype=np.float64)
    if c.ndim == 1:
        c = c[None]
    if c.ndim != 2 or c.shape[0] < 1:
        raise ActionError(f"action chunk must be [H, D] with H >= 1, got shape {c.shape}")
    return np.stack([check_action(row, embodiment) for row in c])


# -- GUI actions (schema; the devices that execute them come with the GUI issue) ------------------
GUI_ACTION_TYPES = {
    # type: fields it requires
    "click": ("point",), "double_click": ("point",), "right_click": ("point",),
    "long_press": ("point",), "swipe": ("point", "end"), "drag": ("point", "end"),
    "scroll": ("point", "direction"), "type": ("text",), "key": ("keys",),
    "system_button": ("button",), "open_app": ("app",), "wait": (), "answer": ("text",),
    "terminate": ("status",),
}
SYSTEM_BUTTONS = ("back", "home", "enter", "menu")
SCROLL_DIRECTIONS = ("up", "down", "left", "right")


def _check_point(name, p):
    if p is None:
        return None
    try:
        if isinstance(p, (str, bytes)) or len(p) != 2:
            raise TypeError
        x, y = float(p[0]), float(p[1])
    except (TypeError, ValueError):
        raise ActionError(f"GuiAction.{name} must be (x, y) numbers, got {p!r}") from None
    if not (0 <= x <= 1000 and 0 <= y <= 1000):     # NaN fails this too
        raise ActionError(f"GuiAction.{name} {p!r} outside the normalized 0..1000 screen")
    return (x, y)


@dataclass(frozen=True)
class GuiAction:
    """One GUI action; coordinates normalized to 0..1000 of the screen (x right, y down).

    >>> GuiAction("click", point=(500, 250))
    GuiAction(type='click', point=(500.0, 250.0), end=None, text=None, keys=(), button=None, app=None, direction=None, duration_ms=None, status=None, element=None)
    """

    type: str
    point: tuple[float, float] | None = None
    end: tuple[float, float] | None = None
    text: str | None = None
    keys: tuple[str, ...] = ()
    button: str | None = None
    app: str | None = None
    direction: str | None = None
    duration_ms: int | None = None
    status: str | None = None        # terminate: "success" | "failure"
    element: int | None = field(default=None)   # index into the UI tree, when the policy points at one

    def __post_init__(self):
        if self.type not in GUI_ACTION_TYPES:
            raise ActionError(f"unknown GUI action {self.type!r}; known: {sorted(GUI_ACTION_TYPES)}")
        object.__setattr__(self, "point", _check_point("point", self.point))
        object.__setattr__(self, "end", _check_point("end", self.end))
        for name in ("text", "app", "button", "direction", "status"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, str):
                raise ActionError(f"GuiAction.{name} must be a string, got {type(v).__name__}")
        if self.element is not None and (isinstance(self.element, bool) or not isinstance(self.element, int)):
            raise ActionError(f"GuiAction.element must be an int, got {self.element!r}")
        # one key name is one key, not its letters
        object.__setattr__(self, "keys", (self.keys,) if isinstance(self.keys, str) else tuple(self.keys))
        if not all(isinstance(k, str) and k for k in self.keys):
            raise ActionError(f"GuiAction.keys must be non-empty strings, got {self.keys!r}")
        for req in GUI_ACTION_TYPES[self.type]:
            if req == "point" and self.point is None and self.element is not None:
                continue   # an element reference stands in for a point
            if getattr(self, req) in (None, ()):
                raise ActionError(f"GuiAction {self.type!r} requires {req!r}")
        if self.button is not None and self.button not in SYSTEM_BUTTONS:
            raise ActionError(f"system_button must be one of {SYSTEM_BUTTONS}, got {self.button!r}")
        if self.direction is not None and self.direction not in SCROLL_DIRECTIONS:
            raise ActionError(f"scroll direction must be one of {SCROLL_DIRECTIONS}, got {self.direction!r}")
        if self.status is not None and self.status not in ("success", "failure"):
            raise ActionError(f"terminate status must be 'success' or 'failure', got {self.status!r}")
        if self.duration_ms is not None and not (0 <= self.duration_ms <= 60_000):
            raise ActionError(f"duration_ms out of range: {self.duration_ms}")

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v not in (None, ())}

    @classmethod
    def from_dict(cls, d: dict) -> "GuiAction":
        d = dict(d)
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ActionError(f"unknown GuiAction fields {sorted(unknown)}")
        if "type" not in d:
            raise ActionError(f"GuiAction needs a 'type'; got fields {sorted(d)}")
        return cls(**d)
