"""JSON without pickle, atomic files (written to a temp file in the same folder, fsynced, then
os.replace'd), and paths named by files that must stay inside a folder."""
from __future__ import annotations

import dataclasses
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from embodia.memory.persist import fsync_dir as _fsync_dir  # one implementation for every folder


# -- JSON and atomic files ---------------------------------------------------------------------------
def _jsonable(o):
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    return repr(o)


def _dumps(obj, **kw) -> str:
    return json.dumps(obj, default=_jsonable, separators=(",", ":"), **kw)


def _normalized(d) -> Any:
    """The JSON round trip of d (tuples -> lists, numpy -> Python), for comparisons."""
    return json.loads(_dumps(d))


def _fsync_file(p: Path) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _tmp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")


def _atomic_write(path: Path, write) -> None:
    """write(tmp_path) then fsync and os.replace onto path: readers see the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_path(path)
    try:
        write(tmp)
        _fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _write_json(path: Path, obj) -> None:
    _atomic_write(path, lambda p: p.write_text(json.dumps(obj, indent=2, default=_jsonable) + "\n",
                                               encoding="utf-8"))


def _write_parquet(path: Path, table) -> None:
    import pyarrow.parquet as pq
    _atomic_write(path, lambda p: pq.write_table(table, p))


# -- paths named by a file or a request ----------------------------------------------------------------
def resolved_inside(path, roots) -> Path | None:
    """``path`` resolved (``~``, ``..`` and every symlink followed) if it lies in one of ``roots``
    (resolved likewise), else None. A recording, a dataset or a request may come from someone else:
    what it names ("/etc/passwd", "../../root/.bashrc", a symlink out) is followed only inside the
    folder it belongs to. A relative ``path`` is taken from the working directory.

    >>> resolved_inside("/etc/passwd", ["/tmp"]) is None
    True
    """
    try:
        p = Path(path).expanduser().resolve()
        return p if any(p.is_relative_to(Path(r).expanduser().resolve()) for r in roots) else None
    except (OSError, RuntimeError, ValueError, TypeError):      # a symlink loop, a NUL in the name, not a path
        return None
