"""`sim:metaworld/<task>`: the Meta-World v3 tasks (Sawyer arm, 50 manipulation tasks) as devices.

Each task is one Meta-World environment with its goal in the observation (MT1-style). The seed
passed to `reset` picks the task variation (object and goal positions) through the environment's
own random stream, so `eval` with seeds 0..N is reproducible and different seeds give different
starts. Meta-World's scripted policy for the task is the expert.

>>> from embodia.devices import open_device
>>> with open_device("sim:metaworld/pick-place-v3") as dev:              # doctest: +SKIP
...     obs = dev.reset(seed=0)
...     pol = dev.expert(); pol.reset(seed=0)
...     for t in range(dev.max_steps):
...         dev.act(pol.act(obs, dev.instruction)[0]); obs = dev.observe()
...         if dev.success(): break

Needs the optional dependency: `pip install 'embodia[metaworld]'`. This module imports without it;
opening a task or listing tasks raises an ImportError that says so.
"""
from __future__ import annotations

import warnings

import numpy as np

from embodia.devices.actions import check_action
from embodia.devices.base import SimDevice
from embodia.devices.embodiment import Camera, Channel, Embodiment
from embodia.devices.gl import CameraRenderer
from embodia.devices.mujoco import parse_size
from embodia.devices.observation import Observation
from embodia.policies.base import Policy
from embodia.sim.metaworld_shifts import SHIFTS, ActionShift, SceneShift, ShiftSpec

INSTALL_HINT = "pip install 'embodia[metaworld]'"

DEFAULT_CAMERA = "corner"   # low corner view: the whole arm, the object and the goal at 96x96
DEFAULT_MAX_STEPS = 200     # the expert needs <= 140 steps on the other tasks (80 Hz: 2.5 s)
# Tasks whose expert needed > 150 steps on some of seeds 0..9: keep Meta-World's own 500.
LONG_TASKS = frozenset({"bin-picking-v3", "disassemble-v3", "peg-insert-side-v3", "push-back-v3",
                        "stick-pull-v3"})

INSTRUCTIONS: dict[str, str] = {
    "assembly-v3": "pick up the nut and place it onto the peg",
    "basketball-v3": "pick up the basketball and dunk it into the basket",
    "bin-picking-v3": "pick the puck out of one bin and place it into the other bin",
    "box-close-v3": "pick up the lid and close the box with it",
    "button-press-topdown-v3": "press the button from the top",
    "button-press-topdown-wall-v3": "reach past the wall and press the button from the top",
    "button-press-v3": "press the button from the front",
    "button-press-wall-v3": "reach past the wall and press the button from the front",
    "coffee-button-v3": "push the button on the coffee machine",
    "coffee-pull-v3": "pull the mug out from under the coffee machine",
    "coffee-push-v3": "push the mug under the coffee machine",
    "dial-turn-v3": "turn the dial",
    "disassemble-v3": "pick the nut up off the peg",
    "door-close-v3": "close the door",
    "door-lock-v3": "lock the door by turning the lock down",
    "door-open-v3": "open the door",
    "door-unlock-v3": "unlock the door by turning the lock",
    "drawer-close-v3": "push the drawer closed",
    "drawer-open-v3": "pull the drawer open",
    "faucet-close-v3": "turn the faucet handle closed",
    "faucet-open-v3": "turn the faucet handle open",
    "hammer-v3": "pick up the hammer and hammer the nail into the wall",
    "hand-insert-v3": "move the gripper into the hole at the goal",
    "handle-press-side-v3": "press the handle down from the side",
    "handle-press-v3": "press the handle down",
    "handle-pull-side-v3": "pull the handle up from the side",
    "handle-pull-v3": "pull the handle up",
    "lever-pull-v3": "pull the lever up",
    "peg-insert-side-v3": "pick up the peg and insert it sideways into the hole",
    "peg-unplug-side-v3": "pull the peg sideways out of the socket",
    "pick-out-of-hole-v3": "pick the puck up out of the hole and move it to the goal",
    "pick-place-v3": "pick up the puck and place it at the goal",
    "pick-place-wall-v3": "pick up the puck, carry it over the wall and place it at the goal",
    "plate-slide-back-side-v3": "slide the plate sideways out of the cabinet to the goal",
    "plate-slide-back-v3": "slide the plate out of the cabinet to the goal",
    "plate-slide-side-v3": "slide the plate sideways into the cabinet",
    "plate-slide-v3": "slide the plate into the cabinet",
    "push-back-v3": "pull the puck back to the goal",
    "push-v3": "push the puck to the goal",
    "push-wall-v3": "push the puck around the wall to the goal",
    "reach-v3": "move the gripper to the goal",
    "reach-wall-v3": "move the gripper past the wall to the goal",
    "shelf-place-v3": "pick up the puck and place it on the shelf",
    "soccer-v3": "push the ball into the goal",
    "stick-pull-v3": "grasp the stick and pull the box to the goal with it",
    "stick-push-v3": "grasp the stick and push the box to the goal with it",
    "sweep-into-v3": "sweep the puck into the hole",
    "sweep-v3": "sweep the puck off the table",
    "window-close-v3": "slide the window closed",
    "window-open-v3": "slide the window open",
}

