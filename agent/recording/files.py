"""JSON without pickle, the recording's JSON and parquet files (written atomically by
`embodia.shared.files`), and paths named by files that must stay inside a folder."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from embodia.shared.files import write_atomic_path


# -- JSON and atomic files ---------------------------------------------------------------------------
def jsonable(o):
    """``json.dumps``'s ``default`` for what a recording holds: arrays, numpy scalars, sets, paths,
    objects with ``to_dict``, dataclasses; anything else as its repr."""
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


def dumps(obj, **kw) -> str:
    """Compact JSON of a recording's record (`jsonable` for what JSON lacks)."""
    return json.dumps(obj, default=jsonable, separators=(",", ":"), **kw)


def normalized(d) -> Any:
    """The JSON round trip of d (tuples -> lists, numpy -> Python), for comparisons."""
    return json.loads(dumps(d))


def write_json(path: Path, obj) -> None:
    """``obj`` as indented JSON at ``path``, atomically and durably."""
    text = json.dumps(obj, indent=2, default=jsonable) + "\n"
    write_atomic_path(path, lambda p: p.write_text(text, encoding="utf-8"))


def write_parquet(path: Path, table) -> None:
    """A pyarrow table as a parquet file at ``path``, atomically and durably."""
    import pyarrow.parquet as pq
    write_atomic_path(path, lambda p: pq.write_table(table, p))


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
