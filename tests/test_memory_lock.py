"""A memory folder's writer lock (`embodia.memory.lock`) that is not a regular file of its own, and a
memory folder nobody may write, through the real CLI (issue 56): one line, exit 2, nothing written.

Before: a symlinked ``writer.lock`` was followed and the file it pointed to truncated (`embodia memory
ingest` wrote ``{}`` into it); a FIFO, a folder, /dev/zero or a read-only folder ended in a traceback."""
import errno
import importlib
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_lying_datasets import base  # noqa: E402,F401  (a module-scoped fixture: two expert episodes to ingest)
from typer.testing import CliRunner

from embodia.memory import MemoryConfig, SuccessMemory, lock

cli = importlib.import_module("embodia.agent.cli.app")
KW = dict(encoder_id="enc", normalizer_hash="norm")
PRECIOUS = "precious: not the lock's to overwrite\n"


def saved(path: Path) -> Path:
    mem = SuccessMemory(MemoryConfig(sigma=None), 4, 6, 2, 3, **KW)
    rng = np.random.default_rng(0)
    for i in range(3):
        mem.add_episode("ns", rng.standard_normal((20, 4)), rng.uniform(-1, 1, (20, 2)), success=True, episode_id=i)
    mem.save(path)
    (path / lock.LOCK).unlink()
    return path


def invoke(*args):
    return CliRunner().invoke(cli.app, [str(a) for a in args])


def assert_one_line(r, *words):
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), (r.exit_code, r.output, repr(r.exception))
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in r.output, r.output
    for w in words:
        assert w in " ".join(r.output.split()), r.output


def _symlink(lk: Path, target: Path):
    lk.symlink_to(target)


def _devzero(lk: Path, target: Path):
    lk.symlink_to("/dev/zero")


def _fifo(lk: Path, target: Path):
    os.mkfifo(lk)


def _folder(lk: Path, target: Path):
    lk.mkdir()


def _hardlink(lk: Path, target: Path):
    os.link(target, lk)


BAD_LOCKS = {"symlink": (_symlink, "is a symbolic link"), "symlink to /dev/zero": (_devzero, "is a symbolic link"),
             "fifo": (_fifo, "is not a regular file"), "folder": (_folder, "is a folder"),
             "hard link": (_hardlink, "has other hard links")}


@pytest.mark.parametrize("name", list(BAD_LOCKS))
def test_a_writer_lock_that_is_not_a_regular_file_is_refused_in_one_line(tmp_path, base, name):  # noqa: F811
    make, words = BAD_LOCKS[name]
    target = tmp_path / "notes.txt"
    target.write_text(PRECIOUS)
    fresh, old = tmp_path / "fresh", saved(tmp_path / "old")
    fresh.mkdir()
    for mem in (fresh, old):
        make(mem / lock.LOCK, target)
    assert_one_line(invoke("memory", "ingest", fresh, "--data", base), words)
    before = sorted(p.name for p in old.iterdir())
    assert_one_line(invoke("memory", "prune", old), words)
    assert target.read_text() == PRECIOUS                       # the file a link pointed to is untouched
    assert not (fresh / "meta.json").exists() and sorted(p.name for p in old.iterdir()) == before


@pytest.fixture
def immutable(tmp_path):
    """A saved memory in a folder nobody may write, root included (chattr +i), made writable again after."""
    mem = saved(tmp_path / "mem")
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(mem)], capture_output=True).returncode:
        pytest.skip("chattr +i is not available here (needs root on a file system with inode flags)")
    try:
        yield mem
    finally:
        subprocess.run(["chattr", "-i", str(mem)], check=True)


def test_a_read_only_memory_is_refused_in_one_line(immutable, base, tmp_path):  # noqa: F811
    before = {p.name: p.read_bytes() for p in immutable.iterdir() if p.is_file()}
    assert_one_line(invoke("memory", "prune", immutable), "read-only")
    assert_one_line(invoke("memory", "ingest", immutable, "--data", base, "--policy", "embodia-tiny"), "read-only")
    assert {p.name: p.read_bytes() for p in immutable.iterdir() if p.is_file()} == before
    # a new memory inside it cannot even be made
    assert_one_line(invoke("memory", "ingest", immutable / "sub", "--data", base), "cannot create")


def test_a_read_only_file_system_is_refused_in_one_line(tmp_path, base, monkeypatch):  # noqa: F811
    """EROFS, as a read-only mount gives it (no test here may mount one): the lock's open fails so."""
    mem, real_open = saved(tmp_path / "mem"), os.open

    def read_only(path, flags, *a, **kw):
        if Path(path).name == lock.LOCK and flags & (os.O_RDWR | os.O_WRONLY | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *a, **kw)
    monkeypatch.setattr(lock.os, "open", read_only)
    assert_one_line(invoke("memory", "prune", mem), "read-only file system")
    assert_one_line(invoke("memory", "ingest", tmp_path / "new", "--data", base), "read-only file system")