# Evaluation suites (`sim:metaworld/<suite>`). The difficulty groups are the ones LeRobot's
# Meta-World environment evaluates (`--env.task=easy|medium|hard|very_hard`; 28 + 11 + 6 + 5 tasks);
# MT10 is Meta-World's own MT10 list; MT50 is every task. Facts, not code: see docs/metaworld.md "Meta-World suites".
GROUPS: dict[str, tuple[str, ...]] = {
    "easy": ("button-press-v3", "button-press-topdown-v3", "button-press-topdown-wall-v3",
             "button-press-wall-v3", "coffee-button-v3", "dial-turn-v3", "door-close-v3",
             "door-lock-v3", "door-open-v3", "door-unlock-v3", "drawer-close-v3", "drawer-open-v3",
             "faucet-close-v3", "faucet-open-v3", "handle-press-v3", "handle-press-side-v3",
             "handle-pull-v3", "handle-pull-side-v3", "lever-pull-v3", "plate-slide-v3",
             "plate-slide-back-v3", "plate-slide-back-side-v3", "plate-slide-side-v3", "reach-v3",
             "reach-wall-v3", "window-close-v3", "window-open-v3", "peg-unplug-side-v3"),
    "medium": ("basketball-v3", "bin-picking-v3", "box-close-v3", "coffee-pull-v3", "coffee-push-v3",
               "hammer-v3", "peg-insert-side-v3", "push-wall-v3", "soccer-v3", "sweep-v3",
               "sweep-into-v3"),
    "hard": ("assembly-v3", "hand-insert-v3", "pick-out-of-hole-v3", "pick-place-v3", "push-v3",
             "push-back-v3"),
    "very_hard": ("shelf-place-v3", "disassemble-v3", "stick-pull-v3", "stick-push-v3",
                  "pick-place-wall-v3"),
}
MT10 = ("reach-v3", "push-v3", "pick-place-v3", "door-open-v3", "drawer-open-v3", "drawer-close-v3",
        "button-press-topdown-v3", "peg-insert-side-v3", "window-open-v3", "window-close-v3")
SUITES: dict[str, tuple[str, ...]] = {
    "mt50": tuple(sorted(INSTRUCTIONS)), "mt10": MT10, **GROUPS,
}
SUITE_MAX_STEPS = 500   # LeRobot's Meta-World episodes: 500 steps on every task (MT1's max_path_length)

# Observation protocols (`?obs=`): what the policy receives. "state" is Meta-World's 39 numbers with
# the object and goal positions in them; "lerobot" is what LeRobot's Meta-World environment
# (`obs_type=pixels_agent_pos`) hands a policy: the `corner2` image, that camera moved to
# (0.75, 0.075, 0.7) and turned upright, and `agent_pos`, the first four numbers of Meta-World's
# observation (hand x, y, z and the gripper opening). Nothing else: the object and the goal are
# only in the pixels. Scripted experts still act from the full state, which the device keeps.
OBS_PROTOCOLS = ("state", "lerobot")
LEROBOT_CAMERA = "corner2"
LEROBOT_CAMERA_POS = (0.75, 0.075, 0.7)
AGENT_POS = 4   # hand_x, hand_y, hand_z, gripper_open


def group_of(task: str) -> str:
    """The difficulty group of a task.

    >>> group_of("reach-v3"), group_of("stick-pull-v3")
    ('easy', 'very_hard')
    """
    for name, tasks in GROUPS.items():
        if task in tasks:
            return name
    raise ValueError(f"{task!r} is in no Meta-World difficulty group; tasks: {', '.join(SUITES['mt50'])}")


