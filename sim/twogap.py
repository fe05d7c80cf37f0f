"""`sim:twogap-push`: push a puck through one of two gaps in a wall onto a goal (planar MuJoCo).

The scene is bimodal by construction: the wall across y=0 has a left and a right gap, both lead to
the goal, and the scripted expert picks one of them with probability 1/2. Named shifts change the
scene but not the expert: `blocked-left` / `blocked-right` narrow one gap below the puck's width,
`heavy` makes the puck heavier and stickier and moves the goal.

>>> from embodia.devices import open_device
>>> with open_device("sim:twogap-push", shift="blocked-left") as dev:      # doctest: +SKIP
...     obs = dev.reset(seed=0)
...     pol = dev.expert(); pol.reset(seed=0)
...     for t in range(dev.max_steps):
...         dev.act(pol.act(obs, dev.instruction)[0]); obs = dev.observe()
...         if dev.success(): break
"""
from __future__ import annotations

import math

import numpy as np

from embodia.devices.embodiment import Channel
from embodia.devices.mujoco import MujocoDevice, load_model, parse_flag, parse_size
from embodia.policies.base import Policy

# -- nominal scene constants (metres); the expert may know these, never the shift -----------------
TIMESTEP = 0.01
HZ = 10.0
PUSHER_R = 0.03
PUCK_R = 0.05
GAP_X = {"left": -0.2, "right": 0.2}
GAP_WIDTH = 0.24                     # 0.07 m of play either side of the 0.10 m puck
BLOCKED_WIDTH = 0.08                 # narrower than the 0.10 m puck: impassable
WALL_HALF_T = 0.02                   # the wall across y=0 is 0.04 m thick
GOAL = (0.0, 0.35)
GOAL_R = 0.06
ARENA_X = (-0.5, 0.5)
ARENA_Y = (-0.8, 0.6)
PUSHER_START = (0.0, -0.6)
PUCK_START = (0.0, -0.3)
JITTER = 0.05
VEL_SCALE = 0.5                      # ctrl 1.0 -> 0.5 m/s target velocity
KP = 20.0                            # velocity servo gain (N per m/s)
SUCCESS_STEPS = 5
# Pusher-puck friction. With a slippery 0.05 (and 0.16 m gaps) the scripted expert still succeeded
# every time, but a learned policy executing open-loop chunks could not imitate its high-gain
# corrections (a state-only head: 0.05 success); benchmarks/twogap_imitability.py measures this.
PAIR_FRICTION = 0.6

INSTRUCTIONS = (
    "push the puck through a gap in the wall onto the goal",
    "push the puck onto the green goal through one of the gaps in the wall",
    "get the puck through the wall and stop it on the goal",
)

_CONVENTION = ("world-frame velocity targets for the pusher, x right, y toward the goal, "
               "scaled by 0.5 m/s")


