"""MiniWoB++ tasks (the Farama package's own pages) on the browser device, under MiniWoB's protocol:
a seed draws the same problem for every policy, the instruction is the task's utterance, success is
its raw reward > 0. The scripted experts solve their tasks; the chance baseline mostly does not."""
import json
import re

import pytest
from miniwob_pages import miniwob_or_skip, needs_chromium

from embodia.agent.loop.episode import run_episode
from embodia.devices import open_device

pytestmark = needs_chromium
miniwob = miniwob_or_skip()

pytest_plugins = ("fake_openai",)
TASKS = ("click-button", "enter-text", "click-checkboxes")
SEEDS = range(5)


@pytest.fixture(scope="module")
def outcomes():
    """Per task: (seed, instruction, expert success, expert reward, chance success), paired by seed."""
    out = {}
    for task in TASKS:
        rows = []
        with open_device(f"sim:miniwob/{task}") as dev:
            for seed in SEEDS:
                r = run_episode(dev, dev.expert(), seed=seed)
                reward = dev.info()["raw_reward"]
                c = run_episode(dev, miniwob.RandomTreePolicy(seed=7), seed=seed, max_steps=6)
                assert c.instruction == r.instruction            # the same seed drew the same problem
                rows.append((seed, r.instruction, r.success, reward, c.success))
        out[task] = rows
    return out


def test_the_experts_solve_their_tasks(outcomes):
    for task, rows in outcomes.items():
        assert all(ok and reward > 0 for _, _, ok, reward, _ in rows), (task, rows)


def test_the_chance_baseline_mostly_fails(outcomes):
    chance = [c for rows in outcomes.values() for *_, c in rows]
    assert sum(chance) <= len(chance) // 3, outcomes


def test_the_instruction_is_the_tasks_utterance_and_seeds_repeat(outcomes):
    for rows in outcomes.values():
        assert len({instr for _, instr, *_ in rows}) >= 3          # seeds draw different problems
    assert all(instr.startswith('Click on the "') for _, instr, *_ in outcomes["click-button"])
    assert all(instr.startswith('Enter "') for _, instr, *_ in outcomes["enter-text"])


def test_reward_time_limit_and_a_wrong_answer():
    with open_device("sim:miniwob/click-button") as dev:
        first = dev.reset(3)
        again = dev.reset(3)
        assert [e["text"] for e in first.ui_tree] == [e["text"] for e in again.ui_tree]
        wrong = next(e for e in again.ui_tree if e["role"] == "push button" and
                     e["text"] not in dev.instruction)
        r = run_episode(dev, _Plan([{"type": "click", "element": wrong["index"]}]), seed=3)
        info = dev.info()
        assert r.success is False and info["done"] and info["raw_reward"] < 0 and info["time_limit_ms"] == 10000
        assert "sandbox" in dev.capabilities and "success" in dev.capabilities


def test_the_packages_field_extractor_names_each_episodes_slots():
    """info()["slots"] are the fields MiniWoB's own extractor reads from the utterance, fresh at every
    reset: what lets a success memory store "type {target}" rather than one episode's literal text."""
    from embodia.memory.screen_refs import canonical
    with open_device("sim:miniwob/choose-list") as dev:
        targets = []
        for seed in (4, 5):
            dev.reset(seed)
            slots = dev.info()["slots"]
            assert set(slots) == {"target"} and f"Select {slots['target']} from" in dev.instruction
            targets.append(slots["target"])
            typed = canonical({"type": "type", "text": slots["target"]}, [], slots)
            assert slots["target"] not in typed and "target" in typed      # stored as the slot, not the text
        assert targets[0] != targets[1]
    assert miniwob.task_fields("choose-list", "not an utterance of this task") == {}
    assert miniwob.task_fields("no-such-task", "Select x from the list and click Submit.") == {}


def test_key_chords_copy_and_paste_on_a_page():
    """copy-paste's expert selects, copies and pastes with ctrl+a, ctrl+c and ctrl+v, as a person does."""
    with open_device("sim:miniwob/copy-paste") as dev:
        expert = dev.expert()
        steps = []
        r = run_episode(dev, expert, seed=1000, on_step=lambda step: steps.append(step.action))
    assert r.success
    chords = [a.keys for a in steps if a.type == "key"]
    assert chords == [("ctrl", "a"), ("ctrl", "c"), ("ctrl", "v")] and not any(a.type == "type" for a in steps)


