"""Offline evaluation scores recorded actions perfectly, punishes shuffled ones, and prints chance
rates a random clicker really gets."""
import json
import math

import numpy as np
import pytest

from embodia.agent.evaluation.evaluate import evaluate
from embodia.agent.evaluation.offline import (
    RecordedPolicy,
    kendall,
    offline_policy,
    score,
    score_robot,
    spearman,
    summary_lines,
)
from embodia.agent.evaluation.offline_gui import RandomClickPolicy, RecordedGuiPolicy, score_gui, target_box
from embodia.agent.recording.dataset import LocalDataset
from embodia.devices import GuiAction, open_device
from embodia.devices.embodiment import Screen


@pytest.fixture(scope="module")
def pusher(tmp_path_factory):
    """Four expert episodes of twogap-push in our LeRobot v3 layout."""
    from embodia.agent.recording.writer import DatasetWriter
    root = tmp_path_factory.mktemp("pusher") / "ds"
    dev = open_device("sim:twogap-push")
    w = DatasetWriter(root, dev.embodiment)
    evaluate(dev, dev.expert(), episodes=4, seed=0, recorder=w,
             episode_meta={"device": "sim:twogap-push"})
    w.close()
    dev.close()
    return root


@pytest.fixture(scope="module")
def phone(tmp_path_factory):
    """Expert episodes of gui-sim over all apps, recorded as GUI step logs."""
    from embodia.agent.recording.gui_log import GuiRecorder
    root = tmp_path_factory.mktemp("phone") / "rec"
    dev = open_device("gui-sim:all")
    rec = GuiRecorder(root, dev.embodiment)
    evaluate(dev, dev.expert(), episodes=14, seed=0, recorder=rec, episode_meta={"device": "gui-sim:all"})
    dev.close()
    return root


def test_recorded_actions_score_zero_error_and_shuffled_ones_do_not(pusher, tmp_path):
    ds = LocalDataset(pusher)
    exact = score_robot(ds, RecordedPolicy(ds.embodiment), plot_dir=tmp_path, plot_episodes=2)
    assert exact["overall"]["first"]["nmae_mean"] == 0.0 and exact["overall"]["chunk"]["nmae_mean"] == 0.0
    assert exact["overall"]["first"]["n"] == sum(len(ds.episode(i)["action"]) for i in range(4))
    wrong = score_robot(ds, RecordedPolicy(ds.embodiment, shuffle=True))
    # the same numbers at the wrong times: worse than always predicting the mean action
    base = wrong["baseline_mean_action"]["first"]["nmae_mean"]
    assert wrong["overall"]["first"]["nmae_mean"] > base > 0.05
    assert wrong["overall"]["chunk"]["nmae_mean"] > base
    for ch in exact["channels"]:
        assert wrong["overall"]["first"]["nmae"][ch] > 0.05
    assert [p.rsplit("/", 1)[-1] for p in exact["plots"]] == ["episode_0000.png", "episode_0001.png"]
    assert all((tmp_path / p.rsplit("/", 1)[-1]).read_bytes()[:4] == b"\x89PNG" for p in exact["plots"])
    assert len(exact["per_episode"]) == 4 and "vx" in exact["units"]


def test_chunk_error_grows_with_a_lag(pusher):
    """A policy one step late scores a nonzero error that the scorer reports per chunk offset."""
    ds = LocalDataset(pusher)

    class Late(RecordedPolicy):
        def act(self, obs, instruction):
            return self.actions[max(0, self.t - 1):max(0, self.t - 1) + self.embodiment.chunk]
    rep = score_robot(ds, Late(ds.embodiment), stride=4)
    assert rep["stride"] == 4
    assert 0 < rep["overall"]["first"]["nmae_mean"] < score_robot(
        ds, RecordedPolicy(ds.embodiment, shuffle=True), stride=4)["overall"]["first"]["nmae_mean"]
    assert len(rep["overall"]["chunk_nmae_by_offset"]) == ds.embodiment.chunk
    late = Late(ds.embodiment)
    late.exec_horizon = 3           # a checkpoint deciding every 3 steps is asked every 3 steps
    assert score_robot(ds, late)["stride"] == 3 != ds.embodiment.exec_horizon