def _scene_xml(*, gap_widths=(GAP_WIDTH, GAP_WIDTH), goal=GOAL, puck_mass=0.2,
               puck_damping=2.0, puck_frictionloss=0.05, puck_friction=0.3, pair_friction=PAIR_FRICTION) -> str:
    """The MJCF of the scene; every shift is a change of these arguments."""
    x0, x1 = ARENA_X
    y0, y1 = ARENA_Y
    t = WALL_HALF_T
    # Wall across y=0: three segments around the two gaps.
    (cl, wl), (cr, wr) = (GAP_X["left"], gap_widths[0]), (GAP_X["right"], gap_widths[1])
    edges = [(x0, cl - wl / 2), (cl + wl / 2, cr - wr / 2), (cr + wr / 2, x1)]
    walls = []
    for i, (a, b) in enumerate(edges):
        walls.append(f'<geom name="wall{i}" type="box" class="wall" pos="{(a + b) / 2:.4f} 0 0.025" '
                     f'size="{(b - a) / 2:.4f} {t} 0.025"/>')
    # Arena borders (outside the play area, so its inner edges are at ARENA_X / ARENA_Y).
    b = 0.02
    cy, hy = (y0 + y1) / 2, (y1 - y0) / 2 + 2 * b
    walls += [
        f'<geom name="border_left" type="box" class="wall" pos="{x0 - b} {cy} 0.025" size="{b} {hy} 0.025"/>',
        f'<geom name="border_right" type="box" class="wall" pos="{x1 + b} {cy} 0.025" size="{b} {hy} 0.025"/>',
        f'<geom name="border_bottom" type="box" class="wall" pos="0 {y0 - b} 0.025" size="{(x1 - x0) / 2} {b} 0.025"/>',
        f'<geom name="border_top" type="box" class="wall" pos="0 {y1 + b} 0.025" size="{(x1 - x0) / 2} {b} 0.025"/>',
    ]
    wall_xml = "\n    ".join(walls)
    # top camera: the arena plus borders is 1.08 x 1.48 m; fovy 42 at 2 m sees 1.53 m square.
    return f"""
<mujoco model="twogap_push">
  <compiler angle="radian"/>
  <option timestep="{TIMESTEP}" integrator="implicitfast"/>
  <visual>
    <quality shadowsize="256"/>
    <global offwidth="256" offheight="256"/>
    <headlight ambient="0.45 0.45 0.45" diffuse="0.55 0.55 0.55" specular="0 0 0"/>
  </visual>
  <default>
    <geom contype="1" conaffinity="1" condim="3" friction="0.3 0.005 0.0001"/>
    <default class="wall"><geom rgba="0.15 0.15 0.18 1"/></default>
    <default class="visual"><geom contype="0" conaffinity="0"/></default>
  </default>
  <worldbody>
    <geom name="table" class="visual" type="plane" pos="0 {cy} 0" size="0.8 0.9 0.05" rgba="0.82 0.82 0.78 1"/>
    <camera name="top" pos="0 {cy} 2.0" xyaxes="1 0 0 0 1 0" fovy="42"/>
    <geom name="goal" class="visual" type="cylinder" pos="{goal[0]} {goal[1]} 0.001" size="{GOAL_R} 0.001" rgba="0.1 0.75 0.2 1"/>
    {wall_xml}
    <body name="pusher" pos="0 0 0.02">
      <joint name="pusher_x" type="slide" axis="1 0 0" damping="1"/>
      <joint name="pusher_y" type="slide" axis="0 1 0" damping="1"/>
      <geom name="pusher" type="cylinder" size="{PUSHER_R} 0.02" mass="0.5" rgba="0.15 0.35 0.95 1"/>
    </body>
    <body name="puck" pos="0 0 0.02">
      <joint name="puck_x" type="slide" axis="1 0 0" damping="{puck_damping}" frictionloss="{puck_frictionloss}"/>
      <joint name="puck_y" type="slide" axis="0 1 0" damping="{puck_damping}" frictionloss="{puck_frictionloss}"/>
      <geom name="puck" type="cylinder" size="{PUCK_R} 0.02" mass="{puck_mass}" friction="{puck_friction} 0.005 0.0001" rgba="0.95 0.45 0.05 1"/>
    </body>
  </worldbody>
  <contact>
    <!-- a grippy pusher: the puck follows the push instead of squirting sideways -->
    <pair geom1="pusher" geom2="puck" condim="3" friction="{pair_friction} {pair_friction} 0.005 0.0001 0.0001"/>
  </contact>
  <actuator>
    <!-- velocity servo: force = KP * (VEL_SCALE * ctrl - qvel); needs biastype="affine" -->
    <general name="vx" joint="pusher_x" ctrllimited="true" ctrlrange="-1 1" gainprm="{KP * VEL_SCALE}" biastype="affine" biasprm="0 0 {-KP}"/>
    <general name="vy" joint="pusher_y" ctrllimited="true" ctrlrange="-1 1" gainprm="{KP * VEL_SCALE}" biastype="affine" biasprm="0 0 {-KP}"/>
  </actuator>
</mujoco>
"""


def _shift_params(shift: str | None, width: float = GAP_WIDTH) -> dict:
    if shift is None:
        return {}
    if shift == "blocked-left":
        return {"gap_widths": (BLOCKED_WIDTH, width)}
    if shift == "blocked-right":
        return {"gap_widths": (width, BLOCKED_WIDTH)}
    if shift == "heavy":
        return {"puck_mass": 0.2 * 1.5, "puck_damping": 2.0 * 2, "puck_frictionloss": 0.05 * 2,
                "puck_friction": 0.3 * 2, "goal": (GOAL[0] + 0.05, GOAL[1])}
    raise AssertionError(shift)


