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

    def __init__(self, device):
        self.device = device
        self.t = {"capture": [], "dispatch": [], "settle": [], "record": []}

    def wrap(self):
        dev, t = self.device, self.t
        act, observe = dev.act, dev.observe

        def timed_act(a):
            t0 = time.perf_counter()
            out = act(a)
            dt = time.perf_counter() - t0
            s = getattr(dev, "last_settle", None)
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


def run(device, actions, out_dir: Path) -> dict:
    timed = Timed(device)
    dev = timed.wrap()
    rec = GuiRecorder(out_dir, dev.embodiment)
    begin = rec.begin_episode

    def begin_timed(*a, **k):
        ep = begin(*a, **k)
        add = ep.add_step

        def add_timed(*aa, **kk):
            t0 = time.perf_counter()
            r = add(*aa, **kk)
            timed.t["record"].append((time.perf_counter() - t0) * 1e3)
            return r
        ep.add_step = add_timed
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
                out = run(dev, actions, work / "rec-desktop")
                out["settle_interval_ms"] = dev.settle_interval * 1e3
            return {"screen": "1280x800", **out}
        finally:
            form.stop()
            server.stop()


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
            return {"screen": "1080x2400", "capture_path": getattr(dev, "capture", None), **out}
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200, help="desktop steps (android: half)")
    ap.add_argument("--skip", choices=["desktop", "android"], default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        rep = {"benchmark": "gui_step_overhead", "date": time.strftime("%Y-%m-%d"),
               "machine": f"{platform.machine()}, {os.cpu_count()} cpus", "image_format": "png"}
        if args.skip != "desktop":
            rep["desktop"] = desktop(args.steps, work)
        if args.skip != "android":
            rep["android_fake_adb"] = android(max(10, args.steps // 2), work)
    # the fixed per-step sleeps in those projects' agent loops, in ms
    rep["anchor_fixed_sleep_ms"] = {"MobileAgent-v3": 2000, "OSWorld": 2000, "UI-TARS-desktop": 1000,
                                    "Mobile-Agent-E": 3000}
    if "desktop" in rep:
        rep["desktop_step_vs_1s_sleep"] = round(rep["desktop"]["step_ms"]["p50"] / 1000.0, 4)
        rep["desktop_overhead_p50_under_30ms"] = rep["desktop"]["overhead_ms"]["p50"] < 30.0
    print(json.dumps(rep))


if __name__ == "__main__":
    main()
