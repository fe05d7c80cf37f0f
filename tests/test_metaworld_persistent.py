"""benchmarks/metaworld_persistent.py on a small cell: the protocol (cells, streams, paired arms),
every new shift, the paired report, resuming from the kept streams, and the replay check."""
import json
import os

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np
import pytest

pytest.importorskip("metaworld")

from bench_module import load  # noqa: E402

bench = load("metaworld_persistent")


def test_cell_uri_and_task_lists():
    assert bench.expand_tasks("hard,reach-v3")[:2] == ["assembly-v3", "hand-insert-v3"]
    assert bench.expand_tasks("hard,reach-v3")[-1] == "reach-v3" and len(bench.expand_tasks("very_hard")) == 5
    uri = bench.cell_uri("push-v3", repeat=3, jitter=0.02, span=30, shift="delay", severity=2, drift=10)
    from embodia.devices import open_device
    with open_device(uri + "&render=0") as d:
        assert (d.repeat, d.jitter, d.cell_span, d.shift, d.drift) == (3, 0.02, 30, "delay", 10)
        assert d.max_steps == 500


def test_paired_report_counts():
    a = np.array([[1, 1, 0, 0], [1, 0, 1, 0]], bool)
    b = np.array([[1, 0, 1, 0], [0, 0, 1, 0]], bool)
    r = bench.paired(a, b)
    assert (r["a_only"], r["b_only"], r["episodes"]) == (2, 1, 8)
    assert r["diff"] == pytest.approx(1 / 8) and r["newcombe_paired95"][0] < 0 < r["newcombe_paired95"][1]


def test_replay_check_exact_set_ups_replay_and_jittered_ones_need_not():
    out = bench.replay_check(["pick-place-v3"], repeat=3, jitters=[0.0], streams=1, episodes=6, seed=1008)
    row = out["0"]
    assert row["expert"]["successes"] == 6
    # Meta-World is deterministic: an exactly repeated set-up is passed by replaying a stored success
    assert row["replay"]["episodes"] == 3 and row["replay"]["successes"] == 3


def test_eval_runs_a_copy_that_decides_as_often_as_asked_and_keeps_to_it(tmp_path, capsys):
    """--exec-horizon N: the workdir's copy of the checkpoint decides every N actions, the report says
    so, and the same workdir refuses another rate (its kept streams ran at the first)."""
    argv = ["eval", "--policy", "embodia-mt50", "--tasks", "reach-v3", "--axes", "delay", "--arms", "off",
            "--streams", "1", "--episodes", "2", "--seed", "0", "--max-steps", "16", "--jobs", "1",
            "--workdir", str(tmp_path / "w")]
    bench.main(argv + ["--exec-horizon", "2"])
    rep = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rep["exec_horizon"] == 2 and rep["memory_settings"] is None
    assert json.loads((tmp_path / "w" / "policy" / "config.json").read_text())["exec_horizon"] == 2
    with pytest.raises(ValueError, match="exec_horizon 2, not .* and 4"):
        bench.main(argv + ["--exec-horizon", "4"])
    with pytest.raises(ValueError, match="from 1 to the chunk's 16, not 0"):      # refused, not ignored
        bench.main(argv[:-1] + [str(tmp_path / "w0"), "--exec-horizon", "0"])


@pytest.mark.slow
def test_eval_on_a_small_cell_pairs_arms_and_resumes(tmp_path, capsys):
    argv = ["eval", "--policy", "embodia-mt50", "--tasks", "reach-v3", "--axes", "gain,delay,pose",
            "--severity", "gain=0.5", "--arms", "off,online,replay", "--memory-settings", '{"sigma": 1.0}',
            "--streams", "2", "--episodes", "4", "--seed", "0", "--max-steps", "24", "--jobs", "1",
            "--workdir", str(tmp_path / "w"), "--plot-dir", str(tmp_path / "plots")]
    bench.main(argv)
    rep = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rep["severity"] == {"gain": 0.5, "delay": 1.0, "pose": 1.0}
    assert json.loads((tmp_path / "w" / "policy" / "memory.json").read_text())["sigma"] == 1.0
    for axis in ("gain", "delay", "pose"):
        row = rep["axes"][axis]
        assert {"clean", "off", "online", "replay", "cost", "comparisons"} <= set(row)
        assert row["off"]["episodes"] == 4 and row["clean"]["episodes"] == 4       # second halves, 2 streams
        c = row["comparisons"]
        assert set(c) == {"online - off", "replay - off", "online - replay"}
        on, off = row["online"]["successes"], row["off"]["successes"]
        assert c["online - off"]["a_only"] - c["online - off"]["b_only"] == on - off   # paired counts add up
        assert (tmp_path / "plots" / f"{axis}.png").stat().st_size > 1000
        cell = rep["cells"][f"reach-v3|{axis}"]
        assert isinstance(cell["harmed"], bool) and set(cell["harmed_arms"]) <= {"online", "replay"}
        assert cell["harmed"] == ("online" in cell["harmed_arms"]) and "replay - off" in cell
        assert ("replay" in cell["harmed_arms"]) == (cell["replay - off"]["newcombe_paired95"][1] < 0)
    streams = list((tmp_path / "w" / "streams").iterdir())
    assert len(streams) == 2 * (3 + 3 * 3)               # clean + 3 axes, 3 arms each, 2 streams each
    clean = rep["clean"]                                  # do-no-harm on the clean cell too
    assert set(clean["comparisons"]) == {"online - off", "replay - off"}
    assert clean["off"] == rep["axes"]["gain"]["clean"] and isinstance(clean["cells"]["reach-v3"]["harmed"], bool)
    assert rep["cost"]["episodes"] == len(streams) * 4 and rep["cost"]["invocations"] == 1
    assert rep["cost"]["jobs"] == [1] and rep["cost"]["episodes_per_s"] > 0
    bench.main(argv)                                      # everything kept: the same report again
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {k: v for k, v in again.items() if k != "seconds"} == {k: v for k, v in rep.items() if k != "seconds"}
