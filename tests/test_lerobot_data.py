"""A dataset written by LeRobot's own writer (tests/data/lerobot_pusher, made by
tests/data/make_lerobot_fixture.py; no success flags): `embodia train` trains on it as demonstrations,
the checkpoint evaluates, and `embodia memory ingest` stores it only with --as-successes."""
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from embodia.agent.cli.app import app
from embodia.agent.recording.dataset import LocalDataset
from embodia.agent.training.ingest import episodes_to_store
from embodia.agent.training.train import training_episodes

FIXTURE = Path(__file__).parent / "data" / "lerobot_pusher"
run = CliRunner().invoke


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    out = tmp_path_factory.mktemp("lerobot") / "ck"
    res = run(app, ["train", "--data", str(FIXTURE), "--out", str(out), "--steps", "3", "--batch-size", "8",
                    "--save-every", "3", "--threads", "1", "--hidden", "32", "--layers", "1"],
              catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "no success flags" in res.output and "3 episodes" in res.output
    return out


def test_the_fixture_is_lerobots_and_carries_no_success_flag():
    info = json.loads((FIXTURE / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0"
    ds = LocalDataset(FIXTURE)
    assert [e["success"] for e in ds.episodes] == [None, None, None]
    logged = []
    assert training_episodes(ds, log=logged.append) == [0, 1, 2] and "no success flags" in logged[0]
    assert episodes_to_store(ds.episodes) == [] and episodes_to_store(ds.episodes, as_successes=True) == [0, 1, 2]


def test_flagged_datasets_still_train_on_successes_only():
    class Flagged:
        root = "flagged"
        episodes = [{"success": True}, {"success": False}, {"success": None}]
    assert training_episodes(Flagged(), log=lambda m: None) == [0]
    Flagged.episodes = [{"success": False}]
    with pytest.raises(ValueError, match="no successful episodes to train on"):
        training_episodes(Flagged(), log=lambda m: None)


def test_trained_on_lerobot_data_it_evaluates(ckpt, tmp_path):
    rep = tmp_path / "rep.json"
    res = run(app, ["eval", "--device", "sim:twogap-push", "--policy", str(ckpt), "-n", "1", "--json", str(rep)],
              catch_exceptions=False)
    assert res.exit_code in (0, 1), res.output        # 1 = no success: a 3-step model may well fail
    r = json.loads(rep.read_text())
    assert r["episodes"] == 1 and r["errors"] == 0 and r["per_episode"][0]["length"] > 0


def test_ingest_needs_the_explicit_flag(ckpt, tmp_path):
    mem = tmp_path / "mem"
    res = run(app, ["memory", "ingest", str(mem), "--data", str(FIXTURE), "--policy", str(ckpt)])
    assert res.exit_code == 2
    out = res.output.replace("\n", "")
    assert "stored nothing" in out and "no success flag" in out and "--as-successes" in out
    assert not mem.exists()
    res = run(app, ["memory", "ingest", str(mem), "--data", str(FIXTURE), "--policy", str(ckpt),
                    "--device", "sim:twogap-push", "--as-successes"], catch_exceptions=False)
    assert res.exit_code == 0 and "ingested 3 episodes" in res.output, res.output
    res = run(app, ["memory", "stats", str(mem)], catch_exceptions=False)
    assert "planar_pusher/twogap-push" in res.output and "entries=" in res.output


def test_norms_are_fitted_on_every_dataset_of_a_body():
    """A recorded suite gives one dataset per task, all of one body: the normalizer spans them all."""
    import numpy as np

    from embodia.agent.training.train import fit_norms

    class Emb:
        name = "sawyer"

    class DS:
        embodiment = Emb()

        def __init__(self, lo, hi):
            self.rows = np.linspace(lo, hi, 200)[:, None] * np.ones((1, 2))

        def episode(self, i):
            return {"state": self.rows, "action": self.rows[:, :1]}
    norms = fit_norms([DS(0.0, 1.0), DS(5.0, 6.0)], [[0], [0]])
    q01, q99 = norms["sawyer"]["action"]["q01"][0], norms["sawyer"]["action"]["q99"][0]
    assert q01 < 0.1 and q99 > 5.9           # the first dataset alone would give [0.01, 0.99]
    assert fit_norms([DS(0.0, 1.0)], [[0]], skip={"sawyer": {}}) == {}


# -- a mapping file (GR00T's meta/modality.json form) where the features do not name the numbers -----
def anonymous_copy(tmp_path) -> Path:
    """The fixture with its names and robot_type gone, as many LeRobot datasets are written."""
    import shutil
    root = tmp_path / "anon"
    shutil.copytree(FIXTURE, root)
    info = json.loads((root / "meta" / "info.json").read_text())
    info["robot_type"] = None
    for key in ("observation.state", "action"):
        info["features"][key]["names"] = None
    (root / "meta" / "info.json").write_text(json.dumps(info))
    return root


PUSHER_MAP = {"embodiment": "planar_pusher",
              "state": {"pusher": {"start": 0, "end": 4, "names": ["pusher_x", "pusher_y", "pusher_vx", "pusher_vy"]},
                        "puck": {"start": 4, "end": 8, "names": ["puck_x", "puck_y", "puck_vx", "puck_vy"]},
                        "goal": {"start": 8, "end": 10, "names": ["goal_x", "goal_y"]}},
              "action": {"vx": {"start": 0, "end": 1}, "vy": {"start": 1, "end": 2}},
              "video": {"overhead": {"original_key": "observation.images.top"}},
              "annotation": {"human.task_description": {"original_key": "task_index"}}}


def test_a_mapping_file_names_an_anonymous_dataset(tmp_path):
    root = anonymous_copy(tmp_path)
    bare = LocalDataset(root)
    assert bare.embodiment.name == "unknown" and bare.embodiment.state[0].name == "observation.state_0"
    (root / "meta" / "modality.json").write_text(json.dumps(PUSHER_MAP))       # dropped beside info.json
    ds = LocalDataset(root)
    assert ds.embodiment.name == "planar_pusher"
    assert [c.name for c in ds.embodiment.state] == [c.name for c in LocalDataset(FIXTURE).embodiment.state]
    assert [c.name for c in ds.embodiment.actions] == ["vx", "vy"]
    assert [c.name for c in ds.embodiment.cameras] == ["overhead"]
    assert ds.frames(0, "overhead").shape == LocalDataset(FIXTURE).frames(0, "top").shape


def test_trained_through_a_mapping_file_the_checkpoint_drives_the_named_body(tmp_path):
    root = anonymous_copy(tmp_path)
    mapping = tmp_path / "pusher_modality.json"                       # kept outside the dataset: --modality
    mapping.write_text(json.dumps({**PUSHER_MAP, "video": {"top": {"original_key": "observation.images.top"}}}))
    out = tmp_path / "ck"
    args = ["train", "--data", str(root), "--out", str(out), "--steps", "2", "--batch-size", "4",
            "--save-every", "2", "--threads", "1", "--hidden", "32", "--layers", "1"]
    res = run(app, args + ["--modality", str(mapping)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    rep = tmp_path / "rep.json"
    res = run(app, ["eval", "--device", "sim:twogap-push", "--policy", str(out), "-n", "1",
                    "--json", str(rep)], catch_exceptions=False)
    assert res.exit_code in (0, 1), res.output                 # 1 = no success: a 2-step model may well fail
    r = json.loads(rep.read_text())
    assert r["episodes"] == 1 and r["errors"] == 0 and r["per_episode"][0]["length"] > 0
    bare = tmp_path / "ck_bare"                                        # without the mapping: an unknown body
    res = run(app, args[:3] + ["--out", str(bare)] + args[5:], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    res = run(app, ["eval", "--device", "sim:twogap-push", "--policy", str(bare), "-n", "1"])
    assert res.exit_code == 2 and "unknown" in res.output, res.output


@pytest.mark.parametrize("bad, says", [
    ({"state": {"a": {"start": 0, "end": 11}}}, "0 <= start < end <= 10"),
    ({"state": {"a": {"start": 0, "end": 4}, "b": {"start": 3, "end": 5}}}, "both cover entry 3"),
    ({"video": {"cam": {"original_key": "observation.images.nope"}}}, "no image feature"),
    ({"action": {"v": {"start": 0, "end": 2, "original_key": "observation.velocity"}}}, "only 'action' is read"),
    ({"embodiment": "x", "robots": 1}, "unknown keys ['robots']"),
])
def test_a_bad_mapping_file_is_one_clear_error(tmp_path, bad, says):
    root = anonymous_copy(tmp_path)
    mapping = tmp_path / "m.json"
    mapping.write_text(json.dumps(bad))
    res = run(app, ["train", "--data", str(root), "--out", str(tmp_path / "ck"), "--steps", "1",
                    "--modality", str(mapping)])
    assert res.exit_code == 2 and says in res.output.replace("\n", " ") and str(mapping) in res.output.replace("\n", "")
    assert not (tmp_path / "ck").exists()