class TwoGapPush(MujocoDevice):
    """Planar pusher + puck + a wall with two gaps; success = puck on the goal for 5 steps."""

    SHIFTS: dict[str, str] = {
        "blocked-left": "the left gap is narrowed to 0.08 m, too narrow for the 0.10 m puck",
        "blocked-right": "the right gap is narrowed to 0.08 m, too narrow for the 0.10 m puck",
        "heavy": "puck friction and damping x2, mass x1.5, goal moved +0.05 m in x",
    }
    max_steps: int = 150
    STATE_NAMES = ("pusher_x", "pusher_y", "pusher_vx", "pusher_vy", "puck_x", "puck_y",
                   "puck_vx", "puck_vy", "goal_x", "goal_y")

    def __init__(self, shift: str | None = None, size=(96, 96), render: bool = True, scene: dict | None = None):
        """`scene`: overrides of the scene's construction arguments (gap_widths, pair_friction, ...),
        for experiments on the task itself; shifts are applied on top."""
        if shift in ("", "none", "None"):
            shift = None
        if shift is not None and shift not in self.SHIFTS:
            raise ValueError(f"unknown twogap-push shift {shift!r}; known: "
                             + ", ".join(f"{k} ({v})" for k, v in self.SHIFTS.items()))
        self.shift = shift
        scene = dict(scene or {})
        params = scene | _shift_params(shift, max(scene.get("gap_widths", (GAP_WIDTH,))))
        self.goal = np.array(params.get("goal", GOAL), dtype=np.float64)
        self.gap_widths = dict(zip(("left", "right"), params.get("gap_widths", (GAP_WIDTH, GAP_WIDTH))))
        model = load_model(_scene_xml(**params))
        # exec_horizon 1: embodia-tiny replans after every action here (0.82 success; every 4 steps
        # 0.71, stalling short of the goal); a decision costs ~14 ms of the 100 ms period
        super().__init__(model, name="planar_pusher", hz=HZ, cameras=["top"], size=size,
                         state_source="joints", kind="planar pusher", chunk=16, exec_horizon=1,
                         convention=_CONVENTION, render=render, overrides=dict(
                             actions=(Channel("vx", -1.0, 1.0, "m/s"), Channel("vy", -1.0, 1.0, "m/s")),
                             state=tuple(Channel(n) for n in self.STATE_NAMES), action_kind="velocity"))
        self.capabilities = self.capabilities | {"success", "expert"}
        jid = {n: model.joint(n).id for n in ("pusher_x", "pusher_y", "puck_x", "puck_y")}
        self._qadr = np.array([model.jnt_qposadr[jid[n]] for n in jid])
        self._vadr = np.array([model.jnt_dofadr[jid[n]] for n in jid])
        self._on_goal = 0
        self._gap: str | None = None
        self._steps = 0
        self.instruction = INSTRUCTIONS[0]

    # -- episode -----------------------------------------------------------------------------------
    def randomize(self, rng: np.random.Generator) -> None:
        jit = rng.uniform(-JITTER, JITTER, size=2)
        q = self.data.qpos
        q[self._qadr[0]], q[self._qadr[1]] = PUSHER_START[0] + jit[0], PUSHER_START[1]
        q[self._qadr[2]], q[self._qadr[3]] = PUCK_START[0] + jit[1], PUCK_START[1]
        self.instruction = INSTRUCTIONS[int(rng.integers(len(INSTRUCTIONS)))]
        self._on_goal = 0
        self._gap = None
        self._steps = 0

    def act(self, action) -> np.ndarray:
        before = self._puck().copy()
        a = super().act(action)
        after = self._puck()
        self._steps += 1
        if before[1] < 0.0 <= after[1]:       # crossed the wall line upward: through which gap?
            x = before[0] + (after[0] - before[0]) * (0.0 - before[1]) / (after[1] - before[1])
            self._gap = "left" if x < 0.0 else "right"
        elif after[1] < 0.0 <= before[1]:     # went back down: it no longer counts as through
            self._gap = None
        self._on_goal = self._on_goal + 1 if self._goal_dist() <= GOAL_R else 0
        return a

    def state(self) -> np.ndarray:
        d = self.data
        return np.concatenate([d.qpos[self._qadr[:2]], d.qvel[self._vadr[:2]],
                               d.qpos[self._qadr[2:]], d.qvel[self._vadr[2:]],
                               self.goal]).astype(np.float32)

    def success(self) -> bool:
        return self._on_goal >= SUCCESS_STEPS

    def done(self) -> bool:
        return self.success()

    def info(self) -> dict:
        return {"gap": self._gap, "puck_goal_dist": float(self._goal_dist())}

    def expert(self, noise: float = 0.05) -> "TwoGapExpert":
        return TwoGapExpert(noise=noise)

    # -- helpers -----------------------------------------------------------------------------------
    def _puck(self) -> np.ndarray:
        return self.data.qpos[self._qadr[2:]].astype(np.float64)

    def _goal_dist(self) -> float:
        return float(np.linalg.norm(self._puck() - self.goal))


def _unit(v: np.ndarray) -> np.ndarray:
    n = float(np.hypot(v[0], v[1]))
    return v / n if n > 1e-9 else np.array([0.0, 1.0])


