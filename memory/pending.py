"""Unverified episodes, kept beside a memory until a person confirms or rejects them.

An episode whose success label is not verified (an unsure judge, an unknown, a skipped question)
never steers: it is not stored. It is kept in the memory's folder instead, with everything needed
to store it later, and ``embodia memory review`` shows it to a person::

    <memory>/pending/<id>/episode.json   id, kind (robot | screen), namespace, instruction, the label
                                         (source, confidence, reason), when, the entries that steered
                                         it (for failure credit), and for a screen memory its steps
    <memory>/pending/<id>/final.png      the final screen or camera frame (when the body has one)
    <memory>/pending/<id>/steps.npz      robots: the keys and executed actions, in the memory's units

Each record is written under ``pending/.tmp-<id>`` and renamed into place (a crash leaves no half
record), and leaves the list by a rename to ``pending/.gone-<id>`` before it is deleted. ``confirm``
stores the episode as a verified success (so it steers afterwards) and ``reject`` credits the entries
that steered it with a failure (the memory's failure credit, cascade included). Both note the
record's id in the memory (``reviewed``, saved in its meta.json), save the memory atomically, then
remove the record. A crash between the two leaves the record on disk, but the saved memory names it
as decided, so the next listing finishes its removal instead of showing it again: an episode is
never stored twice nor credited twice.

>>> import tempfile, numpy as np
>>> d = Path(tempfile.mkdtemp())
>>> pid = hold(d, {"kind": "screen", "namespace": "app/t", "instruction": "go", "label": {"source": "ask"}},
...            frame=np.zeros((4, 4, 3), np.uint8))
>>> [r["instruction"] for r in pending(d)], (d / "pending" / pid / "final.png").is_file()
(['go'], True)
>>> drop(d, pid); pending(d)
[]
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import time
from pathlib import Path
from typing import Optional

import numpy as np

from embodia.memory.errors import MemoryStoreError
from embodia.memory.files import read_json
from embodia.shared.files import commit_dir, fsync_dir, write_atomic
from embodia.shared.images import png_bytes

PENDING = "pending"
_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{6}")


class PendingError(ValueError):
    """No such pending episode, or a record that cannot be read; one line."""


def _jsonable(x):
    """numpy scalars and arrays, tuples and sets as plain JSON values."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    return x


def hold(folder, record: dict, *, arrays: Optional[dict] = None, frame=None) -> str:
    """Keep one unverified episode under ``folder/pending``; returns its id. ``record`` holds at
    least kind, namespace, instruction and label; ``arrays`` (robots) go to steps.npz."""
    root = Path(folder) / PENDING
    root.mkdir(parents=True, exist_ok=True)
    pid = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    tmp = root / f".tmp-{pid}"
    tmp.mkdir()
    try:
        rec = _jsonable({**record, "id": pid, "held_at": time.time(),
                         "frame": "final.png" if frame is not None else None})
        text = json.dumps(rec, sort_keys=True).encode("utf-8")
        write_atomic(tmp / "episode.json", lambda f: f.write(text))
        if frame is not None:
            data = png_bytes(frame)
            write_atomic(tmp / "final.png", lambda f: f.write(data))
        if arrays:
            write_atomic(tmp / "steps.npz", lambda f: np.savez(f, **{k: np.asarray(v) for k, v in arrays.items()}))
        commit_dir(tmp, root / pid)         # the commit point: the record appears whole or not at all
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return pid


def reviewed(folder) -> set:
    """The ids of pending episodes that the memory saved in ``folder`` says were decided (empty when
    no memory is saved there, or one saved before it kept them)."""
    try:
        meta = read_json(Path(folder) / "meta.json", "missing")
    except MemoryStoreError:
        return set()
    ids = meta.get("reviewed")
    return {str(i) for i in ids} if isinstance(ids, list) else set()


