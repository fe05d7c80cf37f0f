"""Crash-safe file primitives every memory file uses: a checksum and a bounded, checked read of a
meta.json (the atomic writes are `embodia.shared.files`)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from embodia.memory.errors import MemoryFileError

MAX_META_BYTES = 64 << 20


def sha256_file(path) -> str:
    """The SHA-256 hex digest of a file, read in 1 MB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_json(mp: Path, missing: str) -> dict:
    """A meta.json as a dict: MemoryFileError (``missing`` when absent) for a file that is unreadable,
    over MAX_META_BYTES, not JSON (nesting too deep included) or not an object."""
    try:
        with open(mp, "rb") as f:
            raw = f.read(MAX_META_BYTES + 1)
    except FileNotFoundError:
        raise MemoryFileError(mp, missing) from None
    except OSError as e:
        raise MemoryFileError(mp, f"unreadable: {e}") from e
    if len(raw) > MAX_META_BYTES:
        raise MemoryFileError(mp, f"larger than {MAX_META_BYTES >> 20} MB: not a meta.json this memory writes")
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise MemoryFileError(mp, f"corrupted or truncated JSON ({type(e).__name__}: {str(e)[:100]})") from None
    if not isinstance(meta, dict):
        raise MemoryFileError(mp, "not a JSON object")
    return meta
