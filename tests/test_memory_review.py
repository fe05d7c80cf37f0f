"""Unverified episodes are kept beside the memory, never steer, and `embodia memory review` lets a
person confirm (stored, steers afterwards) or reject them (failure credit); both leave the list."""
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from embodia.agent.loop.episode import run_episode
from embodia.devices import GuiAction, open_device
from embodia.memory import ScreenMemory, pending
from embodia.memory.saved import open_memory
from embodia.policies.base import Policy
from embodia.policies.gui.screen_memory import ScreenMemoryPolicy

pytest_plugins = ("fake_openai",)
cli = importlib.import_module("embodia.agent.cli.app")
ROOT = Path(__file__).resolve().parents[1]
UNSURE = '{"success": true, "confidence": 0.6, "reason": "the switch looks on, maybe"}'


class Idle(Policy):
    """Waits forever: it succeeds only where the memory acts for it."""

    def act(self, obs, instruction):
        return GuiAction("wait")


def idle_run(mem_dir, seed=0):
    """One gui-sim:settings episode of the idle policy with the memory saved at ``mem_dir``."""
    dev = open_device("gui-sim:settings")
    try:
        mem = ScreenMemory.load(mem_dir, missing_ok=True)
        pol = ScreenMemoryPolicy(Idle(), mem, device=dev, learn=False)
        res = run_episode(dev, pol, seed=seed, max_steps=12)
        return res.success, pol.info()["memory_replaced"]
    finally:
        dev.close()


def judged_run(fake_openai, mem, tmp_path, *, seed=0):
    fake_openai.script(UNSURE)
    r = CliRunner().invoke(cli.app, ["run", "-d", "gui-sim:settings", "-p", "expert", "-n", "1", "--seed", str(seed),
                                     "--memory", str(mem), "--no-record", "--success", "judge:openai:test",
                                     "--base-url", fake_openai.url])
    assert r.exit_code == 0, r.output
    return r


def test_unsure_episode_is_pending_then_confirmed_and_steers(fake_openai, tmp_path):
    mem = tmp_path / "mem"
    for _ in range(3):          # three unsure runs of the same task (one stored success is too weak to act on)
        judged_run(fake_openai, mem, tmp_path)
    kept = pending.pending(mem)
    assert len(kept) == 3 and len(ScreenMemory.load(mem)) == 0          # kept, not stored
    rec = kept[0]
    assert rec["label"]["source"] == "judge:openai:test" and rec["label"]["confidence"] == 0.6
    assert rec["label"]["reason"].startswith("the switch looks on") and rec["instruction"]
    assert Path(rec["frame_path"]).read_bytes()[:4] == b"\x89PNG"
    assert idle_run(mem) == (False, 0)                                 # a pending episode never steers

    r = CliRunner().invoke(cli.app, ["memory", "review", str(mem), "--confirm", rec["id"]])
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "source=judge:openai:test confidence=0.60" in out and f"{rec['id']}: confirmed" in out
    assert len(pending.pending(mem)) == 2 and len(ScreenMemory.load(mem)) > 0
    r = CliRunner().invoke(cli.app, ["memory", "review", str(mem), "--confirm", "all"])
    assert r.exit_code == 0 and " ".join(r.output.split()).count(": confirmed") == 2, r.output
    assert pending.pending(mem) == [] and ScreenMemory.load(mem).stats()["gui-sim:phone/turn-on"]["episodes"] == 3
    ok, replaced = idle_run(mem)
    assert ok and replaced > 0                                         # it steers now: the memory did the task


def test_reject_credits_the_entries_that_steered_and_leaves_the_list(fake_openai, tmp_path):
    mem = tmp_path / "mem"
    for _ in range(3):
        r = CliRunner().invoke(cli.app, ["run", "-d", "gui-sim:settings", "-p", "expert", "-n", "1", "--memory",
                                         str(mem), "--no-record", "--success", "oracle"])
        assert r.exit_code == 0, r.output
    stored = ScreenMemory.load(mem)
    (ns,) = stored.namespaces()
    assert sum(e["n_used_fail"] for e in stored.entries(ns)) == 0
    judged_run(fake_openai, mem, tmp_path)        # the memory steers this one; its outcome is unsure
    (rec,) = pending.pending(mem)
    assert rec["uses"]["ids"][ns]                 # what steered it is kept with it
    r = CliRunner().invoke(cli.app, ["memory", "review", str(mem), "--reject", rec["id"]])
    assert r.exit_code == 0, r.output
    assert f"{rec['id']}: rejected, 2 entries credited with a failure" in " ".join(r.output.split()), r.output
    after = ScreenMemory.load(mem)
    assert pending.pending(mem) == [] and sum(e["n_used_fail"] for e in after.entries(ns)) == 2


