"""Per-step runtime overhead of GUI episodes: capture, encode, dispatch, record (no model).

Desktop: a real Tk window on Xvfb at 1280x800, driven through `embodia`'s loop by a replay policy
that clicks the window's background (the screen does not change, so the settle wait is its floor),
recorded with GuiRecorder (PNG screenshots at native size, JSON-lines steps). Android: the same
through the fake adb server of the tests (a 1080x2400 phone; its own PIL rendering and loopback
round trips are part of the figure, a real phone's screencap and uiautomator are not).

Per step it reports p50/p95 of: capture (`observe`: screenshot [+ UI tree]), dispatch (`act`
without the settle wait), settle (waiting for the screen to stop changing, instead of a fixed
sleep), record (PNG encode + step line), and the loop's whole step; `overhead_ms` = step minus the
settle wait, i.e. what the runtime itself costs. One JSON line on stdout.

Real application (``real_app``): galculator from Debian (the desktop bench's calculator) on its own
Xvfb with an accessibility bus; each step observes (screenshot + the AT-SPI tree, `tree_ms` its
read alone), clicks a digit button named by its tree element, settles and records. Beside it, in
the same run, the anchors' way on the same window: ``pyautogui.screenshot()``, the click, then a
fixed 1 s sleep (``--anchor-steps`` of them).

Tree reads per application (``tree_read_per_app``): the AT-SPI read alone on each bench
application's main window (galculator, mousepad, gnumeric), ``--tree-reads`` times each over the
application's own AT-SPI socket (the default), alternating with as many through the bus daemon
(``via_bus_ms``).

    python benchmarks/gui_step_overhead.py --steps 200
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]      # the tests' Xvfb, Tk form and fake adb server

from embodia.agent.loop.episode import run_episode  # noqa: E402
from embodia.agent.recording.gui_log import GuiRecorder  # noqa: E402
from embodia.devices import GuiAction  # noqa: E402
from embodia.policies import GuiReplayPolicy  # noqa: E402


def pct(xs) -> dict:
    a = np.asarray(xs, float)
    return {"p50": round(float(np.percentile(a, 50)), 2), "p95": round(float(np.percentile(a, 95)), 2),
            "mean": round(float(a.mean()), 2), "n": int(a.size)}


class Timed:
    """Wraps a device and a recorder episode, timing each call per step."""

    def __init__(self, device, last_settle=None):
        """``last_settle()``: the device's wait for the screen to stop changing after its latest
        action (a desktop's ``last_settle``); without one the settle is counted as 0."""
        self.device, self.last_settle = device, last_settle or (lambda: None)
        self.t = {"capture": [], "dispatch": [], "settle": [], "record": []}

    def wrap(self):
        dev, t = self.device, self.t
        act, observe = dev.act, dev.observe

        def timed_act(a):
            t0 = time.perf_counter()
            out = act(a)
            dt = time.perf_counter() - t0
            s = self.last_settle()
            wait = s.seconds if s is not None else 0.0
            t["settle"].append(wait * 1e3)
            t["dispatch"].append((dt - wait) * 1e3)
            return out

        def timed_observe():
            t0 = time.perf_counter()
            out = observe()
            t["capture"].append((time.perf_counter() - t0) * 1e3)
            return out
        dev.act, dev.observe = timed_act, timed_observe
        return dev


def run(device, actions, out_dir: Path, last_settle=None) -> dict:
    timed = Timed(device, last_settle)
    dev = timed.wrap()
    rec = GuiRecorder(out_dir, dev.embodiment)
    begin = rec.begin_episode

    def begin_timed(*a, **k):
        ep = begin(*a, **k)
        step = ep.step          # the `Recorder` call the loop makes

        def step_timed(*aa, **kk):
            t0 = time.perf_counter()
            r = step(*aa, **kk)
            timed.t["record"].append((time.perf_counter() - t0) * 1e3)
            return r
        ep.step = step_timed
        return ep
    rec.begin_episode = begin_timed
    res = run_episode(dev, GuiReplayPolicy(actions), recorder=rec, max_steps=len(actions) + 1)
    if res.error:
        raise RuntimeError(res.error)
    t = timed.t
    step = [c + d + s + r for c, d, s, r in zip(t["capture"][1:], t["dispatch"], t["settle"], t["record"])]
    overhead = [x - s for x, s in zip(step, t["settle"])]
    return {"steps": res.steps, "step_ms": pct(step), "overhead_ms": pct(overhead),
            **{f"{k}_ms": pct(v) for k, v in t.items()},
            "loop_step_ms": {k: round(v, 2) for k, v in res.timing["step_ms"].items()}}


def desktop(steps: int, work: Path) -> dict:
    from gui_fixtures import start_tk_form, start_xvfb

    from embodia.devices.base import environ
    from embodia.devices.desktop import DesktopDevice
    server = start_xvfb(1280, 800, workdir=work / "x")
    with environ(DISPLAY=server.display, XAUTHORITY=server.env["XAUTHORITY"]):
        form = start_tk_form(server, work / "form")
        try:
            x0, y0, x1, y1 = form.rect("window")
            pts = [((x0 + 8 + 0.5) * 1000 / 1280, (y1 - 8 + 0.5) * 1000 / 800),     # the frame's background
                   ((x1 - 8 + 0.5) * 1000 / 1280, (y1 - 8 + 0.5) * 1000 / 800)]
            actions = [GuiAction("click", point=pts[i % 2]) for i in range(steps)]
            with DesktopDevice(server.display) as dev:
                out = run(dev, actions, work / "rec-desktop", lambda: dev.last_settle)
                out["settle_interval_ms"] = dev.settle_interval * 1e3
            return {"screen": "1280x800", **out}
        finally:
            form.stop()
            server.stop()


def real_app(steps: int, anchor_steps: int, work: Path) -> dict:
    from gui_fixtures import start_xvfb

    from embodia.devices.atspi import start_bus
    from embodia.devices.base import environ
    from embodia.sim.desktop_bench import open_desktop_bench
    server = start_xvfb(1280, 800, workdir=work / "xa")
    with environ(DISPLAY=server.display, XAUTHORITY=server.env["XAUTHORITY"]):
        bus = start_bus(server.display)
        try:
            with open_desktop_bench("galculator/add") as dev:
                obs = dev.reset(seed=0)
                digits = {e["text"]: e["index"] for e in obs.ui_tree if e["text"] in "123456789" and e["text"]}
                actions = [GuiAction("click", element=digits[str(1 + i % 9)]) for i in range(steps)]
                tree_ms, read = [], dev._ui_tree

                def timed_tree():
                    out = read()
                    tree_ms.append(dev.tree.last_ms)
                    return out
                dev._ui_tree = timed_tree
                out = run(dev, actions, work / "rec-real", lambda: dev.last_settle)
                out["tree_ms"] = pct(tree_ms)
                out["tree_elements"] = len(dev.last_obs.ui_tree or [])
                out["anchor_way"] = anchor_way(dev, digits, anchor_steps)
            return {"app": "galculator 2.1.4 (Debian 12)", "screen": "1280x800", **out}
        finally:
            bus.stop()
            server.stop()


TREE_APPS = {"galculator": "galculator/add", "mousepad": "mousepad/save-as", "gnumeric": "gnumeric/sum"}


def tree_reads(reads: int, work: Path) -> dict:
    """The AT-SPI tree read alone, per bench application (its main window after start): p50/p95
    over ``reads`` reads, nodes visited, elements kept, and whether the application's own socket
    (peer to peer) carried the calls."""
    from gui_fixtures import start_xvfb

    from embodia.devices.atspi import start_bus
    from embodia.devices.base import environ
    from embodia.sim.desktop_bench import open_desktop_bench
    server = start_xvfb(1280, 800, workdir=work / "xt")
    out = {}
    with environ(DISPLAY=server.display, XAUTHORITY=server.env["XAUTHORITY"]):
        bus = start_bus(server.display)
        try:
            for app, target in TREE_APPS.items():
                with open_desktop_bench(target) as dev:
                    dev.reset(seed=0)
                    tree = dev.tree
                    tree.apps = dev.tree_apps
                    ms, bus_ms, n = [], [], 0
                    tree.read(dev._screen())
                    peers = tree._peers
                    for i in range(2 * reads):        # alternate, so both ways see the same load
                        via_bus = i % 2 == 1
                        tree.direct, tree._peers = (False, {}) if via_bus else (True, peers)
                        n = len(tree.read(dev._screen()))
                        (bus_ms if via_bus else ms).append(tree.last_ms)
                    tree.direct, tree._peers = True, peers
                    out[app] = {**pct(ms), "nodes": tree.nodes_visited, "elements": n,
                                "direct_socket": any(v is not None for v in peers.values()),
                                "via_bus_ms": pct(bus_ms)}
        finally:
            bus.stop()
            server.stop()
    return out


def anchor_way(dev, digits: dict, steps: int) -> dict:
    """pyautogui.screenshot() + click + fixed 1 s sleep per step, on the same window."""
    import pyautogui
    tree = dev.last_obs.ui_tree
    centres = []
    for label in "12":
        x0, y0, x1, y1 = next(e for e in tree if e["index"] == digits[label])["bounds"]
        centres.append(((x0 + x1) // 2, (y0 + y1) // 2))
    try:
        pyautogui.screenshot()             # X11: pyscreeze runs scrot (or gnome-screenshot) and reads the PNG
        shot, how = pyautogui.screenshot, "pyautogui.screenshot (scrot)"
    except Exception:                      # noqa: BLE001 - neither installed: Pillow's own X grab
        from PIL import ImageGrab
        shot, how = (lambda: ImageGrab.grab(xdisplay=dev.display)), "PIL.ImageGrab (no scrot here)"
    step, grab = [], []
    for i in range(steps):
        t0 = time.perf_counter()
        shot()
        grab.append((time.perf_counter() - t0) * 1e3)
        pyautogui.click(*centres[i % 2])
        time.sleep(1.0)
        step.append((time.perf_counter() - t0) * 1e3)
    return {"step_ms": pct(step), "screenshot_ms": pct(grab), "screenshot": how, "sleep_s": 1.0}


def android(steps: int, work: Path) -> dict:
    import adbutils._adb
    from fakeadb import FakeAdbServer, FakePhone

    from embodia.devices.android import open_android

    def no_daemon(*a, **k):
        raise RuntimeError("adbutils tried to start its bundled adb daemon")
    adbutils._adb.adb_path = no_daemon
    server = FakeAdbServer([FakePhone()]).start()
    try:
        actions = [GuiAction("click", point=(300 + 400 * (i % 2), 500)) for i in range(steps)]
        with open_android("emulator-5554", host="127.0.0.1", port=server.port) as dev:
            out = run(dev, actions, work / "rec-android")
            return {"screen": "1080x2400", "capture_path": dev.capture, **out}
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200, help="desktop steps (android: half)")
    ap.add_argument("--skip", choices=["desktop", "android", "real_app", "tree_reads"], default=None,
                    action="append")
    ap.add_argument("--tree-reads", type=int, default=100, help="tree reads per bench application")
    ap.add_argument("--real-steps", type=int, default=100, help="steps on the real application")
    ap.add_argument("--anchor-steps", type=int, default=20, help="steps of the anchors' way (1 s each)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        rep = {"benchmark": "gui_step_overhead", "date": time.strftime("%Y-%m-%d"),
               "machine": f"{platform.machine()}, {os.cpu_count()} cpus", "image_format": "png"}
        skip = args.skip or []
        if "desktop" not in skip:
            rep["desktop"] = desktop(args.steps, work)
        if "real_app" not in skip:
            rep["real_app"] = real_app(args.real_steps, args.anchor_steps, work)
        if "tree_reads" not in skip:
            rep["tree_read_per_app"] = tree_reads(args.tree_reads, work)
        if "android" not in skip:
            rep["android_fake_adb"] = android(max(10, args.steps // 2), work)
    # the fixed per-step sleeps in those projects' agent loops, in ms
    rep["anchor_fixed_sleep_ms"] = {"MobileAgent-v3": 2000, "OSWorld": 2000, "UI-TARS-desktop": 1000,
                                    "Mobile-Agent-E": 3000}
    if "real_app" in rep:
        r = rep["real_app"]
        rep["real_app_tree_p50_under_50ms"] = r["tree_ms"]["p50"] <= 50.0
        rep["real_app_step_vs_anchor_way"] = round(r["step_ms"]["p50"] / r["anchor_way"]["step_ms"]["p50"], 4)
    if "tree_read_per_app" in rep:
        rep["tree_read_p50_under_50ms_per_app"] = {a: r["p50"] <= 50.0 for a, r in rep["tree_read_per_app"].items()}
    if "desktop" in rep:
        rep["desktop_step_vs_1s_sleep"] = round(rep["desktop"]["step_ms"]["p50"] / 1000.0, 4)
        rep["desktop_overhead_p50_under_30ms"] = rep["desktop"]["overhead_ms"]["p50"] < 30.0
    print(json.dumps(rep))


if __name__ == "__main__":
    main()
