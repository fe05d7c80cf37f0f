"""Any MJCF scene as a device: embodiment from actuators and sensors, offscreen cameras, substeps.

>>> dev = open_mujoco("path/to/scene.xml", hz="20", size="96x96")      # doctest: +SKIP
>>> dev.embodiment.prompt()                                              # doctest: +SKIP
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import mujoco
import numpy as np

from embodia.devices.actions import check_action
from embodia.devices.base import SimDevice
from embodia.devices.embodiment import Camera, Channel, Embodiment
from embodia.devices.gl import CameraRenderer, route_mujoco_warnings
from embodia.devices.observation import Observation

route_mujoco_warnings()      # every MuJoCo device imports this module: its warnings go to a logger, not stdout


def _name(model, objtype, i, prefix):
    return mujoco.mj_id2name(model, objtype, i) or f"{prefix}{i}"


MAX_SIZE = 4096          # px per side: a 99999x99999 camera would ask for 28 GB a frame
MAX_HZ = 1000.0


def parse_size(size) -> tuple[int, int]:
    """A camera size ``"WxH"`` (or ``"N"``, an int, a pair) as (w, h), each 1..4096; ValueError otherwise.

    >>> parse_size("64x48"), parse_size(32)
    ((64, 48), (32, 32))
    >>> parse_size("-5x3")
    Traceback (most recent call last):
    ValueError: size '-5x3': width and height must be whole numbers 1..4096 (WxH, e.g. 96x96)
    """
    try:
        if isinstance(size, str):
            w, _, h = size.strip().lower().partition("x")
            w, h = int(w), int(h or w)
        elif isinstance(size, int) and not isinstance(size, bool):
            w = h = size
        else:
            w, h = int(size[0]), int(size[1])
    except (TypeError, ValueError, IndexError):
        w = h = -1
    if not (1 <= w <= MAX_SIZE and 1 <= h <= MAX_SIZE):
        raise ValueError(f"size {size!r}: width and height must be whole numbers 1..{MAX_SIZE} (WxH, e.g. 96x96)")
    return w, h


def parse_flag(value, name: str = "render") -> bool:
    """A yes/no URI parameter: 1/0, true/false, yes/no (any case); ValueError otherwise.

    >>> parse_flag("0"), parse_flag("Yes")
    (False, True)
    """
    v = str(value).strip().lower()
    if v not in ("0", "1", "true", "false", "yes", "no"):
        raise ValueError(f"{name} {value!r}: expected 1 or 0 (true/false, yes/no)")
    return v in ("1", "true", "yes")


def check_query(hz=None, size="96x96", cameras=None, state="auto", render="1", shift=None) -> dict:
    """Validate a ``mujoco:`` URI's parameters before the scene is loaded; one-line ValueError.

    >>> check_query(hz="20", size="64x64")["hz"]
    20.0
    >>> check_query(hz="0")
    Traceback (most recent call last):
    ValueError: hz '0': expected a control rate in (0, 1000] Hz
    """
    try:
        rate = None if hz in (None, "") else float(hz)
    except (TypeError, ValueError):
        rate = float("nan")
    if rate is not None and not (0 < rate <= MAX_HZ):      # NaN fails too
        raise ValueError(f"hz {hz!r}: expected a control rate in (0, {MAX_HZ:g}] Hz")
    parse_size(size)
    if cameras is not None and not isinstance(cameras, (list, tuple)):
        names = str(cameras).split(",")
        if not all(n.strip() for n in names):
            raise ValueError(f"cameras {cameras!r}: expected comma-separated camera names")
    if state not in ("auto", "sensors", "joints"):
        raise ValueError(f"state {state!r}: expected auto, sensors or joints")
    parse_flag(render)
    if shift:
        raise ValueError(f"mujoco: scenes have no named shifts (got shift={shift!r}); "
                         "edit the MJCF or use a sim: task")
    return {"hz": rate}


def derive_embodiment(model, *, name: str, hz: float, cameras: tuple[Camera, ...],
                      kind: str = "mujoco", chunk: int = 16, exec_horizon: int = 8,
                      state_source: str = "auto", convention: str = "") -> Embodiment:
    """Action channels from actuators (ctrlrange where ctrllimited), state from sensors or joints."""
    actions = []
    for i in range(model.nu):
        lo, hi = (model.actuator_ctrlrange[i] if model.actuator_ctrllimited[i] else (-math.inf, math.inf))
        actions.append(Channel(_name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, i, "actuator"), float(lo), float(hi)))
    return Embodiment(name=name, kind=kind, actions=tuple(actions),
                      state=tuple(Channel(n) for n in state_names(model, state_source)),
                      cameras=cameras, hz=hz, chunk=chunk, exec_horizon=exec_horizon,
                      action_kind="ctrl", convention=convention)


def state_names(model, source: str = "auto") -> list[str]:
    if source == "auto":
        source = "sensors" if model.nsensordata else "joints"
    if source == "sensors":
        names = []
        for i in range(model.nsensor):
            n, dim = _name(model, mujoco.mjtObj.mjOBJ_SENSOR, i, "sensor"), int(model.sensor_dim[i])
            names += [n] if dim == 1 else [f"{n}[{k}]" for k in range(dim)]
        return names
    if source == "joints":
        return [f"qpos[{i}]" for i in range(model.nq)] + [f"qvel[{i}]" for i in range(model.nv)]
    raise ValueError(f"state source must be auto, sensors or joints, got {source!r}")


class MujocoDevice(SimDevice):
    """A MuJoCo model driven through its actuators at `hz` (substeps of the model's timestep)."""

    def __init__(self, model: "mujoco.MjModel", *, name: str = "mujoco", hz: float | None = None,
                 cameras: list[str] | None = None, size=(96, 96), state_source: str = "auto",
                 kind: str = "mujoco", chunk: int = 16, exec_horizon: int = 8, convention: str = "",
                 render: bool = True, overrides: dict | None = None):
        """`overrides` replaces fields of the derived Embodiment (e.g. named state channels,
        units, action_kind) for tasks that know more about the body than the MJCF says."""
        self.model = model
        self.data = mujoco.MjData(model)
        dt = float(model.opt.timestep)
        hz = float(hz) if hz else 1.0 / (dt * max(1, round(0.05 / dt)))
        self.substeps = max(1, round(1.0 / (hz * dt)))
        self.state_source = "sensors" if state_source == "auto" and model.nsensordata else (
            "joints" if state_source == "auto" else state_source)
        w, h = parse_size(size)
        all_cams = [_name(model, mujoco.mjtObj.mjOBJ_CAMERA, i, "camera") for i in range(model.ncam)]
        cams = all_cams if cameras is None else list(cameras)
        for c in cams:
            if c not in all_cams and c != "free":
                raise ValueError(f"camera {c!r} not in the model; it has {all_cams or 'no cameras'} "
                                 f"(use 'free' for the default free camera)")
        if not render:
            cams = []
        self.embodiment = derive_embodiment(
            model, name=name, hz=1.0 / (dt * self.substeps), kind=kind, chunk=chunk,
            exec_horizon=exec_horizon, state_source=self.state_source, convention=convention,
            cameras=tuple(Camera(c, w, h) for c in cams))
        if overrides:
            self.embodiment = replace(self.embodiment, **overrides)
        self.capabilities = frozenset({"state", "deterministic"}
                                      | ({"render", "frames_on_demand"} if cams else set()))
        self._renderer = CameraRenderer(model, w, h, owner=name) if cams else None

    # -- Device protocol ---------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> Observation:
        mujoco.mj_resetData(self.model, self.data)
        self.rng = np.random.default_rng(seed)
        self.randomize(self.rng)
        mujoco.mj_forward(self.model, self.data)
        return self.observe()

    def randomize(self, rng: np.random.Generator) -> None:
        """Hook for tasks: set the initial state from `rng` (data is reset before, forwarded after)."""

    def act(self, action) -> np.ndarray:
        a = check_action(action, self.embodiment)
        self.data.ctrl[:] = a
        for _ in range(self.substeps):
            mujoco.mj_step(self.model, self.data)
        if not np.all(np.isfinite(self.data.qpos)):
            raise FloatingPointError(f"{self.embodiment.name}: simulation diverged (non-finite qpos) "
                                     f"after action {a.tolist()}")
        return a

    def observe(self, images: bool = True) -> Observation:
        """What the policy reads; ``images=False`` skips rendering ("frames_on_demand")."""
        return Observation(images=self.render() if images else {}, state=self.state(),
                           timestamp=float(self.data.time))

    def state(self) -> np.ndarray:
        if self.state_source == "sensors":
            return self.data.sensordata.astype(np.float32).copy()
        return np.concatenate([self.data.qpos, self.data.qvel]).astype(np.float32)

    def bodies(self) -> dict[str, np.ndarray]:
        """Each body's world position now, by name (an unnamed body is ``body<id>``)."""
        return {mujoco.mj_id2name(self.model, mujoco.mjtObj.mjOBJ_BODY, i) or f"body{i}": self.data.xpos[i].copy()
                for i in range(self.model.nbody)}

    def render(self) -> dict[str, np.ndarray]:
        if self._renderer is None:
            return {}
        return self._renderer.render(self.data, [c.name for c in self.embodiment.cameras])

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()


def load_model(source: str | Path) -> "mujoco.MjModel":
    """Load an MJCF file (or an MJCF string starting with '<'), with a clear error if it fails."""
    s = str(source)
    if s.lstrip().startswith("<"):
        return mujoco.MjModel.from_xml_string(s)
    p = Path(s).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"MJCF file not found: {p}")
    try:
        return mujoco.MjModel.from_xml_path(str(p))
    except ValueError as e:
        raise ValueError(f"could not load MJCF {p}: {e}") from e


def open_mujoco(target: str, hz=None, size="96x96", cameras=None, state="auto", render="1",
                shift=None) -> MujocoDevice:
    """Factory for `mujoco:path/to/scene.xml?hz=20&size=96x96&cameras=top,side&state=joints`."""
    rate = check_query(hz, size, cameras, state, render, shift)["hz"]
    model = load_model(target)
    cams = [c.strip() for c in cameras.split(",")] if isinstance(cameras, str) and cameras else cameras
    return MujocoDevice(model, name=Path(target).stem, hz=rate, cameras=cams,
                        size=size, state_source=state, render=parse_flag(render))
