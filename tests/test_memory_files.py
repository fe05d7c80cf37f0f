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


# -- every field of meta.json range-checked on load (issue 35) ----------------------------------------

def with_seeds(path, recs):
    edit_meta(path, lambda m: m.update(seeds={"ns": recs}), rehash=True)     # the checksum is recomputable


@pytest.mark.parametrize("recs,says", [
    ([[2 ** 64, 1, 1, 1]], r"seeds\['ns'\]\[0\].seed = 18446744073709551616: expected a whole number "
                           r"0..18446744073709551615"),
    ([[-1, 1, 1, 1]], r"seeds\['ns'\]\[0\].seed = -1: expected a whole number 0"),
    ([[5, -1, 1, 1]], r"seeds\['ns'\]\[0\].successes = -1"),
    ([[5, 2, 1, 1]], r"seeds\['ns'\]\[0\].successes = 2: expected a whole number 0..1"),
    ([[5, 1, 1, -3]], r"seeds\['ns'\]\[0\].latest = -3"),
    ([[5, 1, 1, True]], r"seeds\['ns'\]\[0\].latest = True"),
    ([[s, 1, 1, 1] for s in range(100_000)], r"seeds\['ns'\] = 100000: expected a list of at most 10000 seed records"),
])
def test_seed_records_out_of_range_are_refused_on_load(tmp_path, recs, says):
    """A seed of 2**64 used to pass `memory stats` and then stop every run in VLAPolicy.reset
    (torch.Generator.manual_seed: Overflow when unpacking long long); negative seeds and 100,000
    records were accepted silently."""
    from embodia.memory.persist import seed_records
    p = tmp_path / "m"
    saved(p)
    with_seeds(p, recs)
    for read in (lambda: SuccessMemory.load(p, **KW), lambda: seed_records(p)):
        with pytest.raises(MemoryFileError, match=says):
            read()


def test_the_largest_seed_loads_and_seeds_the_generator(tmp_path, monkeypatch):
    import torch

    from embodia.memory import persist
    p = tmp_path / "m"
    saved(p)
    with_seeds(p, [[2 ** 64 - 1, 1, 1, 1]])
    mem = SuccessMemory.load(p, **KW)
    torch.Generator().manual_seed(mem.recall_seed("ns"))       # what VLAPolicy.reset does with it
    with pytest.raises(ValueError, match="noise seed"):
        mem.credit_seed("ns", 2 ** 64, True)                   # never saved, so never refused later
    monkeypatch.setattr(persist, "MAX_SEED_RECORDS", 50)       # (10,000: the same rule, slower to fill)
    mem.credit_seed("ns", 2 ** 64 - 1, False)                  # the big one now the worst record
    for s in range(60):                                         # the records stay within what load accepts
        mem.credit_seed("ns", s, True)
    assert len(mem.seeds["ns"]) == 50 and 2 ** 64 - 1 not in mem.seeds["ns"]
    mem.save(p)
    assert len(SuccessMemory.load(p, **KW).seeds["ns"]) == 50


@pytest.mark.parametrize("edit,says", [
    (lambda m: m.update(hist_len=-1), r"hist_len = -1: expected a whole number 0\.\."),
    (lambda m: m.update(key_dim=True), r"key_dim = True: expected a whole number 1\.\."),
    (lambda m: m.update(saved_at=float("nan")), r"saved_at = nan: expected a finite time"),
    (lambda m: m["namespaces"][0].update(n=-5), r"namespaces\[0\].n = -5"),
    (lambda m: m["namespaces"][0].update(bytes="12"), r"namespaces\[0\].bytes = '12'"),
    (lambda m: m["namespaces"][0].update(sha256="x" * 64), r"namespaces\[0\].sha256"),
    (lambda m: m.update(reviewed=[7]), r"reviewed\[0\] = 7"),
    (lambda m: m["config"].update(sigma_min=float("inf")), r"config.sigma_min = inf: expected a finite number"),
    (lambda m: m.update(generation="../x"), r"generation = '../x'"),
])
def test_every_meta_field_is_range_checked(tmp_path, edit, says):
    p = tmp_path / "m"
    saved(p)
    edit_meta(p, edit, rehash=True)
    with pytest.raises(MemoryFileError, match=says):
        SuccessMemory.load(p, **KW)


def test_screen_meta_fields_are_range_checked(tmp_path):
    from embodia.memory import ScreenMemory
    tree = [{"index": 0, "role": "Switch", "text": "Wi-Fi", "id": "w", "bounds": [0, 0, 10, 10]}]
    for edit, says in [(lambda m: m.update(next_episode=-1), r"next_episode = -1"),
                       (lambda m: m["namespaces"][0].update(dir="../../x-00000000"), "not a folder this memory writes"),
                       (lambda m: m["namespaces"][0].update(n=-1), r"namespaces\[0\].n = -1"),
                       (lambda m: next(iter(m["namespaces"][0]["files"].values())).update(bytes=-1), "bytes = -1")]:
        mem = ScreenMemory()
        mem.add_episode("app/t", [(tree, "Turn on Wi-Fi", {"type": "click", "element": 0})], True)
        p = tmp_path / f"s{len(list(tmp_path.iterdir()))}"
        mem.save(p)
        edit_meta(p, edit)
        with pytest.raises(MemoryFileError, match=says):
            ScreenMemory.load(p)
    (p / "meta.json").write_text("[" * 100_000)                 # nested too deep: an error, not a RecursionError
    with pytest.raises(MemoryFileError, match="RecursionError"):
        ScreenMemory.load(p)


def test_cli_refuses_a_seed_out_of_range_in_one_line(tmp_path):
    """The issue's run: `memory stats` and `embodia run --memory` on a memory whose seed is 2**64."""
    from typer.testing import CliRunner

    from embodia.agent.cli.app import app
    mem = tmp_path / "mem"
    run = ["run", "-d", "sim:twogap-push", "-p", "embodia-tiny", "--memory", str(mem), "--no-record",
           "--max-steps", "8", "--success", "check:state.puck_y > -100"]
    r = CliRunner().invoke(app, run)
    assert r.exit_code == 0, r.output
    (ns,) = [rec["name"] for rec in json.loads((mem / "meta.json").read_text())["namespaces"]]
    edit_meta(mem, lambda m: m.update(seeds={ns: [[2 ** 64, 1, 1, 1]]}), rehash=True)
    for args in (["memory", "stats", str(mem)], run):
        r = CliRunner().invoke(app, args)
        out = " ".join(r.output.split())
        assert r.exit_code == 2 and "seed = 18446744073709551616: expected a whole number" in out, r.output
        assert "Traceback" not in r.output and "Overflow" not in r.output
