"""One writer at a time per memory folder: ``<folder>/writer.lock``.

Two processes that both load a memory, add their episodes and save it would each write the
memory *they* loaded: the last save wins and garbage-collects the other's files. So a process that
means to save a folder holds its writer lock first, from before it reads the memory until it is
done (``SuccessMemory.load(..., lock=True)``, ``ScreenMemory.load(..., lock=True)``; a ``save`` by
a process that holds none takes it for the length of the save). A second writer is refused at once
with `MemoryBusy`, naming the holder::

    /m is in use by another writer: pid 4711 on host lab-3 since 2026-11-26 22:10:05 UTC (embodia run ...)

The lock is an ``flock`` on ``writer.lock``; the kernel drops it when its process ends, however it
ends, so a lock left by a killed process (kill -9, a crash, a power cut) is stale by construction
and the next writer takes it over (`WriterLock.took_over` names the dead holder). The file's text
(JSON: pid, host, since, process start, command) is only the message. On a file system without
``flock`` the text decides alone: a holder on this host whose pid is not running (or runs another
process, by its start time) is taken over; a holder on another host is obeyed.

Readers take no lock and never wait: a save commits by renaming meta.json, so a reader sees the old
memory or the new one (`embodia.memory.persist` retries a read whose files a newer save removed).

Held locks are per process and re-entrant (a second ``hold`` of the same folder counts up); a
forked child holds none of its parent's.

>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> a = hold(d); b = hold(d); a is b, a.count
(True, 2)
>>> b.release(); a.release(); a.count
0
"""
from __future__ import annotations

import errno
import json
import os
import socket
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from embodia.memory.errors import MemoryStoreError

LOCK = "writer.lock"


class LockRefused(MemoryStoreError, ValueError):
    """The folder's writer lock cannot be this process's own file: ``writer.lock`` is a symbolic link
    (followed, it would truncate the file it points to), a FIFO, a device, a folder or a hard link,
    or the folder cannot be written (a read-only file system, an immutable folder, no permission).
    The message is one line."""

    def __init__(self, path, reason: str):
        self.path = str(path)
        super().__init__(f"{path}: {reason}")


class MemoryBusy(MemoryStoreError):
    """Another live process holds the folder's writer lock; the message (one line) names it."""

    def __init__(self, folder, holder: dict):
        self.folder, self.holder = str(folder), holder
        super().__init__(f"{folder} is in use by another writer: {describe(holder)}; wait for it to finish "
                         "or use another memory folder")


def describe(holder: dict) -> str:
    """A lock holder in words: pid, host, since (UTC) and its command line, shortened."""
    since = holder.get("since")
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since)) if isinstance(since, (int, float)) else "?"
    cmd = "".join(c if c.isprintable() else " " for c in str(holder.get("command") or ""))[:100]
    return (f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')} since {when}"
            + (f" ({cmd})" if cmd else ""))


def start_time(pid: int) -> Optional[str]:
    """The process's start time in clock ticks since boot (/proc; None where there is no /proc): with
    the pid it names one process, never a later one that reused the pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19] if ")" in stat else None


def pid_alive(pid) -> bool:
    """Whether a process ``pid`` runs on this host."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:          # someone else's process: it exists
        return True
    except OSError:
        return False
    return True


def holder_alive(holder: dict) -> bool:
    """Whether the process a lock's text names still runs. On another host nobody here can tell:
    True (obeyed). On this host: its pid runs and, where recorded, started when the lock says."""
    if holder.get("host") != socket.gethostname():
        return bool(holder)
    pid = holder.get("pid")
    if not pid_alive(pid):
        return False
    recorded = holder.get("start")
    return recorded is None or start_time(pid) in (None, recorded)


def _me() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(),
            "start": start_time(os.getpid()), "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:200]}


