"""Fixtures for GUI-device tests on a virtual X screen: an Xvfb server and a real Tk form on it.

Use them from a test module with ``pytest_plugins = ("gui_fixtures",)``::

    @pytest.mark.parametrize("xvfb", [(1024, 768)], indirect=True)   # default 1280x800
    def test_submit(xvfb, tk_form):                                   # tk_form: see its fixture
        dev = DesktopDevice(xvfb.display)
        dev.act(GuiAction("click", point=tk_form.point("submit", dev.observe().screen)))
        assert tk_form.wait_state(lambda s: s["submits"] == 1)["submits"] == 1

or call `start_xvfb` / `start_tk_form` directly for other scopes (benchmarks, one server per
session). Tests skip, with the reason, only when the Xvfb binary is missing.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from embodia.devices.coords import element_point
from embodia.devices.xvfb import XServer, start_xvfb  # noqa: F401  (the runtime's, under the tests' names)
from embodia.devices.xvfb import stop_process as _stop

DEFAULT_SIZE = (1280, 800)
TK_FORM = Path(__file__).with_name("tk_form.py")


def _size_param(param) -> tuple[int, int]:
    if isinstance(param, str):
        w, _, h = param.lower().partition("x")
        return int(w), int(h)
    return int(param[0]), int(param[1])


@pytest.fixture
def xvfb(request, monkeypatch, tmp_path_factory):
    """A fresh Xvfb for this test, $DISPLAY and $XAUTHORITY pointing at it; yields an `XServer`.

    Parametrize the size indirectly: ``@pytest.mark.parametrize("xvfb", [(1024, 768)], indirect=True)``
    (or ``"1024x768"``); the default is 1280x800.
    """
    width, height = _size_param(getattr(request, "param", DEFAULT_SIZE))
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    server = start_xvfb(width, height, workdir=tmp_path_factory.mktemp("xvfb"))
    monkeypatch.setenv("DISPLAY", server.display)
    monkeypatch.setenv("XAUTHORITY", server.xauthority)
    try:
        yield server
    finally:
        server.stop()


# -- the Tk form -----------------------------------------------------------------------------------
@dataclass
class TkForm:
    """The form of ``tests/tk_form.py`` running on an `XServer`; see that file for what it records."""

    geometry: dict            # {"screen": [w, h], "window": rect, "widgets": {name: rect}}
    state_path: Path
    proc: subprocess.Popen = field(repr=False)
    log: Path = field(repr=False)

    def rect(self, widget: str) -> tuple[int, int, int, int]:
        """Screen bounds ``(x0, y0, x1, y1)`` of a widget (right/bottom exclusive)."""
        r = self.geometry["widgets"][widget] if widget != "window" else self.geometry["window"]
        return r["x"], r["y"], r["x"] + r["width"], r["y"] + r["height"]

    def point(self, widget: str, screen) -> tuple[float, float]:
        """0..1000 point at the widget's centre on ``screen`` (a `Screen` or (width, height))."""
        return element_point(self.rect(widget), screen)

    def contains(self, widget: str, x: float, y: float) -> bool:
        x0, y0, x1, y1 = self.rect(widget)
        return x0 <= x < x1 and y0 <= y < y1

    def state(self) -> dict | None:
        """The last state the app wrote (on Submit, or after every event with ``live=True``)."""
        try:
            return json.loads(self.state_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    def wait_state(self, until=lambda s: True, timeout: float = 5.0) -> dict:
        """Poll the state file until ``until(state)`` holds; fail with the last state otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            s = self.state()
            if s is not None and until(s):
                return s
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"tk_form state never matched within {timeout}s; last state: {s}; "
                                     f"app log: {self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.02)

    def stop(self) -> None:
        _stop(self.proc)


def start_tk_form(server: XServer, workdir: Path, *, at: tuple[int, int] = (100, 80),
                  size: tuple[int, int] = (520, 260), live: bool = False, timeout: float = 15.0) -> TkForm:
    """Run ``tests/tk_form.py`` as a subprocess on ``server`` and wait for its geometry report."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    state, geometry, log = workdir / "form_state.json", workdir / "form_geometry.json", workdir / "form.log"
    for p in (state, geometry):
        p.unlink(missing_ok=True)
    cmd = [sys.executable, str(TK_FORM), "--state", str(state), "--geometry", str(geometry),
           "--at", f"{at[0]},{at[1]}", "--size", f"{size[0]}x{size[1]}", *(["--live"] if live else [])]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=server.env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    while not geometry.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            raise RuntimeError(f"tk_form did not start on {server.display}: "
                               f"{log.read_text(errors='replace')}")
        time.sleep(0.02)
    return TkForm(json.loads(geometry.read_text(encoding="utf-8")), state, proc, log)


@pytest.fixture
def tk_form(request, xvfb, tmp_path):
    """The Tk form on the test's Xvfb (window 520x260 at +100+80); yields a `TkForm`.

    Options of `start_tk_form` go through indirect parametrization:
    ``@pytest.mark.parametrize("tk_form", [{"at": (480, 460), "live": True}], indirect=True)``.
    """
    form = start_tk_form(xvfb, tmp_path / "tk_form", **getattr(request, "param", {}))
    try:
        yield form
    finally:
        form.stop()
