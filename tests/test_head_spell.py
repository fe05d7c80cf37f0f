"""The GUI head's spelling columns: which keypad button enters the next character of the
instruction's expression, and that a head without ``spell`` reads and acts exactly as before."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from embodia.agent.loop.factory import BUNDLED
from embodia.agent.training.gui_data import record_gui_demos
from embodia.policies.backbone import Backbone
from embodia.policies.gui.head import extend_vocabulary, load_gui_head, save_gui_head
from embodia.policies.gui.head_encoding import GuiHeadConfig, SequenceBuilder, backbone_features, collate
from embodia.policies.gui.head_spell import entered, expression, spell_columns

TINY = BUNDLED["embodia-tiny"]


def _key(index: int, text: str, col: int, row: int) -> dict:
    return {"index": index, "role": "push button", "text": text, "clickable": True,
            "bounds": [10 + 40 * col, 60 + 30 * row, 45 + 40 * col, 85 + 30 * row]}


def calculator_tree() -> list[dict]:
    """A made-up calculator: a display showing "0", a menu, digits in keypad order and operators."""
    keys = ["7", "8", "9", "/", "4", "5", "6", "*", "1", "2", "3", "-", "0", ".", "=", "+"]
    tree = [{"index": 0, "role": "text", "text": "0", "clickable": False, "bounds": [10, 10, 170, 50]},
            {"index": 1, "role": "menu", "text": "Edit", "clickable": True, "bounds": [0, 0, 30, 9]},
            {"index": 2, "role": "push button", "text": "AC", "desc": "Clear all", "clickable": True,
             "bounds": [180, 60, 215, 85]}]
    return tree + [_key(3 + k, t, k % 4, k // 4) for k, t in enumerate(keys)]


def _named(tree: list[dict], cols: np.ndarray) -> list[str]:
    return [tree[i]["text"] for i in np.flatnonzero(cols[:, 0])]


@pytest.mark.parametrize("instruction, keys", [
    ("Compute 661 + 74 with the calculator.", "661+74"),
    ("Compute 303 × 27 with the calculator.", "303*27"),      # the instruction's symbol, the keypad's label
    ("Compute 34709 ÷ 61 with the calculator.", "34709/61"),
    ("What is 9 − 4.5?", "9-4.5"),
])
def test_each_step_marks_the_key_of_the_next_character_then_says_all_is_entered(instruction, keys):
    tree, history = calculator_tree(), []
    for k in keys:
        cols = spell_columns(instruction, history, tree)
        assert _named(tree, cols) == [k], (history, k)             # that key alone, never the display
        assert not cols[:, 1].any()
        history.append(f"click {k}")
    cols = spell_columns(instruction, history, tree)
    assert not cols[:, 0].any() and cols[:, 1].all()               # now "=" is the head's to learn


def test_history_other_than_one_character_clicks_is_read_past():
    tree, instruction = calculator_tree(), "Compute 12 + 3 with the calculator."
    history = ["click Edit", "press ctrl+a", "scroll down", "click 1", "click icon"]
    assert entered(history) == "1"
    assert _named(tree, spell_columns(instruction, history, tree)) == ["2"]


def _showing(tree: list[dict], text: str) -> list[dict]:
    return [{**tree[0], "text": text}] + tree[1:]


def test_a_press_the_application_missed_is_read_off_the_display_and_asked_for_again():
    # galculator's misses seen in recorded demos: a digit clicked, the display unchanged, the expert
    # clicking it again; the history then holds one click more than the display took
    tree, instruction = calculator_tree(), "Compute 142 × 69 with the calculator."
    assert _named(tree, spell_columns(instruction, ["click 1", "click 4", "click 2"], _showing(tree, "14"))) == ["2"]
    assert _named(tree, spell_columns(instruction, ["click 1", "click 4", "click 2"], _showing(tree, "142"))) == ["*"]
    retried = ["click 1", "click 4", "click 2", "click 2"]
    assert _named(tree, spell_columns(instruction, retried, _showing(tree, "142"))) == ["*"]
    second = retried + ["click *", "click 6", "click 9"]
    assert _named(tree, spell_columns(instruction, second, _showing(tree, "6"))) == ["9"]
    assert spell_columns(instruction, second + ["click 9"], _showing(tree, "69"))[:, 1].all()
    # right after the operator the display still shows the first operand: the history is trusted
    assert _named(tree, spell_columns(instruction, retried + ["click *"], _showing(tree, "142"))) == ["6"]
    # a screen showing nothing of the number (no display) leaves the history as it is
    assert _named(tree, spell_columns(instruction, ["click 1", "click 4"], _showing(tree, ""))) == ["2"]


def test_a_wrong_key_or_no_expression_marks_nothing():
    tree = calculator_tree()
    wrong = spell_columns("Compute 12 + 3 with the calculator.", ["click 1", "click 3"], tree)
    too_many = spell_columns("Compute 12 + 3 with the calculator.", ["click 1", "click 2", "click +",
                                                                       "click 3", "click ="], tree)
    assert not wrong.any() and not too_many.any()
    for plain in ("Put 42 in cell C5 and save the workbook.", "Open the 2nd tab", "Call 555 1234", ""):
        assert expression(plain) == "" and not spell_columns(plain, [], tree).any()
    assert expression("Add 2 + 3. Then 10 - 4 + 1 = ?") == "10-4+1"                  # the longest one


def _calc_encodings(cfg: GuiHeadConfig, backbone: Backbone, instruction: str, history: list[str]):
    tree = calculator_tree()
    return SequenceBuilder(backbone, cfg).encode("", instruction, history, tree, (220, 200),
                                                np.zeros((200, 220, 3), np.uint8))


def test_a_head_with_spell_reads_two_more_columns_and_one_without_reads_as_before():
    backbone = Backbone.from_pretrained(TINY / "backbone")
    instruction, history = "Compute 661 + 74 with the calculator.", ["click 6", "click 6"]
    for features in (1, 2):
        off = GuiHeadConfig(features=features)
        on = GuiHeadConfig(features=features, spell=True)
        a, b = (_calc_encodings(c, backbone, instruction, history) for c in (off, on))
        assert a.elem_feats.shape[1] == off.elem_feats and b.elem_feats.shape[1] == off.elem_feats + 2
        assert np.array_equal(b.elem_feats[:, :off.elem_feats], a.elem_feats)
        assert a.input_ids == b.input_ids and np.array_equal(a.unit_meta, b.unit_meta)
        assert [calculator_tree()[i]["text"] for i in np.flatnonzero(b.elem_feats[:, -2])] == ["1"]
    # the bundled head and the desktop heads trained before have no such field: off
    assert "spell" not in json.loads((TINY / "gui_head.json").read_text())["config"]
    assert load_gui_head(TINY, backbone)[0].cfg.spell is False


@pytest.mark.parametrize("features", [None, 3])       # with the bundled head's set, and with set 3 beside it
def test_extending_with_spell_keeps_the_old_heads_choices_until_trained_and_travels_in_its_file(one_thread, tmp_path,
                                                                                               features):
    backbone = Backbone.from_pretrained(TINY / "backbone")
    old, _, _ = load_gui_head(TINY, backbone)
    new = extend_vocabulary(old, actions=old.cfg.actions, chords=(), copy_tree=False, spell=True, features=features)
    assert new.cfg.spell and not old.cfg.spell and not hasattr(old, "spell")
    steps = record_gui_demos(4, seed=5, noise=0.0)[:6]
    calc = [("Compute 661 + 74 with the calculator.", h) for h in ([], ["click 6"], ["click 6", "click 6", "click 1"])]
    picks = {}
    for name, head in (("old", old), ("new", new)):
        b = SequenceBuilder(backbone, head.cfg)
        encs = [b.encode(s.prompt, s.instruction, s.history, s.tree, (s.size.width, s.size.height), s.screen)
                for s in steps]
        encs += [_calc_encodings(head.cfg, backbone, i, h) for i, h in calc]
        decided = head.decide(collate(backbone_features(backbone, encs)), generator=torch.Generator().manual_seed(0))
        picks[name] = [(d["type"], d["element"], round(d["element_p"], 4)) for d in decided]
    assert picks["new"] == picks["old"]          # the spelling projection starts at zero
    shutil.copytree(TINY, tmp_path / "ck")
    save_gui_head(new, tmp_path / "ck")
    back, _, meta = load_gui_head(tmp_path / "ck", backbone)
    assert meta["config"]["spell"] is True and back.cfg.spell and torch.equal(back.spell.weight, new.spell.weight)


def _calc_steps(seed: int, n: int, low: int, high: int) -> list:
    """Expert steps on the made-up calculator: each key of "<a> <op> <b>", then "=", history growing."""
    import random

    from embodia.agent.training.gui_data import GuiStep
    from embodia.devices import GuiAction
    from embodia.devices.embodiment import Screen
    rng, tree = random.Random(seed), calculator_tree()
    index = {e["text"]: e["index"] for e in tree}
    out = []
    for _ in range(n):
        a, b, (said, key) = rng.randint(low, high), rng.randint(2, 99), rng.choice([("+", "+"), ("×", "*"), ("÷", "/")])
        instruction, history = f"Compute {a} {said} {b} with the calculator.", []
        for k in [*str(a), key, *str(b), "="]:
            out.append(GuiStep(instruction, list(history), tree, np.zeros((200, 220, 3), np.uint8), Screen(220, 200),
                               GuiAction("click", element=index[k])))
            history.append(f"click {k}")
    return out


@pytest.mark.slow
def test_a_tiny_head_learns_to_spell_held_out_numbers_with_the_columns_and_not_without(one_thread):
    from embodia.agent.training.gui_train import GuiTrainConfig, build_samples, fit
    from embodia.policies.gui.head import GuiHead
    backbone = Backbone.from_pretrained(TINY / "backbone")
    right = {}
    for spell in (True, False):
        torch.manual_seed(0)
        cfg = GuiHeadConfig(dim=32, layers=1, heads=2, spell=spell)
        builder = SequenceBuilder(backbone, cfg)
        samples = build_samples(_calc_steps(1, 16, 2, 299), builder, backbone, log=lambda *_: None)
        head = fit(GuiHead(cfg, backbone.hidden_size), samples,
                   GuiTrainConfig(out="", steps=150, batch_size=32, lr=3e-3, warmup=15, threads=1),
                   log=lambda *_: None, progress=False)
        held_out = _calc_steps(2, 6, 300, 999)          # other numbers: 3-digit first operands
        test = build_samples(held_out, builder, backbone, log=lambda *_: None)
        got = [d["element"] for d in head.decide(collate(test))]
        right[spell] = np.mean([g == s["label_elem"] for g, s in zip(got, test)])
    assert right[True] >= 0.95 and right[False] < 0.6, right