def test_gui_recording_scored_against_itself_is_perfect_and_shuffled_is_not(phone):
    rep = score_gui(phone, RecordedGuiPolicy())
    assert rep["steps"] >= 30
    for m in ("type", "grounding", "step_success"):
        assert rep["overall"][m]["rate"] == 1.0, m
    assert rep["overall"]["text"]["n"] > 0 and rep["overall"]["text"]["rate"] == 1.0
    assert set(rep["by_app"]) >= {"settings", "messages", "contacts", "signup"} or len(rep["by_app"]) >= 2
    assert sum(t["step_success"]["n"] for t in rep["by_action"].values()) == rep["steps"]
    shuffled = score_gui(phone, RecordedGuiPolicy(shuffle=True))
    assert shuffled["overall"]["step_success"]["rate"] < 0.6


def test_random_click_gets_the_printed_chance_rates(phone):
    rep = score_gui(phone, RandomClickPolicy(seed=3))
    ch, o = rep["chance"], rep["overall"]
    # a click is always the type: its accuracy is the share of recorded clicks, exactly
    assert o["type"]["rate"] == pytest.approx(ch["type"], abs=1e-4)
    assert 0 < ch["type"] < 1 and o["text"]["rate"] == 0.0 and ch["text"] == 0.0
    # grounding hits are a sum of Bernoulli draws with the targets' area shares
    n = o["grounding"]["n"]
    mean = ch["grounding"] * n
    sd = math.sqrt(mean)
    assert abs(o["grounding"]["k"] - mean) <= 4 * sd + 1
    assert ch["grounding"] < 0.25 and o["grounding"]["ci95"][0] <= ch["grounding"] <= o["grounding"]["ci95"][1]
    text = "\n".join(summary_lines(rep))
    assert f"chance {ch['grounding']:.3f}" in text


def test_target_box_prefers_the_named_element_then_the_smallest_clickable_one():
    s = Screen(200, 100)
    tree = [{"index": 0, "bounds": [0, 0, 200, 100], "clickable": True},
            {"index": 1, "bounds": [0, 0, 100, 50], "clickable": True},
            {"index": 2, "bounds": [0, 0, 20, 10], "clickable": False}]
    assert target_box(GuiAction("click", point=(50, 50)), tree, s) == (0.0, 0.0, 500.0, 500.0)
    assert target_box(GuiAction("click", point=(50, 50), element=0), tree, s) == (0.0, 0.0, 1000.0, 1000.0)
    assert target_box(GuiAction("key", keys=("enter",)), tree, s) is None


def test_memory_from_other_episodes_steers_a_random_clicker(tmp_path):
    """A leave-one-out screen memory of the other episodes of one task decides some steps, and
    the same steps score better with it than without; the recorded actions stay perfect with it."""
    from embodia.agent.recording.gui_log import GuiRecorder
    dev = open_device("gui-sim:settings?task=turn-on")
    rec = GuiRecorder(tmp_path / "rec", dev.embodiment)
    evaluate(dev, dev.expert(), episodes=10, seed=0, recorder=rec,
             episode_meta={"device": "gui-sim:settings?task=turn-on"})
    dev.close()
    rep = score_gui(tmp_path / "rec", RandomClickPolicy(seed=3), memory=True)
    assert rep["memory"]["step_success"]["n"] == rep["overall"]["step_success"]["n"]
    assert rep["memory_replaced_steps"] > 0
    assert rep["memory"]["step_success"]["k"] > rep["overall"]["step_success"]["k"] + 2
    # scoring one episode, the memory still holds the other nine (and never episode 9 itself)
    one = score_gui(tmp_path / "rec", RandomClickPolicy(seed=3), memory=True, episodes=[9])
    assert one["episodes"] == 1 and one["memory_replaced_steps"] > 0


def test_offline_policy_specs_and_dispatch(pusher, phone):
    assert isinstance(offline_policy("recorded", pusher), RecordedPolicy)
    assert isinstance(offline_policy("shuffled", phone), RecordedGuiPolicy)
    with pytest.raises(ValueError, match="random-click is a GUI policy"):
        offline_policy("random-click", pusher)
    rep = score(pusher, offline_policy("random", pusher), episodes=[0])
    assert rep["kind"] == "robot" and rep["overall"]["first"]["nmae_mean"] > 0
    json.dumps(rep)


def test_rank_agreement():
    assert spearman([0.1, 0.2, 0.3], [0.9, 0.5, 0.1]) == -1.0
    assert kendall([1, 2, 3], [1, 2, 3]) == 1.0
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    assert np.isclose(kendall([1, 2, 3, 4], [1, 2, 4, 3]), 2 / 3)


