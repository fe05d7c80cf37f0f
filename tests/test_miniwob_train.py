"""The MiniWoB++ variant of embodia-tiny's GUI head: expert demos recorded as GUI step logs on train
seeds (a rerun keeps them), an extended copy of the bundled head fine-tuned into a folder of its
own, the bundled checkpoint untouched."""
import hashlib
import json
from pathlib import Path

import pytest

from embodia.agent.training.desktop_train import BUNDLE
from embodia.agent.training.gui_train import bundle_head
from embodia.agent.training.miniwob_train import TRAIN_SEED, demo_steps, train_miniwob_head
from embodia.devices.cdp import find_chromium

needs_chromium = pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed")


def _digest(folder: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())).hexdigest()


def test_never_trains_into_the_bundled_checkpoint_nor_on_a_task_without_expert(tmp_path):
    with pytest.raises(ValueError, match="bundled"):
        train_miniwob_head(BUNDLE, tasks=["click-button"], episodes=0, steps=0)
    with pytest.raises(ValueError, match="no scripted expert"):
        train_miniwob_head(tmp_path / "m", tasks=["not-a-task"], episodes=0, steps=0)


def test_a_bundle_is_the_checkpoint_without_its_demos_with_its_sha256_and_rebuild_line(tmp_path):
    import shutil
    ck = tmp_path / "run"
    shutil.copytree(BUNDLE, ck)
    (ck / "demos" / "click-button").mkdir(parents=True)
    (ck / "demos" / "click-button" / "ep.jsonl").write_text("{}\n")
    dest = tmp_path / "bundle"
    (dest / "stale").mkdir(parents=True)                  # what was there before is replaced whole
    facts = bundle_head(ck, dest, "embodia train miniwob --bundle x")
    assert not (dest / "demos").exists() and not (dest / "stale").exists()
    assert facts == json.loads((dest / "bundle.json").read_text())
    assert facts["sha256"] == hashlib.sha256((dest / "gui_head.safetensors").read_bytes()).hexdigest()
    assert facts["rebuild"] == "embodia train miniwob --bundle x"
    assert facts["bytes"] == sum(p.stat().st_size for p in dest.rglob("*") if p.is_file() and p.name != "bundle.json")
    (ck / "gui_head.safetensors").unlink()
    with pytest.raises(ValueError, match="no trained GUI head"):
        bundle_head(ck, dest, "x")
    assert (dest / "gui_head.safetensors").is_file()     # a refused bundle leaves the old one


@pytest.mark.slow
@needs_chromium
def test_demos_are_kept_on_a_rerun_and_train_a_head_with_chords(tmp_path):
    pytest.importorskip("embodia.sim.miniwob").html_root()
    from embodia.policies.gui.head import load_gui_head
    from embodia.policies.gui.head_encoding import ACTIONS_V3, CHORDS
    before = _digest(BUNDLE)
    lines: list[str] = []
    done = train_miniwob_head(tmp_path / "m", tasks=["copy-paste"], episodes=1, steps=5, batch_size=8,
                              log=lines.append)
    assert done["expert_successes"] == {"copy-paste": 1} and done["samples"] >= 5
    assert any(ln.startswith("copy-paste: 1/1 expert demos (0 kept") for ln in lines)
    steps = list(demo_steps(tmp_path / "m" / "demos", ["copy-paste"], range(TRAIN_SEED, TRAIN_SEED + 1)))
    assert [s.action.keys for s in steps if s.action.type == "key"] == [("ctrl", "a"), ("ctrl", "c"), ("ctrl", "v")]
    assert steps[2].history == ["click text", "press ctrl+a"]          # its own past actions, as the policy keeps them
    head, _, meta = load_gui_head(tmp_path / "m")
    assert head.cfg.actions == ACTIONS_V3 and head.cfg.chords == CHORDS and meta["trained_steps"] == 5
    assert head.cfg.compute and head.cfg.snippets == ()   # copy-paste types nothing no page holds
    assert head.cfg.features == 3                       # reads values, labels, the page's layout (GuiHeadConfig.features)
    assert json.loads((tmp_path / "m" / "gui_head.json").read_text())["miniwob"]["train_seeds"] == [TRAIN_SEED,
                                                                                                   TRAIN_SEED + 1]
    lines.clear()
    train_miniwob_head(tmp_path / "m", tasks=["copy-paste"], episodes=1, steps=1, batch_size=8, log=lines.append)
    assert any(ln.startswith("copy-paste: 1/1 expert demos (1 kept from before") for ln in lines)
    assert len(list((tmp_path / "m" / "demos" / "copy-paste" / "episodes").iterdir())) == 1
    assert _digest(BUNDLE) == before
