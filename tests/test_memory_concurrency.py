"""Two writers on one memory folder (issue 35): two `embodia run --memory M` processes at once, a
kill -9 of the holder, readers beside a writer, and the leftovers of killed saves.

Before this issue the second run of a screen memory died with a FileNotFoundError traceback, and on
a robot memory the last save won and deleted the other run's episodes without a word."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from embodia.memory import MemoryConfig, ScreenMemory, SuccessMemory, lock, persist
from embodia.memory import pending as pending_mod
from embodia.memory.saved import open_memory

REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", MUJOCO_GL="egl",
           COLUMNS="400")
KW = dict(encoder_id="enc", normalizer_hash="norm")


def run(args, cwd) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "embodia", "run", "--no-record", *args], cwd=cwd, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def holder(mem: Path) -> dict:
    try:
        return json.loads((mem / lock.LOCK).read_text() or "{}")
    except (OSError, ValueError):
        return {}


def wait_for(cond, proc, timeout=180.0):
    t0 = time.time()
    while not cond():
        assert proc.poll() is None, proc.stdout.read()
        assert time.time() - t0 < timeout, "timed out"
        time.sleep(0.2)


def episodes(mem: Path) -> int:
    """Verified episodes the saved memory counts (its namespaces' clocks), read as `memory stats` reads."""
    return sum(row["clock"] for row in open_memory(mem).stats().values())


def two_runs_then_kill(tmp_path, device: list, n_first: int, n_long: int, cond_first_save):
    """The scenario of both acceptance tests (see the callers)."""
    mem = tmp_path / "mem"
    a = run([*device, "--memory", str(mem), "-n", str(n_first)], tmp_path)
    wait_for(lambda: holder(mem).get("pid") == a.pid, a)
    b = run([*device, "--memory", str(mem), "-n", "2"], tmp_path)
    out_b = b.communicate(timeout=300)[0]
    a_running = a.poll() is None
    out_a = a.communicate(timeout=600)[0]
    # the second is refused at once, naming the first; the first stores every one of its episodes
    assert a_running, "the first run ended before the second asked for the lock: nothing was tested"
    assert b.returncode == 2, out_b
    line = " ".join(out_b.split())
    assert f"is in use by another writer: pid {a.pid} on host {socket.gethostname()} since" in line, out_b
    assert "Traceback" not in out_a + out_b and a.returncode == 0, out_a
    assert len([x for x in out_b.splitlines() if x.strip()]) == 1, out_b
    assert episodes(mem) == n_first and holder(mem) == {}
    # kill -9 of the holder after its first save: a new run takes the stale lock over
    c = run([*device, "--memory", str(mem), "-n", str(n_long)], tmp_path)
    wait_for(lambda: holder(mem).get("pid") == c.pid and cond_first_save(mem, n_first), c)
    c.send_signal(signal.SIGKILL)
    c.wait()
    assert holder(mem).get("pid") == c.pid                       # the dead process's lock text is still there
    saved = episodes(mem)
    ns_dir = next((mem / "ns").iterdir())
    temps = [ns_dir / f".entries-1234abcd.npz.tmp-{c.pid}", mem / f".meta.json.tmp-{c.pid}"]
    for t in temps:                                               # what a kill during a save leaves
        t.write_bytes(b"x" * 1000)
    d = run([*device, "--memory", str(mem), "-n", "1"], tmp_path)
    out_d = d.communicate(timeout=300)[0]
    assert d.returncode == 0 and "Traceback" not in out_d, out_d
    assert f"took over the writer lock of pid {c.pid}" in " ".join(out_d.split()), out_d
    assert not any(t.exists() for t in temps)
    assert episodes(mem) == saved + 1 and saved >= n_first + 1
    return mem


@pytest.mark.slow
def test_two_robot_runs_on_one_memory_folder(tmp_path):
    """sim:twogap-push with embodia-tiny (a robot SuccessMemory): the second run is refused naming the
    first's pid and host; the first's 4 episodes are all counted; kill -9 of a third run after its
    first save, and a fourth takes the lock over and cleans the dead run's temp files."""
    device = ["--device", "sim:twogap-push", "--policy", "embodia-tiny", "--max-steps", "40",
              "--success", "check:state.puck_y > -100"]        # every episode a verified success: all stored
    two_runs_then_kill(tmp_path, device, 4, 40, lambda mem, n: episodes(mem) > n)


@pytest.mark.slow
def test_two_screen_runs_on_one_memory_folder(tmp_path):
    """gui-sim:settings with the expert (a ScreenMemory): the same, on a screen memory."""
    device = ["--device", "gui-sim:settings", "--policy", "expert"]
    two_runs_then_kill(tmp_path, device, 150, 3000, lambda mem, n: episodes(mem) > n)


# -- the same rules, in process (fast) -----------------------------------------------------------------

def saved(path, n_eps=3, seed=0):
    mem = SuccessMemory(MemoryConfig(sigma=None), 4, 6, 2, 3, **KW)
    rng = np.random.default_rng(seed)
    for i in range(n_eps):
        mem.add_episode("ns", rng.standard_normal((20, 4)), rng.uniform(-1, 1, (20, 2)), success=True, episode_id=i)
    mem.save(path)
    return mem


def test_a_second_writer_process_is_refused_naming_the_holder(tmp_path):
    p = tmp_path / "m"
    saved(p)
    mem = SuccessMemory.load(p, lock=True, **KW)
    code = ("import sys; from embodia.memory import SuccessMemory, MemoryBusy\n"
            "try:\n  SuccessMemory.load(sys.argv[1], lock=True, encoder_id='enc', normalizer_hash='norm')\n"
            "except MemoryBusy as e:\n  print(e); sys.exit(3)\n"
            "m = SuccessMemory.load(sys.argv[1], encoder_id='enc', normalizer_hash='norm')\n")
    r = subprocess.run([sys.executable, "-c", code, str(p)], env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 3 and f"pid {os.getpid()} on host {socket.gethostname()}" in r.stdout, r.stdout + r.stderr
    # a reader beside the writer neither waits nor is refused; a save from there is refused
    r = subprocess.run([sys.executable, "-c", code.replace("lock=True", "lock=False") + "m.save(sys.argv[1])",
                        str(p)], env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "MemoryBusy" in r.stderr and "is in use by another writer" in r.stderr
    persist.let_go(mem)
    assert holder(p) == {}
    r = subprocess.run([sys.executable, "-c", code, str(p)], env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_stale_lock_text_is_taken_over_and_dead_temp_files_go(tmp_path):
    p = tmp_path / "m"
    saved(p)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (p / lock.LOCK).write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "since": 1.0}))
    ns_dir = next((p / "ns").iterdir())
    dead_tmp, live_tmp = ns_dir / f".entries-ab.npz.tmp-{dead.pid}", ns_dir / f".entries-cd.npz.tmp-{os.getppid()}"
    for t in (dead_tmp, live_tmp, p / f".meta.json.tmp-{dead.pid}"):
        t.write_bytes(b"partial")
    (p / "pending" / ".tmp-20260101-000000-abcdef").mkdir(parents=True)      # a hold cut short
    mem = SuccessMemory.load(p, lock=True, **KW)
    assert mem.lock_taken_over["pid"] == dead.pid and holder(p)["pid"] == os.getpid()
    assert not dead_tmp.exists() and not (p / f".meta.json.tmp-{dead.pid}").exists()
    assert live_tmp.exists()                                     # a running process's temp file stays
    assert not any((p / "pending").iterdir())
    assert lock.holder_alive({"pid": dead.pid, "host": socket.gethostname()}) is False
    assert lock.holder_alive({"pid": os.getpid(), "host": socket.gethostname(), "start": "1"}) is False  # pid reused
    assert lock.holder_alive({"pid": 1, "host": "another-host"}) is True      # cannot tell: obeyed
    persist.let_go(mem)


def test_a_reader_overtaken_by_a_save_reads_the_new_memory(tmp_path, monkeypatch):
    """Readers take no lock: the files a reader was about to open are removed by a save that commits
    meanwhile. It reads again (the old code raised, naming a missing file)."""
    p = tmp_path / "m"
    saved(p)
    from embodia.memory import loading
    real, calls = loading._load_namespace, []

    def overtaken(mem, path, rec):
        if not calls:
            calls.append(1)
            saved(p, n_eps=5, seed=1)              # another process's save commits and collects the old files
        return real(mem, path, rec)
    monkeypatch.setattr(loading, "_load_namespace", overtaken)
    back = SuccessMemory.load(p, **KW)
    assert back.stats()["ns"]["episodes"] == 5

    sp = tmp_path / "s"
    smem = ScreenMemory()
    tree = [{"index": 0, "role": "Switch", "text": "Wi-Fi", "id": "w", "bounds": [0, 0, 10, 10]}]
    smem.add_episode("app/t", [(tree, "Turn on Wi-Fi", {"type": "click", "element": 0})], True)
    smem.save(sp)
    from embodia.memory import screen
    real_space, seen = screen._read_space, []

    def overtaken_space(path, rec, cfg):
        if not seen:
            seen.append(1)
            smem.add_episode("app/t", [(tree, "Turn on Wi-Fi", {"type": "click", "element": 0})], True)
            smem.save(sp)
        return real_space(path, rec, cfg)
    monkeypatch.setattr(screen, "_read_space", overtaken_space)
    assert ScreenMemory.load(sp).stats()["app/t"]["episodes"] == 2


def test_pending_only_reads(tmp_path):
    """Listing pending episodes writes nothing, even where a record is already decided (a review cut
    short); the next writer removes it."""
    p = tmp_path / "m"
    mem = saved(p)
    keep = pending_mod.hold(p, {"kind": "robot", "namespace": "ns", "instruction": "a", "label": {"source": "ask"}})
    done = pending_mod.hold(p, {"kind": "robot", "namespace": "ns", "instruction": "b", "label": {"source": "ask"}})
    mem.reviewed.add(done)
    mem.save(p)

    def snapshot():
        return sorted((str(f.relative_to(p)), f.stat().st_mtime_ns) for f in p.rglob("*"))
    before = snapshot()
    assert [r["id"] for r in pending_mod.pending(p)] == [keep]
    assert snapshot() == before
    w = persist.writer(p)
    assert [d.name for d in (p / "pending").iterdir()] == [keep]
    w.release()


def test_a_lock_on_a_folder_nothing_was_saved_into_leaves_no_folder(tmp_path):
    """`embodia run --memory typo` refused after its lock was taken leaves no folder behind; a
    folder that existed, or that a save wrote into, stays."""
    w = lock.hold(tmp_path / "new" / "mem")
    assert (tmp_path / "new" / "mem" / lock.LOCK).exists()
    w.release()
    assert not (tmp_path / "new").exists()
    (tmp_path / "old").mkdir()
    lock.hold(tmp_path / "old").release()
    assert (tmp_path / "old").is_dir()
    w = lock.hold(tmp_path / "used")
    (tmp_path / "used" / "meta.json").write_text("{}")
    w.release()
    assert (tmp_path / "used" / "meta.json").exists()
