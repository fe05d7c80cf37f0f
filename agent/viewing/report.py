"""Build the report folder: ``index.html`` (the page, the run's summary and the plots inline),
``episodes/ep-NNNNNN.js`` (one episode's steps, loaded when a person opens it) and ``assets/``
(screenshots and videos, hard-linked where the file system allows, else copied).

A recording may come from someone else, and the report folder is what a person zips and shares:
only files that resolve inside the recording or dataset being viewed are copied (an image or video
path such as ``/etc/passwd``, ``../../x`` or a symlink out is skipped, and the page and
``build_view``'s ``skipped`` list say so), and every value the page shows is escaped.

Nothing is inlined per frame: the page loads an episode's data when it is opened, and its images
with ``loading="lazy"``, so a 200-episode dataset opens as fast as a 2-episode one.

>>> build_view("runs/gui-sim-settings", "runs/gui-sim-settings-view")     # doctest: +SKIP
PosixPath('runs/gui-sim-settings-view/index.html')
"""
from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import numpy as np

from embodia.agent.loop.safety import target_element
from embodia.agent.recording.gui_log import is_gui_recording, list_gui_episodes, read_gui_episode, screen_file
from embodia.agent.viewing.page import page_html, script_json
from embodia.agent.viewing.plots import eval_plots
from embodia.devices import GuiAction


class ViewError(ValueError):
    """A source `embodia view` cannot read; the message says what it expected."""


def build_view(source, out=None, skipped: list | None = None, bad: list | None = None) -> Path:
    """Write the report of ``source`` (a GUI recording, a LeRobot dataset, an eval report JSON, or a
    folder of GUI recordings such as `embodia mcp --record`'s) to ``out``; returns its index.html.
    ``skipped`` (a list) receives the files the source named that were not copied (outside it, or
    missing); ``bad`` the places of values that are not numbers (NaN, infinite), which the report
    shows marked instead of refusing the whole source."""
    src = Path(source)
    if not src.exists():
        raise ViewError(f"{src}: no such file or directory")
    out = Path(out) if out else src.parent / f"{src.stem if src.is_file() else src.name}-view"
    if out.resolve() == src.resolve():
        raise ViewError(f"choose an output folder other than {src}")
    out.mkdir(parents=True, exist_ok=True)
    skipped = [] if skipped is None else skipped
    if src.is_file():
        view = _eval_view(src)
    elif is_gui_recording(src):
        view = _gui_view([src], out, skipped=skipped)
    elif (src / "meta" / "info.json").exists():
        view = _dataset_view(src, out, skipped=skipped)
    else:
        view = _folder_view(src, out, skipped)
    places: list = []
    view = marked(view, "", places)
    places += [f"episode {e['index']} ({e['bad_values']})" for e in view["episodes"] if e.get("bad_values")]
    if bad is not None:
        bad += places
    view["source"], view["skipped"], view["bad"] = str(src), skipped, places
    index = out / "index.html"
    index.write_text(page_html(view), encoding="utf-8")
    return index


def _folder_view(src: Path, out: Path, skipped: list) -> dict:
    """Every GUI recording and dataset directly under ``src`` (e.g. what `embodia mcp --record` saved)."""
    rows: list = []
    for p in sorted(p for p in src.iterdir() if p.is_dir()):
        if is_gui_recording(p):
            _gui_view([p], out, rows, skipped)
        elif (p / "meta" / "info.json").exists():
            _dataset_view(p, out, rows, skipped)
    if not rows:
        raise ViewError(f"{src}: not a GUI recording, a LeRobot dataset (meta/info.json), an eval report "
                        f"(.json) or a folder of them")
    return {"kind": "mixed", "title": f"{len(rows)} episodes from {src.name}", "episodes": rows, "plots": []}


# -- assets ------------------------------------------------------------------------------------------
def _place(src: Path, dst: Path) -> None:
    """Hard-link (fast, no space) or copy ``src`` to ``dst``; an existing file is replaced."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists():
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _write_episode(out: Path, index: int, data: dict) -> str:
    """The episode's data as a script the page loads on demand (works from file://, unlike fetch)."""
    rel = f"episodes/ep-{index:06d}.js"
    path = out / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    bad: list = []
    text = script_json(marked(json.loads(json.dumps(data, default=_jsonable)), "", bad))
    path.write_text(f"embodiaEpisode({index}, {text});\n", encoding="utf-8")
    data["bad_values"] = len(bad)
    return rel


