"""Atomic, durable writes: the one way a file or a folder of embodia's replaces another.

A file is written under a hidden temporary name in its own folder (``.<name>.tmp-<pid>-<thread>``),
fsynced, renamed over its path, and the folder is fsynced so that the rename itself survives a crash:
a reader sees the old file or the new one, never a torn one, whatever kills the writer. A folder is
built aside and renamed into place the same way (`commit_dir`).

>>> import tempfile; d = Path(tempfile.mkdtemp())
>>> write_atomic(d / "a.json", lambda f: f.write(b"{}")); (d / "a.json").read_bytes()
b'{}'
"""
from __future__ import annotations

import os
import re
import shutil
import threading
from pathlib import Path

__all__ = ["fsync_dir", "temp_path", "temp_owner", "commit_file", "write_atomic", "write_atomic_path", "commit_dir"]

# ``.<name>.tmp-<pid>`` (older writers) or ``.<name>.tmp-<pid>-<thread>``: what a killed writer leaves
TEMP_NAME = re.compile(r"\.(.+)\.tmp-(\d+)(?:-\d+)?")


def fsync_dir(path) -> None:
    """Make a folder's entries (a rename, a new file) durable; a no-op where the OS cannot."""
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(path) -> None:
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path(path) -> Path:
    """The hidden temporary name beside ``path`` that this process and thread write it under."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")


def temp_owner(name: str) -> int | None:
    """The process id in a `temp_path` file name, or None for any other name."""
    m = TEMP_NAME.fullmatch(name)
    return int(m.group(2)) if m else None


def commit_file(tmp, path, *, sync: bool = True) -> None:
    """Rename the finished temporary file ``tmp`` over ``path``; with ``sync`` (the default) the file
    is fsynced first and the folder after, so the new file survives a crash of the machine too.
    Without it the rename is still atomic for readers and a killed process (a screenshot per step)."""
    if sync:
        _fsync_file(tmp)
    os.replace(tmp, path)
    if sync:
        fsync_dir(Path(path).parent)


def write_atomic_path(path, write, *, sync: bool = True) -> None:
    """Replace ``path`` atomically: ``write(tmp)`` fills a temporary path beside it (for writers that
    want a path: pyarrow, PyAV), then `commit_file`. A failure removes the temporary file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        write(tmp)
        commit_file(tmp, path, sync=sync)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path, write, *, sync: bool = True) -> None:
    """Replace ``path`` atomically: ``write(f)`` fills a temporary file beside it (binary mode), then
    `commit_file`; a crash leaves the old file or the new one."""
    def fill(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            write(f)
    write_atomic_path(path, fill, sync=sync)


def commit_dir(tmp, path, *, replace: bool = True) -> None:
    """Put the finished folder ``tmp`` (built beside ``path``) at ``path``: its files and itself are
    fsynced, a folder already at ``path`` is moved aside to ``<path>.old`` and deleted after the
    rename, and the parent is fsynced. A crash leaves the old folder or the new one (between the two
    renames, the old one under ``<name>.old``). With ``replace=False`` a folder already at ``path``
    is kept and the rename raises OSError (two writers racing for one folder: the first one wins)."""
    tmp, path = Path(tmp), Path(path)
    for root, _, names in os.walk(tmp):
        for n in names:
            _fsync_file(Path(root) / n)
        fsync_dir(root)
    old = path.with_name(path.name + ".old")
    if not replace:
        os.rename(tmp, path)
        fsync_dir(path.parent)
        return
    if path.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(path, old)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    shutil.rmtree(old, ignore_errors=True)
