"""The GUI head of embodia-tiny: robot behaviour untouched, pointing at unseen labels, the bundled
head beating chance on held-out gui-sim instances, files and errors."""
import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from embodia.agent.loop.episode import run_episode
from embodia.agent.loop.factory import BUNDLED, PolicyError, make_policy
from embodia.agent.training.gui_data import GuiTeacher, record_gui_demos
from embodia.agent.training.gui_train import GuiTrainConfig, build_samples, fit
from embodia.devices import GuiAction, open_device
from embodia.policies.backbone import Backbone
from embodia.policies.backbone import backbone_sha256
from embodia.policies.gui.head import GuiHead, GuiHeadPolicy, has_gui_head, load_gui_head, save_gui_head
from embodia.policies.gui.head_encoding import ACTIONS, GuiHeadConfig, GuiHeadError, SequenceBuilder
from embodia.policies.gui.head_labels import label
from embodia.policies.gui.head_layout import words
from embodia.policies.robot.vla import VLAPolicy
from embodia.sim.gui import GuiSimDevice

TINY = BUNDLED["embodia-tiny"]
# the robot weights docs/benchmarks/sim-memory.md's VLA and success-memory figures were measured with
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
    with pytest.raises(PolicyError, match="embodia train gui-head"):
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


# the bundled head's decisions on recorded send-message steps, pinned from the code before the head
# had a chord vocabulary: an old-format gui_head.json (no actions/chords fields) must act the same
OLD_DECISIONS = [["click", 11, None, 1.0, 1.0], ["click", 16, None, 1.0, 1.0], ["type", 4, "How are you", 1.0, 1.0],
                 ["click", 5, None, 0.9998, 1.0], ["click", 6, None, 1.0, 1.0], ["click", 12, None, 1.0, 1.0],
                 ["type", 4, "Running late", 1.0, 1.0], ["click", 5, None, 1.0, 1.0]]


def test_an_old_format_head_loads_with_the_old_vocabulary_and_acts_as_before(one_thread):
    import json

    from embodia.policies.gui.head_encoding import backbone_features, collate
    from embodia.policies.gui.head_labels import to_action
    meta = json.loads((TINY / "gui_head.json").read_text())
    assert not {"actions", "chords", "copy_tree"} & set(meta["config"])          # the old format
    policy = GuiHeadPolicy.from_pretrained(TINY)
    assert policy.head.cfg.actions == ACTIONS and policy.head.cfg.chords == () and not hasattr(policy.head, "chord")
    got = []
    for st in record_gui_demos(4, seed=3, template="send-message", noise=0.0)[:8]:
        enc = policy.builder.encode(st.prompt, st.instruction, st.history, st.tree, (st.size.width, st.size.height),
                                    st.screen)
        d = policy.head.decide(collate([backbone_features(policy.backbone, [enc])[0]]),
                               generator=torch.Generator().manual_seed(0))[0]
        a = to_action(d, enc, st.instruction)
        got.append([a.type, a.element, a.text, round(d["type_p"], 4), round(d["element_p"], 4)])
    assert got == OLD_DECISIONS


def _chord_steps(seed: int, n: int):
    """gui-sim screens with a chord to press, named by the instruction: the key a page needs."""
    from dataclasses import replace

    from embodia.policies.gui.head_encoding import chord_name
    asks = {"Press enter to send it": ("enter",), "Select all of the text": ("ctrl", "a"),
            "Copy the selected text": ("ctrl", "c"), "Paste what was copied": ("ctrl", "v")}
    out = []
    for k, st in enumerate(record_gui_demos(n, seed=seed, noise=0.0)):
        text, keys = list(asks.items())[k % len(asks)]
        out.append((replace(st, instruction=text, action=GuiAction("key", keys=keys)), chord_name(keys)))
    return out