def pending(folder) -> list[dict]:
    """The kept episodes, oldest first, each its episode.json plus ``frame_path`` (absolute, or None).
    Only reads: a record the saved memory already names as decided (a review cut short between
    saving the memory and removing the record) is left out, and removed by the next writer
    (`tidy`); a record that leaves the list while it is read (a review beside this) is skipped."""
    root = Path(folder) / PENDING
    if not root.is_dir():
        return []
    done = reviewed(folder)
    out = []
    for d in sorted(root.iterdir()):
        if not d.is_dir() or not _ID.fullmatch(d.name) or d.name in done:
            continue            # .tmp-* (a hold cut short) and .gone-* (a removal cut short) are not listed
        try:
            rec = json.loads((d / "episode.json").read_bytes().decode("utf-8"))
        except FileNotFoundError:
            continue
        except (OSError, ValueError, RecursionError) as e:
            raise PendingError(f"{d / 'episode.json'}: unreadable ({type(e).__name__}: {str(e)[:200]})") from None
        if not isinstance(rec, dict):
            raise PendingError(f"{d / 'episode.json'}: not a pending episode record")
        rec["frame_path"] = str((d / rec["frame"]).resolve()) if isinstance(rec.get("frame"), str) else None
        out.append(rec)
    return out


def tidy(folder) -> int:
    """Finish what killed writers left under ``folder/pending``: records cut short while held
    (``.tmp-*``) or removed (``.gone-*``), and records the saved memory names as decided. Called by
    the folder's writer lock's new holder (`embodia.memory.persist.writer`), when no other process
    writes here; returns how many records it removed."""
    root = Path(folder) / PENDING
    if not root.is_dir():
        return 0
    done, n = reviewed(folder), 0
    for d in sorted(root.iterdir()):
        if d.is_dir() and (d.name.startswith((".tmp-", ".gone-")) or d.name in done):
            shutil.rmtree(d, ignore_errors=True)
            n += 1
    return n


def get(folder, pid: str) -> tuple[dict, dict]:
    """One kept episode: (its record, its arrays); PendingError naming what is there otherwise."""
    for rec in pending(folder):
        if rec["id"] == pid:
            f = Path(folder) / PENDING / pid / "steps.npz"
            arrays = {}
            if f.is_file():
                with np.load(f, allow_pickle=False) as z:
                    arrays = {k: z[k] for k in z.files}
            return rec, arrays
    have = [r["id"] for r in pending(folder)]
    raise PendingError(f"no pending episode {pid!r} in {Path(folder) / PENDING} (pending: {have or 'none'})")


def drop(folder, pid: str) -> None:
    """Take one record off the list (a rename, then the files are deleted)."""
    root = Path(folder) / PENDING
    if not _ID.fullmatch(pid) or not (root / pid).is_dir():
        raise PendingError(f"no pending episode {pid!r} in {root}")
    gone = root / f".gone-{pid}"
    os.rename(root / pid, gone)
    fsync_dir(root)
    shutil.rmtree(gone, ignore_errors=True)


# -- the memory's side: what steered an episode, stored or credited once a person decides -----------

def confirm(mem, rec: dict, arrays: dict) -> int:
    """Store a kept episode as a verified success (crediting the entries that steered it with a
    success); returns the entries stored or merged. The caller saves the memory, then drops it."""
    _decide(mem, rec)
    mem.attach_uses(rec.get("uses") or {})
    mem.end_episode(True, namespace=rec["namespace"])
    if rec["kind"] == "screen":
        return mem.add_episode(rec["namespace"], rec["steps"], True, slots=rec.get("slots"))
    keys, actions = arrays["keys"], arrays["actions"]
    ids = mem.entries(rec["namespace"]).get("episode_id") if rec["namespace"] in mem else None
    episode_id = int(ids.max()) + 1 if ids is not None and len(ids) else 1     # a source id of its own
    return mem.add_episode(rec["namespace"], keys, actions, success=True, episode_id=episode_id,
                           stride=rec.get("stride"))


def reject(mem, rec: dict) -> dict:
    """A kept episode judged a failure: the entries that steered it are credited with a failure
    (deleted when they keep failing, their source episodes too); returns {"credited", "deleted"}."""
    _decide(mem, rec)
    mem.attach_uses(rec.get("uses") or {})
    return mem.end_episode(False, namespace=rec["namespace"])


def _decide(mem, rec: dict) -> None:
    if rec["id"] in mem.reviewed:
        raise PendingError(f"pending episode {rec['id']} was already decided (this memory holds its outcome)")
    mem.reviewed.add(rec["id"])
