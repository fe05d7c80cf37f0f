"""`embodia view --rerun out.rrd`: the same episodes as a rerun recording, where rerun-sdk is installed.

GUI episodes: per step (timeline ``step``) the screen, the action's point(s) and swipe arrow, the
targeted element's box, and a text log line (action, gate decision, memory, reply). Robot datasets:
each frame, and every action and state channel as a scalar. Open the file with ``rerun out.rrd``.

>>> log_to_rerun("runs/gui-sim-settings", "gui.rrd")       # doctest: +SKIP
"""
from __future__ import annotations

import json
from pathlib import Path

from embodia.agent.loop.safety import target_element
from embodia.agent.recording.gui_log import is_gui_recording, list_gui_episodes, load_screen, read_gui_episode
from embodia.devices import GuiAction


def log_to_rerun(source, rrd, *, max_episodes: int | None = None) -> int:
    """Write ``source`` (a GUI recording, a folder of them, or a LeRobot dataset) to ``rrd``;
    returns the number of episodes logged. ImportError (with the install line) without rerun-sdk."""
    try:
        import rerun as rr
    except ImportError:
        raise ImportError("--rerun needs rerun-sdk: pip install rerun-sdk") from None
    src = Path(source)
    rec = rr.RecordingStream("embodia", recording_id=f"embodia-view-{src.name}")
    rec.save(str(rrd))
    if is_gui_recording(src) or (src.is_dir() and any(is_gui_recording(p) for p in src.iterdir() if p.is_dir())):
        runs = [src] if is_gui_recording(src) else sorted(p for p in src.iterdir() if p.is_dir() and is_gui_recording(p))
        n = _gui(rr, rec, [e for r in runs for e in list_gui_episodes(r)][:max_episodes])
    elif (src / "meta" / "info.json").exists():
        n = _dataset(rr, rec, src, max_episodes)
    else:
        raise ValueError(f"{src}: --rerun takes a GUI recording or a LeRobot dataset")
    rec.flush()
    rec.disconnect()
    return n


def _gui(rr, rec, episodes: list[Path]) -> int:
    for i, path in enumerate(episodes):
        ep = read_gui_episode(path)
        base = f"episode_{i:04d}"
        for s in ep["steps"]:
            rec.set_time("step", sequence=s["t"])
            img = load_screen(path, s.get("image"))
            if img is None:
                continue
            h, w = img.shape[:2]
            rec.log(f"{base}/screen", rr.Image(img))
            a = s["action"]
            px = [[p[0] / 1000 * w, p[1] / 1000 * h] for p in (a.get("point"), a.get("end")) if p]
            if px:
                rec.log(f"{base}/screen/action", rr.Points2D(px[:1], radii=8, labels=[a["type"]]))
            if len(px) == 2:
                rec.log(f"{base}/screen/swipe", rr.Arrows2D(origins=[px[0]], vectors=[[px[1][0] - px[0][0],
                                                                                       px[1][1] - px[0][1]]]))
            try:
                el = target_element(GuiAction.from_dict(a), s.get("ui_tree"), (w, h))
            except (ValueError, TypeError):
                el = None
            if el is not None and el.get("bounds"):
                x0, y0, x1, y1 = el["bounds"]
                rec.log(f"{base}/screen/element", rr.Boxes2D(array=[[x0, y0, x1, y1]],
                                                             array_format=rr.Box2DFormat.XYXY,
                                                             labels=[str(el.get("text") or el.get("desc") or "")]))
            words = [json.dumps(a)] + ([] if s.get("executed", True) else ["NOT EXECUTED"])
            if s.get("safety"):
                words.append(f"gate: {s['safety'].get('risk')} allowed={s['safety'].get('allowed')} "
                             f"by {s['safety'].get('by')}")
            mem = (s.get("policy_record") or {}).get("memory")
            if mem:
                words.append(f"memory: {mem.get('source')} confidence {mem.get('confidence')}")
            rec.log(f"{base}/log", rr.TextLog(" | ".join(words)))
        end = ep["end"] or {}
        rec.log(f"{base}/log", rr.TextLog(f"end: success={end.get('success')} task={ep['header'].get('task')!r}"))
    return len(episodes)


def _dataset(rr, rec, src: Path, max_episodes: int | None) -> int:
    from embodia.agent.recording.dataset import LocalDataset
    ds = LocalDataset(src)
    cams = [k.rsplit(".", 1)[-1] for k in ds.image_keys]
    n = min(ds.num_episodes, max_episodes or ds.num_episodes)
    for i in range(n):
        ep = ds.episode(i)
        base = f"episode_{i:04d}"
        frames = {c: ds.frames(i, c) for c in cams}
        for t in range(ep["length"]):
            rec.set_time("step", sequence=t)
            for c, f in frames.items():
                rec.log(f"{base}/{c}", rr.Image(f[t]))
            for j, ch in enumerate(ds.embodiment.actions):
                rec.log(f"{base}/action/{ch.name}", rr.Scalars(float(ep["action"][t, j])))
        rec.log(f"{base}/log", rr.TextLog(f"end: success={ep['success']} task={ep['task']!r}"))
    return n
