"""The GUI head of embodia-tiny: robot behaviour untouched, pointing at unseen labels, the bundled
head beating chance on held-out gui-sim instances, files and errors."""
import hashlib
import shutil

import numpy as np
import pytest
import torch

from embodia.agent.loop.episode import run_episode
from embodia.agent.loop.factory import BUNDLED, PolicyError, make_policy
from embodia.agent.training.gui_data import GuiTeacher, record_gui_demos
from embodia.agent.training.gui_train import GuiTrainConfig, build_samples, fit
from embodia.devices import GuiAction, open_device
from embodia.policies.backbone import Backbone
from embodia.policies.gui.head import (
    ACTIONS,
    GuiHead,
    GuiHeadConfig,
    GuiHeadError,
    GuiHeadPolicy,
    SequenceBuilder,
    backbone_sha256,
    has_gui_head,
    label,
    load_gui_head,
    save_gui_head,
    words,
)
from embodia.policies.robot.vla import VLAPolicy
from embodia.sim.gui import GuiSimDevice

TINY = BUNDLED["embodia-tiny"]
# the robot weights BENCHMARKS.md's VLA and success-memory figures were measured with
ROBOT_SHA256 = {"model.safetensors": "b8c3a2ea7fa0d5d051af7c80406b4aac85a1ab5ef6f623dbf2774616a9eb6a78",
                "backbone/model.safetensors": "e20eff7ce2cd5c15a787dcea3429fe90edc108b4487e1b43d5ffde028979aae4"}


def test_robot_actions_are_bit_identical_with_the_gui_head_present(tmp_path):
    assert has_gui_head(TINY)
    for name, digest in ROBOT_SHA256.items():
        assert hashlib.sha256((TINY / name).read_bytes()).hexdigest() == digest, name
    bare = tmp_path / "tiny"
    shutil.copytree(TINY, bare, ignore=shutil.ignore_patterns("gui_head.*"))
    assert not has_gui_head(bare)
    with open_device("sim:twogap-push") as dev:
        obs = dev.reset(0)
        chunks = []
        for path in (TINY, bare):
            policy = make_policy(str(path), dev)
            assert isinstance(policy, VLAPolicy)
            policy.reset(0)
            chunks.append(policy.act(obs, dev.instruction))
    assert chunks[0].shape == (16, 2) and np.array_equal(chunks[0], chunks[1])


def test_words_keep_labels_whole_and_type_labels_point_at_the_slot():
    assert [w for w, _, _ in words("Turn on Wi-Fi, then 'Dinner at 8?'")] == \
        ["Turn", "on", "Wi-Fi", ",", "then", "'", "Dinner", "at", "8", "?", "'"]
    backbone = Backbone.from_pretrained(TINY / "backbone")
    builder = SequenceBuilder(backbone, GuiHeadConfig())
    typed = [s for s in record_gui_demos(30, seed=3, template="send-message", noise=0.0) if s.action.type == "type"]
    assert typed
    for st in typed:
        enc = builder.encode(st.prompt, st.instruction, st.history, st.tree, (st.size.width, st.size.height),
                             st.screen)
        lab = label(st, enc)
        assert ACTIONS[lab["label_type"]] == "type"
        assert enc.elem_index[lab["label_elem"]] == st.action.element
        a, b = enc.spans[lab["label_start"]][0], enc.spans[lab["label_end"]][1]
        assert st.instruction[a:b] == st.action.text


def _at_least(k: int, chances: list[float]) -> float:
    """P(at least k successes) when episode i succeeds by chance with probability chances[i]."""
    dist = [1.0]                                   # dist[j] = P(j successes so far)
    for p in chances:
        dist = [(dist[j] if j < len(dist) else 0.0) * (1 - p) + (dist[j - 1] * p if j else 0.0)
                for j in range(len(dist) + 1)]
    return sum(dist[k:])


@pytest.fixture
def one_thread():
    """Small matmuls on a shared 2-core machine: one thread is several times faster than two."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_a_tiny_head_learns_to_point_at_labels_it_never_saw(one_thread):
    torch.manual_seed(0)
    backbone = Backbone.from_pretrained(TINY / "backbone")
    hcfg = GuiHeadConfig(dim=32, layers=1, heads=2)
    steps = record_gui_demos(80, seed=50_000, template="open-app", noise=0.0)
    samples = build_samples(steps, SequenceBuilder(backbone, hcfg), backbone, log=lambda *_: None)
    head = fit(GuiHead(hcfg, backbone.hidden_size), samples,
               GuiTrainConfig(out="", steps=250, batch_size=32, lr=3e-3, warmup=20, threads=1),
               log=lambda *_: None, progress=False)
    dev = GuiSimDevice("launcher", split="test", shift="layout")
    policy = GuiHeadPolicy(head, backbone).bind(dev.embodiment)
    results = [run_episode(dev, policy, seed=s, max_steps=1) for s in range(20)]
    wins, chance = sum(bool(r.success) for r in results), max(r.info["chance"] for r in results)
    assert chance < 0.1 and wins >= 14, (wins, chance)          # held-out app names, new layouts


def test_the_bundled_gui_head_solves_held_out_multi_step_tasks():
    dev = GuiSimDevice("all", split="test", shift="layout")
    policy = make_policy("embodia-tiny", dev, threads=1)
    assert isinstance(policy, GuiHeadPolicy)
    results = [run_episode(dev, policy, seed=s) for s in range(1000, 1012)]
    wins = sum(bool(r.success) for r in results)
    chances = [r.info["chance"] for r in results]
    assert all(r.error is None for r in results)
    assert wins >= 9 and _at_least(wins, chances) < 1e-6, (wins, chances)


def test_the_policy_keeps_its_own_history_and_forgets_it_on_reset():
    dev = GuiSimDevice("settings", task="turn-on", split="test")
    policy = make_policy("embodia-tiny", dev)
    obs = dev.reset(0)
    policy.reset(0)
    action = policy.act(obs, dev.instruction)
    assert isinstance(action, GuiAction) and len(policy.history) == 1
    assert policy.info()["last"]["type"] in ACTIONS
    policy.reset(1)
    assert policy.history == []


def test_missing_or_foreign_gui_heads_are_refused_with_the_file_named(tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(TINY, bare, ignore=shutil.ignore_patterns("gui_head.*"))
    dev = GuiSimDevice("launcher")
    with pytest.raises(PolicyError, match="gui_train"):
        make_policy(str(bare), dev)
    head, _, _ = load_gui_head(TINY)                       # a saved head loads back bit for bit
    save_gui_head(head, bare)
    back, _, meta = load_gui_head(bare)
    assert meta["backbone_sha256"] == backbone_sha256(TINY)
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in head.state_dict().items())
    assert isinstance(make_policy(str(bare), dev), GuiHeadPolicy)
    other = tmp_path / "other"
    shutil.copytree(TINY, other)
    weights = other / "backbone" / "model.safetensors"
    weights.write_bytes(weights.read_bytes() + b" ")          # another backbone, as far as the hash goes
    with pytest.raises(GuiHeadError, match="another backbone"):
        load_gui_head(other)
    assert not isinstance(make_policy("expert", dev), GuiHeadPolicy)
    assert isinstance(GuiTeacher(dev).act(dev.reset(0)), GuiAction)
