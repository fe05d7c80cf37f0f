"""The learned success detector (issue 18): its calibration, files, training from recordings, the
`--success learned` labeler and its threshold rule, and the label-source arm of the memory benchmark."""
import json
import shutil
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch

from embodia.agent.evaluation.memory_eval import NoOracle, arm_loop, label_summary
from embodia.agent.loop.episode import run_episode
from embodia.agent.loop.success import (
    LEARNED_THRESHOLD,
    LearnedLabeler,
    SuccessSourceError,
    check_source,
    make_labeler,
    probability_label,
)
from embodia.agent.training.success_train import (
    fit_kind,
    fold_indices,
    out_of_fold_logits,
    precision_recall,
    record,
    train_success_head,
)
from embodia.devices import open_device
from embodia.policies import BUNDLED_CHECKPOINTS, RandomPolicy
from embodia.policies.success_head import (
    DIST_EPS,
    GEOMETRY_DIM,
    HEAD_CONFIG,
    HEAD_WEIGHTS,
    MAX_POINTS,
    Reader,
    SuccessDetector,
    SuccessHead,
    SuccessHeadError,
    fit_platt,
    geometry,
    load_success_head,
    save_success_head,
    state_points,
)
from embodia.sim.gui import ChancePolicy, GuiSimDevice

TINY = BUNDLED_CHECKPOINTS / "embodia-tiny"
CHEETAH = f"mujoco:{Path(gymnasium.__file__).parent / 'envs' / 'mujoco' / 'assets' / 'half_cheetah.xml'}?render=0"


@pytest.fixture
def ckpt(tmp_path):
    """A copy of embodia-tiny without its success head."""
    out = tmp_path / "ckpt"
    shutil.copytree(TINY, out)
    for f in (HEAD_WEIGHTS, HEAD_CONFIG):
        (out / f).unlink(missing_ok=True)
    return out


# -- calibration and the threshold rule ---------------------------------------------------------------

def test_platt_calibration_recovers_probabilities():
    rng = np.random.default_rng(0)
    z = rng.normal(0, 3, 4000)                    # logits of an over-confident model: truth is sigmoid(z / 3 - 1)
    y = rng.random(4000) < 1 / (1 + np.exp(-(z / 3 - 1)))
    a, b = fit_platt(z, y)
    assert a == pytest.approx(1 / 3, abs=0.06) and b == pytest.approx(-1, abs=0.15)
    # a reversed score is calibrated by a negative slope, not clipped
    a2, _ = fit_platt(-z, y)
    assert a2 < 0


def test_threshold_rule():
    assert probability_label(LEARNED_THRESHOLD, "learned").verified
    assert probability_label(1 - LEARNED_THRESHOLD + 1e-9, "learned").verified is False
    sure_fail = probability_label(0.01, "learned")
    assert (sure_fail.success, sure_fail.verified) == (False, True)
    unsure = probability_label(0.6, "learned")
    assert (unsure.success, unsure.verified) == (True, False)
    assert probability_label(0.6, "learned", threshold=0.55).verified
    assert unsure.to_dict()["probability"] == 0.6


def test_precision_recall_and_folds():
    p = np.array([0.99, 0.95, 0.6, 0.2, 0.97])
    y = np.array([True, False, True, False, True])
    r = precision_recall(p, y, 0.9)
    assert (r["labelled_success"], r["true_positives"]) == (3, 2)
    assert r["precision"] == pytest.approx(2 / 3) and r["recall"] == pytest.approx(2 / 3)
    folds = fold_indices(100, 4, seed=1)
    assert [len(f) for f in folds] == [25] * 4 and sorted(np.concatenate(folds).tolist()) == list(range(100))
    assert all((a == b).all() for a, b in zip(fold_indices(100, 4, seed=1), folds))


def test_fit_kind_separates_a_learnable_rule():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 12)).astype(np.float32)
    y = x[:, 3] + 0.5 * x[:, 7] > 0.3
    head = SuccessHead({"robot": 12}, hidden=16)
    fit_kind(head, "robot", x[:300], y[:300], steps=300)
    with torch.inference_mode():
        z = head.logits("robot", torch.as_tensor(x[300:])).numpy()
    pos, neg = z[y[300:]], z[~y[300:]]
    auc = (pos[:, None] > neg[None, :]).mean()       # ranks successes above failures
    assert auc > 0.95


