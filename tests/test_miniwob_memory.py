"""benchmarks/miniwob_memory.py on a small cell: memory on vs off on a repeated MiniWoB++ stream,
paired episode by episode, the memory growing from the task's own successes, resumable."""
import json
import os
import subprocess
import sys
from pathlib import Path

import bench_module
import pytest
from miniwob_pages import miniwob_or_skip, needs_chromium

pytestmark = needs_chromium
miniwob = miniwob_or_skip()

ROOT = Path(__file__).resolve().parents[1]
bench = bench_module.load("miniwob_memory")


def test_paired_counts_and_interval():
    r = bench.paired([True, True, False, True, False], [True, False, False, False, True])
    assert (r["both"], r["on_only"], r["off_only"], r["neither"]) == (1, 2, 1, 1)
    assert r["on"]["successes"] == 3 and r["off"]["successes"] == 2 and r["diff"] == 0.2
    lo, hi = r["newcombe_paired95"]
    assert lo < 0.2 < hi
    with pytest.raises(ValueError, match="same non-zero number"):
        bench.paired([True], [True, False])


def test_a_stream_pairs_the_arms_and_the_memory_grows_from_successes(tmp_path):
    """The expert solves every episode in both arms (same seeds, so the same problems); the memory arm
    stores each verified success. A second run with the same partial file reads the task back."""
    partial = tmp_path / "run.partial"
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "miniwob_memory.py"), "--policy", "expert",
                          "--tasks", "enter-text", "--episodes", "3", "--resume", str(partial)],
                         check=False, capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    rep = json.loads(out.stdout.strip().splitlines()[-1])
    cell = rep["per_task"]["enter-text"]
    assert (cell["both"], cell["on_only"], cell["off_only"], cell["neither"]) == (3, 0, 0, 0)
    # the successes are stored; the same plan with another target merges (typed text is the {target} slot)
    assert 1 <= cell["memory_entries_per_stream"][0] < 3 * 3
    assert rep["pooled"]["on"]["episodes"] == 3 and rep["resumed_tasks"] == 0

    def never(*a, **kw):
        raise AssertionError("a finished task ran again")
    bench.run_task = never
    run = {"benchmark": "miniwob_memory", "policy": "expert", "tasks": ["enter-text"], "streams": 1,
           "episodes": 3, "seed": 5000, "max_steps": 10}
    rows = bench.run_all(["enter-text"], "expert", streams=1, episodes=3, seed=5000, max_steps=10,
                         partial=bench.PartialRun(partial, run))
    assert rows["enter-text"]["outcomes"]["online"] == [True, True, True]
    with pytest.raises(ValueError, match="another run"):
        bench.PartialRun(partial, {**run, "episodes": 4})


def test_bad_arguments_are_one_line_errors():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "miniwob_memory.py"), "--tasks", "no-such-task"],
                         check=False, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "unknown tasks ['no-such-task']" in out.stderr and "Traceback" not in out.stderr


class SubmitAtOnce:
    """A wrong policy for choose-list: it clicks Submit whatever the list holds."""

    def act(self, obs, instruction):
        from embodia.devices import GuiAction
        return GuiAction("click", element=next(e["index"] for e in obs.ui_tree if e.get("text") == "Submit"))


def test_the_memory_chooses_before_it_submits_on_a_real_list():
    """choose-list in Chromium: successes of the expert (some instances draw the list already on the
    target, and there Submit comes first) are stored; then a policy that submits at once is steered
    through open, type, submit on lists that hold another value. The step before choosing and the one
    after differ in the list's value only: the memory tells them apart by the field state."""
    from embodia.agent.loop import run_episode
    from embodia.devices import open_device
    from embodia.memory import ScreenMemory
    from embodia.policies.gui.screen_memory import ScreenMemoryPolicy

    with open_device("sim:miniwob/choose-list?max_steps=6") as dev:
        mem = ScreenMemory()
        learner = ScreenMemoryPolicy(dev.expert(), mem, device=dev)
        for seed in range(5000, 5008):
            assert run_episode(dev, learner, seed=seed).success
        hist = [e["hist"] for e in mem.entries(learner.namespace) if e["canon"] == "click el=push button||Submit|"]
        assert "<start>" in hist and len(hist) >= 2          # Submit as a first step and after typing
        wrong = SubmitAtOnce()
        steered = ScreenMemoryPolicy(wrong, mem, device=dev, learn=False)
        tried = 0
        for seed in range(5100, 5120):
            obs = dev.reset(seed=seed)
            if next(e for e in obs.ui_tree if e["role"] == "combo box").get("value") == dev.slots["target"]:
                continue                                      # the list holds the target: submitting is right
            assert not run_episode(dev, wrong, seed=seed).success
            r = run_episode(dev, steered, seed=seed)
            # the memory opened the list and typed the target (the policy would have submitted at
            # once); the last step, Submit, is the memory's or the policy's: after typing, the page
            # resembles the stored first steps closely enough that the progress estimate may leave
            # it to the policy
            assert r.success and steered.info()["memory_replaced"] >= 2 and r.steps == 3
            tried += 1
            if tried == 2:
                break
        assert tried == 2