def suite_tasks(name: str) -> tuple[str, ...]:
    """The tasks of suite `name` (mt50, mt10, easy, medium, hard, very_hard), in a fixed order.

    >>> len(suite_tasks("mt50")), len(suite_tasks("mt10")), suite_tasks("hard")[0]
    (50, 10, 'assembly-v3')
    """
    if name not in SUITES:
        raise ValueError(f"unknown Meta-World suite {name!r}; suites: {', '.join(SUITES)}")
    return SUITES[name]


# Kept short: the backbone reads it at every decision. Details (x to the robot's side, y away from
# the base, z up; quaternions in Meta-World's order; unused object slots are 0) live here instead.
_CONVENTION = "world-frame end-effector deltas, 1 cm per unit per step; gripper +1 closes, -1 opens"


def _require_metaworld():
    try:
        import metaworld  # noqa: F401  (registers the envs)
        from metaworld.env_dict import ALL_V3_ENVIRONMENTS
    except ImportError as e:
        raise ImportError(f"Meta-World tasks need the metaworld package: {INSTALL_HINT} "
                          f"({type(e).__name__}: {e})") from e
    return ALL_V3_ENVIRONMENTS


def list_tasks() -> list[str]:
    """The Meta-World v3 task names (e.g. 'pick-place-v3'); ImportError without metaworld."""
    return sorted(_require_metaworld())


def expert_policy_class(task: str):
    """Meta-World's scripted policy class for `task`, or None when it has none."""
    try:
        from metaworld import policies
    except ImportError as e:
        raise ImportError(f"Meta-World experts need the metaworld package: {INSTALL_HINT}") from e
    cls = getattr(policies, "ENV_POLICY_MAP", {}).get(task)
    if cls is None:   # older/newer releases without the map: build the class name from the task
        stem = task.rsplit("-v", 1)[0]
        cls = getattr(policies, "Sawyer" + "".join(w.capitalize() for w in stem.split("-"))
                      + "V3Policy", None)
    return cls


def state_channels(obs_low: np.ndarray | None = None, obs_high: np.ndarray | None = None
                   ) -> tuple[Channel, ...]:
    """The 39 named slices of the Meta-World observation (bounds from the env's observation space)."""
    frame = ["hand_x", "hand_y", "hand_z", "gripper_open"]
    for k in (1, 2):
        frame += [f"obj{k}_{a}" for a in ("x", "y", "z", "q0", "q1", "q2", "q3")]
    names = frame + ["prev_" + n for n in frame] + ["goal_x", "goal_y", "goal_z"]
    assert len(names) == 39
    units = ["m" if n.rsplit("_", 1)[-1] in ("x", "y", "z") else "" for n in names]
    lo = np.full(39, -np.inf) if obs_low is None else np.asarray(obs_low, dtype=np.float64)
    hi = np.full(39, np.inf) if obs_high is None else np.asarray(obs_high, dtype=np.float64)
    return tuple(Channel(n, float(lo[i]), float(hi[i]), units[i]) for i, n in enumerate(names))


def _truthy(v) -> bool:
    return str(v).strip().lower() not in ("0", "false", "no", "off", "")