def test_review_without_a_terminal_changes_nothing(fake_openai, tmp_path):
    mem = tmp_path / "mem"
    judged_run(fake_openai, mem, tmp_path)
    before = sorted((p.relative_to(mem), p.read_bytes()) for p in mem.rglob("*") if p.is_file())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "embodia", "memory", "review", str(mem)], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    text = " ".join((p.stdout + p.stderr).split())
    assert "no terminal" in text and "nothing changed" in text and "1 episode(s) stay pending" in text
    after = sorted((p.relative_to(mem), p.read_bytes()) for p in mem.rglob("*") if p.is_file())
    assert after == before


def test_a_hold_cut_short_is_not_listed_and_unknown_ids_are_named(tmp_path):
    (tmp_path / "pending" / ".tmp-20261125-120000-abcdef").mkdir(parents=True)   # a crash mid-write
    assert pending.pending(tmp_path) == []
    pid = pending.hold(tmp_path, {"kind": "robot", "namespace": "p/t", "instruction": "push", "label": {}},
                       arrays={"keys": np.zeros((3, 2), np.float32), "actions": np.ones((3, 1), np.float32)})
    rec, arrays = pending.get(tmp_path, pid)
    assert rec["instruction"] == "push" and arrays["actions"].shape == (3, 1) and rec["frame_path"] is None
    with pytest.raises(pending.PendingError, match="no pending episode 'nope'"):
        pending.get(tmp_path, "nope")
    r = CliRunner().invoke(cli.app, ["memory", "review", str(tmp_path), "--confirm", "nope"])
    assert r.exit_code == 2 and "no pending episode 'nope'" in " ".join(r.output.split())
    assert json.loads((tmp_path / "pending" / pid / "episode.json").read_text())["id"] == pid


def test_a_robot_episode_is_kept_with_its_chunks_and_confirmed(fake_openai, tmp_path):
    """sim:twogap-push with the bundled VLA: an unsure judge keeps the episode (keys and executed
    actions in the memory's units); confirming stores it in the robot success memory."""
    mem = tmp_path / "mem"
    fake_openai.script(UNSURE)
    r = CliRunner().invoke(cli.app, ["run", "-d", "sim:twogap-push", "-p", "embodia-tiny", "--memory", str(mem),
                                     "--no-record", "--max-steps", "8", "--success", "judge:openai:test",
                                     "--base-url", fake_openai.url])
    assert r.exit_code == 0, r.output
    (rec,) = pending.pending(mem)
    _, arrays = pending.get(mem, rec["id"])
    assert rec["kind"] == "robot" and arrays["keys"].shape[0] == arrays["actions"].shape[0] == 8
    assert "puck_y" in rec["final_state"]
    r = CliRunner().invoke(cli.app, ["memory", "stats", str(mem)])
    assert "entries=" not in r.output                     # nothing stored while it is pending
    r = CliRunner().invoke(cli.app, ["memory", "review", str(mem), "--confirm", rec["id"]])
    assert r.exit_code == 0 and ": confirmed, 8 entries stored in planar_pusher/twogap-push" in \
        " ".join(r.output.split()), r.output
    r = CliRunner().invoke(cli.app, ["memory", "stats", str(mem)])
    assert "planar_pusher/twogap-push: entries=8," in " ".join(r.output.split()), r.output