def test_state_branch_learns_a_distance_threshold_the_layernorm_alone_misses():
    """A success that is a sharp threshold on a small distance (puck within 0.06 of a moving goal)
    among wide irrelevant features: through the geometry and the state branch it is learned."""
    rng = np.random.default_rng(0)
    n = 600
    names = ["a_x", "a_y", "puck_x", "puck_y", "goal_x", "goal_y"]
    pts = state_points(names)
    assert pts == [[0, 1], [2, 3], [4, 5]]
    state = rng.uniform(-0.5, 0.5, (n, 6))
    state[:, 2:4] = state[:, 4:6] + rng.uniform(-0.12, 0.12, (n, 2))       # the puck near the goal
    y = np.linalg.norm(state[:, 2:4] - state[:, 4:6], axis=1) <= 0.06
    noise = rng.normal(0, 1, (n, 64)).astype(np.float32)                    # a camera's features
    g = np.stack([geometry(s, pts) for s in state])
    x = np.concatenate([g, state.astype(np.float32), noise], 1)

    def auc(x, state_dims):
        torch.manual_seed(0)
        head = SuccessHead({"robot": x.shape[1]}, hidden=32, state_dims=state_dims)
        fit_kind(head, "robot", x[:450], y[:450], steps=300)
        with torch.inference_mode():
            z = head.logits("robot", torch.as_tensor(x[450:])).numpy()
        return (z[y[450:]][:, None] > z[~y[450:]][None, :]).mean()
    assert auc(x, {"robot": GEOMETRY_DIM + 6}) > 0.93
    # the same columns through the LayerNorm'd MLP alone, or the raw positions without the geometry: not learned
    assert auc(x, {}) < 0.85
    assert auc(x[:, GEOMETRY_DIM:], {"robot": 6}) < 0.7
    # the geometry: the pair (puck, goal) is the 2nd pair of the first point, then norms
    s = np.array([0, 0, 0.3, 0.4, 0.3, 0.45])
    assert np.exp(geometry(s, pts)[MAX_POINTS - 1]) - DIST_EPS == pytest.approx(0.05, abs=1e-6)
    assert np.exp(geometry(s, pts)[0]) - DIST_EPS == pytest.approx(0.5, abs=1e-6)