def test_unknown_task_and_option_are_one_line_errors():
    with pytest.raises(ValueError, match="unknown MiniWoB task 'no-such-task'"):
        open_device("sim:miniwob/no-such-task")
    with pytest.raises(ValueError, match="unknown options"):
        open_device("sim:miniwob/click-button?colour=red")


class _Plan:
    def __init__(self, steps):
        from embodia.devices import GuiAction
        self.steps = [GuiAction.from_dict(s) for s in steps]

    def reset(self, seed=None):
        self.i = 0

    def act(self, obs, instruction):
        from embodia.devices import GuiAction
        self.i += 1
        return self.steps[self.i - 1] if self.i <= len(self.steps) else GuiAction("terminate", status="failure")


def test_an_openai_policy_reads_the_tree_and_solves_a_task(fake_openai):
    """A served model (a loopback fake speaking the OpenAI wire format) gets the instruction and the
    page's tree in its prompt; it answers with an element, which the page clicks."""
    from embodia.agent.loop.factory import make_policy

    def model(req):
        text = req.texts()[1]
        target = re.search(r'Task: Click on the "([^"]+)" button', text).group(1)
        element = re.search(r'\[(\d+)\] push button "' + re.escape(target) + '"', text).group(1)
        return json.dumps({"type": "click", "element": int(element)})

    with open_device("sim:miniwob/click-button") as dev:
        fake_openai.script(model)
        policy = make_policy("openai:test", dev, base_url=fake_openai.url)
        r = run_episode(dev, policy, seed=1000, max_steps=3)
    assert r.success and r.steps == 1 and len(fake_openai.chats) == 1
    assert fake_openai.chats[0].image_sizes()                      # the screenshot went too


def test_suites_are_the_published_lists_and_name_what_they_cannot_run():
    """Each published set is its source's list, name for name (sizes and a few members pinned);
    a set that could not be sourced is refused with the reason; coverage names every task without
    an expert instead of dropping it."""
    assert len(miniwob.suite_tasks("wge-original")) == 46 and len(miniwob.suite_tasks("wge-additional")) == 12
    assert len(miniwob.suite_tasks("synapse-exemplars")) == 48 == len(set(miniwob.SYNAPSE_EXEMPLARS))
    assert miniwob.suite_tasks("wge-original")[-1] == "use-autocomplete-nodelay"
    assert set(miniwob.suite_tasks("experts")) == set(miniwob.EXPERTS)
    with pytest.raises(ValueError, match="synapse-64 is not built"):
        miniwob.suite_tasks("synapse-64")
    cov = miniwob.suite_coverage("wge-additional")
    assert cov["missing"] == [] and "click-checkboxes-soft" in cov["no_expert"] and "multi-layouts" not in cov["no_expert"]
    shipped = set(miniwob.list_tasks())
    for name in miniwob.SUITES:      # every listed task is either shipped or reported missing
        assert set(miniwob.suite_tasks(name)) <= shipped | set(miniwob.suite_coverage(name)["missing"])


def test_a_suite_run_reports_the_tasks_it_could_not_run():
    from embodia.agent.evaluation.suite import parse_suite, run_suite, suite_table
    assert parse_suite("sim:miniwob/wge-additional?size=500x340") == ("wge-additional", {"size": "500x340"})
    rep = run_suite("wge-additional", "expert", episodes=2, seed=1000, tasks=["multi-layouts", "click-checkboxes-soft"])
    assert list(rep["tasks"]) == ["multi-layouts"] and rep["tasks"]["multi-layouts"]["successes"] == 2
    assert rep["not_run"] == {"click-checkboxes-soft": "no scripted expert"}
    table = suite_table(rep)
    assert "click-checkboxes-soft" in table and "not run: no scripted expert" in table and "(1 of 2 tasks)" in table


@pytest.mark.parametrize("task", ["guess-number", "search-engine", "terminal", "email-inbox-forward",
                                  "login-user-popup", "text-transform"])