def marked(v, where: str, bad: list):
    """``v`` (plain JSON values) with every NaN or infinite number replaced by the text ``"nan (bad
    value)"``: JSON has no NaN, and one such value in a shared recording refused the whole report.
    ``bad`` receives each one's place (e.g. ``steps[3].timing.policy_ms``)."""
    if isinstance(v, float) and not math.isfinite(v):
        bad.append(where or "value")
        return f"{v} (bad value)"
    if isinstance(v, dict):
        return {k: marked(x, f"{where}.{k}" if where else str(k), bad) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [marked(x, f"{where}[{i}]", bad) for i, x in enumerate(v)]
    return v


def _jsonable(v):
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)


def _success_source(end: dict | None, meta: dict) -> str | None:
    """Who decided success: the label's own source when it says, else the simulator's check."""
    if not end or end.get("success") is None:
        return None
    info = end.get("info") or {}
    return info.get("success_source") or info.get("label_source") or (
        "oracle (simulator)" if str(meta.get("device", "")).startswith(("gui-sim:", "sim:")) else "device")


# -- GUI recordings ------------------------------------------------------------------------------------
def _gui_view(runs: list[Path], out: Path, rows: list | None = None, skipped: list | None = None) -> dict:
    rows = [] if rows is None else rows
    for run in runs:
        for ep_dir in list_gui_episodes(run):
            i = len(rows)
            ep = read_gui_episode(ep_dir)
            head, end = ep["header"], ep["end"]
            meta = head.get("meta") or {}
            data = {"index": i, "kind": "gui", "task": head.get("task", ""), "seed": head.get("seed"),
                    "run": run.name, "meta": meta, "success": None if end is None else end.get("success"),
                    "success_source": _success_source(end, meta), "ended": end is not None,
                    "end_info": (end or {}).get("info") or {}, "steps": []}
            for s in ep["steps"]:
                data["steps"].append(_gui_step(s, ep_dir, out, i, skipped))
            final = (end or {}).get("final_image")
            if final:
                data["final_image"] = _gui_image(ep_dir, final, out, i, skipped)
            file = _write_episode(out, i, data)
            err = (data["end_info"] or {}).get("error")
            rows.append({"index": i, "task": data["task"], "seed": data["seed"], "run": run.name,
                         "bad_values": data["bad_values"],
                         "success": data["success"], "success_source": data["success_source"],
                         "steps": len(data["steps"]), "error": err, "file": file,
                         "memory_steps": sum(1 for s in data["steps"] if s.get("memory")),
                         "memory_steered": sum(1 for s in data["steps"]
                                               if (s.get("memory") or {}).get("source") in ("memory", "fused")),
                         "refused": sum(1 for s in data["steps"] if not s["executed"])})
    return {"kind": "gui", "title": f"{len(rows)} GUI episodes", "episodes": rows, "plots": []}


def _gui_image(ep_dir: Path, image: dict, out: Path, i: int, skipped: list | None) -> dict | None:
    """The screenshot copied into the report, if it is a file inside its episode's folder."""
    src = screen_file(ep_dir, image if isinstance(image, dict) else None)
    if src is None:
        if skipped is not None:
            skipped.append(str(image.get("file") if isinstance(image, dict) else image))
        return None
    rel = f"assets/ep-{i:06d}/{src.name}"
    _place(src, out / rel)
    return {"src": rel, "w": image.get("width"), "h": image.get("height")}


def _gui_step(s: dict, ep_dir: Path, out: Path, i: int, skipped: list | None = None) -> dict:
    img = _gui_image(ep_dir, s["image"], out, i, skipped) if s.get("image") else None
    screen = s.get("screen") or {}
    size = (img["w"], img["h"]) if img else (screen.get("width"), screen.get("height"))
    el = None
    try:
        el = target_element(GuiAction.from_dict(s["action"]), s.get("ui_tree"), size if size[0] else None)
    except (ValueError, TypeError):
        pass
    rec = s.get("policy_record") or {}
    return {"t": s["t"], "image": img, "action": s["action"], "executed": s.get("executed", True),
            "safety": s.get("safety"), "timing": s.get("timing") or {},
            "element": None if el is None else {k: el.get(k) for k in ("index", "role", "text", "desc", "id",
                                                                         "bounds")},
            "reply": _reply_text(rec), "memory": rec.get("memory"), "error": s.get("error")}


