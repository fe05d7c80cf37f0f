"""`desktop-bench:<app>/<task>`: tasks on real Debian desktop applications, read through AT-SPI.

The bench drives applications nobody here wrote (galculator, mousepad, gnumeric) on the current X
display (``$DISPLAY`` or ``display=``), one at a time: ``reset(seed)`` ends the previous instance,
prepares a fresh working folder (its own $HOME, so no saved preferences leak between episodes),
writes the task's files, starts the application and waits until its window is in the accessibility
tree. Observations are those of `embodia.devices.desktop.DesktopDevice`, with the tree narrowed to
the bench application. Where the display has no accessibility bus, the bench starts one
(`embodia.devices.atspi.start_bus`) and stops it on ``close()``.

>>> dev = open_desktop_bench("galculator/add", split="test")          # doctest: +SKIP
>>> obs = dev.reset(seed=3); dev.instruction                          # doctest: +SKIP
'Compute 734 + 86 with the calculator.'
>>> from embodia.agent.loop.episode import run_episode              # doctest: +SKIP
>>> run_episode(dev, dev.expert(), seed=3).success                  # doctest: +SKIP
True

Every task has held-out variations (``split="test"``: other value ranges, words and file names than
``train``), an outcome checked outside the agent's view (the calculator's display read from its
tree, a file's content on disk, a sheet's cells read back with gnumeric's own ``ssconvert``) and a
scripted expert that finds every target in the tree (element references, never fixed points).
The ``close-discard`` tasks end with a click on "Don't Save" / "Discard": the default safety gate
refuses it on a real desktop; pass ``SafetyGate(allow=GATE_ALLOW)`` to run them unattended.
The tasks themselves (checks and experts, per app) are in `embodia.sim.desktop_tasks`.
"""
from __future__ import annotations

import dataclasses
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from embodia.devices.desktop import DesktopDevice
from embodia.policies.base import Policy
from embodia.sim.desktop_tasks import APPS, TASKS, AppMissing, calc_display, editor, find, name_box

__all__ = ["DesktopBenchDevice", "BenchExpert", "open_desktop_bench", "list_targets", "TASKS", "APPS",
           "GATE_ALLOW", "AppMissing"]

GATE_ALLOW = ("delete",)          # the close-discard tasks click "Discard" / "Don't Save"
SPLITS = ("train", "test")
DEFAULT_MAX_STEPS = 16


# -- the device ----------------------------------------------------------------------------------------
def app_installed(app: str) -> bool:
    return shutil.which(APPS[app].binary) is not None and (app != "gnumeric" or shutil.which("ssconvert"))


