"""`gui-sim:<app>`: a simulated phone or desktop with apps, a UI tree and verifiable multi-step tasks.

Screens are drawn offscreen with PIL at native resolution from a widget model: phone 540x960 at
pixel ratio 1.5 (360x640 dp; text 18-28 px), desktop 1024x640 at ratio 1 (text 15-21 px). Apps: a
launcher, Settings (switches on the main page and in category sub-pages), Contacts (a long
scrolling list; its search sits behind an icon-only magnifier), Messages (conversations, a
compose "+" and a settings page behind an icon-only "more" button), a Sign-up form, and distractor
apps. Icon-only buttons are drawn and tappable but absent from the UI tree on purpose: tasks that
need one say so in `info()["needs_absent"]`.

URI: ``gui-sim:<target>?task=<id|any>&split=train|test&shift=layout,theme,font,size&form=phone|desktop&max_steps=N``
with target one of `TARGETS` (``all`` when empty; the app family whose templates are drawn).

>>> dev = open_gui_sim("settings", split="test", shift="theme")
>>> obs = dev.reset(seed=0)
>>> obs.images["screen"].shape, dev.instruction.startswith(("Turn", "Open"))
((960, 540, 3), True)
>>> from embodia.agent.loop.episode import run_episode           # doctest: +SKIP
>>> from embodia.agent.loop.safety import SafetyGate          # doctest: +SKIP
>>> run_episode(dev, dev.expert(), seed=1, gate=SafetyGate(allow=GATE_ALLOW)).success   # doctest: +SKIP
True

Actions (points already in physical pixels when they reach the simulator):

- ``click`` / ``long_press`` tap the topmost clickable widget under the point (nothing there: no
  effect); ``double_click`` taps twice (a switch toggles back); ``right_click`` (desktop) has no effect.
- ``scroll`` up/down moves the list under the point by 40% of the screen height; ``swipe`` /
  ``drag`` move it by the finger's vertical travel (content follows the finger).
- ``type`` appends to the focused field (a ``type`` naming a field taps it first); ``key``
  understands enter, backspace, escape, back, home; ``system_button`` back/home/enter/menu;
  ``open_app`` opens an installed app by name (unknown name: `ActionError`).
- Actions that cannot apply here (typing with no focused field, scrolling where nothing scrolls,
  Back on the home screen, enter, menu) do nothing and are counted in ``info()["ignored"]``; they
  are no errors, as on a phone. Unknown keys and apps raise `ActionError`.

Sending a message clicks a button labelled "Send", which the runtime's safety gate classes as
``send``. The simulator declares the "sandbox" capability (nothing real is sent), so the default
gate of a run allows it and records the decision; a gate passed explicitly still applies, e.g.
``SafetyGate(allow=GATE_ALLOW)`` to allow only what these tasks need.
"""
from __future__ import annotations

import dataclasses
import random

import numpy as np

from embodia.devices.embodiment import Screen
from embodia.devices.gui import ELEMENT_FIELDS, GuiDevice, gui_embodiment
from embodia.policies.base import Policy
from embodia.sim.gui.tasks import (
    SCREENS,
    SHIFTS,
    SPLITS,
    TARGETS,
    TEMPLATES,
    candidate_actions,
    expert_action,
    heldout_labels,
    new_instance,
    plan,
    templates_for,
)
from embodia.sim.gui.widgets import ROLES, render, ui_tree

GATE_ALLOW = ("send",)
DEFAULT_MAX_STEPS = 10           # the expert needs 1-5 steps on the base screens
ACTIONS = frozenset({"click", "double_click", "long_press", "swipe", "drag", "scroll", "type", "key",
                     "system_button", "open_app"})

__all__ = ["GuiSimDevice", "GuiSimExpert", "ChancePolicy", "open_gui_sim", "list_targets", "chance_rate",
           "candidate_actions", "heldout_labels", "GATE_ALLOW", "TEMPLATES", "TARGETS", "SHIFTS", "SPLITS"]