def test_a_head_with_the_new_vocabulary_learns_to_press_chords(one_thread):
    from embodia.policies.gui.head import extend_vocabulary
    from embodia.policies.gui.head_encoding import ACTIONS_V2, CHORDS
    torch.manual_seed(0)
    backbone = Backbone.from_pretrained(TINY / "backbone")
    old, _, _ = load_gui_head(TINY, backbone)
    head = extend_vocabulary(old)
    assert head.cfg.actions == ACTIONS_V2 and head.cfg.chords == CHORDS
    for k, v in old.state_dict().items():                          # every trained weight carried over
        assert torch.equal(head.state_dict()[k][tuple(slice(0, n) for n in v.shape)], v), k
    builder = SequenceBuilder(backbone, head.cfg)
    train = _chord_steps(60_000, 12)
    samples = build_samples([st for st, _ in train], builder, backbone, log=lambda *_: None)
    assert len(samples) == len(train) and all(s["label_chord"] >= 0 for s in samples)
    fit(head, samples, GuiTrainConfig(out="", steps=80, batch_size=12, lr=3e-3, warmup=10, threads=1),
        log=lambda *_: None, progress=False)
    policy = GuiHeadPolicy(head, backbone)
    got = []
    for st, chord in _chord_steps(70_000, 8):                      # other screens
        from embodia.devices import Observation
        obs = Observation(images={"screen": st.screen}, ui_tree=st.tree, screen=st.size)
        policy.reset(0)
        a = policy.act(obs, st.instruction)
        got.append((a.type, "+".join(a.keys), chord))
    assert sum(t == "key" and k == c for t, k, c in got) >= 7, got
    tmp = Path(__import__("tempfile").mkdtemp())
    shutil.copytree(TINY, tmp / "ck")
    save_gui_head(head, tmp / "ck")                                # the vocabulary travels with the head
    back, _, meta = load_gui_head(tmp / "ck")
    assert meta["config"]["chords"] == list(CHORDS) and back.cfg.actions == ACTIONS_V2


def test_typing_into_the_focused_field_and_copying_words_from_the_tree_are_labelled():
    from dataclasses import replace

    from embodia.policies.gui.head_encoding import ACTIONS_V2, CHORDS
    from embodia.policies.gui.head_labels import span_text
    backbone = Backbone.from_pretrained(TINY / "backbone")
    st = next(s for s in record_gui_demos(4, seed=3, template="send-message", noise=0.0) if s.action.type == "type")
    tree = [dict(e) for e in st.tree] + [{"index": 99, "role": "TextView", "text": "Total: 42 apples, fresh",
                                          "bounds": [0, 0, 10, 10]}]
    new = GuiHeadConfig(actions=ACTIONS_V2, chords=CHORDS, copy_tree=True)
    builder = SequenceBuilder(backbone, new)
    field = st.action.element
    for action, kind in ((GuiAction("type", text="42 apples"), "type_focused"),
                         (GuiAction("type", element=field, text="42 apples"), "type")):
        step = replace(st, instruction="Enter the total into the field", tree=tree, action=action)
        enc = builder.encode(step.prompt, step.instruction, [], tree, (st.size.width, st.size.height), st.screen)
        lab = label(step, enc, new)
        assert ACTIONS_V2[lab["label_type"]] == kind
        assert span_text((lab["label_start"], lab["label_end"]), enc, step.instruction) == "42 apples"
        old = label(step, enc)              # the old vocabulary: no focused typing, no text from the tree
        assert (old is None) if action.element is None else (old["label_start"] == -1)
    with pytest.raises(GuiHeadError, match="chord"):
        GuiHeadConfig(actions=ACTIONS_V2)


def _form_step(tree, action, instruction):
    """A recorded-step stand-in on a web form (screen blank: only the tree matters here)."""
    from embodia.agent.training.gui_data import GuiStep
    from embodia.devices import Screen
    return GuiStep(instruction, [], tree, np.zeros((210, 160, 3), np.uint8), Screen(160, 210), action)


FORM_TREE = [
    {"index": 0, "role": "label", "text": "Year:", "bounds": [12, 68, 35, 79], "clickable": False},
    {"index": 1, "role": "entry", "text": "", "bounds": [62, 62, 150, 83], "clickable": True, "editable": True,
     "value": "", "enabled": True},
    {"index": 2, "role": "text", "text": "", "bounds": [3, 95, 149, 145], "clickable": True, "editable": True,
     "scrollable": True, "enabled": False,
     "value": " ".join(f"w{k}" for k in range(40)) + " finale"},
    {"index": 3, "role": "push button", "text": "Agree", "bounds": [5, 167, 63, 188], "clickable": True,
     "enabled": False},
]