def test_experts_that_read_the_page_as_it_changes(task):
    """Experts that act on what the page shows after their own actions (feedback, results, a
    terminal's listing, an opened email, a popup) or on a text drawn one character per element."""
    with open_device(f"sim:miniwob/{task}") as dev:
        for seed in (1000, 1001):
            r = run_episode(dev, dev.expert(), seed=seed)
            assert r.success and dev.info()["raw_reward"] > 0, (task, seed, r.steps, dev.info())


@pytest.mark.parametrize("task", ["navigate-tree", "click-menu", "phone-book", "choose-date-easy", "use-slider",
                                  "email-inbox-nl-turk"])
def test_experts_that_open_reveal_or_page_what_the_task_hides(task):
    """Issue 54's experts (`embodia.sim.miniwob_experts_more`) on what is not in the first tree:
    folders opened and read off their item, a submenu reached with the menu's keys, a contact book
    paged, a date picker's months stepped, a slider's range read with home and end, and an inbox
    searched for the sender a request in free words names."""
    with open_device(f"sim:miniwob/{task}") as dev:
        for seed in (1000, 1001):
            r = run_episode(dev, dev.expert(), seed=seed)
            assert r.success and dev.info()["raw_reward"] > 0, (task, seed, r.steps, dev.info())


def test_the_nl_tasks_instruction_is_their_utterance_and_their_fields_the_slots():
    """In train mode the -nl email tasks answer ``core.getUtterance()`` with the utterance and its
    fields (as the package's Selenium environment reads them): the instruction is the utterance
    alone, the fields are the slots."""
    with open_device("sim:miniwob/email-inbox-forward-nl") as dev:
        dev.reset(1000)
        slots = dev.info()["slots"]
        assert set(slots) == {"by", "to"} and "{" not in dev.instruction
        assert slots["by"] in dev.instruction and slots["to"] in dev.instruction


def test_a_stop_from_kill_ends_the_run_as_ctrl_c_does_and_takes_the_browser_with_it(tmp_path):
    """SIGTERM (`kill`, `timeout`, a service manager) to `embodia run`: the run ends as an interrupt
    does, with what it recorded kept, and no Chromium process outlives it (the browser runs in its
    own session, so without the handler it would stay behind)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path
    import shutil
    import tempfile
    # a short folder: Chromium puts sockets there, and a socket's path may not exceed 107 bytes
    scratch, rec = Path(tempfile.mkdtemp(prefix="ebt-", dir="/tmp")), tmp_path / "rec"
    env = {**os.environ, "TMPDIR": str(scratch), "HF_HUB_OFFLINE": "1"}    # the browser's profile goes there
    proc = subprocess.Popen([sys.executable, "-c", "from embodia.agent.cli import main; main()", "run", "-d",
                             "sim:miniwob/click-button", "-p", "expert", "-n", "500", "--record", str(rec)],
                            env=env, stdout=subprocess.DEVNULL, stderr=(tmp_path / "err.txt").open("w"))

    def browsers() -> int:
        out = subprocess.run(["pgrep", "-f", str(scratch)], capture_output=True, text=True).stdout
        return len(out.split())
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(list((rec / "episodes").glob("*"))) < 2:
            assert proc.poll() is None, (tmp_path / "err.txt").read_text()
            time.sleep(0.5)
        assert browsers() > 0, "no browser seen while the run went on"
        proc.send_signal(signal.SIGTERM)
        # as Ctrl-C ends it: mid-episode the loop ends the episode as interrupted and the run closes (0);
        # between episodes the interrupt ends the command (130)
        assert proc.wait(60) in (0, 130)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(1)
    left = browsers(), list(scratch.glob("embodia-chromium-*"))
    subprocess.run(["pkill", "-KILL", "-f", str(scratch)])
    shutil.rmtree(scratch, ignore_errors=True)
    assert left == (0, [])
    done = [json.loads(Path(p, "steps.jsonl").read_text().splitlines()[-1]) for p in (rec / "episodes").iterdir()]
    assert len(done) >= 2 and all(e["type"] == "end" for e in done[:-1])