def test_review_on_a_real_terminal_asks_each_and_skip_keeps_it(tmp_path):
    """A pseudo-terminal stands in for the person: yes stores, no rejects, skip leaves it pending."""
    import pty
    import select
    import time
    mem = tmp_path / "mem"
    r = CliRunner().invoke(cli.app, ["run", "-d", "gui-sim:settings", "-p", "expert", "-n", "3", "--memory", str(mem),
                                     "--no-record", "--success", "ask"])      # no terminal here: all unknown
    assert r.exit_code == 0 and "3 unverified episode(s) kept in" in " ".join(r.output.split()), r.output
    ids = [rec["id"] for rec in pending.pending(mem)]
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "embodia", "memory", "review", str(mem)], stdin=slave, stdout=slave,
                         stderr=slave, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=tmp_path)
    os.close(slave)
    out, answers, deadline = b"", [b"yes\n", b"no\n", b"skip\n"], time.time() + 90
    try:
        while time.time() < deadline and p.poll() is None:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    out += os.read(master, 65536)
                except OSError:
                    break
            if answers and out.count(b"[yes/no/skip]") > 3 - len(answers):
                os.write(master, answers.pop(0))
    finally:
        if p.poll() is None:
            p.kill()
        os.close(master)
    text = " ".join(out.decode(errors="replace").split())
    assert p.wait(10) == 0 and not answers, text[-2000:]
    assert f"{ids[0]}: confirmed" in text and f"{ids[1]}: rejected" in text
    assert f"{ids[2]}: confirmed" not in text and f"{ids[2]}: rejected" not in text
    assert [rec["id"] for rec in pending.pending(mem)] == [ids[2]]
    assert len(ScreenMemory.load(mem)) > 0


def test_a_review_cut_short_after_the_memory_saved_is_not_applied_twice(fake_openai, tmp_path, monkeypatch):
    """The memory is saved (with the decided id in it), then the crash comes before the record leaves
    the list: the next look does not show it and the next writer finishes the removal, so the
    failure is credited once, not twice."""
    mem = tmp_path / "mem"
    for _ in range(3):
        r = CliRunner().invoke(cli.app, ["run", "-d", "gui-sim:settings", "-p", "expert", "-n", "1", "--memory",
                                         str(mem), "--no-record", "--success", "oracle"])
        assert r.exit_code == 0, r.output
    judged_run(fake_openai, mem, tmp_path)
    (rec,) = pending.pending(mem)
    (ns,) = ScreenMemory.load(mem).namespaces()

    class Killed(Exception):
        pass

    def crash(folder, pid):
        raise Killed("killed between saving the memory and removing the record")
    monkeypatch.setattr(pending, "drop", crash)
    with pytest.raises(Killed):
        CliRunner().invoke(cli.app, ["memory", "review", str(mem), "--reject", rec["id"]], catch_exceptions=False)
    monkeypatch.undo()
    assert (mem / "pending" / rec["id"]).is_dir()                        # the record is still on disk
    saved = ScreenMemory.load(mem)
    assert rec["id"] in saved.reviewed and sum(e["n_used_fail"] for e in saved.entries(ns)) == 2
    assert pending.pending(mem) == [] and (mem / "pending" / rec["id"]).is_dir()   # not shown; listing only reads
    del saved
    writer = ScreenMemory.load(mem, lock=True)                  # the next writer finishes the removal
    assert not (mem / "pending" / rec["id"]).exists()
    del writer                                                  # (its lock goes with it)
    r = CliRunner().invoke(cli.app, ["memory", "review", str(mem), "--reject", rec["id"]])
    assert r.exit_code == 0 and "no pending episodes" in " ".join(r.output.split()), r.output
    assert sum(e["n_used_fail"] for e in ScreenMemory.load(mem).entries(ns)) == 2       # credited once
    with pytest.raises(pending.PendingError, match="already decided"):
        pending.reject(ScreenMemory.load(mem), rec)


def test_a_robot_memory_keeps_the_ids_it_decided(tmp_path):
    from embodia.memory import MemoryConfig, SuccessMemory
    m = SuccessMemory(MemoryConfig(), key_dim=2, horizon=4, action_dim=1, hist_len=2, encoder_id="e",
                      normalizer_hash="h")
    pid = pending.hold(tmp_path, {"kind": "robot", "namespace": "p/t", "instruction": "push", "label": {}},
                       arrays={"keys": np.zeros((6, 2), np.float32), "actions": np.ones((6, 1), np.float32)})
    rec, arrays = pending.get(tmp_path, pid)
    assert pending.confirm(m, rec, arrays) > 0
    m.save(tmp_path)                                       # ... and the crash comes before drop()
    assert open_memory(tmp_path).reviewed == {pid}
    assert pending.pending(tmp_path) == []                 # the next look removes it instead of listing it
    assert len(open_memory(tmp_path)) == len(m)
