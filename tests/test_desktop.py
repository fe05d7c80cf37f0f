"""The desktop device drives a real Tk form on Xvfb: every action must land where the 0..1000
point says, on any screen size, and what it cannot do is refused with a clear error."""
import os
import shutil
import subprocess
import time

import numpy as np
import pytest

from embodia.devices import ActionError, DeviceLost, GuiAction, Screen
from embodia.devices.desktop import DesktopDevice, FailSafe, NoDisplay, Settle, open_desktop

pytest_plugins = ("gui_fixtures",)

TK_BG = (232, 232, 232)     # the form's frame colour (#e8e8e8); Xvfb's bare root is black


def pointer(server) -> tuple[int, int]:
    """Where the X pointer is, asked independently of the device (xdotool)."""
    if shutil.which("xdotool") is None:
        pytest.skip("xdotool is not installed (apt-get install xdotool)")
    out = subprocess.run(["xdotool", "getmouselocation", "--shell"], env=server.env, check=True,
                         capture_output=True, text=True).stdout
    loc = dict(line.split("=", 1) for line in out.split())
    return int(loc["X"]), int(loc["Y"])


# the window moves with the screen, so the points must come from its reported geometry
SIZES = [((1280, 800), {"at": (100, 80)}), ((1024, 768), {"at": (480, 460)}),
         ((1600, 900), {"at": (1040, 600)})]


@pytest.mark.parametrize("xvfb, tk_form", SIZES, indirect=True, ids=["1280x800", "1024x768", "1600x900"])
def test_form_flow_lands_on_every_screen_size(xvfb, tk_form):
    form = tk_form
    with DesktopDevice(xvfb.display) as dev:
        obs = dev.observe()
        img, screen = obs.images["screen"], obs.screen
        assert img.shape == (xvfb.height, xvfb.width, 3) and img.dtype == np.uint8
        assert screen == Screen(xvfb.width, xvfb.height, 1.0) == dev.embodiment.screen
        wx, wy, _, _ = form.rect("window")
        assert tuple(img[wy + 4, wx + 4]) == TK_BG and tuple(img[wy - 4, wx - 4]) == (0, 0, 0)

        steps = [GuiAction("click", point=form.point("entry", screen)),
                 GuiAction("type", text="Hello, World!!"),
                 GuiAction("key", keys=("BackSpace",)),           # any case: pyautogui's "backspace"
                 GuiAction("type", text=" héllo 你好 ✓"),          # beyond ASCII: the clipboard
                 GuiAction("click", point=form.point("check", screen)),
                 GuiAction("click", point=form.point("submit", screen))]
        for action in steps:
            dev.act(action)
            assert isinstance(dev.last_settle, Settle) and dev.last_settle.settled
        state = form.wait_state(lambda s: s["submits"] >= 1)
        assert state["entry"] == "Hello, World! héllo 你好 ✓"
        assert state["checked"] is True and state["submits"] == 1
        presses = [e for e in state["events"] if e["type"] == "press"]
        assert [e["widget"] for e in presses] == ["entry", "check", "submit"]
        assert all(form.contains(e["widget"], e["x"], e["y"]) for e in presses)
        kinds = [(e["type"], e.get("widget")) for e in state["events"]]
        assert kinds.index(("focus_in", "entry")) < kinds.index(("key", "entry"))   # the click focused it
        after = dev.observe().images["screen"]
        x0, y0, x1, y1 = form.rect("status")                 # "submitted 1" is drawn
        assert (img[y0:y1, x0:x1] != after[y0:y1, x0:x1]).any()


@pytest.mark.parametrize("tk_form", [{"live": True}], indirect=True)
def test_pointer_actions_reach_the_app(xvfb, tk_form):
    form = tk_form
    with open_desktop(xvfb.display, settle="1") as dev:
        screen = dev.observe().screen
        entry, check = form.point("entry", screen), form.point("check", screen)
        dev.act(GuiAction("right_click", point=entry))
        dev.act(GuiAction("double_click", point=entry))
        dev.act(GuiAction("scroll", point=entry, direction="down"))
        dev.act(GuiAction("scroll", point=entry, direction="up"))
        dev.act(GuiAction("long_press", point=entry, duration_ms=300))
        dev.act(GuiAction("drag", point=entry, end=check, duration_ms=200))
        n = dev.scroll_clicks
        state = form.wait_state(lambda s: sum(e["type"] == "release" for e in s["events"]) >= 5 + 2 * n)
    ev = [e for e in state["events"] if e["type"] in ("press", "release")]
    assert [e["button"] for e in ev if e["type"] == "press"] == [3, 1, 1] + [5] * n + [4] * n + [1, 1]
    assert all(form.contains("entry", e["x"], e["y"]) for e in ev[:-1])
    long_down, long_up = ev[-4], ev[-3]
    assert long_up["t"] - long_down["t"] >= 0.25
    assert form.contains("check", ev[-1]["x"], ev[-1]["y"])        # the drag ended on the checkbox