def test_feature_set_2_reads_values_labels_long_texts_and_states_set_1_does_not():
    from embodia.policies.gui.head_encoding import ACTIONS_V2, CHORDS, F_DESC, F_VALUE
    from embodia.policies.gui.head_labels import span_text
    backbone = Backbone.from_pretrained(TINY / "backbone")
    new = GuiHeadConfig(actions=ACTIONS_V2, chords=CHORDS, copy_tree=True, features=2)
    old = GuiHeadConfig(actions=ACTIONS_V2, chords=CHORDS, copy_tree=True)
    step = _form_step(FORM_TREE, GuiAction("type", element=1, text="finale"), "Type the last word of the text")
    encs = {}
    for name, cfg in (("new", new), ("old", old)):
        encs[name] = SequenceBuilder(backbone, cfg).encode("", step.instruction, [], FORM_TREE, (160, 210), step.screen)
    enc = encs["new"]
    assert enc.elem_feats.shape == (4, new.elem_feats) and encs["old"].elem_feats.shape == (4, old.elem_feats)
    assert enc.elem_feats[:, -4].tolist() == [1, 1, 0, 0]              # enabled
    assert enc.elem_feats[2, -2] == 1 and enc.elem_feats[1, -2] == 0   # holds a value
    assert enc.elem_near[:, :2].tolist() == [[-1, -1], [0, -1], [-1, -1], [-1, -1]]   # "Year:" names the field beside it
    fld, elem = enc.unit_meta[:, 1], enc.unit_meta[:, 2]
    assert ((fld == F_DESC) & (elem == 1)).sum() == 2                   # "Year", ":" read as the field's label
    value_units = (fld == F_VALUE) & (elem == 2)
    assert value_units.sum() == new.max_text_words and enc.unit_meta[value_units, 3].max() == 31   # its end, last
    lab = label(step, enc, new)
    assert span_text((lab["label_start"], lab["label_end"]), enc, step.instruction) == "finale"
    assert label(step, encs["old"], old)["label_start"] == -1          # set 1: a value is not read, not copied
    assert not (encs["old"].unit_meta[:, 1] == F_VALUE).any()
    # an ordinal in the instruction marks the word at that position and the n-th element of a role
    builder = SequenceBuilder(backbone, new)
    third = builder.encode("", "Type the 3rd word of the text", [], FORM_TREE, (160, 210), step.screen)
    assert [third.elem_texts[third.tree_spans[u][0]][third.tree_spans[u][1]:third.tree_spans[u][2]]
            for u in np.flatnonzero(third.unit_ord)] == ["w2"]
    assert third.elem_feats[:, -1].tolist() == [0, 0, 0, 0]            # no role has three elements
    first = builder.encode("", "Click the first button", [], FORM_TREE, (160, 210), step.screen)
    assert first.elem_feats[:, -1].tolist() == [1, 1, 1, 1]            # each the 1st of its role


def test_a_wheel_turn_on_a_web_text_area_is_a_scroll_label_on_it():
    from embodia.policies.gui.head_encoding import ACTIONS_V2, CHORDS
    backbone = Backbone.from_pretrained(TINY / "backbone")
    cfg = GuiHeadConfig(actions=ACTIONS_V2, chords=CHORDS, copy_tree=True, features=2)
    step = _form_step(FORM_TREE, GuiAction("scroll", point=(475, 571), direction="down"), "Scroll the agreement")
    enc = SequenceBuilder(backbone, cfg).encode("", step.instruction, [], FORM_TREE, (160, 210), step.screen)
    lab = label(step, enc, cfg)
    assert cfg.actions[lab["label_type"]] == "scroll_down" and lab["label_elem"] == 2
    flat = [dict(e, scrollable=False) for e in FORM_TREE]          # a page that flags nothing: no label
    assert label(_form_step(flat, step.action, step.instruction), enc, cfg) is None


