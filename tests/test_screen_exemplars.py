"""The screen memory for any chat model (issue 54, part 4): verified successes of a task are offered
to a served model as exemplars in its prompt (as Synapse gives its exemplars, but filled online),
against the loopback server that speaks OpenAI's wire format and keeps every request: the prompt
carries the retrieved success with this instance's values, and a run stores a success in one
episode and shows it in the next."""
import json

import pytest
from test_gui_sim_remote import expert_plan

from embodia.agent.loop.episode import run_episode
from embodia.devices import open_device
from embodia.memory import ScreenMemory
from embodia.policies.gui.local_vlm import LocalVLMPolicy
from embodia.policies.gui.remote import OpenAIPolicy
from embodia.policies.gui.screen_memory import ScreenMemoryPolicy

pytest_plugins = ("fake_openai",)
URI = "gui-sim:settings?task=open-turn-off"
HEADER = "Verified successful runs of this task"


def _replies(plan):
    return ["```json\n" + json.dumps(a) + "\n```" for a in plan]


def _exemplar_runs(text: str) -> list:
    return [json.loads(line.split(": ", 1)[1]) for line in text.splitlines() if line.startswith("Run ")]


def test_a_success_in_one_episode_is_an_exemplar_in_the_next_prompt(fake_openai):
    (ins_a, plan_a), (ins_b, plan_b) = expert_plan(URI, seed=3), expert_plan(URI, seed=4)
    assert ins_a != ins_b                       # two instances of one template: other values
    fake_openai.script(*_replies(plan_a), *_replies(plan_b))
    mem = ScreenMemory()
    with open_device(URI) as dev:
        pol = ScreenMemoryPolicy(OpenAIPolicy("test", fake_openai.url, api_key_env=None).bind(dev.embodiment),
                                 mem, mode="exemplars", device=dev)
        first = run_episode(dev, pol, seed=3)
        assert first.success and len(mem) > 0              # stored
        n_first = len(fake_openai.chats)
        assert all(HEADER not in c.texts()[1] for c in fake_openai.chats)     # nothing to show yet
        second = run_episode(dev, pol, seed=4)
    assert second.success and fake_openai.left == 0
    prompt = fake_openai.chats[n_first].texts()[1]
    assert HEADER in prompt
    runs = _exemplar_runs(prompt)
    assert len(runs) == 1 and [s["type"] for s in runs[0]] == [a["type"] for a in plan_a]
    # the stored success is shown with this instance's values: what the model must press here
    slots = dev.info().get("slots") or {}
    shown = json.dumps(runs[0], ensure_ascii=False)
    assert slots and all(v in shown for v in slots.values() if isinstance(v, str)), (slots, shown)
    assert pol.step_record()["exemplars"] == 1


def test_the_off_arm_and_an_empty_memory_show_nothing_and_a_head_cannot_read_exemplars(fake_openai):
    _, plan = expert_plan(URI, seed=3)
    fake_openai.script(*_replies(plan) * 2)
    mem = ScreenMemory()
    with open_device(URI) as dev:
        base = OpenAIPolicy("test", fake_openai.url, api_key_env=None).bind(dev.embodiment)
        off = ScreenMemoryPolicy(base, mem, mode="off", device=dev)
        assert run_episode(dev, off, seed=3).success and len(mem) > 0
        assert run_episode(dev, off, seed=3).success
        assert all(HEADER not in c.texts()[1] for c in fake_openai.chats)
        assert base.takes_exemplars and LocalVLMPolicy.takes_exemplars       # openai: and hf: read them
        with pytest.raises(ValueError, match="reads exemplars"):
            ScreenMemoryPolicy(dev.expert(), mem, mode="exemplars", device=dev)


def test_exemplars_are_the_nearest_successes_with_their_steps_in_order():
    mem = ScreenMemory()
    with open_device(URI) as dev:
        for seed in (3, 4):
            pol = ScreenMemoryPolicy(dev.expert(), mem, mode="off", device=dev)
            assert run_episode(dev, pol, seed=seed).success
        obs = dev.reset(5)
        slots, ns = dev.info()["slots"], pol.namespace
        runs = mem.exemplars(ns, obs.ui_tree, dev.instruction, slots=slots, k=2)
        assert len(runs) == 2 and all(r and r[0]["type"] for r in runs)
        assert mem.exemplars(ns, obs.ui_tree, dev.instruction, slots=slots, k=1) == runs[:1]
        assert mem.exemplars("nowhere/else", obs.ui_tree, dev.instruction) == []
