"""GUI demonstrations for the GUI head of `embodia-tiny`: gui-sim episodes turned into training steps
(screen, instruction, UI tree, what was done so far, the teacher's next action).

    steps = record_gui_demos(100, seed=10_000)          # the train split, phone form; a list of GuiStep

The teacher is the simulator's scripted expert with one change: it does not know where a setting
lives. The expert reads the world state, so for "Turn on Hotspot" it opens the right category
(Network) at once; nothing on the screen says so, and a held-out setting name carries no hint a
model could learn. The teacher opens the categories in screen order instead, skipping those it has
already looked in, and goes back when the setting is not there: what an agent that reads the
screen and remembers its own past actions can do. Everything else is the expert's choice.

Episodes mix the looks the benchmark shifts (no shift, ``layout``, ``theme``, ``font``, all three),
and some steps execute a random on-screen action instead of the teacher's (DART-style noise: the
step still records the teacher's action for the state it saw), so the data shows recoveries from
wrong pages. An episode stops once a noisy step made the task unsolvable (a toggled switch, a sent
message); what was recorded before stays.
"""
from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field

import numpy as np

from embodia.devices import GuiAction, Screen
from embodia.policies.base import Policy
from embodia.policies.gui.head_encoding import describe

SHIFT_MIX = (("", 0.25), ("layout", 0.3), ("theme", 0.1), ("font", 0.1), ("layout,theme,font", 0.25))
HISTORY = 12                 # past actions a step remembers


@dataclass
class GuiStep:
    """One decision: what the policy sees and the action to learn."""

    instruction: str
    history: list[str]                 # what was done before, oldest first (`embodia.policies.gui.head.describe`)
    tree: list[dict]
    screen: np.ndarray                 # uint8 HxWx3 at native size (the encoder downscales it)
    size: Screen
    action: GuiAction
    template: str = ""
    prompt: str = ""                   # the body's embodiment prompt
    meta: dict = field(default_factory=dict)


def teacher_action(world, task, visited: set) -> GuiAction:
    """The expert's next action, except on the Settings page of a setting task whose setting sits in
    a category: open the first category (screen order) not yet looked in (`visited`)."""
    from embodia.sim.gui.look import slug
    from embodia.sim.gui.tasks import click, expert_action
    a = expert_action(world, task)
    if task.id in ("turn-on", "open-turn-off") and world.page == ("settings",) and "setting" in task.slots:
        place = world.setting_place(task.slots["setting"])
        if place[0] == "category" and place[1] not in visited:
            for kind, name in world.main_rows:
                wdg = world.find("category_" + slug(name)) if kind == "category" and name not in visited else None
                if wdg is not None:
                    return click(world, wdg)
    return a


class GuiTeacher(Policy):
    """`teacher_action` as a policy over a `GuiSimDevice` (it reads the device's world)."""

    def __init__(self, device):
        self.device = device
        self.reset()

    def reset(self, seed: int | None = None) -> None:
        self.visited: set[str] = set()

    def act(self, obs=None, instruction: str = "") -> GuiAction:
        w, task = self.device.world, self.device.task
        note_visit(w, task, self.visited)
        return teacher_action(w, task, self.visited)


def note_visit(world, task, visited: set) -> None:
    """A category page looked at without the task's setting on it counts as visited."""
    if world.page[0] == "category" and "setting" in task.slots:
        names = world.categories[world.page[1]]
        if task.slots["setting"] not in names:
            visited.add(world.page[1])


def _solvable(world, task, visited: set, max_steps: int = 12) -> bool:
    from embodia.sim.gui.tasks import step
    w, seen = copy.deepcopy(world), set(visited)
    for _ in range(max_steps):
        if task.success(w):
            return True
        note_visit(w, task, seen)
        a = teacher_action(w, task, seen)
        if a.type == "terminate":
            return False
        step(w, a)
    return task.success(w)


def _shift(rng: random.Random) -> str:
    r, acc = rng.random(), 0.0
    for name, p in SHIFT_MIX:
        acc += p
        if r < acc:
            return name
    return SHIFT_MIX[-1][0]


def record_gui_demos(episodes: int, **kw) -> list[GuiStep]:
    """`iter_gui_demos` as a list (screens at native size: about 1.5 MB a step on the phone)."""
    return list(iter_gui_demos(episodes, **kw))


def iter_gui_demos(episodes: int, *, seed: int = 10_000, split: str = "train", target: str = "all",
                   template: str = "any", noise: float = 0.15, max_steps: int = 12,
                   shifts: str | None = None):
    """Teacher episodes on gui-sim (seeds ``seed..seed+episodes-1``), one `GuiStep` per decision.

    ``shifts`` fixes the look of every episode (default: the `SHIFT_MIX` draw per episode);
    ``noise`` is the chance that a step executes a random candidate action instead (never on an
    episode's first step).
    """
    from embodia.sim.gui import GuiSimDevice
    from embodia.sim.gui.tasks import candidate_actions, target_of

    rng = random.Random(f"gui-demos/{seed}")
    devices: dict[str, GuiSimDevice] = {}
    for i in range(episodes):
        shift = _shift(rng) if shifts is None else shifts
        dev = devices.get(shift)
        if dev is None:
            dev = devices[shift] = GuiSimDevice(target, task=template, split=split, shift=shift)
        obs = dev.reset(seed + i)
        visited: set[str] = set()
        history: list[str] = []
        for t in range(max_steps):
            w, task = dev.world, dev.task
            if task.success(w):
                break
            note_visit(w, task, visited)
            a = teacher_action(w, task, visited)
            if a.type == "terminate":
                break
            yield GuiStep(dev.instruction, history[-HISTORY:], obs.ui_tree, obs.images["screen"], obs.screen, a,
                          task.id, dev.embodiment.prompt(), {"seed": seed + i, "shift": shift, "t": t})
            do = a
            if t > 0 and rng.random() < noise:
                mine = target_of(w, a)
                others = [c for c in candidate_actions(w, task) if target_of(w, c) != mine]
                if others:
                    do = rng.choice(others)
            dev.act(do)
            history.append(describe(do, obs.ui_tree))
            obs = dev.observe()
            if do is not a and not _solvable(dev.world, dev.task, visited):
                break