def _read(fd: int) -> dict:
    """The lock file's text as a holder ({} when empty or unreadable: nobody)."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 4096)
        holder = json.loads(text.decode("utf-8")) if text.strip() else {}
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _write(fd: int, holder: dict) -> None:
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, json.dumps(holder).encode("utf-8"))
    os.fsync(fd)


class WriterLock:
    """This process's hold on one folder's writer lock (see the module doc); ``release`` when done."""

    def __init__(self, folder: Path, fd: int, took_over: dict, created: tuple = ()):
        self.folder, self.fd, self.count = folder, fd, 1
        self.took_over = took_over      # the dead holder whose stale lock this one replaced ({}: none)
        self.created = created          # the folders this hold made (deepest first): removed if left empty

    def release(self) -> None:
        """Count one hold down; the last one empties the file's text and drops the flock."""
        with _GUARD:
            if self.count <= 0:
                return
            self.count -= 1
            if self.count:
                return
            _HELD.pop(str(self.folder), None)
            try:
                _write(self.fd, {})
            except OSError:
                pass
            self._tidy_unused()
            os.close(self.fd)         # closing drops the flock

    def _tidy_unused(self) -> None:
        """A folder this hold created and nothing was saved into (a run refused after its lock was
        taken) goes again, so a mistyped --memory leaves no folder behind."""
        if not self.created:
            return
        try:
            if [p.name for p in self.folder.iterdir()] != [LOCK]:
                return
            (self.folder / LOCK).unlink()
            for d in self.created:
                d.rmdir()
        except OSError:
            pass


_HELD: dict[str, WriterLock] = {}
_GUARD = threading.RLock()


def hold(folder) -> WriterLock:
    """This process's writer lock on ``folder`` (created when absent); `MemoryBusy` when another
    live process holds it. Re-entrant: a folder this process holds counts up."""
    folder = Path(folder)
    created = tuple(p for p in (folder, *folder.parents) if not p.exists())
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LockRefused(folder, f"cannot create the memory folder here ({e.strerror or e})") from None
    key = str(folder.resolve())
    with _GUARD:
        held = _HELD.get(key)
        if held is not None:
            held.count += 1
            return held
        fd = _open_lock(folder)
        try:
            old = _claim(folder, fd)
            _write(fd, _me())
        except BaseException:
            os.close(fd)
            raise
        lock = _HELD[key] = WriterLock(Path(key), fd, old, tuple(p.resolve() for p in created))
        return lock


# opened without following a symlink, and without waiting on a FIFO; never inherited by a child
_FLAGS = (os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
          | getattr(os, "O_CLOEXEC", 0))


def _read_only(e: OSError | None = None) -> str:
    """Why a writer cannot write a memory folder, in words (``e``: the error that said so)."""
    if e is not None and e.errno == errno.EROFS:
        return "the memory folder is on a read-only file system: a writer cannot save into it"
    if e is None or e.errno in (errno.EPERM, errno.EACCES):
        return ("the memory folder is read-only here (no permission, or an immutable folder): a writer cannot "
                "save into it")
    return f"cannot write the memory folder: {e.strerror or e}"


def _open_lock(folder: Path) -> int:
    """The descriptor of ``folder/writer.lock``, created when absent; LockRefused (one line) for
    anything but a regular file of its own (see `LockRefused`) or a folder this process cannot write."""
    path = folder / LOCK
    try:
        fd = os.open(path, _FLAGS, 0o644)
    except OSError as e:
        what = {errno.ELOOP: "is a symbolic link", errno.EISDIR: "is a folder"}.get(e.errno)
        if what is None:
            raise LockRefused(folder, _read_only(e)) from None
        raise LockRefused(path, f"{what}; a writer lock must be a regular file (move it away)") from None
    st = os.fstat(fd)
    problem = ("is not a regular file (a FIFO, a device or a socket)" if not stat.S_ISREG(st.st_mode) else
               "has other hard links" if st.st_nlink > 1 else None)
    if problem is None and not os.access(folder, os.W_OK | os.X_OK):
        os.close(fd)
        raise LockRefused(folder, _read_only())
    if problem:
        os.close(fd)
        raise LockRefused(path, f"{problem}; a writer lock must be a regular file (move it away)")
    return fd


def _claim(folder: Path, fd: int) -> dict:
    """Take the lock on ``fd`` or raise MemoryBusy; returns the stale holder it replaces ({} if none)."""
    try:
        import fcntl
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except ImportError:
        flock_ok = False
    except OSError as e:
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            flock_ok = False           # ENOLCK, EOPNOTSUPP: a file system without flock
        else:
            raise MemoryBusy(folder, _read(fd) or {"pid": "?"}) from None
    else:
        flock_ok = True
    old = _read(fd)
    if not flock_ok and old and holder_alive(old):
        raise MemoryBusy(folder, old)
    return old if old.get("pid") != os.getpid() else {}


def _forget_after_fork() -> None:
    """A forked child holds none of its parent's locks (its copies of the descriptors are closed;
    the parent's flock stays the parent's)."""
    for lock in list(_HELD.values()):
        try:
            os.close(lock.fd)
        except OSError:
            pass
        lock.count = 0
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