def _reply_text(rec: dict) -> str | None:
    """The policy's own words at a decision: the last attempt's reply (VLM policies)."""
    attempts = rec.get("attempts") or []
    for a in reversed(attempts):
        if a.get("reply"):
            return str(a["reply"])
        for c in a.get("candidates") or []:
            if c.get("reply"):
                return str(c["reply"])
    return rec.get("reply")


# -- LeRobot datasets (robot episodes) ------------------------------------------------------------------
def _dataset_view(src: Path, out: Path, rows: list | None = None, skipped: list | None = None) -> dict:
    from embodia.agent.recording.dataset import LocalDataset
    from embodia.agent.recording.dataset_checks import DatasetError
    try:
        ds = LocalDataset(src)
        episodes = ds.episodes
    except (DatasetError, OSError) as e:
        raise ViewError(str(e)) from None
    if not episodes and rows is None:
        raise ViewError(f"{src}: no episodes to view (meta/info.json total_episodes=0)")
    emb = ds.embodiment
    vkey = ds.video_keys[0] if ds.video_keys else None
    placed: dict[Path, str] = {}
    rows = [] if rows is None else rows
    for k, row in enumerate(episodes):
        i = len(rows)                  # the report's numbering (several datasets: one after another)
        ep = ds.episode(k)
        data = {"index": i, "kind": "robot", "task": ep["task"], "seed": ep["seed"], "success": ep["success"],
                "success_source": _success_source({"success": ep["success"], "info": ep["info"]}, ep["meta"]),
                "meta": ep["meta"], "end_info": ep["info"], "timing": ep["timing"], "fps": ds.fps,
                "action_names": [c.name for c in emb.actions], "state_names": [c.name for c in emb.state],
                "action": np.round(ep["action"], 4).tolist(), "state": np.round(ep["state"], 4).tolist()}
        if vkey is not None and "steplog" not in row:     # a killed writer's episode has no video yet
            video = ds.video_file(row, vkey)                # refused unless it lies inside the dataset
            if video not in placed:
                placed[video] = f"assets/videos/{i:06d}.mp4"
                _place(video, out / placed[video])
            data["video"] = {"src": placed[video], "from": float(row.get(f"videos/{vkey}/from_timestamp") or 0.0),
                             "camera": vkey.rsplit(".", 1)[-1]}
        file = _write_episode(out, i, data)
        rows.append({"index": i, "task": ep["task"], "seed": ep["seed"], "success": ep["success"], "run": src.name,
                     "bad_values": data["bad_values"],
                     "success_source": data["success_source"], "steps": int(ep["length"]),
                     "error": (ep["info"] or {}).get("error"), "file": file})
    return {"kind": "robot", "title": f"{emb.name}: {len(rows)} episodes", "episodes": rows, "plots": []}


# -- eval reports ---------------------------------------------------------------------------------------
def _eval_view(src: Path) -> dict:
    try:
        rep = json.loads(src.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ViewError(f"{src}: not a JSON eval report ({e})") from None
    if not isinstance(rep, dict) or not ({"success_rate", "by"} <= set(rep) or "arms" in rep):
        raise ViewError(f"{src}: not an `embodia eval` report (no success_rate/by, no arms)")
    rows = [{"index": i, "task": "", "seed": r.get("seed"), "success": r.get("success"),
             "success_source": "oracle (simulator)" if r.get("success") is not None else None,
             "steps": r.get("length"), "error": r.get("error"), "file": None}
            for i, r in enumerate(rep.get("per_episode") or [])]
    title = f"eval: {rep.get('policy', '?')} on {rep.get('device', '?')}" + (
        f" (shift {rep['shift']})" if rep.get("shift") else "")
    try:
        plots = eval_plots(rep)
    except (TypeError, ValueError, KeyError, AttributeError) as e:    # a rate or interval that is not a number
        raise ViewError(f"{src}: a plotted field is not what `embodia eval` writes ({type(e).__name__}: {e})") from None
    return {"kind": "eval", "title": title, "episodes": rows, "plots": plots,
            "report": {k: rep.get(k) for k in ("device", "policy", "shift", "seed", "episodes", "successes",
                                                "success_rate", "wilson95", "mean_length", "streams",
                                                "episodes_per_stream", "created") if k in rep}}
