"""gui-sim: the simulated phone / desktop, its UI tree, tasks, expert, chance rates and shifts."""
import dataclasses

import numpy as np
import pytest

from embodia.agent.loop.episode import run_episode
from embodia.agent.loop.safety import SafetyGate
from embodia.devices import GuiAction
from embodia.devices.actions import ActionError
from embodia.sim.gui import (
    GATE_ALLOW,
    SHIFTS,
    TEMPLATES,
    ChancePolicy,
    GuiSimDevice,
    candidate_actions,
    chance_rate,
    heldout_labels,
    list_targets,
    open_gui_sim,
)
from embodia.sim.gui.look import HOME
from embodia.sim.gui.tasks import new_instance
from embodia.sim.gui.widgets import MIN_FONT_PX, render

GATE = SafetyGate(allow=GATE_ALLOW)


def every_page(world):
    """Every page of an instance, each with the state that shows the most on it."""
    contact = world.contacts[0].name
    yield [HOME], {}
    yield [HOME, ("app", "Camera")], {}
    yield [HOME, ("settings",)], {}
    for cat in world.categories:
        yield [HOME, ("settings",), ("category", cat)], {}
    yield [HOME, ("messages",)], {}
    yield [HOME, ("messages",), ("msettings",)], {}
    yield [HOME, ("messages",), ("thread", world.conversations[0][0])], {"fields": {"compose_text": "Hi"}}
    yield [HOME, ("messages",), ("compose",)], {"fields": {"to_field": contact}, "focus": "to_field"}
    yield [HOME, ("contacts",)], {}
    yield [HOME, ("contacts",)], {"search_open": True, "fields": {"search": contact[:3]}, "focus": "search"}
    yield [HOME, ("contacts",), ("contact", contact)], {}
    yield [HOME, ("form",)], {"fields": {"form_name": "Ada"}, "ticked": {world.options[0]}}
    yield [HOME, ("form",), ("form-done",)], {}


def show(world, stack, state):
    world._go(list(stack))
    for k, v in state.items():
        setattr(world, k, v)
    world.version += 1
    return world.widgets()


@pytest.mark.parametrize("form,shift", [("phone", ""), ("desktop", ""), ("phone", "layout,font,size,theme"),
                                        ("desktop", "layout,font,size,theme")])
def test_every_page_renders_at_native_size_and_its_tree_is_what_is_drawn(form, shift):
    dev = open_gui_sim("all", form=form, shift=shift)
    for seed in (0,) if shift else (0, 1):
        dev.reset(seed=seed)
        world, look = dev.world, dev.world.look
        size, bg = (look.width, look.height), look.palette.bg
        for stack, state in every_page(world):
            widgets = show(world, stack, state)
            img = dev.observe().images["screen"]
            assert img.shape == (look.height, look.width, 3) and img.dtype == np.uint8
            tree = dev.last_obs.ui_tree
            assert [e["id"] for e in tree] == [w.id for w in widgets if w.in_tree]
            for w in widgets:
                x0, y0, x1, y1 = w.bounds
                assert 0 <= x0 < x1 <= look.width and 0 <= y0 < y1 <= look.height, (stack, w)
                if w.text:
                    assert w.font >= MIN_FONT_PX, (stack, w)
            for k, w in enumerate(widgets):
                if not w.in_tree or not (w.text or w.kind == "icon"):
                    continue
                # drawn without its text (icons: without the widget): pixels change inside its bounds only
                blank = widgets[:k] + ([dataclasses.replace(w, text="")] if w.text else []) + widgets[k + 1:]
                diff = np.any(render(blank, size, bg) != img, axis=-1)
                x0, y0, x1, y1 = w.bounds
                assert diff[y0:y1, x0:x1].sum() >= 20, (stack, w.id, w.text)
                outside = diff.copy()
                outside[y0:y1, x0:x1] = False
                assert not outside.any(), (stack, w.id, w.text)


