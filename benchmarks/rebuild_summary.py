"""The `rebuild` phase of `benchmarks/gpu_checks.sh` in one JSON line: the build's sessions rows
(record_s, train_s, wall_s as `embodia train mt50` writes them), the trainer's
parts timed from its time-stamped log (loading the demos, end-to-end steps, caching the backbone's
context, head-only steps), and from those the time a whole rebuild of embodia-mt50 would take
(marked as a projection wherever a part did not run to the end).

    python benchmarks/rebuild_summary.py --train-log gpu-out/rebuild_train.log --data /tmp/mt50 \
        --sessions /tmp/ckpt/embodia-mt50.sessions.jsonl --card "NVIDIA H100 80GB HBM3"
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

LOADED = re.compile(r": \S+, \d+ episodes, (\d+) frames$")
SAVED = re.compile(r"step (\d+): loss")
CACHED = re.compile(r"cached backbone context for ")
FREEZE_AFTER, STEPS = 1000, 5000          # the bundled embodia-mt50's schedule (mt50.py's defaults, --steps 5000)


def stamped(path: Path) -> list[tuple[float, str]]:
    """(seconds, text) of each line the phase's `stamp` wrote (``<epoch seconds> <text>``)."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        t, _, text = line.partition(" ")
        try:
            out.append((float(t), text.strip()))
        except ValueError:
            continue
    return out


def rate(points: list[tuple[float, int]]) -> float | None:
    """Seconds per unit between the first and last (time, count) point; None with fewer than two."""
    if len(points) < 2 or points[-1][1] == points[0][1]:
        return None
    return (points[-1][0] - points[0][0]) / (points[-1][1] - points[0][1])


def train_parts(lines: list[tuple[float, str]]) -> dict:
    """The trainer's parts from its log: loading (from the log's first line, the command's start, to
    the last dataset's line: the datasets load in threads, so their lines come together at the end),
    the step times before and after the freeze (from save to save), and the context cache."""
    start = lines[0][0] if lines else None
    loads, saves, cached = [], [], []
    for t, text in lines:
        if m := LOADED.search(text):
            loads.append((t, (loads[-1][1] if loads else 0) + int(m.group(1))))
        elif m := SAVED.search(text):
            saves.append((t, int(m.group(1))))
        elif CACHED.search(text):
            cached.append(t)
    freeze = cached[0] if cached else None
    live = [p for p in saves if freeze is None or p[0] < freeze]
    head = [p for p in saves if freeze is not None and p[0] > cached[-1]]
    before_cache = max((t for t, _ in live), default=None)
    load_s = loads[-1][0] - start if loads else None
    return {"frames_loaded": loads[-1][1] if loads else 0,
            "load_s": round(load_s, 1) if loads else None,
            "load_ms_per_frame": round(1000 * load_s / loads[-1][1], 3) if loads else None,
            "step_ms_end_to_end": round(1000 * rate(live), 2) if rate(live) else None,
            "cache_s": round(cached[-1] - before_cache, 1) if cached and before_cache else None,
            "step_ms_head_only": round(1000 * rate(head), 2) if rate(head) else None,
            "last_saved_step": saves[-1][1] if saves else None}


def demo_frames(data: Path) -> int:
    """Frames of the successful episodes under ``data`` (what the trainer loads)."""
    from embodia.agent.recording.dataset import LocalDataset
    return sum(int(e.get("length") or 0) for d in sorted(data.iterdir()) if (d / "meta" / "info.json").is_file()
               for e in LocalDataset(d).episodes if e.get("success"))


def projection(record_s: float | None, parts: dict, frames: int, loaded: int) -> dict | None:
    """A whole rebuild's seconds from the measured parts, each scaled by frames or steps (a subset's
    loading ran on fewer threads: scaled, it is an upper figure); None where a part was not measured."""
    need = ("load_ms_per_frame", "step_ms_end_to_end", "step_ms_head_only", "cache_s")
    if record_s is None or not loaded or any(parts.get(k) is None for k in need):
        return None
    load = parts["load_ms_per_frame"] / 1000 * frames      # the measured time itself when all were loaded
    cache = parts["cache_s"] * frames / loaded
    steps = (FREEZE_AFTER * parts["step_ms_end_to_end"] + (STEPS - FREEZE_AFTER) * parts["step_ms_head_only"]) / 1000
    return {"record_s": record_s, "load_s": round(load), "cache_s": round(cache), "steps_s": round(steps),
            "total_s": round(record_s + load + cache + steps), "measured": False}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train-log", type=Path, required=True)
    ap.add_argument("--sessions", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--card", default="")
    args = ap.parse_args(argv)
    rows = [json.loads(r) for r in args.sessions.read_text().splitlines()] if args.sessions.is_file() else []
    parts = train_parts(stamped(args.train_log)) if args.train_log.is_file() else {}
    frames = demo_frames(args.data) if args.data.is_dir() else 0
    record = next((r for r in rows if r.get("record_s") is not None), {})
    print(json.dumps({"benchmark": "mt50_rebuild", "card": args.card, "sessions": rows, "demo_frames": frames,
                      "train_parts": parts,
                      "full_rebuild_projected": projection(record.get("record_s"), parts, frames,
                                                           parts.get("frames_loaded", 0))}))


if __name__ == "__main__":
    main()
