"""Memory files under attack (issue 22): a deleted or corrupt meta.json, an edited config, paths
outside the folder, and a kill -9 during `embodia eval --memory` (loses at most the episode in
flight)."""
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from embodia.memory import MemoryConfig, MemoryFileError, SuccessMemory
from embodia.memory.persist import meta_checksum

DK, H, D = 4, 6, 2
KW = dict(encoder_id="enc", normalizer_hash="norm")
REPO = Path(__file__).resolve().parents[1]


def saved(path, n_eps=5):
    mem = SuccessMemory(MemoryConfig(sigma=None), DK, H, D, 3, **KW)
    rng = np.random.default_rng(0)
    for i in range(n_eps):
        mem.add_episode("ns", rng.standard_normal((20, DK)), rng.uniform(-1, 1, (20, D)), success=True, episode_id=i)
    mem.save(path)
    return mem


def edit_meta(path, fn, rehash=False):
    mp = path / "meta.json"
    meta = json.loads(mp.read_text())
    fn(meta)
    if rehash:
        meta["meta_sha256"] = meta_checksum(meta)
    mp.write_text(json.dumps(meta))


def test_deleted_meta_json_is_an_error_never_an_empty_memory(tmp_path):
    p = tmp_path / "m"
    n = len(saved(p))
    (p / "meta.json").unlink()
    for kw in ({}, {"missing_ok": True}, {"on_error": "empty"}):
        with pytest.raises(MemoryFileError, match="refusing to treat it as empty"):
            SuccessMemory.load(p, key_dim=DK, horizon=H, action_dim=D, **KW, **kw)
    fresh = SuccessMemory(None, DK, H, D, 3, **KW)             # nor may a fresh memory overwrite it
    with pytest.raises(MemoryFileError, match="missing"):
        fresh.save(p)
    assert sum(1 for _ in p.rglob("entries-*.npz")) == 1
    (p / "meta.json").write_text("{not json")                  # corrupt instead of deleted
    with pytest.raises(MemoryFileError, match="refusing"):
        SuccessMemory.load(p, missing_ok=True, on_error="empty", key_dim=DK, horizon=H, action_dim=D, **KW)
    assert n > 0


def test_cli_eval_refuses_a_memory_folder_without_meta(tmp_path):
    from typer.testing import CliRunner

    from embodia.agent.cli.app import app
    p = tmp_path / "m"
    saved(p)
    (p / "meta.json").unlink()
    before = sorted(f.name for f in p.rglob("*"))
    r = CliRunner().invoke(app, ["eval", "--policy", "embodia-tiny", "--memory", str(p), "--episodes", "1"])
    assert r.exit_code == 2 and "refusing" in r.output.replace("\n", " ")
    assert sorted(f.name for f in p.rglob("*")) == before


def test_edited_config_is_reported_not_obeyed(tmp_path):
    p = tmp_path / "m"
    n = len(saved(p))
    edit_meta(p, lambda m: m["config"].update(capacity=1))
    with pytest.raises(MemoryFileError, match="edited outside embodia"):
        SuccessMemory.load(p, **KW)
    edit_meta(p, lambda m: None, rehash=True)                   # a deliberate edit (checksum redone)
    back = SuccessMemory.load(p, **KW)
    assert back.config.capacity == 1
    # a config passed at load time is reported
    saved(tmp_path / "m2")
    with pytest.warns(RuntimeWarning, match="capacity"):
        back = SuccessMemory.load(tmp_path / "m2", config=MemoryConfig(sigma=None, capacity=7), **KW)
    assert len(back) == n


@pytest.mark.parametrize("field,value", [("dir", "../../outside-00000000"), ("dir", "/etc"),
                                         ("entries", "../../../etc/passwd"), ("entries", "x.npz"),
                                         ("dir", "ns/../..")])
def test_paths_outside_the_folder_are_refused(tmp_path, field, value):
    p = tmp_path / "m"
    saved(p)
    edit_meta(p, lambda m: m["namespaces"][0].update({field: value}), rehash=True)
    with pytest.raises(MemoryFileError, match="not a (folder|name) this memory writes"):
        SuccessMemory.load(p, **KW)


def test_a_symlink_out_of_the_folder_is_refused(tmp_path):
    p = tmp_path / "m"
    saved(p)
    f = next(p.rglob("entries-*.npz"))
    outside = tmp_path / "elsewhere.npz"
    f.rename(outside)
    f.symlink_to(outside)
    with pytest.raises(MemoryFileError, match="outside the memory folder"):
        SuccessMemory.load(p, **KW)


def test_old_meta_without_checksum_loads_with_a_warning(tmp_path):
    p = tmp_path / "m"
    n = len(saved(p))
    edit_meta(p, lambda m: m.pop("meta_sha256"))
    with pytest.warns(RuntimeWarning, match="checksum"):
        assert len(SuccessMemory.load(p, **KW)) == n


@pytest.mark.slow
def test_kill_9_during_eval_memory_loses_at_most_the_episode_in_flight(tmp_path):
    """The memory is saved after every episode: kill -9 after the k-th save, and the folder loads
    with that save's content (the run before this issue saved only at the end: nothing)."""
    mem = tmp_path / "mem"
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, "-m", "embodia", "eval", "--policy", "embodia-tiny", "--memory",
                             str(mem), "--episodes", "200"],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    gens, deadline = [], time.time() + 240
    try:
        while time.time() < deadline and len(gens) < 3 and proc.poll() is None:
            try:
                g = json.loads((mem / "meta.json").read_text())["generation"]
                if not gens or gens[-1] != g:
                    gens.append(g)
            except (FileNotFoundError, json.JSONDecodeError, KeyError):
                pass
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert len(gens) >= 3, proc.stderr.read().decode()[-2000:]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        meta = json.loads((mem / "meta.json").read_text())
        back = SuccessMemory.load(mem, encoder_id=meta["encoder_id"], normalizer_hash=meta["normalizer_hash"])
    assert meta["generation"] >= gens[-1]          # at most the episode after the last save seen is lost
    eps = sum(back.stats()[ns]["episodes"] for ns in back.namespaces())
    assert eps >= 1 and len(back) > 0


def test_cli_gui_run_refuses_a_screen_memory_folder_without_meta(tmp_path):
    from typer.testing import CliRunner

    from embodia.agent.cli.app import app
    p = tmp_path / "screens"
    (p / "ns" / "messages-0123abcd").mkdir(parents=True)
    (p / "ns" / "messages-0123abcd" / "entries-1a.npz").write_bytes(b"saved entries")
    r = CliRunner().invoke(app, ["run", "--device", "gui-sim:messages", "--policy", "embodia-tiny",
                                 "--memory", str(p), "--no-record"])
    assert r.exit_code == 2 and "refusing" in " ".join(r.output.split())
    assert (p / "ns" / "messages-0123abcd" / "entries-1a.npz").read_bytes() == b"saved entries"