@pytest.mark.parametrize("split", ["train", "test"])
def test_expert_solves_98_percent_of_instances_through_the_loop(split):
    dev = open_gui_sim("all", split=split)
    solved, tasks = 0, set()
    for seed in range(100):
        r = run_episode(dev, dev.expert(), seed=seed, gate=GATE)
        assert r.error is None, r.error
        solved += dev.success() and r.success          # verified from the app state, not the pixels
        tasks.add(dev.task.id)
        assert 1 <= dev.info()["expert_steps"] <= 5
    assert solved >= 98
    assert tasks == set(TEMPLATES)


def test_desktop_expert_and_every_template_on_its_own_target():
    for tid, t in TEMPLATES.items():
        dev = open_gui_sim(t.apps[0], task=tid, form="desktop")
        assert all(run_episode(dev, dev.expert(), seed=s, gate=GATE).success for s in range(5)), tid


def test_random_agents_succeed_about_as_often_as_the_chance_rate():
    dev = open_gui_sim("all")
    wins, chances = 0, []
    policy = ChancePolicy(dev)
    for seed in range(300):
        dev.reset(seed=seed)
        n = dev.info()["expert_steps"]
        chances.append(chance_rate(dev))
        wins += run_episode(dev, policy, seed=seed, max_steps=n, gate=GATE).success
    p, rate = float(np.mean(chances)), wins / 300
    sd = (p * (1 - p) / 300) ** 0.5
    assert 0.0 < p < 0.05
    # the expert's path is one of the random agent's winning paths; a few others exist
    assert p - 3 * sd <= rate <= p + 3 * sd + 0.02, (rate, p)

    class TreeClicks:                  # uniform over the clickable elements of the UI tree
        def reset(self, seed=None):
            self.rng = np.random.default_rng(seed)

        def act(self, obs, instruction):
            idx = [e["index"] for e in obs.ui_tree if e["clickable"]]
            return GuiAction("click", element=int(self.rng.choice(idx)))
    wins = sum(run_episode(dev, TreeClicks(), seed=s, max_steps=10, gate=GATE).success for s in range(100))
    assert wins / 100 < 0.1


def test_chance_menu_contains_the_experts_every_step():
    dev = open_gui_sim("all")
    for seed in range(30):
        dev.reset(seed=seed)
        c = chance_rate(dev)
        assert 0 < c <= 1
        obs, pol = dev.last_obs, dev.expert()
        prod = 1.0
        while not dev.success():
            a = pol.act(obs, dev.instruction)
            menu = candidate_actions(dev.world, dev.task)
            assert a in menu
            prod /= len(menu)
            dev.act(a)
            obs = dev.observe()
        assert prod == pytest.approx(c)


@pytest.mark.parametrize("shift", list(SHIFTS) + [",".join(SHIFTS)])
def test_shifts_change_the_look_not_the_task(shift):
    base, moved = open_gui_sim("all"), open_gui_sim("all", shift=shift)
    differ = {"pixels": 0, "bounds": 0, "size": 0}
    for seed in range(25):
        a, b = base.reset(seed=seed), moved.reset(seed=seed)
        assert base.instruction == moved.instruction and base.task.slots == moved.task.slots
        sa, sb = a.images["screen"], b.images["screen"]
        differ["size"] += sa.shape != sb.shape
        differ["pixels"] += sa.shape != sb.shape or bool((sa != sb).any())
        differ["bounds"] += [e["bounds"] for e in a.ui_tree] != [e["bounds"] for e in b.ui_tree]
        if shift in ("theme", "font"):          # same elements in the same places, drawn differently
            assert a.ui_tree == b.ui_tree
        assert b.screen == moved.embodiment.screen
        r = run_episode(moved, moved.expert(), seed=seed, gate=GATE)
        assert r.success, (shift, seed, moved.info())
    assert differ["pixels"] == 25
    if shift in ("layout", "size"):
        assert differ["bounds"] >= 20
    if "size" in shift:
        assert differ["size"] >= 20


