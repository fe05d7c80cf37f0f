"""The desktop variant of embodia-tiny's GUI head: bench demos recorded as GUI step logs, the head
fine-tuned into a folder of its own, the bundled checkpoint untouched."""
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from embodia.agent.training.desktop_train import BUNDLE, HEAD_TASKS, head_can_do, train_desktop_head
from embodia.devices import GuiAction

pytest_plugins = ("gui_fixtures",)


def test_the_head_tasks_and_actions():
    assert head_can_do(GuiAction("click", element=3)) and head_can_do(GuiAction("type", element=0, text="x"))
    assert not head_can_do(GuiAction("key", keys=("ctrl", "s")))          # no key combinations in the head
    assert not head_can_do(GuiAction("type", text="=SUM(A1:A3)\n"))       # typing needs a target element
    assert not head_can_do(GuiAction("wait", duration_ms=200))
    assert all(t.split("/")[0] in ("galculator", "mousepad") for t in HEAD_TASKS)


def test_never_trains_into_the_bundled_checkpoint():
    with pytest.raises(ValueError, match="bundled"):
        train_desktop_head(BUNDLE, bench_episodes=0, sim_episodes=0, steps=0)


def _digest(folder: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())).hexdigest()


@pytest.mark.slow
def test_bench_demos_train_a_desktop_head(tmp_path):
    from embodia.agent.evaluation.offline import read_gui_episodes
    from embodia.devices.atspi import LAUNCHER
    if shutil.which("Xvfb") is None or not Path(LAUNCHER).exists() or shutil.which("galculator") is None:
        pytest.skip("needs Xvfb, at-spi2-core and galculator")
    before = _digest(BUNDLE)
    done = train_desktop_head(tmp_path / "d", tasks=["galculator/add"], bench_episodes=1, sim_episodes=10,
                              steps=10, log=lambda *a: None)
    assert done["bench_samples"] >= 4 and done["sim_samples"] > 0           # every key press of the demo
    meta = json.loads((tmp_path / "d" / "gui_head.json").read_text())
    assert meta["trained_steps"] == 10 and meta["desktop"]["bench_tasks"] == ["galculator/add"]
    eps = read_gui_episodes(tmp_path / "d" / "demos" / "galculator-add")
    assert len(eps) == 1 and eps[0]["success"] is True
    assert all(s["action"]["type"] == "click" for s in eps[0]["steps"])
    assert _digest(BUNDLE) == before