class MetaWorldDevice(SimDevice):
    """One Meta-World v3 task driven by end-effector deltas; success as Meta-World reports it."""

    SHIFTS = SHIFTS   # name -> what it changes at severity s (sim/metaworld_shifts.py)

    def __init__(self, task: str, shift: str | None = None, size=(96, 96),
                 cameras: list[str] | None = None, render: bool = True,
                 max_steps: int | None = None, repeat: int = 0, obs: str = "state",
                 severity: float = 1.0, drift: int = 0, jitter: float = 0.0, cell: int = 0,
                 cell_span: int = 0):
        envs = _require_metaworld()
        if obs not in OBS_PROTOCOLS:
            raise ValueError(f"unknown observation protocol obs={obs!r}; known: {', '.join(OBS_PROTOCOLS)}")
        if obs == "lerobot" and cameras is not None and list(cameras) != [LEROBOT_CAMERA]:
            raise ValueError(f"obs=lerobot reads the {LEROBOT_CAMERA!r} camera only, not {list(cameras)}")
        self.obs_protocol = obs
        if task not in envs:
            raise ValueError(f"unknown Meta-World task {task!r}; known: {', '.join(sorted(envs))}")
        self._shift = ShiftSpec.parse(shift, severity)
        import mujoco
        self._mj = mujoco
        self.task, self.shift = task, self._shift.name
        self._cell_settings(repeat, drift, jitter, cell, cell_span)
        self.env = self._goal_observable_env(envs[task]())
        self.model, self.data = self.env.model, self.env.data
        cams = self._cameras(cameras, render)
        self._scene = SceneShift(self.env, cams, task)
        self._scene.apply(self._shift)      # at full severity once: a shift the task cannot take fails here
        self._act_shift = ActionShift()

        self.hz = 1.0 / (self.env.frame_skip * float(self.model.opt.timestep))
        space = self.env.observation_space
        state = state_channels(space.low, space.high)
        w, h = parse_size(size)
        self.embodiment = Embodiment(
            name="sawyer", kind="arm (Sawyer, Meta-World)", hz=self.hz,
            actions=(Channel("dx", -1.0, 1.0), Channel("dy", -1.0, 1.0), Channel("dz", -1.0, 1.0),
                     Channel("gripper", -1.0, 1.0)),
            state=state[:AGENT_POS] if obs == "lerobot" else state,
            cameras=tuple(Camera(c, w, h) for c in cams), chunk=16, exec_horizon=8,
            action_kind="delta", convention=_CONVENTION)
        self._expert_cls = expert_policy_class(task)
        self.capabilities = frozenset({"state", "success", "deterministic"}
                                      | ({"render", "frames_on_demand"} if cams else set())
                                      | ({"expert"} if self._expert_cls is not None else set()))
        self.instruction = INSTRUCTIONS.get(task, task.rsplit("-v", 1)[0].replace("-", " "))
        self.max_steps = int(max_steps) if max_steps else (
            500 if task in LONG_TASKS else DEFAULT_MAX_STEPS)
        self.seed: int | None = None
        self._obs: np.ndarray | None = None
        self._last_info: dict = {}
        self._success_step: int | None = None
        self._steps = 0
        self._t0 = 0.0
        self._renderer = None

    def _cell_settings(self, repeat, drift, jitter, cell, cell_span) -> None:
        """`repeat` > 0: seed s shows the variation of seed s % repeat (a robot that meets the same
        few set-ups again, the setting where a success memory can recall); the policy still gets
        seed s. `cell` picks another K set-ups (those of seeds K*cell .. K*cell + K - 1), `jitter`
        moves the objects and the goal of each episode up to that many metres from its set-up (drawn
        from seed s), so set-ups come back similar but never identical. `cell_span=N`: seeds come in
        blocks of N, each its own cell (cell + s // N), and a drifting shift grows with the
        episode's place in its block (s % N): a stream of N episodes from a multiple of N is one
        cell, whichever process runs it."""
        if min(int(repeat), int(drift), int(cell), int(cell_span)) < 0:
            raise ValueError(f"repeat, drift, cell and cell_span must be >= 0, got {repeat}, {drift}, {cell}, "
                             f"{cell_span}")
        if not (np.isfinite(jitter) and 0 <= float(jitter) <= 0.1):
            raise ValueError(f"jitter is a half-width in metres from 0 to 0.1, got {jitter!r}")
        self.repeat, self.cell, self.jitter = int(repeat), int(cell), float(jitter)
        self.cell_span = int(cell_span)
        self.drift = int(drift)
        self._episodes = 0          # resets so far: how far a drifting shift has grown
        self._now = self._shift
        self._base_vecs: dict[int, np.ndarray] = {}

    @staticmethod
    def _goal_observable_env(env):
        """Goal observable, seeded task variations: the same switches Meta-World's MT1 benchmark and
        its `-goal-observable` classes use, but with the rand vec drawn from env.np_random."""
        env._partially_observable = False
        if "sawyer_observation_space" in env.__dict__:
            del env.sawyer_observation_space          # cached_property: recompute with the goal
        env.observation_space = env.sawyer_observation_space
        env._set_task_called = True
        env._freeze_rand_vec = False
        env.seeded_rand_vec = True
        env.max_path_length = 2**62   # never raise mid-episode; `max_steps` is the loop's horizon
        return env

    def _cameras(self, cameras: list[str] | None, render: bool) -> list[str]:
        """The cameras the device renders (none with render off), placed and turned upright."""
        mujoco, m = self._mj, self.model
        all_cams = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(m.ncam)]
        if self.obs_protocol == "lerobot":
            cams = [LEROBOT_CAMERA]
            m.cam_pos[m.camera(LEROBOT_CAMERA).id] = LEROBOT_CAMERA_POS
        else:
            cams = [DEFAULT_CAMERA] if cameras is None else list(cameras)
        for c in cams:
            if c not in all_cams:
                raise ValueError(f"camera {c!r} not in the Meta-World scene; it has {all_cams}")
        cams = cams if render else []
        self._upright_cameras(cams)
        return cams

    # -- scene edits, once at construction ---------------------------------------------------------
    def _upright_cameras(self, cams: list[str]) -> None:
        """Meta-World's corner cameras look upside down (their up axis points down): turn them 180°
        about the view axis, so images show the table below the arm (a rotation, not a mirror)."""
        mj, m = self._mj, self.model
        mj.mj_forward(m, self.data)
        for c in cams:
            i = m.camera(c).id
            up = self.data.cam_xmat[i].reshape(3, 3)[:, 1]
            if m.cam_mode[i] == mj.mjtCamLight.mjCAMLIGHT_FIXED and up[2] < 0:
                q = np.empty(4)
                mj.mju_mulQuat(q, m.cam_quat[i].copy(), np.array([0.0, 0.0, 0.0, 1.0]))
                m.cam_quat[i] = q

    # -- Device protocol ---------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> Observation:
        if seed is None:
            seed = int(np.random.default_rng().integers(2**31))
        self.seed = int(seed)
        cell, place = ((self.cell + self.seed // self.cell_span, self.seed % self.cell_span) if self.cell_span
                       else (self.cell, self._episodes))
        grown = min(1.0, place / self.drift) if self.drift else 1.0
        self._now = self._shift.at(self._shift.severity * grown)
        self._scene.apply(self._now)
        self._act_shift.reset()
        self._episodes += 1
        # env.seed reseeds env.np_random, the only source of the task variation (object and goal
        # positions); the rest of the reset (hand settling, physics) is deterministic.
        base = self.repeat * cell + self.seed % self.repeat if self.repeat else self.seed
        if self.jitter > 0:
            obs = self._jittered_reset(base)
        else:
            self.env.seed(base)
            obs, _ = self.env.reset()
        self._obs = np.asarray(obs, dtype=np.float32)
        self._last_info = {}
        self._success_step = None
        self._steps = 0
        self._t0 = float(self.data.time)
        return self.observe()

    def shift_now(self) -> ShiftSpec:
        """The shift at the severity of the episode running: full unless it drifts (`drift=N`: the
        n-th episode since the device opened, or of its cell with `cell_span`, runs at severity x
        min(1, n / N), the first one clean)."""
        return self._now

    def _jittered_reset(self, base: int):
        """Reset to set-up `base` with its object and goal moved up to `jitter` metres (drawn from the
        episode's seed): the env draws its rand vec from a box around the base one, so a task that
        redraws until object and goal are apart still finds a draw (the base one is apart)."""
        from gymnasium.spaces import Box
        env = self.env
        space = env._random_reset_space
        if base not in self._base_vecs:
            env.seed(base)
            env.reset()
            self._base_vecs[base] = np.array(env._last_rand_vec, dtype=np.float64)
        vec = self._base_vecs[base]
        env._random_reset_space = Box(np.maximum(space.low, vec - self.jitter),
                                      np.minimum(space.high, vec + self.jitter), dtype=np.float64)
        try:
            env.seed(self.seed)
            obs, _ = env.reset()
        finally:
            env._random_reset_space = space
        return obs

    def act(self, action) -> np.ndarray:
        if self._obs is None:
            raise RuntimeError(f"metaworld/{self.task}: call reset() before act()")
        a = check_action(action, self.embodiment)
        # the arm gets the shifted action; what the policy commanded is what is returned and recorded
        obs, _, _, _, info = self.env.step(self._act_shift(self.shift_now(), a))
        if not np.all(np.isfinite(self.data.qpos)):
            raise FloatingPointError(f"metaworld/{self.task}: simulation diverged (non-finite qpos) "
                                     f"after action {a.tolist()}")
        self._obs = np.asarray(obs, dtype=np.float32)
        self._steps += 1
        self._last_info = info
        if self._success_step is None and float(info.get("success", 0.0)) > 0:
            self._success_step = self._steps
        return a

    def observe(self, images: bool = True) -> Observation:
        """What the policy reads; ``images=False`` skips rendering ("frames_on_demand")."""
        if self._obs is None:
            raise RuntimeError(f"metaworld/{self.task}: call reset() before observe()")
        # The cached observation: env._get_obs() advances Meta-World's frame stack, so never here.
        state = self._obs[:AGENT_POS] if self.obs_protocol == "lerobot" else self._obs
        return Observation(images=self.render() if images else {}, state=state.copy(),
                           timestamp=float(self.data.time) - self._t0)

    def full_state(self) -> np.ndarray:
        """Meta-World's whole 39-number observation (objects and goal included), whatever the
        protocol: what the scripted expert reads. Policies get `observe()`."""
        if self._obs is None:
            raise RuntimeError(f"metaworld/{self.task}: call reset() before full_state()")
        return self._obs.copy()

    def success(self) -> bool:
        return self._success_step is not None

    def done(self) -> bool:
        return self.success()

    def info(self) -> dict:
        out = {}
        for k, v in self._last_info.items():
            try:
                out[k] = float(v)
            except (TypeError, ValueError):
                continue
        out["success_step"] = self._success_step
        out["steps"] = self._steps
        out["seed"] = self.seed
        if self.shift is not None:
            out["shift_severity"] = self.shift_now().severity
        return out

    def expert(self) -> "MetaWorldExpert":
        if self._expert_cls is None:
            raise NotImplementedError(f"Meta-World has no scripted policy for {self.task}")
        # Under obs=lerobot the observation lacks the object and goal: the expert reads the device.
        privileged = self.full_state if self.obs_protocol == "lerobot" else None
        return MetaWorldExpert(self._expert_cls(), privileged)

    def render(self) -> dict[str, np.ndarray]:
        cams = self.embodiment.cameras
        if not cams:
            return {}
        if self._renderer is None:
            self._renderer = CameraRenderer(self.model, cams[0].width, cams[0].height,
                                            owner=f"metaworld/{self.task}")
        return self._renderer.render(self.data, [c.name for c in cams])

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        if self.env is not None:
            self.env.close()
            self.env = None


class MetaWorldExpert(Policy):
    """Meta-World's scripted policy for the task, applied to `obs.state` (needs the goal in it), or to
    `full_state()` where the observation protocol hides the objects and goal from the policy."""

    def __init__(self, policy, full_state=None):
        self.policy = policy
        self.full_state = full_state

    def reset(self, seed: int | None = None) -> None:
        pass   # the scripted policies are stateless and deterministic

    def info(self) -> dict:
        return {}

    def act(self, obs, instruction: str = "") -> np.ndarray:
        s = np.asarray(obs.state if self.full_state is None else self.full_state(), dtype=np.float64)
        with warnings.catch_warnings():   # "Constant(s) may be too high": the env clips anyway
            warnings.simplefilter("ignore")
            a = self.policy.get_action(s)
        return np.clip(np.asarray(a, dtype=np.float32), -1.0, 1.0)[None]


def open_metaworld(task: str, shift: str | None = None, size="96x96", camera=None, render="1",
                   max_steps=None, repeat="0", obs="state", severity="1", drift="0", jitter="0", cell="0",
                   cell_span="0", **_) -> MetaWorldDevice:
    """Factory for `sim:metaworld/<task>[?shift=heavy&severity=1&drift=0&size=96x96&camera=corner&render=0
    &max_steps=500&repeat=3&cell=0&cell_span=40&jitter=0.02&obs=lerobot]` (``repeat=K``: seed s shows
    the task variation of seed s % K (+ K x cell), so a stream repeats K set-ups; ``cell_span=N``:
    every block of N seeds is a cell of its own; ``jitter``: each episode moves them up to that many
    metres; ``severity``/``drift``: see sim/metaworld_shifts.py; ``obs=lerobot``:
    LeRobot's view, the `corner2` image and the 4-number `agent_pos`)."""
    cams = camera.split(",") if isinstance(camera, str) and camera else camera
    return MetaWorldDevice(task, shift=shift, size=parse_size(size), cameras=cams,
                           render=_truthy(render), max_steps=int(max_steps) if max_steps else None,
                           repeat=int(repeat), obs=obs, severity=float(severity), drift=int(drift),
                           jitter=float(jitter), cell=int(cell), cell_span=int(cell_span))
