"""Episodes a killed recording left in step logs, seen by a reader without a writer reopening it.

A `DatasetWriter` commits an episode when it ends; a process killed before (or during) that commit
leaves the episode's step log in ``.steplogs/``, and until now only the next writer turned it into
an episode. `LocalDataset` lists these logs after the committed episodes, in the order a writer's
``recover`` would commit them (start time, then name), and serves them from the log:

* a log with its end record (the episode finished; the commit was cut short) always;
* a log without one (the process died mid-episode) only when no writer holds the dataset's lock,
  as the interrupted episode ``recover`` would make of it (success False, ``interrupted``).

Logs that are unreadable, empty, of another embodiment or already committed are skipped. Nothing
is written: the next writer still commits them as it always did.

>>> complete_logs(Path("/nonexistent"), set())
[]
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from embodia.devices.observation import IMAGES


def _writer_alive(steplogs: Path) -> bool:
    """True when some process holds the writer's flock (a live writer owns the running logs)."""
    lock = steplogs / "writer.lock"
    if not lock.exists():
        return False
    import fcntl
    try:
        with open(lock, "rb") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
    except OSError:
        return True      # cannot tell: treat running logs as someone else's
    return False


def complete_logs(root: Path, committed_ids: set, embodiment=None) -> list[dict]:
    """Rows (like `LocalDataset.episodes` rows) of the uncommitted step logs under ``root`` that
    were recorded with ``embodiment`` (any, if None)."""
    from embodia.agent.recording.files import normalized
    from embodia.agent.recording.steplog import RecordingError, read_steplog
    emb_dict = normalized(embodiment.to_dict()) if embodiment is not None else None
    from embodia.agent.recording.dataset_checks import inside
    steplogs = Path(root) / ".steplogs"
    if not steplogs.is_dir():
        return []
    inside(root, steplogs, steplogs)       # a symlink out of the dataset is refused, not listed
    alive = _writer_alive(steplogs)
    found = []
    for p in steplogs.glob("episode_*.jsonl"):
        inside(root, p, p)
        try:
            header, steps, end = read_steplog(p, decode_images=False)
        except (RecordingError, OSError, ValueError):
            continue
        if header is None or not steps or header.get("episode_id") in committed_ids:
            continue
        if end is None and alive:
            continue
        if emb_dict and normalized(header.get("embodiment")) != emb_dict:
            continue
        found.append((float(header.get("start_time") or 0.0), p.name, p, header, steps, end))
    rows = []
    for _, _, p, header, steps, end in sorted(found, key=lambda r: (r[0], r[1])):
        info = (end or {}).get("info") or ({"interrupted": True} if end is None else {})
        fs = (end or {}).get("final_state")
        rows.append({"length": len(steps), "task": header.get("task") or "", "seed": header.get("seed"),
                     "success": bool(end["success"]) if end and end.get("success") is not None else
                     (False if end is None else None),
                     "interrupted": end is None or (isinstance(info, dict) and info.get("interrupted") is True),
                     "final_state": None if fs is None else np.asarray(fs, np.float32), "info": info,
                     "meta": header.get("meta") or {}, "timing": {}, "steplog": str(p),
                     "embodia/episode_id": header.get("episode_id")})
    return rows


def episode_from_log(row: dict, index: int) -> dict:
    """`LocalDataset.episode` of an uncommitted episode, read from its step log."""
    from embodia.agent.recording.steplog import read_steplog
    _, steps, _ = read_steplog(row["steplog"], decode_images=False)
    steps = steps[:row["length"]]
    out = {k: row[k] for k in ("length", "task", "seed", "success", "interrupted", "final_state", "info",
                               "meta", "timing")}
    out.update(episode_index=index, state=np.stack([s["state"] for s in steps]).astype(np.float32),
               action=np.stack([s["action"] for s in steps]).astype(np.float32),
               timestamp=np.array([s.get("timestamp", 0.0) for s in steps], np.float32),
               frame_index=np.arange(len(steps)))
    return out


def frames_from_log(row: dict, camera: str) -> np.ndarray:
    """One camera's frames uint8[T, H, W, 3] of an uncommitted episode."""
    from embodia.agent.recording.steplog import read_steplog
    name = camera[len(IMAGES) + 1:] if camera.startswith(IMAGES + ".") else camera
    _, steps, _ = read_steplog(row["steplog"], decode_images=True)
    return np.stack([s["images"][name] for s in steps[:row["length"]]])


__all__ = ["complete_logs", "episode_from_log", "frames_from_log"]