def test_out_of_fold_logits_never_see_their_episode():
    """Cross-fitted calibration: an episode's logit comes from a head trained without it. Labels
    that are pure noise (nothing to learn) give out-of-fold logits near chance, while the
    same head scored on its own training rows would have memorized them."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 40)).astype(np.float32)
    y = rng.random(120) < 0.5
    f = fold_indices(120, 4, 0)
    assert sorted(np.concatenate(f).tolist()) == list(range(120))
    z = out_of_fold_logits("robot", 40, {}, x, y, k=4, steps=400, seed=0, hidden=32)
    auc = (z[y][:, None] > z[~y][None, :]).mean()
    assert 0.3 < auc < 0.7
    torch.manual_seed(0)
    head = SuccessHead({"robot": 40}, hidden=32)
    fit_kind(head, "robot", x, y, steps=400)
    with torch.inference_mode():
        zin = head.logits("robot", torch.as_tensor(x)).numpy()
    assert (zin[y][:, None] > zin[~y][None, :]).mean() > 0.9


# -- files --------------------------------------------------------------------------------------------

def test_save_load_round_trip_and_refusals(ckpt):
    head = SuccessHead({"robot": 10, "gui": 6}, hidden=8)
    head.calibration = {"robot": (0.5, -1.0), "gui": (2.0, 0.25), "robot/sawyer": (3.0, 1.0)}
    save_success_head(head, ckpt)
    back, meta = load_success_head(ckpt)
    x = np.random.default_rng(0).normal(size=(5, 6)).astype(np.float32)
    assert np.allclose(back.probability("gui", x), head.eval().probability("gui", x))
    assert back.calibration["robot"] == (0.5, -1.0) and meta["dims"] == {"robot": 10, "gui": 6}
    # a body with its own calibration uses it; any other body the kind's
    xr = np.random.default_rng(1).normal(size=(5, 10)).astype(np.float32)
    assert not np.allclose(back.probability("robot", xr, "sawyer"), back.probability("robot", xr, "planar_pusher"))
    assert np.allclose(back.probability("robot", xr, "planar_pusher"), back.probability("robot", xr))
    # a head is tied to its backbone's weights
    cfg = ckpt / HEAD_CONFIG
    cfg.write_text(cfg.read_text().replace(meta["backbone_sha256"], "0" * 64))
    with pytest.raises(SuccessHeadError, match="another backbone"):
        load_success_head(ckpt)
    cfg.write_text("{not json")
    with pytest.raises(SuccessHeadError, match="corrupt"):
        load_success_head(ckpt)
    (ckpt / HEAD_WEIGHTS).unlink()
    with pytest.raises(SuccessHeadError, match="no success head"):
        load_success_head(ckpt)


# -- training from recordings ---------------------------------------------------------------------------

def test_train_from_recordings_gui_and_robot(tmp_path, ckpt):
    """Record a few gui-sim and twogap episodes (successes by the expert, failures by random
    agents), train on them: the head reads the recordings back, saves a calibrated head, and the
    labeler built on it labels episodes."""
    plan = [("gui", "gui-sim:settings?task=turn-on&split=train&max_steps=4", [("expert@0.0", 6), ("random", 6)]),
            ("pusher", "sim:twogap-push?size=32x32", [("expert@0.05", 2), ("random", 2)])]
    dirs = record(tmp_path / "data", ckpt, plan, log=lambda m: None)
    rep = train_success_head(dirs, ckpt, folds=3, steps=150, log=lambda m: None)
    assert set(rep) == {"gui", "robot"}
    assert rep["gui"]["episodes"] == 12 and 0 < rep["gui"]["successes"] < 12 and rep["gui"]["folds"] == 3
    # every episode scored out of fold: the figures count all 12
    assert max(r["labelled_success"] for r in rep["gui"]["out_of_fold_at"]) <= 12
    head, meta = load_success_head(ckpt)
    assert set(head.calibration) == {"gui", "robot"} and meta["calibration_fit"] == "cross-fitted"
    assert meta["state_dims"] == {"robot": Reader(ckpt).robot_state_dim}
    with open_device("gui-sim:settings?task=turn-on&split=train&max_steps=4") as dev:
        lab = LearnedLabeler(dev, ckpt)
        r = run_episode(dev, dev.expert(), seed=5, labeler=lab)
        got = r.info["success_label"]
        assert got["source"] == f"learned:{ckpt}" and 0 <= got["probability"] <= 1


# -- the labeler on the bundled detector ------------------------------------------------------------------

def test_bundled_detector_tells_success_from_failure_on_screens():
    """The bundled head on held-out gui-sim labels (split=test) under a layout shift: the expert's
    finished episodes get a higher P(success) than a random agent's failed ones, and a verified
    success label is only ever given to a true success here."""
    dev = GuiSimDevice("settings", task="turn-on", split="test", shift="layout", max_steps=4)
    lab = make_labeler("learned", dev)
    good, bad = [], []
    for seed in range(6):
        r = run_episode(dev, dev.expert(), seed=seed, labeler=lab)
        good.append(r.info["success_label"]["probability"])
        assert dev.success()
        r = run_episode(dev, ChancePolicy(dev), seed=seed, labeler=lab)
        if not dev.success():
            bad.append(r.info["success_label"]["probability"])
            assert not (r.info["success_label"]["verified"] and r.info["success_label"]["success"])
    assert bad and np.mean(good) > np.mean(bad) + 0.3


def test_bundled_detector_on_the_pusher():
    """The bundled head on twogap-push under a shift it never saw (blocked-right), seeds far from
    its training ones: the expert's successes are verified successes, a random agent's failures
    never are, and a head whose feature width does not match the checkpoint is refused."""
    with open_device("sim:twogap-push?shift=blocked-right") as dev:
        lab = make_labeler("learned", dev)
        good, bad = [], []
        for seed in range(900_000, 900_008):       # the expert takes the blocked gap about half the time
            r = run_episode(dev, dev.expert(), seed=seed, labeler=lab)
            if dev.success():
                good.append(r.info["success_label"])
            r = run_episode(dev, RandomPolicy(dev.embodiment), seed=seed, labeler=lab)
            assert not dev.success()
            bad.append(r.info["success_label"])
        assert len(good) >= 3 and sum(g["verified"] and g["success"] for g in good) >= len(good) - 1
        assert not any(b["verified"] and b["success"] for b in bad)
        assert max(b["probability"] for b in bad) < min(g["probability"] for g in good)
        det = SuccessDetector.from_pretrained(TINY)
        det.head = SuccessHead({"robot": det.reader.robot_dim - 1, "gui": det.reader.gui_dim})
        with pytest.raises(SuccessHeadError, match="retrain"):
            det.check(dev.embodiment)


def test_learned_source_refuses_unknown_bodies_and_bad_specs():
    with open_device(CHEETAH) as dev:
        with pytest.raises(SuccessSourceError, match="half_cheetah"):
            make_labeler("learned", dev)
    with pytest.raises(SuccessSourceError, match="learned:<checkpoint"):
        check_source("learned: ")
    check_source("learned")
    check_source("learned:/some/ckpt")
    with open_device("sim:twogap-push?render=0") as dev:
        with pytest.raises(SuccessSourceError, match="no success head|no such|No such"):
            make_labeler("learned:/nonexistent/ckpt", dev)


# -- the memory benchmark's label-source arm ----------------------------------------------------------------

def test_no_oracle_hides_the_check_and_arms_are_wired():
    dev = GuiSimDevice("settings", task="turn-on", split="train", max_steps=4)
    blind = NoOracle(dev)
    assert "success" in dev.capabilities and "success" not in blind.capabilities
    assert blind.embodiment is dev.embodiment
    # blind: the off arm and the learned arm run on the hidden device, stopped and labelled by the detector
    for arm in ("off", "learned"):
        loop_dev, labeler, on_step = arm_loop(arm, dev, blind=True)
        assert isinstance(loop_dev, NoOracle) and isinstance(labeler, LearnedLabeler) and callable(on_step)
        r = run_episode(loop_dev, dev.expert(), seed=3, labeler=labeler, on_step=on_step)
        assert "success_label" in r.info
    # the oracle-fed reference arm keeps the simulator; not blind, only the label arm gets a labeler
    loop_dev, labeler, on_step = arm_loop("online", dev, blind=True)
    assert loop_dev is dev and labeler is None and on_step is None
    assert arm_loop("off", dev, blind=False)[1] is None


def test_label_summary_counts_false_successes():
    labels = [{"success": True, "verified": True}, {"success": True, "verified": True},
              {"success": False, "verified": True}, {"success": True, "verified": False}]
    s = label_summary(labels, [True, False, True, True])
    assert s == {"episodes": 4, "verified_success": 2, "verified_failure": 1, "unverified": 1,
                 "false_successes": 1, "false_failures": 1, "true_successes_missed": 2}


# -- the command line -------------------------------------------------------------------------------------

def test_cli_success_learned_and_train_success_head(tmp_path):
    import importlib

    from typer.testing import CliRunner
    cli = importlib.import_module("embodia.agent.cli.app")
    r = CliRunner().invoke(cli.app, ["eval", "-d", "gui-sim:settings?task=turn-on&max_steps=4", "-p", "expert",
                                     "-n", "2", "--success", "learned", "--json", str(tmp_path / "rep.json")])
    assert r.exit_code == 0, r.output
    labels = [e["info"]["success_label"] for e in json.loads((tmp_path / "rep.json").read_text())["per_episode"]]
    assert [lab["source"] for lab in labels] == ["learned", "learned"] and all("probability" in lab for lab in labels)
    r = CliRunner().invoke(cli.app, ["run", "-d", CHEETAH, "-p", "random", "--no-record", "--success", "learned"])
    assert r.exit_code == 2 and "half_cheetah" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(cli.app, ["train", "--success-head", "--data", str(tmp_path), "--out", str(tmp_path / "no")])
    assert r.exit_code == 2 and "not a checkpoint" in r.output