class GuiSimDevice(GuiDevice):
    """A simulated phone or desktop; a fresh random instance per ``reset(seed)``, deterministic per seed."""

    capabilities = frozenset({"screenshot", "ui_tree", "text_input", "success", "expert", "deterministic",
                              "sandbox"})
    element_fields = ELEMENT_FIELDS | {"checked", "scrollable"}      # widgets.ui_tree writes these
    roles = frozenset(ROLES.values())

    def __init__(self, target: str = "all", *, task: str = "any", split: str = "train", shift=(),
                 form: str = "phone", max_steps: int = DEFAULT_MAX_STEPS):
        super().__init__()
        target = target or "all"
        if target not in TARGETS:
            raise ValueError(f"unknown gui-sim target {target!r}; known: {', '.join(TARGETS)}")
        if task != "any" and task not in templates_for(target):
            raise ValueError(f"unknown task {task!r} for gui-sim:{target}; known: any, "
                             + ", ".join(templates_for(target)))
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        shifts = tuple(s.strip() for s in shift.split(",") if s.strip()) if isinstance(shift, str) else tuple(shift)
        shifts = tuple(s for s in shifts if s != "none")
        bad = [s for s in shifts if s not in SHIFTS]
        if bad:
            raise ValueError(f"unknown gui-sim shift(s) {bad}; known: "
                             + "; ".join(f"{k} ({v})" for k, v in SHIFTS.items()))
        if form not in SCREENS:
            raise ValueError(f"form must be one of {sorted(SCREENS)}, got {form!r}")
        if int(max_steps) < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.target, self.task_id, self.split, self.shifts, self.form = target, task, split, shifts, form
        self.max_steps = int(max_steps)
        self.supported = ACTIONS | ({"right_click"} if form == "desktop" else set())
        w, h, r = SCREENS[form]
        self.embodiment = gui_embodiment(f"gui-sim:{form}", f"gui-{form}", Screen(w, h, r))
        self._new(0)                     # an instance from the start: observe() works before reset()

    # -- episode ---------------------------------------------------------------------------------------
    def _new(self, seed: int) -> None:
        self.seed = seed
        self.world, self.task = new_instance(seed, target=self.target, template=self.task_id,
                                             split=self.split, shifts=self.shifts, form=self.form)
        self.instruction = self.task.instruction
        self.plan = plan(self.world, self.task)
        self._frame: tuple[int, np.ndarray] | None = None
        screen = self._screen()
        if self.embodiment.screen != screen:          # the `size` shift: Embodiment is frozen
            self.embodiment = dataclasses.replace(self.embodiment, screen=screen)

    def reset(self, seed: int | None = None):
        self._new(random.SystemRandom().randrange(2**31) if seed is None else int(seed))
        return super().reset(seed)

    def success(self) -> bool:
        return self.task.success(self.world)

    def info(self) -> dict:
        t = self.task
        return {**super().info(), "task": t.id, "template": t.template.text, "slots": dict(t.slots),
                "split": t.split, "shifts": list(self.shifts), "form": self.form, "seed": self.seed,
                "screen": [self.world.look.width, self.world.look.height, self.world.look.ratio],
                "needs_absent": bool(self.plan.absent), "absent_ids": list(self.plan.absent),
                "expert_steps": len(self.plan.steps), "plan": list(self.plan.steps),
                "chance": self.plan.chance, "page": list(self.world.page),
                "ignored": len(self.world.ignored)}

    def expert(self) -> "GuiSimExpert":
        return GuiSimExpert(self)

    # -- GuiDevice ---------------------------------------------------------------------------------------
    def _screen(self) -> Screen:
        look = self.world.look
        return Screen(look.width, look.height, look.ratio)

    def _grab(self) -> np.ndarray:
        if self._frame is None or self._frame[0] != self.world.version:
            look = self.world.look
            self._frame = (self.world.version, render(self.world.widgets(), (look.width, look.height),
                                                      look.palette.bg))
        return self._frame[1].copy()

    def _ui_tree(self) -> list:
        return ui_tree(self.world.widgets())

    def _execute(self, action, p, q) -> None:
        self.world.execute(action, p, q)


class GuiSimExpert(Policy):
    """Solves the current task from the simulator's state: element references where the target is in
    the UI tree, points where it is not; ``terminate`` (success) once done, which the loop rarely sees
    because it stops on ``success()`` first."""

    def __init__(self, device: GuiSimDevice):
        self.device = device

    def reset(self, seed: int | None = None) -> None:
        pass

    def act(self, obs, instruction: str = ""):
        return expert_action(self.device.world, self.device.task)

    def info(self) -> dict:
        return {"plan_steps": len(self.device.plan.steps)}


class ChancePolicy(Policy):
    """Uniform over `candidate_actions` of the current screen: the agent `chance_rate` describes."""

    def __init__(self, device: GuiSimDevice):
        self.device = device
        self.reset(None)

    def reset(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)

    def act(self, obs, instruction: str = ""):
        return self.rng.choice(candidate_actions(self.device.world, self.device.task))


def chance_rate(device: GuiSimDevice) -> float:
    """Chance success of the current instance: the product over the expert's steps of one over the
    number of candidate actions on that step's screen (see `candidate_actions`): what a uniformly
    random agent achieves in as many steps as the expert needs, along the expert's path."""
    return device.plan.chance


def open_gui_sim(target: str = "", **query) -> GuiSimDevice:
    """Factory for ``gui-sim:<target>?task=..&split=..&shift=..&form=..&max_steps=..``."""
    known = {"task", "split", "shift", "form", "max_steps"}
    unknown = set(query) - known
    if unknown:
        raise ValueError(f"unknown gui-sim option(s) {sorted(unknown)}; known: {sorted(known)}")
    if "max_steps" in query:
        query["max_steps"] = int(query["max_steps"])
    return GuiSimDevice(target or "all", **query)


def list_targets() -> list[str]:
    return [f"gui-sim:{t}" for t in TARGETS]

