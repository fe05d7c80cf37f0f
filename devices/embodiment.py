"""What a body is: its action and state channels, cameras or screen, rate and conventions.

An `Embodiment` is the schema every other part speaks: the loop checks actions against it, the
recorder names dataset features after it, and the policy reads `Embodiment.prompt()`.

>>> arm = Embodiment(
...     name="planar_pusher", kind="planar pusher", hz=10.0,
...     actions=(Channel("vx", -1, 1, "m/s"), Channel("vy", -1, 1, "m/s")),
...     state=(Channel("pusher_x"), Channel("pusher_y")),
...     cameras=(Camera("top", 96, 96),), chunk=16, exec_horizon=8,
...     convention="world-frame velocity targets")
>>> arm.prompt()
'<embodiment> name=planar_pusher; kind=planar pusher; action=velocity[vx,vy] in [-1,1] m/s; hz=10; chunk=16; state=pusher_x,pusher_y; cameras=top:96x96; convention=world-frame velocity targets </embodiment>'
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Channel:
    """One scalar of an action or state vector; limits are inclusive, infinite when unbounded."""

    name: str
    low: float = -math.inf
    high: float = math.inf
    unit: str = ""

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


@dataclass(frozen=True)
class Camera:
    name: str
    width: int
    height: int


@dataclass(frozen=True)
class Screen:
    """A GUI device's screen in physical pixels, with its device pixel ratio: what
    `Observation.screen` holds and what every function taking a ``screen`` reads (through `of`).

    >>> Screen.of((1080, 2400)).size, Screen.of(Screen(720, 1600, 2.0)).pixel_ratio
    ((1080, 2400), 2.0)
    """

    width: int
    height: int
    pixel_ratio: float = 1.0

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) in physical pixels."""
        return self.width, self.height

    @classmethod
    def of(cls, value) -> "Screen":
        """``value`` itself when it is a `Screen`, else one from (width, height[, pixel_ratio]);
        a ValueError names anything else."""
        if isinstance(value, Screen):
            return value
        try:
            parts = tuple(value)
            if len(parts) not in (2, 3):
                raise ValueError
            return cls(*parts)
        except (TypeError, ValueError):
            raise ValueError(f"a screen is a Screen or (width, height[, pixel_ratio]), got {value!r}") from None


def group_names(names) -> str:
    """Compact channel names: consecutive names sharing a prefix are written once.

    >>> group_names(["hand_x", "hand_y", "hand_z", "gripper", "goal_x", "goal_y"])
    'hand_{x,y,z},gripper,goal_{x,y}'
    """
    out, i, names = [], 0, list(names)
    while i < len(names):
        prefix = names[i].rpartition("_")[0]
        j = i + 1
        while prefix and j < len(names) and names[j].rpartition("_")[0] == prefix:
            j += 1
        if j - i > 1:
            out.append(prefix + "_{" + ",".join(n[len(prefix) + 1:] for n in names[i:j]) + "}")
        else:
            out.append(names[i])
        i = j
    return ",".join(out)


def _fmt(x: float) -> str:
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:g}"


@dataclass(frozen=True)
class Embodiment:
    name: str
    kind: str
    actions: tuple[Channel, ...] = ()
    state: tuple[Channel, ...] = ()
    cameras: tuple[Camera, ...] = ()
    screen: Screen | None = None
    hz: float = 10.0
    chunk: int = 16          # H: actions a policy proposes per decision
    exec_horizon: int = 8    # H_exec: actions executed before replanning
    action_kind: str = "velocity"   # what the numbers mean: velocity, position, torque, delta, gui
    convention: str = ""     # frame, delta vs absolute, gripper meaning, in words

    def __post_init__(self):
        if not self.name:
            raise ValueError("Embodiment.name is empty")
        if self.hz <= 0:
            raise ValueError(f"Embodiment {self.name!r}: hz must be > 0, got {self.hz}")
        if not 1 <= self.exec_horizon <= self.chunk:
            raise ValueError(f"Embodiment {self.name!r}: need 1 <= exec_horizon <= chunk, "
                             f"got exec_horizon={self.exec_horizon}, chunk={self.chunk}")
        for group in ("actions", "state"):
            names = [c.name for c in getattr(self, group)]
            if len(set(names)) != len(names):
                raise ValueError(f"Embodiment {self.name!r}: duplicate {group} channel names {names}")
            for c in getattr(self, group):
                if c.low > c.high:
                    raise ValueError(f"Embodiment {self.name!r}: channel {c.name!r} has low > high")

    @property
    def action_dim(self) -> int:
        return len(self.actions)

    @property
    def state_dim(self) -> int:
        return len(self.state)

    @property
    def is_gui(self) -> bool:
        return self.screen is not None

    def prompt(self) -> str:
        """The embodiment-aware text the backbone reads beside the instruction."""
        parts = [f"name={self.name}", f"kind={self.kind}"]
        if self.is_gui:
            s = self.screen
            parts.append(f"screen={s.width}x{s.height}@{s.pixel_ratio:g}; coords=0..1000")
        else:
            names = group_names(c.name for c in self.actions)
            lows = {c.low for c in self.actions}
            highs = {c.high for c in self.actions}
            units = {c.unit for c in self.actions}
            if len(lows) == len(highs) == len(units) == 1:
                rng = f" in [{_fmt(lows.pop())},{_fmt(highs.pop())}] {units.pop()}".rstrip()
            else:
                rng = " in " + ",".join(f"[{_fmt(c.low)},{_fmt(c.high)}]{c.unit}" for c in self.actions)
            parts.append(f"action={self.action_kind}[{names}]{rng}")
            parts.append(f"hz={self.hz:g}")
            parts.append(f"chunk={self.chunk}")
        if self.state:
            parts.append("state=" + group_names(c.name for c in self.state))
        if self.cameras:
            parts.append("cameras=" + ",".join(f"{c.name}:{c.width}x{c.height}" for c in self.cameras))
        if self.convention:
            parts.append(f"convention={self.convention}")
        return "<embodiment> " + "; ".join(parts) + " </embodiment>"

    # -- serialization: recorded with every dataset and checkpoint ---------------------------------
    def to_dict(self) -> dict:
        d = asdict(self)
        for group in ("actions", "state"):   # JSON has no infinity
            for c in d[group]:
                c["low"] = None if math.isinf(c["low"]) else c["low"]
                c["high"] = None if math.isinf(c["high"]) else c["high"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Embodiment":
        def ch(c):
            return Channel(c["name"], -math.inf if c.get("low") is None else c["low"],
                           math.inf if c.get("high") is None else c["high"], c.get("unit", ""))
        d = dict(d)
        d["actions"] = tuple(ch(c) for c in d.get("actions", ()))
        d["state"] = tuple(ch(c) for c in d.get("state", ()))
        d["cameras"] = tuple(Camera(**c) for c in d.get("cameras", ()))
        d["screen"] = Screen(**d["screen"]) if d.get("screen") else None
        return cls(**d)

    def action_bounds(self):
        """(low, high) float arrays of the action channels (infinite where unbounded)."""
        import numpy as np
        return (np.array([c.low for c in self.actions], dtype=np.float64),
                np.array([c.high for c in self.actions], dtype=np.float64))