def test_heldout_values_never_appear_in_train_instances():
    held = heldout_labels()
    for seed in range(500):
        world, task = new_instance(seed, split="train")
        assert not (world.labels() & held), seed
        assert not any(h in task.instruction for h in held), task.instruction
    dev = open_gui_sim("all", split="train")
    # and the labels an expert run shows are among the instance's labels
    seen = set()
    for seed in range(40):
        run_episode(dev, dev.expert(), seed=seed, gate=GATE,
                    on_step=lambda step: seen.update(e["text"] for e in step.next_obs.ui_tree) and False)
    assert not any(h in text for text in seen for h in held)
    test = open_gui_sim("all", split="test")
    for seed in range(100):
        test.reset(seed=seed)
        for key, value in test.task.slots.items():
            if key != "app" or test.task.id == "open-app":
                parts = value.split(" ") if key in ("name", "contact") else [value]
                assert all(p in held for p in parts), (test.task.id, key, value)


def test_same_seed_same_screens_and_trees():
    a, b = open_gui_sim("all", shift="theme,layout"), open_gui_sim("all", shift="theme,layout")
    for seed in (3, 11):
        oa, ob = a.reset(seed=seed), b.reset(seed=seed)
        pa, pb = a.expert(), b.expert()
        for _ in range(3):
            assert oa.images["screen"].tobytes() == ob.images["screen"].tobytes()
            assert oa.ui_tree == ob.ui_tree
            a.act(pa.act(oa, "")), b.act(pb.act(ob, ""))
            oa, ob = a.observe(), b.observe()
    assert a.reset(seed=1).images["screen"].tobytes() != a.reset(seed=2).images["screen"].tobytes()


def test_icon_only_buttons_are_absent_from_the_tree_and_some_tasks_need_them():
    dev = open_gui_sim("all")
    needed = {}
    for seed in range(120):
        dev.reset(seed=seed)
        info = dev.info()
        for wid in info["absent_ids"]:
            needed.setdefault(info["task"], set()).add(wid)
        assert info["needs_absent"] == bool(info["absent_ids"])
    assert needed["search-contact"] == {"search_button"}
    assert needed["send-message"] == {"compose_fab"}
    assert needed["open-turn-off"] == {"more_options"}
    assert "open-app" not in needed and "fill-form" not in needed
    # the magnifier is drawn and tappable, yet no tree element names it
    dev = open_gui_sim("contacts", task="search-contact")
    obs = dev.reset(seed=0)
    dev.act(GuiAction("open_app", app="Contacts"))
    obs = dev.observe()
    magnifier = dev.world.find("search_button")
    assert magnifier is not None and magnifier.clickable and not magnifier.in_tree
    assert "search_button" not in {e["id"] for e in obs.ui_tree}
    x0, y0, x1, y1 = magnifier.bounds
    assert len(np.unique(obs.images["screen"][y0:y1, x0:x1].reshape(-1, 3), axis=0)) > 1


def test_actions_that_cannot_apply_do_nothing_and_bad_ones_raise():
    dev = open_gui_sim("all", task="open-app")
    obs = dev.reset(seed=0)
    before = obs.images["screen"]
    dev.act(GuiAction("type", text="hello"))                     # no focused field: no effect
    dev.act(GuiAction("system_button", button="back"))           # back on the home screen
    dev.act(GuiAction("scroll", point=(500, 500), direction="down"))   # nothing scrolls here
    dev.act(GuiAction("swipe", point=(100, 500), end=(900, 500)))
    obs = dev.observe()
    assert (obs.images["screen"] == before).all() and dev.info()["ignored"] == 4
    assert dev.world.page == HOME and not dev.success()
    with pytest.raises(ActionError, match="single keys"):
        dev.act(GuiAction("key", keys=("ctrl", "a")))
    with pytest.raises(ActionError, match="no app"):
        dev.act(GuiAction("open_app", app="Spreadsheet"))
    with pytest.raises(ActionError, match="not in the current UI tree"):
        dev.act(GuiAction("click", element=999))
    with pytest.raises(ActionError, match="cannot 'right_click'"):
        dev.act(GuiAction("right_click", point=(10, 10)))
    dev.act(GuiAction("open_app", app="contacts"))               # names match case-insensitively
    assert dev.world.page == ("contacts",)
    # a wrong tap elsewhere is a legal action: the episode goes on and can still succeed
    dev.act(GuiAction("system_button", button="home"))
    dev.act(GuiAction("open_app", app=dev.task.slots["app"]))
    assert dev.success()


