"""Open a saved memory of either kind, robot (`SuccessMemory`) or screen (`ScreenMemory`), by
what its own meta.json says: the one rule every reader uses to tell them apart.

>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> from embodia.memory import ScreenMemory
>>> _ = ScreenMemory().save(d); type(open_memory(d)).__name__, memory_kind(read_meta(d))
('ScreenMemory', 'screen')
"""
from __future__ import annotations

from pathlib import Path

from embodia.memory.files import read_json
from embodia.memory.persist import META, writer

SCREEN_FORMAT = "embodia.screen_memory"      # the "format" a screen memory writes in its meta.json


def read_meta(folder) -> dict:
    """A saved memory's meta.json as a dict; MemoryFileError when it is missing or unreadable."""
    return read_json(Path(folder) / META, "missing (no memory saved here)")


def memory_kind(meta: dict) -> str:
    """``"screen"`` for a screen memory's meta.json, ``"robot"`` for anything else (a robot memory's
    own load then checks its fields)."""
    return "screen" if meta.get("format") == SCREEN_FORMAT else "robot"


def open_memory(folder, lock: bool = False):
    """The memory saved in ``folder``, opened with the key encoder and action normalizer its
    meta.json names (no policy needed: stats, review, prune). ``lock``: hold the folder's writer
    lock (to save it again), taken before anything is read."""
    from embodia.memory.screen import ScreenMemory
    from embodia.memory.store import SuccessMemory
    path = Path(folder)
    w = writer(path) if lock and (path / META).is_file() else None
    try:
        meta = read_meta(path)
        if memory_kind(meta) == "screen":
            return ScreenMemory.load(path, lock=lock)
        return SuccessMemory.load(path, encoder_id=meta.get("encoder_id"), normalizer_hash=meta.get("normalizer_hash"),
                                  lock=lock)
    finally:
        if w is not None:
            w.release()        # the memory holds its own count of it now