def test_cli_eval_offline_writes_the_report(pusher, phone, tmp_path):
    from typer.testing import CliRunner

    from embodia.agent.cli.app import app
    runner = CliRunner()
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["eval-offline", str(pusher), "-p", "shuffled", "--episodes", "0-1",
                              "--plots", str(tmp_path / "png"), "--json", str(out)])
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    assert rep["episodes"] == 2 and rep["policy"] == "shuffled" and rep["overall"]["first"]["nmae_mean"] > 0.05
    assert len(list((tmp_path / "png").glob("*.png"))) == 2
    res = runner.invoke(app, ["eval-offline", str(phone), "-p", "random-click"])
    assert res.exit_code == 0 and "chance" in res.output and "step_success" in res.output
    res = runner.invoke(app, ["eval-offline", str(pusher), "-p", "random-click"])
    assert res.exit_code == 2 and "random-click is a GUI policy" in res.output
    res = runner.invoke(app, ["eval-offline", str(pusher), "-p", "recorded", "--episodes", "2-9"])
    assert res.exit_code == 2 and "episodes [4, 5, 6, 7, 8, 9] out of range" in res.output


LEROBOT_FIXTURE = __import__("pathlib").Path(__file__).parent / "data" / "lerobot_pusher"


def test_a_dataset_written_by_lerobot_scores_with_an_embodiment_rebuilt_from_its_features():
    """tests/data/lerobot_pusher was written by LeRobot 0.4.4's own LeRobotDataset (see
    tests/data/make_lerobot_fixture.py): no embodia section, images as PNG in parquet."""
    ds = LocalDataset(LEROBOT_FIXTURE)
    assert "embodia" not in ds.info and ds.embodiment.kind == "lerobot dataset"
    assert [c.name for c in ds.embodiment.actions] == ["vx", "vy"] and ds.embodiment.state_dim == 10
    exact = score(LEROBOT_FIXTURE, offline_policy("recorded", LEROBOT_FIXTURE))
    assert exact["overall"]["first"]["nmae_mean"] == 0.0 and exact["overall"]["first"]["n"] == 48
    wrong = score(LEROBOT_FIXTURE, offline_policy("shuffled", LEROBOT_FIXTURE))
    assert wrong["overall"]["first"]["nmae_mean"] > 0.2
    assert set(wrong["scale"]) == {"vx", "vy"} and all(v > 0 for v in wrong["scale"].values())
    # a trained VLA binds to the rebuilt embodiment (same robot_type and dims) and is scored on it
    vla = score(LEROBOT_FIXTURE, offline_policy("embodia-tiny", LEROBOT_FIXTURE, threads=1), episodes=[0], stride=4)
    assert vla["overall"]["first"]["n"] == 4 and 0 < vla["overall"]["first"]["nmae_mean"] < 2


def test_training_scores_a_heldout_set_at_each_save(pusher, tmp_path):
    from embodia.agent.training.train import TrainConfig, heldout_log, train
    saves = []
    out = train(TrainConfig(data=[str(pusher)], out=str(tmp_path / "ck"), steps=8, batch_size=8, save_every=4,
                            threads=1, freeze_backbone_after=None, hidden=32, heads=2,
                            head=dict(dim=32, depth=2, heads=2), heldout=str(pusher), heldout_episodes=1,
                            heldout_stride=20),
                progress=False, log=lambda *_: None, on_save=lambda step, path: saves.append(step))
    rows = [json.loads(line) for line in heldout_log(out).read_text().splitlines()]
    assert [r["step"] for r in rows] == saves == [4, 8]
    assert all(r["episodes"] == 1 and r["decisions"] >= 3 and 0 < r["first_nmae"] < 10 for r in rows)


def test_gui_head_training_scores_a_heldout_recording_at_each_save(phone, tmp_path):
    import shutil

    from embodia.agent.loop.factory import BUNDLED
    from embodia.agent.training.gui_train import GuiTrainConfig, train_gui_head
    from embodia.agent.training.train import heldout_log
    ck = tmp_path / "ck"
    shutil.copytree(BUNDLED["embodia-tiny"], ck, ignore=shutil.ignore_patterns("gui_head.*"))
    train_gui_head(GuiTrainConfig(out=str(ck), episodes=6, steps=6, batch_size=8, save_every=3, heldout=str(phone)),
                   log=lambda *_: None, progress=False)
    rows = [json.loads(line) for line in heldout_log(ck).read_text().splitlines()]
    assert [r["step"] for r in rows] == [3, 6] and all(r["head"] == "gui" for r in rows)
    assert all(r["steps"] >= 30 and 0 <= r["step_success"] <= 1 for r in rows)
    assert (ck / "gui_head.safetensors").exists()
