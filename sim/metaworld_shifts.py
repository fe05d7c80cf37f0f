"""Local deployment shifts for the Meta-World devices, each with a severity.

A shift is what a robot that works in one place again and again meets there and its training did
not show it: heavier or slipperier objects, another camera pose or light, an arm whose motion is
miscalibrated, a control loop one step late, an arm that starts elsewhere. Severity 1 is the
default (the values the first four shifts always had); 0 is no shift; the numbers scale linearly.
`drift=N` in the device URI makes a shift grow over a stream: the device's n-th episode runs at
`severity * min(1, n / N)`, so the first episode is clean and the shift is full from episode N on.

Scene shifts edit the MuJoCo model from its nominal values, so a drifting severity never compounds;
action shifts transform the action the arm receives (the policy, the recording and the memory all
see the action the policy commanded). Everything is deterministic: no shift draws a random number.

>>> ShiftSpec.parse("delay", severity=2.0).delay_steps
2
>>> round(ShiftSpec.parse("gain", severity=0.5).action_gain, 2)
0.85
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SHIFTS: dict[str, str] = {
    "heavy": "the free objects (puck, mug, peg, ...) have (1 + s)x mass and inertia and 1/(1 + s) of their "
             "sliding friction (theirs governs their contacts): pushed objects slide further",
    "slippery": "the free objects' sliding friction is (1 - 0.7 s)x, at least 0.05x (theirs governs their "
                "contacts): grasps slip",
    "camera": "the camera is moved s x 8 cm sideways and s x 5 cm up (the view changes, the task does not)",
    "dim": "lights at (1 - 0.65 s) of their brightness (the view changes, the task does not)",
    "gain": "a miscalibrated arm: it moves (1 - 0.3 s) of the commanded x, y, z and drifts s x (0.15, -0.15) "
            "units a step in x and y (1 unit = 1 cm a step); the gripper is unaffected",
    "delay": "each action reaches the arm round(s) control steps late (the arm holds still at first)",
    "pose": "the arm starts s x (6, -5, 5) cm away from its usual start (clipped to its workspace)",
}
CAMERA_OFFSET = np.array([0.08, 0.0, 0.05])
GAIN_LOSS, GAIN_DRIFT = 0.3, np.array([0.15, -0.15, 0.0])
POSE_OFFSET = np.array([0.06, -0.05, 0.05])


@dataclass(frozen=True)
class ShiftSpec:
    """One shift at one severity (`name` None: no shift)."""

    name: str | None = None
    severity: float = 1.0

    @classmethod
    def parse(cls, name, severity=1.0) -> "ShiftSpec":
        if isinstance(name, str) and name.strip().lower() in ("", "none"):
            name = None
        if name is not None and name not in SHIFTS:
            raise ValueError(f"unknown metaworld shift {name!r}; known: "
                             + ", ".join(f"{k} ({v})" for k, v in SHIFTS.items()))
        s = float(severity)
        if not np.isfinite(s) or s < 0:
            raise ValueError(f"shift severity must be a number >= 0, got {severity!r}")
        return cls(name, s)

    def at(self, severity: float) -> "ShiftSpec":
        return ShiftSpec(self.name, float(severity))

    @property
    def action_gain(self) -> float:
        return 1.0 - GAIN_LOSS * self.severity if self.name == "gain" else 1.0

    @property
    def delay_steps(self) -> int:
        return int(round(self.severity)) if self.name == "delay" else 0


class SceneShift:
    """Applies a `ShiftSpec` to a Meta-World env's model, always from the nominal values it keeps."""

    def __init__(self, env, cams: list[str], task: str):
        m = env.model
        self.env, self.model, self.cams, self.task = env, m, list(cams), task
        self.nominal = {k: np.array(getattr(m, k)).copy() for k in (
            "body_mass", "body_inertia", "geom_friction", "geom_priority", "cam_pos",
            "light_diffuse", "light_ambient", "light_specular")}
        self.headlight = (np.array(m.vis.headlight.diffuse).copy(), np.array(m.vis.headlight.ambient).copy())
        self.hand_init = np.array(env.hand_init_pos, dtype=np.float64).copy()

    def free_bodies(self) -> list[int]:
        import mujoco
        m = self.model
        return [int(m.jnt_bodyid[j]) for j in range(m.njnt) if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]

    def apply(self, spec: ShiftSpec) -> None:
        m, s = self.model, spec.severity
        for k, v in self.nominal.items():
            getattr(m, k)[:] = v
        m.vis.headlight.diffuse[:], m.vis.headlight.ambient[:] = self.headlight
        self.env.hand_init_pos = self.hand_init.copy()
        if spec.name in ("heavy", "slippery"):
            self._objects(*((1.0 + s, 1.0 / (1.0 + s)) if spec.name == "heavy" else (1.0, max(0.05, 1 - 0.7 * s))))
        elif spec.name == "camera":
            for c in self.cams:
                m.cam_pos[m.camera(c).id] += s * CAMERA_OFFSET
        elif spec.name == "dim":
            k = max(0.0, 1.0 - 0.65 * s)
            for name in ("light_diffuse", "light_ambient", "light_specular"):
                getattr(m, name)[:] *= k
            m.vis.headlight.diffuse[:] = self.headlight[0] * k
            m.vis.headlight.ambient[:] = self.headlight[1] * k
        elif spec.name == "pose":
            env = self.env
            env.hand_init_pos = np.clip(self.hand_init + s * POSE_OFFSET, env.mocap_low, env.mocap_high)

    def _objects(self, mass: float, friction: float) -> None:
        m = self.model
        free = self.free_bodies()
        if not free:
            raise ValueError(f"this shift changes free objects; {self.task} has none")
        for b in free:
            m.body_mass[b] *= mass
            m.body_inertia[b] *= mass
            geoms = m.geom_bodyid == b
            m.geom_friction[geoms, 0] *= friction
            # MuJoCo takes the larger friction of two touching geoms (the pads have 2.0), so without
            # priority a lower object friction would change nothing.
            m.geom_priority[geoms] = np.maximum(m.geom_priority[geoms], 10)


class ActionShift:
    """What a miscalibrated or late arm does to the commanded action (gain, drift, delay)."""

    def __init__(self):
        self.pending: list[np.ndarray] = []

    def reset(self) -> None:
        self.pending = []

    def __call__(self, spec: ShiftSpec, a: np.ndarray) -> np.ndarray:
        out = np.asarray(a, dtype=np.float32).copy()
        if spec.name == "gain":
            out[:3] = out[:3] * spec.action_gain + spec.severity * GAIN_DRIFT
        elif spec.delay_steps:
            self.pending.append(out)
            # nothing has arrived yet during the first steps: the arm gets a zero action
            out = np.zeros_like(out) if len(self.pending) <= spec.delay_steps else self.pending.pop(0)
        return np.clip(out, -1.0, 1.0).astype(np.float32)
