"""What a step costs on ``browser:``: the screenshot, the tree read, and a click with its settle wait.

Headless Chromium (Debian's) at 1280x800, pages from files: the tests' form page (a form, a list,
a dialog: about 20 elements) and a long page (a 300-row table of links and checkboxes, of which
the viewport shows a part). Per page, ``--reads`` times each: the screenshot alone
(``Page.captureScreenshot`` as PNG + decode), the tree read alone (``Accessibility.getFullAXTree``
+ ``DOMSnapshot.captureSnapshot``, joined into elements), and a click on a static text with the
wait for the page to settle (network idle, no DOM change for ``quiet_ms``). One JSON line.

    python benchmarks/browser_step_cost.py --reads 100
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from gui_step_overhead import pct  # noqa: E402
from test_browser import FORM  # noqa: E402

from embodia.devices import GuiAction  # noqa: E402
from embodia.devices.browser import BrowserDevice  # noqa: E402


def long_page(rows: int = 300) -> str:
    body = "".join(f"<tr><td><input type=checkbox id=c{i}></td><td><a href='#r{i}'>Item {i}</a></td>"
                   f"<td>row {i} of the table, with some text</td></tr>" for i in range(rows))
    return f"<!doctype html><html><head><title>Long</title></head><body><table>{body}</table></body></html>"


def timed(fn, n: int) -> tuple[list[float], object]:
    out, last = [], None
    for _ in range(n):
        t = time.perf_counter()
        last = fn()
        out.append((time.perf_counter() - t) * 1e3)
    return out, last


def measure(path: Path, reads: int) -> dict:
    with BrowserDevice(path.as_uri(), size=(1280, 800)) as dev:
        obs = dev.observe()
        label = next(e for e in obs.ui_tree if e["role"] in ("label", "heading", "table cell") and not e["clickable"])
        shot_ms, _ = timed(dev._grab, reads)
        tree_ms, tree = timed(dev._ui_tree, reads)
        click = GuiAction("click", element=label["index"])
        step_ms, _ = timed(lambda: dev.act(click), max(10, reads // 5))
        return {"elements": len(tree), "screenshot_ms": pct(shot_ms), "tree_ms": pct(tree_ms),
                "click_and_settle_ms": pct(step_ms), "quiet_ms": dev.quiet_s * 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reads", type=int, default=100)
    args = ap.parse_args()
    out = {"benchmark": "browser_step_cost", "date": datetime.date.today().isoformat(),
           "machine": f"{platform.machine()}, {os.cpu_count()} cpus", "viewport": "1280x800",
           "load_avg_start": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory() as tmp:
        pages = {"form": FORM, "long_table": long_page()}
        for name, html in pages.items():
            path = Path(tmp) / f"{name}.html"
            path.write_text(html, encoding="utf-8")
            out[name] = measure(path, args.reads)
    out["load_avg_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