def test_typing_searching_scrolling_and_sending_change_the_state():
    dev = open_gui_sim("contacts", task="open-contact")
    obs = dev.reset(seed=4)
    rows = [e for e in obs.ui_tree if e["id"].startswith("contact_")]
    assert len(rows) < len(dev.world.contacts)                  # a long list: not all on screen
    dev.act(GuiAction("swipe", point=(500, 800), end=(500, 300)))
    moved = [e for e in dev.observe().ui_tree if e["id"].startswith("contact_")]
    assert moved[0]["id"] != rows[0]["id"]
    dev.act(GuiAction("scroll", point=(500, 500), direction="up"))
    assert dev.world.scroll["contacts_list"] < 400
    dev = open_gui_sim("messages", task="send-message")
    obs = dev.reset(seed=2)
    dev.act(GuiAction("open_app", app="Messages"))
    obs = dev.observe()
    fab = dev.world.find("compose_fab")
    dev.act(GuiAction("click", point=tuple(1000 * c / s for c, s in zip(fab.centre, (540, 960)))))
    obs = dev.observe()
    to = next(e["index"] for e in obs.ui_tree if e["id"] == "to_field")
    dev.act(GuiAction("type", element=to, text="Nobody"))
    dev.act(GuiAction("key", keys=("backspace",)))
    assert dev.observe().ui_tree[to]["text"] == "Nobod" and dev.last_obs.ui_tree[to]["focused"]
    send = next(e["index"] for e in dev.last_obs.ui_tree if e["id"] == "send")
    dev.act(GuiAction("click", element=send))                    # empty message: nothing sent
    assert dev.world.sent == [] and dev.info()["ignored"] == 1


def test_safety_gate_judges_the_send_step_and_the_sandbox_allows_it():
    from embodia.agent.loop.safety import SafetyGate
    dev = open_gui_sim("messages", task="send-message")
    r = run_episode(dev, dev.expert(), seed=0, gate=SafetyGate())          # a gate that says No
    assert not r.success and "RiskRefused" in r.error and dev.world.sent == []
    gate = SafetyGate(allow=("all",))
    r = run_episode(dev, dev.expert(), seed=0)                              # the sandbox's default gate
    assert r.success and dev.world.sent
    for tid in TEMPLATES:                      # nothing else any task taps looks risky to the gate
        if tid != "send-message":
            d = open_gui_sim("all", task=tid)
            assert all(run_episode(d, d.expert(), seed=s, gate=gate).success for s in range(5)), tid
    assert [d["risk"] for d in gate.decisions] == []


def test_uri_options_are_checked():
    assert "gui-sim:settings" in list_targets()
    dev = open_gui_sim("", task="fill-form", split="test", shift="font", form="desktop", max_steps="7")
    assert isinstance(dev, GuiSimDevice) and dev.max_steps == 7 and dev.embodiment.kind == "gui-desktop"
    assert dev.embodiment.screen.width == 1024
    for bad, match in [(dict(task="fly"), "unknown task"), (dict(split="dev"), "split"),
                       (dict(shift="gravity"), "unknown gui-sim shift"), (dict(form="watch"), "form"),
                       (dict(colour="red"), "unknown gui-sim option")]:
        with pytest.raises(ValueError, match=match):
            open_gui_sim("all", **bad)
    with pytest.raises(ValueError, match="unknown gui-sim target"):
        open_gui_sim("browser")
    with pytest.raises(ValueError, match="unknown task"):
        open_gui_sim("launcher", task="fill-form")