@pytest.mark.parametrize("features, added", [(2, 5), (3, 9)])
def test_extending_to_feature_set_2_or_3_keeps_the_old_heads_choices_until_trained(one_thread, features, added):
    from embodia.policies.gui.head import extend_vocabulary
    from embodia.policies.gui.head_encoding import collate
    backbone = Backbone.from_pretrained(TINY / "backbone")
    old, _, _ = load_gui_head(TINY, backbone)
    assert old.cfg.features == 1                                     # the bundled config has no such field
    new = extend_vocabulary(old, actions=old.cfg.actions, chords=(), copy_tree=False, features=features)
    assert new.cfg.features == features and new.elem.weight.shape[1] == old.elem.weight.shape[1] + added
    steps = [s for s in record_gui_demos(6, seed=5, noise=0.0)][:8]
    picks = {}
    for name, head in (("old", old), ("new", new)):
        b = SequenceBuilder(backbone, head.cfg)
        from embodia.policies.gui.head_encoding import backbone_features
        feats = backbone_features(backbone, [b.encode(s.prompt, s.instruction, s.history, s.tree,
                                                       (s.size.width, s.size.height), s.screen) for s in steps])
        picks[name] = [(d["type"], d["element"]) for d in head.decide(collate(feats))]
    # gui-sim trees have no values, no unnamed fields and short texts: the same sequence, and the
    # added inputs start at zero weight, so every choice is the old head's
    assert picks["new"] == picks["old"]
    with pytest.raises(GuiHeadError, match="feature set"):
        GuiHeadConfig(features=4)


def test_a_head_with_case_learns_the_typed_words_in_capitals_from_the_instruction():
    from embodia.policies.gui.head_encoding import ACTIONS_V2, CHORDS
    from embodia.policies.gui.head_labels import cased_span_label
    from embodia.policies.gui.text_ops import CASES, apply_text_op
    backbone = Backbone.from_pretrained(TINY / "backbone")
    cfg = GuiHeadConfig(actions=ACTIONS_V2, chords=CHORDS, copy_tree=True, features=2, case=True)
    instruction = 'Type "Ronda" in all upper case letters in the textbox'
    enc = SequenceBuilder(backbone, cfg).encode("", instruction, [], FORM_TREE, (160, 210),
                                                np.zeros((210, 160, 3), np.uint8))
    for typed, case in (("Ronda", "as written"), ("RONDA", "upper"), ("ronda", "lower")):
        span, k = cased_span_label(typed, instruction, enc, cfg)
        assert CASES[k] == case and apply_text_op(instruction[enc.spans[span[0]][0]:enc.spans[span[1]][1]], case) == typed
    assert cased_span_label("RoNDA", instruction, enc, cfg) == (None, -1)
    assert cased_span_label("RONDA", instruction, enc, replace_cfg(cfg, case=False)) == (None, -1)


def replace_cfg(cfg, **kw):
    from dataclasses import replace
    return replace(cfg, **kw)


def test_what_sits_beside_an_element_is_found_from_the_boxes_alone():
    from embodia.policies.gui.head_layout import beside, container, right_of
    row = [{"text": "Odd", "clickable": True, "bounds": [0, 0, 30, 20]}, {"text": "7", "bounds": [40, 2, 50, 18]},
           {"text": "Even", "clickable": True, "bounds": [60, 0, 90, 20]}]
    assert right_of(row) == [1, -1, -1] and beside(row) == [-1, -1, 1]        # the number, from either button
    inbox = [{"text": "Ada Hello there", "clickable": True, "bounds": [0, 0, 160, 40]},
             {"text": "", "clickable": True, "bounds": [130, 10, 142, 22]},
             {"text": "Bob Lunch", "clickable": True, "bounds": [0, 40, 160, 80]},
             {"text": "", "clickable": True, "bounds": [130, 50, 142, 62]}]
    assert container(inbox) == [-1, 0, -1, 2]                                  # each icon's own row
    assert beside(inbox)[1] == -1                                              # a clickable row is no label
