"""How long `embodia view` takes on a recorded dataset, and what the page loads when it opens.

Records ``--episodes`` expert episodes of sim:twogap-push (or takes ``--dataset``), builds the
report, then opens it in headless Chromium twice: as a person opens it (the first episode open)
and with ``#open=all``; counts the videos and episode scripts in each rendered DOM. One JSON line.

    python benchmarks/view_speed.py --episodes 200
"""
import argparse
import json
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from embodia.agent.viewing import build_view


def open_page(index: Path, fragment: str = "") -> dict:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    t0 = time.perf_counter()
    out = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=3000",
                          "--dump-dom", index.resolve().as_uri() + fragment], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    return {"s": round(time.perf_counter() - t0, 2), "videos": out.count("<video"),
            "episode_scripts": len(re.findall(r'id="script-ep-\d+"', out))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--dataset", type=Path, default=None, help="an existing dataset (skips recording)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="view-speed-"))
    try:
        ds = args.dataset
        record_s = None
        if ds is None:
            ds = tmp / "ds"
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "embodia", "record", "--device", "sim:twogap-push", "--policy",
                            "expert", "--episodes", str(args.episodes), "-o", str(ds)], check=True,
                           capture_output=True)
            record_s = round(time.perf_counter() - t0, 1)
        t0 = time.perf_counter()
        index = build_view(ds, tmp / "view")
        view_s = round(time.perf_counter() - t0, 2)
        files = [p for p in (tmp / "view").rglob("*") if p.is_file()]
        row = {"benchmark": "view_speed", "dataset": str(args.dataset or "sim:twogap-push expert"),
               "episodes": len(list((tmp / "view" / "episodes").iterdir())), "record_s": record_s,
               "view_s": view_s, "index_html_kb": round(index.stat().st_size / 1024, 1), "files": len(files),
               "open": open_page(index) if shutil.which("chromium") else None,
               "open_all": open_page(index, "#open=all") if shutil.which("chromium") else None,
               "machine": f"{platform.machine()} {platform.python_version()}", "date": str(date.today())}
        print(json.dumps(row))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