class TwoGapExpert(Policy):
    """Scripted closed-loop waypoint pusher; picks the left or right gap with p=1/2 per episode.

    It reads positions from `obs.state` (pusher, puck, goal) and knows the nominal gap centres; it
    is not told about shifts, so under `blocked-left` its left-gap episodes fail.
    Waypoints for the puck: below the chosen gap, above it, then the goal. Each step it either
    pushes (pusher behind the puck relative to the waypoint) or circles the puck to get behind it.
    """

    CONTACT = PUSHER_R + PUCK_R      # centre distance when touching
    ORBIT = CONTACT + 0.04           # radius it circles the puck at
    BELOW, ABOVE = -0.2, 0.2         # waypoint y below / above the wall

    def __init__(self, noise: float = 0.05, gap_x: dict | None = None):
        self.noise = float(noise)
        self.gap_x = dict(GAP_X if gap_x is None else gap_x)
        self.reset(None)

    def reset(self, seed: int | None = None) -> None:
        # Its own stream (not the device's): the mode must not be a function of the start jitter.
        self.rng = np.random.default_rng(None if seed is None else [0x7E, int(seed)])
        self.mode = "left" if self.rng.random() < 0.5 else "right"
        self.phase = 0
        self.hold_at: np.ndarray | None = None

    def info(self) -> dict:
        return {"mode": self.mode}

    # -- control -----------------------------------------------------------------------------------
    def act(self, obs, instruction: str = "") -> np.ndarray:
        s = np.asarray(obs.state, dtype=np.float64)
        p, q, g = s[0:2], s[4:6], s[8:10]
        gx = self.gap_x[self.mode]
        w_below, w_above = np.array([gx, self.BELOW]), np.array([gx, self.ABOVE])

        # phase: 0 puck -> below gap, 1 -> above gap, 2 -> goal, 3 hold still
        if self.phase == 0 and np.linalg.norm(q - w_below) < 0.03 and abs(q[0] - gx) < 0.02:
            self.phase = 1
        if self.phase == 1:
            if q[1] > self.ABOVE - 0.03:
                self.phase = 2
            elif q[1] < -0.15 and abs(q[0] - gx) > 0.05:      # drifted far off the gap line
                self.phase = 0
        if self.phase >= 2 and q[1] < 0.0:                       # fell back below the wall
            self.phase = 1 if abs(q[0] - gx) < 0.05 else 0
        if self.phase == 2 and np.linalg.norm(q - g) < 0.012:
            self.phase, self.hold_at = 3, None
        if self.phase == 3 and np.linalg.norm(q - g) > 0.04:
            self.phase = 2

        if self.phase == 3:
            if self.hold_at is None:     # back off a little from the puck and stay there
                self.hold_at = q + _unit(p - q) * (self.CONTACT + 0.03)
            v = 4.0 * (self.hold_at - p)
        else:
            target = (w_below, w_above, g)[self.phase]
            if self.phase == 1 and abs(q[0] - gx) > 0.025 and q[1] < -0.05:
                # off the gap line too close to the wall to get above the puck: slide it sideways
                target = np.array([gx, q[1]])
            dist = float(np.linalg.norm(target - q))
            speed = float(np.clip((2.0 if self.phase < 2 else 1.2) * dist, 0.04, 0.3))
            v = self._push(p, q, target, speed)
        a = v / VEL_SCALE
        if self.noise > 0:
            a = a + self.rng.normal(0.0, self.noise, size=2)
        return np.clip(a, -1.0, 1.0).astype(np.float32)[None]

    def _push(self, p, q, target, speed) -> np.ndarray:
        """Velocity (m/s) that pushes the puck at q toward target from behind, circling if needed."""
        d = _unit(target - q)
        n = np.array([-d[1], d[0]])
        r = p - q
        rn = float(np.linalg.norm(r))
        # angle of the pusher around the puck, 0 = directly behind (on -d)
        phi = math.atan2(float(r @ n), float(r @ -d))
        if abs(phi) < math.radians(20):
            contact = q - d * (self.CONTACT + 0.002)
            err = contact - p
            lat = float(err @ n)
            v = 5.0 * float(err @ d) * d + 15.0 * lat * n    # steer harder across than along
            if rn < self.CONTACT + 0.02:
                v = v + speed * max(0.3, 1.0 - abs(lat) / 0.02) * d
        else:
            # circle toward phi=0 on the orbit, at most 60 degrees ahead of where it is now
            step = math.copysign(min(abs(phi), math.radians(60)), phi)
            t_phi = phi - step
            t = q + self.ORBIT * (math.cos(t_phi) * -d + math.sin(t_phi) * n)
            v = 6.0 * (t - p)
            if rn < self.ORBIT - 0.01:           # too close while not behind: move out first
                v = v + 0.3 * _unit(r)
        nv = float(np.linalg.norm(v))
        return v * (0.5 / nv) if nv > 0.5 else v


def open_twogap(shift: str | None = None, size="96x96", render="1") -> TwoGapPush:
    """Factory for `sim:twogap-push[?shift=blocked-left&size=96x96&render=0]`."""
    if isinstance(shift, str) and shift.strip().lower() in ("", "none"):
        shift = None
    return TwoGapPush(shift=shift, size=parse_size(size), render=parse_flag(render))