def _remove(path: Path) -> None:
    """Best-effort removal: an app's leftover sockets can make even rmtree(ignore_errors) raise
    (seen: ECONNABORTED from fstat under a sandboxed /tmp)."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except OSError:
        pass


class DesktopBenchDevice(DesktopDevice):
    """One bench task on the current display; see the module doc."""

    def __init__(self, target: str, *, display: str = "", split: str = "train",
                 max_steps: int = DEFAULT_MAX_STEPS, settle: float = 1.5, start_timeout: float = 30.0,
                 repeat: int = 0, **desktop):
        if target not in TASKS:
            raise ValueError(f"unknown desktop-bench task {target!r}; known: {', '.join(TASKS)}")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        self.task = TASKS[target]
        if not app_installed(self.task.app):
            raise AppMissing(f"{self.task.app} is not installed (apt-get install {APPS[self.task.app].package})")
        display = display or os.environ.get("DISPLAY", "")
        from embodia.devices.atspi import find_bus, start_bus
        self.bus = None
        if display and not find_bus(display):
            self.bus = start_bus(display)            # ours: stopped on close()
        super().__init__(display, settle=settle, **desktop)
        self.capabilities = self.capabilities | {"success", "expert"}
        self.target, self.split, self.max_steps = target, split, int(max_steps)
        self.start_timeout = float(start_timeout)
        self.repeat = int(repeat)      # > 0: seed s gets the variation of seed s % repeat (repeated tasks)
        self.root = Path(tempfile.mkdtemp(prefix="embodia-bench-"))
        self.work = self.root / "episode-0"
        self._episodes = 0
        self.proc: subprocess.Popen | None = None
        self.slots: dict = {}
        self.memory: dict = {}         # what the episode's checks need (start mtime, keys pressed)
        self.instruction = ""
        self.seed = None
        self.embodiment = dataclasses.replace(self.embodiment, name=f"desktop-bench:{target}")

    # -- episode -----------------------------------------------------------------------------------
    def reset(self, seed: int | None = None):
        self.seed = random.SystemRandom().randrange(2**31) if seed is None else int(seed)
        variation = self.seed % self.repeat if self.repeat > 0 else self.seed
        rng = random.Random(f"{self.target}/{self.split}/{variation}")
        self.slots = self.task.make(rng, self.split)
        self.instruction = self.slots["instruction"]
        self.memory = {}
        self._stop_app()
        old, self.work = self.work, self.root / f"episode-{self._episodes}"
        self._episodes += 1                 # a fresh folder: an exiting app may still write in the old one
        _remove(old)
        # ~/.cache: where an app with no $XDG_RUNTIME_DIR puts its own AT-SPI socket (read faster)
        (self.work / "home" / ".cache").mkdir(parents=True)
        self.task.files(self.work, self.slots)
        if "file" in self.slots and (self.work / self.slots["file"]).exists():
            self.memory["start_mtime"] = (self.work / self.slots["file"]).stat().st_mtime
        self._start_app()
        return super().reset(self.seed)

    def _app_env(self) -> dict:
        env = {**os.environ, "DISPLAY": self.display, "HOME": str(self.work / "home"),
               "XDG_CONFIG_HOME": str(self.work / "home" / ".config"), "NO_AT_BRIDGE": "0",
               "GTK_A11Y": "atspi", "QT_LINUX_ACCESSIBILITY_ALWAYS_ON": "1", "LC_ALL": "C.UTF-8"}
        if self.bus is not None:
            env["DBUS_SESSION_BUS_ADDRESS"] = self.bus.session
        env.pop("NO_AT_BRIDGE")
        return env

    def _start_app(self) -> None:
        app = APPS[self.task.app]
        log = open(self.root / f"{app.name}.log", "ab")
        self.proc = subprocess.Popen([app.binary, *app.args(self.work, self.slots)], cwd=self.work,
                                     env=self._app_env(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     start_new_session=True)
        log.close()
        tree = self._atspi()
        if tree is None:
            raise RuntimeError(f"desktop-bench needs the accessibility tree on {self.display}")
        deadline = time.monotonic() + self.start_timeout
        self.tree_apps = tree.apps = None          # look at every application for the new one
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{app.name} exited at start (code {self.proc.returncode}); see "
                                   f"{self.root / (app.name + '.log')}")
            bus = next((a[0] for a in tree.applications() if tree.app_pid(a[0]) == self.proc.pid), None)
            if bus is not None:
                self.tree_apps = {bus}
                if self.app_windows() and self._ready():
                    return
            time.sleep(0.1)
        raise RuntimeError(f"{app.name} did not show its window in the accessibility tree within "
                           f"{self.start_timeout}s")

    def _ready(self) -> bool:
        """The window is drawn and its main widgets are in the tree."""
        tree = self.observe_tree()
        if self.task.app == "galculator":
            return find(tree, text="=") is not None and calc_display(tree) is not None
        if self.task.app == "mousepad":
            return editor(tree) is not None
        return name_box(tree) is not None

    def app_windows(self) -> list[dict]:
        """Top-level windows of the bench application (frames and dialogs) in the tree."""
        if self.tree is None or not self.tree_apps:
            return []
        try:
            return [e for e in self.observe_tree() if e["role"] in ("frame", "dialog", "alert", "file chooser")]
        except (OSError, ValueError):
            return []

    def observe_tree(self) -> list:
        """A fresh read of the bench application's tree (no screenshot)."""
        tree = self._atspi()
        if tree is None:
            return []
        tree.apps = self.tree_apps
        return tree.read(self._screen())

    def success(self) -> bool:
        try:
            return bool(self.task.check(self))
        except (OSError, ValueError, subprocess.SubprocessError):
            return False

    def expert(self) -> "BenchExpert":
        return BenchExpert(self)

    def info(self) -> dict:
        return {**super().info(), "task": self.target, "split": self.split, "seed": self.seed,
                "slots": {k: v for k, v in self.slots.items() if k != "instruction"},
                "multi_step": self.task.multi_step, "tree_ms": round(self.tree.last_ms, 1) if self.tree else None}

    def _stop_app(self) -> None:
        """End the application and anything it started in its session (our process group)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)       # started with start_new_session
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
            except ProcessLookupError:
                pass
        else:                                 # the app exited by itself: end what it left behind
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        self.proc = None

    def close(self) -> None:
        self._stop_app()
        super().close()
        if self.bus is not None:
            self.bus.stop()
            self.bus = None
        _remove(self.root)


class BenchExpert(Policy):
    """The scripted expert: reads the observation's tree, returns the next action (None: done)."""

    def __init__(self, device: DesktopBenchDevice):
        self.device = device
        self.mem: dict = {}

    def reset(self, seed: int | None = None) -> None:
        self.mem = {}

    def act(self, obs, instruction: str = ""):
        return self.device.task.expert(self.device, self.mem, obs.ui_tree or [])


def open_desktop_bench(target: str = "", **query) -> DesktopBenchDevice:
    """Factory for ``desktop-bench:<app>/<task>?split=train|test&max_steps=N&display=:N&settle=S&repeat=K``
    (``repeat=K``: seed s shows the variation of seed s % K, so a stream of episodes repeats K tasks)."""
    kinds = {"split": str, "max_steps": int, "display": str, "settle": float, "tree_limit": int,
             "element_clicks": str, "repeat": int}
    unknown = set(query) - set(kinds)
    if unknown:
        raise ValueError(f"desktop-bench: unknown options {sorted(unknown)}; known: {sorted(kinds)}")
    return DesktopBenchDevice(target, **{k: kinds[k](v) for k, v in query.items()})


def list_targets() -> list[str]:
    return [f"desktop-bench:{t}" + ("" if app_installed(TASKS[t].app) else
                                    f" (needs apt-get install {APPS[TASKS[t].app].package})") for t in TASKS]