def test_what_the_desktop_cannot_do_is_refused(xvfb, monkeypatch):
    with DesktopDevice(xvfb.display) as dev:
        for keys in [("ctrl", "bogus"), ("Hyper_Q",), ("command",)]:     # command: macOS only
            with pytest.raises(ActionError, match="key"):
                dev.act(GuiAction("key", keys=keys))
        with pytest.raises(ActionError, match="no desktop equivalent"):
            dev.act(GuiAction("system_button", button="home"))
        with pytest.raises(ActionError, match="cannot 'open_app'"):
            dev.act(GuiAction("open_app", app="xterm"))
        dev.act(GuiAction("key", keys=("Control", "shift", "Escape")))   # aliases resolve
        dev.act(GuiAction("key", keys=("ctrl", "A")))                     # the A key, not shift+a
        dev.act(GuiAction("system_button", button="back"))
        monkeypatch.setenv("PATH", "/nonexistent")       # no xclip, no xsel: the clipboard is ours
        dev.act(GuiAction("type", text="✓"))
        with pytest.raises(ActionError, match="too long to paste"):
            dev.act(GuiAction("type", text="✓" * 100_000))


def test_no_display_says_how_to_get_one(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    with pytest.raises(NoDisplay, match="Xvfb.*DISPLAY"):
        DesktopDevice()
    free = next(n for n in range(400, 500) if not os.path.exists(f"/tmp/.X11-unix/X{n}"))
    with pytest.raises(NoDisplay, match=f":{free}.*Xvfb"):
        open_desktop(f":{free}")
    with pytest.raises(ValueError, match="unknown options"):
        open_desktop(":0", zoom="2")


def test_pixel_ratio_maps_points_to_logical_pixels(xvfb):
    with open_desktop(xvfb.display, pixel_ratio="2", settle="0") as dev:
        assert dev.embodiment.prompt().count("screen=1280x800@2") == 1
        dev.act(GuiAction("click", point=(500, 250)))     # physical (640, 200) -> logical (320, 100)
        assert pointer(xvfb) == (320, 100)
        assert dev.last_settle is None                     # settle=0 disables the wait


def test_screen_size_is_read_at_every_step(xvfb, monkeypatch):
    with DesktopDevice(xvfb.display, settle=0) as dev:
        assert dev.embodiment.screen == Screen(1280, 800)
        monkeypatch.setattr(dev, "_size", lambda: (1024, 768))     # as after an xrandr resize
        obs = dev.observe()
        assert obs.images["screen"].shape == (768, 1024, 3)
        assert obs.screen == dev.embodiment.screen == Screen(1024, 768)
        dev.act(GuiAction("click", point=(750, 750)))
        assert pointer(xvfb) == (768, 576)


def test_two_desktops_take_turns_with_the_one_pyautogui(xvfb, tmp_path):
    from gui_fixtures import start_xvfb  # imported here: pytest already loaded it as a plugin
    other = start_xvfb(1024, 768, workdir=tmp_path)
    try:
        with DesktopDevice(xvfb.display, settle=0) as a, DesktopDevice(other.display, settle=0) as b:
            a.act(GuiAction("click", point=(250, 250)))
            b.act(GuiAction("click", point=(750, 750)))
            a.act(GuiAction("click", point=(500, 500)))
            assert pointer(xvfb) == (640, 400) and pointer(other) == (768, 576)
    finally:
        other.stop()


def test_failsafe_stops_when_someone_takes_the_pointer(xvfb):
    with DesktopDevice(xvfb.display) as dev:
        dev.act(GuiAction("click", point=(0, 0)))          # the agent's own corner click is fine
        assert pointer(xvfb) == (0, 0)
        dev.act(GuiAction("click", point=(500, 500)))
        subprocess.run(["xdotool", "mousemove", "0", str(xvfb.height - 1)], env=xvfb.env, check=True)
        with pytest.raises(FailSafe, match="corner"):
            dev.act(GuiAction("click", point=(500, 500)))
        assert issubclass(FailSafe, DeviceLost)             # the loop ends the episode cleanly


def test_lost_x_server_raises_device_lost(xvfb):
    with DesktopDevice(xvfb.display) as dev:
        dev.observe()
        xvfb.stop()
        time.sleep(0.1)
        with pytest.raises(DeviceLost, match=xvfb.display):
            dev.observe()
        with pytest.raises(DeviceLost):
            dev.act(GuiAction("click", point=(500, 500)))
