"""The desktop variant of embodia-tiny's GUI head: bench demos recorded as GUI step logs, the head
fine-tuned into a folder of its own, the bundled checkpoint untouched."""
import hashlib
import inspect
import json
import shutil
from pathlib import Path

import pytest

from embodia.agent.training.desktop_train import BUNDLE, HEAD_TASKS, EnterAsKey, head_can_do, train_desktop_head
from embodia.devices import GuiAction
from embodia.policies.base import Policy

pytest_plugins = ("gui_fixtures",)


def test_the_head_tasks_and_actions():
    said = "Add the line 'delta ember' at the end of notes.txt and save it."
    assert head_can_do(GuiAction("click", element=3)) and head_can_do(GuiAction("type", element=0, text="delta ember"), said)
    assert head_can_do(GuiAction("type", text="delta ember"), said)          # into the focused field
    for keys in (("ctrl", "s"), ("ctrl", "w"), ("ctrl", "end"), ("ctrl", "a"), ("enter",), ("backspace",)):
        assert head_can_do(GuiAction("key", keys=keys)), keys                # the chords the bench needs
    assert not head_can_do(GuiAction("key", keys=("ctrl", "alt", "f4")))       # not in the chord vocabulary
    assert not head_can_do(GuiAction("type", text="=SUM(A1:A3)"), "Put the sum of A1:A3 in A4")  # not a span
    assert not head_can_do(GuiAction("type", text="delta ember\n"), said)     # the newline is the enter chord
    assert not head_can_do(GuiAction("wait", duration_ms=200))
    assert {"mousepad/append-save", "mousepad/close-discard", "gnumeric/set-cell", "gnumeric/word",
            "gnumeric/close-discard"} <= set(HEAD_TASKS)
    assert not {"gnumeric/sum", "gnumeric/product", "mousepad/save-as"} & set(HEAD_TASKS)


class _Typist(Policy):
    """An expert that types a cell reference with its newline, then is done."""

    def __init__(self):
        self.acts = [GuiAction("type", text="C5\n"), GuiAction("key", keys=("ctrl", "s")), None]
        self.resets = 0

    def reset(self, seed=None):
        self.resets += 1

    def act(self, obs, instruction=""):
        return self.acts.pop(0)


def test_a_typed_newline_becomes_the_enter_chord():
    inner = _Typist()
    p = EnterAsKey(inner)
    p.reset(0)
    got = [p.act(None, "Put 9 in cell C5") for _ in range(4)]
    assert inner.resets == 1
    assert [(a.type, a.text, tuple(a.keys)) for a in got[:3]] == [("type", "C5", ()), ("key", None, ("enter",)),
                                                                 ("key", None, ("ctrl", "s"))]
    assert got[3] is None


def test_never_trains_into_the_bundled_checkpoint():
    with pytest.raises(ValueError, match="bundled"):
        train_desktop_head(BUNDLE, bench_episodes=0, sim_episodes=0, steps=0)


def test_newly_trained_heads_read_the_spelling_columns_unless_told_not_to():
    from embodia.agent.training.desktop_train import extended_bundled_head
    assert extended_bundled_head(2, 0, spell=True)[0].cfg.spell
    assert not extended_bundled_head(2, 0)[0].cfg.spell          # the MiniWoB variant's call: as before
    assert inspect.signature(train_desktop_head).parameters["spell"].default is True


def _digest(folder: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())).hexdigest()


@pytest.mark.slow
def test_bench_demos_train_a_desktop_head(tmp_path):
    from embodia.agent.evaluation.offline_gui import read_gui_episodes
    from embodia.devices.atspi import LAUNCHER
    if shutil.which("Xvfb") is None or not Path(LAUNCHER).exists() or shutil.which("mousepad") is None:
        pytest.skip("needs Xvfb, at-spi2-core and mousepad")
    before = _digest(BUNDLE)
    done = train_desktop_head(tmp_path / "d", tasks=["mousepad/append-save"], bench_episodes=1, sim_episodes=10,
                              steps=10, log=lambda *a: None)
    assert done["bench_samples"] == 5 and done["sim_samples"] > 0     # click, ctrl+end, type, enter, ctrl+s
    meta = json.loads((tmp_path / "d" / "gui_head.json").read_text())
    assert meta["trained_steps"] == 10 and meta["desktop"]["bench_tasks"] == ["mousepad/append-save"]
    cfg = meta["config"]
    assert "key" in cfg["actions"] and "ctrl+s" in cfg["chords"] and cfg["features"] == 2 and cfg["spell"] is True
    eps = read_gui_episodes(tmp_path / "d" / "demos" / "mousepad-append-save")
    assert len(eps) == 1 and eps[0]["success"] is True
    assert [a.type for a in eps[0]["actions"] if a.type != "wait"] == ["click", "key", "type", "key", "key"]
    assert [tuple(a.keys) for a in eps[0]["actions"] if a.type == "key"] == [("ctrl", "end"), ("enter",),
                                                                              ("ctrl", "s")]
    assert _digest(BUNDLE) == before
