"""The `embodia` command end to end on the simulated tasks (eval reports, record, replay)."""
import json
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from embodia.agent.cli.app import app

runner = CliRunner()


def invoke(*args):
    res = runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
    return res


def test_console_script_lists_the_verbs():
    exe = shutil.which("embodia")
    cmd = [exe, "--help"] if exe else [sys.executable, "-m", "embodia", "--help"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    for verb in ("run", "record", "eval", "replay", "devices"):
        assert f" {verb} " in out


def test_devices_lists_sim_tasks():
    res = invoke("devices")
    assert res.exit_code == 0 and "sim:twogap-push" in res.output


def test_eval_writes_a_report_with_wilson_interval_and_gap_split(tmp_path):
    out = tmp_path / "out.json"
    res = invoke("eval", "--device", "sim:twogap-push", "--policy", "expert", "--episodes", 30,
                 "--seed", 0, "--json", out)
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    assert rep["episodes"] == 30 and len(rep["per_episode"]) == 30
    assert [e["seed"] for e in rep["per_episode"]] == list(range(30))
    assert rep["success_rate"] >= 0.9
    lo, hi = rep["wilson95"]
    assert lo < rep["success_rate"] < hi or rep["success_rate"] in (lo, hi)
    gaps = rep["by"]["gap"]
    assert gaps["left"]["successes"] >= 5 and gaps["right"]["successes"] >= 5
    assert set(rep["timing"]) >= {"steps_per_s", "overhead_frac", "policy_s", "device_s"}


def test_eval_under_blocked_left_fails_left_attempts_only(tmp_path):
    out = tmp_path / "out.json"
    res = invoke("eval", "--shift", "blocked-left", "--policy", "expert", "--episodes", 20, "--json", out)
    assert res.exit_code == 0, res.output
    modes = json.loads(out.read_text())["by"]["policy.mode"]
    assert modes["left"]["successes"] == 0 and modes["left"]["episodes"] >= 3
    assert modes["right"]["success_rate"] >= 0.9


def test_record_then_replay_reproduces_final_state_and_outcome(tmp_path):
    ds = tmp_path / "ds"
    res = invoke("record", "--out", ds, "--policy", "expert", "--episodes", 3, "--seed", 5)
    assert res.exit_code == 0, res.output
    info = json.loads((ds / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 3 and info["codebase_version"] == "v3.0"
    rep = tmp_path / "replay.json"
    res = invoke("replay", ds, "--episode", "all", "--json", rep)
    assert res.exit_code == 0, res.output
    rows = json.loads(rep.read_text())["episodes"]
    assert len(rows) == 3
    for r in rows:
        assert r["same_outcome"] and r["steps"] == r["recorded_steps"]
        assert r["final_state_max_abs_diff"] < 1e-6


def test_replay_detects_a_different_scene(tmp_path):
    """Replaying on a shifted scene must not silently 'reproduce' the record."""
    ds = tmp_path / "ds"
    invoke("record", "--out", ds, "--policy", "expert", "--episodes", 1, "--seed", 1)
    from embodia.agent.loop.replay import replay_episode
    from embodia.agent.recording.dataset import LocalDataset
    from embodia.devices import open_device
    with open_device("sim:twogap-push", shift="heavy") as dev:
        r = replay_episode(LocalDataset(ds), 0, device=dev, stop_on_divergence=1e-4)
    assert r["diverged_at"] is not None


def test_bad_inputs_get_clear_errors(tmp_path):
    res = invoke("eval", "--device", "sim:nope", "--episodes", 1)
    assert res.exit_code == 2 and "unknown sim task" in res.output
    res = invoke("eval", "--policy", "oracle", "--episodes", 1)
    assert res.exit_code == 2 and "unknown policy" in res.output
    res = invoke("eval", "--shift", "upside-down", "--episodes", 1)
    assert res.exit_code == 2 and "blocked-left" in res.output
    res = invoke("replay", tmp_path / "missing")
    assert res.exit_code == 2


@pytest.mark.slow
def test_acceptance_expert_100_episodes_and_gap_split(tmp_path):
    out = tmp_path / "out.json"
    invoke("eval", "--device", "sim:twogap-push", "--policy", "expert", "--episodes", 100,
           "--seed", 0, "--json", out)
    rep = json.loads(out.read_text())
    assert rep["success_rate"] >= 0.95
    left, right = rep["by"]["gap"]["left"]["successes"], rep["by"]["gap"]["right"]["successes"]
    assert 0.3 <= left / (left + right) <= 0.7


@pytest.mark.slow
def test_acceptance_metaworld_pick_place_expert(tmp_path):
    pytest.importorskip("metaworld")
    out = tmp_path / "out.json"
    res = invoke("eval", "--device", "sim:metaworld/pick-place-v3", "--policy", "expert",
                 "--episodes", 20, "--json", out)
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["success_rate"] >= 0.9


def test_a_session_closes_the_policy_and_the_device(monkeypatch):
    """A policy that holds something (a websocket client) is closed with the device, also when the
    run fails inside the session."""
    import embodia.agent.loop.factory
    from embodia.agent.loop.factory import open_session
    closed = []

    class Held:
        def act(self, obs, instruction):
            return None

        def close(self):
            closed.append("policy")

    class Dev:
        def close(self):
            closed.append("device")
    monkeypatch.setattr(embodia.agent.loop.factory, "make_device", lambda uri, shift=None, size=None: Dev())
    monkeypatch.setattr(embodia.agent.loop.factory, "make_policy", lambda spec, device, **kw: Held())
    with open_session("sim:twogap-push", "ws://localhost:1") as (dev, pol):
        assert isinstance(pol, Held) and closed == []
    assert closed == ["policy", "device"]
    closed.clear()
    with pytest.raises(RuntimeError):
        with open_session("sim:twogap-push", "ws://localhost:1"):
            raise RuntimeError("the run failed")
    assert closed == ["policy", "device"]
