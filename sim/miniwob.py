"""MiniWoB++ tasks on the browser device: ``sim:miniwob/<task>`` (the Farama ``miniwob`` package's pages).

>>> with open_device("sim:miniwob/click-button") as dev:                   # doctest: +SKIP
...     obs = dev.reset(seed=3)
...     dev.instruction
'Click on the "ok" button.'
...     dev.act(dev.expert().act(obs, dev.instruction)); dev.success()
True

MiniWoB's own protocol, read from the package's ``html/core/core.js`` and its Selenium
environment (facts used; no code taken):

- a task is one HTML page (``html/miniwob/<task>.html``); it shows a START cover until an
  episode begins;
- an episode begins with ``Math.seedrandom(seed)``, ``core.setDataMode(mode)`` (``train`` by
  default, as the Selenium environment) and ``core.startEpisodeReal()``, which draws the problem
  from the seeded generator; the page is ready when ``WOB_TASK_READY`` is true;
- the instruction is ``core.getUtterance()`` (the ``#query`` text);
- the task ends itself (``core.endEpisode``): ``WOB_DONE_GLOBAL`` becomes true,
  ``WOB_RAW_REWARD_GLOBAL`` is the reward in [-1, 1] and ``WOB_REWARD_GLOBAL`` the same reward
  discounted by the time taken where the task asks for that; running out of
  ``core.EPISODE_MAX_TIME`` (10 s unless the task sets its own, in real time) ends it with -1;
- success is a raw reward > 0;
- the utterance's fields (what the problem asks for) come from the package's own extractor,
  ``miniwob.fields``; the device reports them as ``info()["slots"]``, the slots a success memory
  abstracts typed text and labels into.

Here the page is loaded afresh at every reset (a seed then draws the same problem for every
policy: seeds are paired across policies), driven by trusted input like any page
(`embodia.devices.browser`), and the device is a "sandbox": nothing real is deleted or sent, so the
safety gate allows and records. Scripted experts (`EXPERTS`, written in
`embodia.sim.miniwob_experts` and `embodia.sim.miniwob_experts_more`) act from the instruction and
the UI tree alone, as a policy could; ``expert()`` raises for a task without one. Each kept expert
solved at least 19 of 20 held-out seeds (docs/benchmarks/miniwob.md, "Every expert on 20 held-out
seeds" and "Issue 54, part 3: 22 more experts on 20 held-out seeds").

Tasks without an expert, and why (the tree is what an expert may read):

- what decides the task is drawn, not in the tree: click-shades, click-color (colour only),
  click-shape, count-shape, count-sides, identify-shape (shapes and colours of unnamed SVG parts;
  a letter or digit is a label, a drawn shape is not), visual-addition (drawn blocks),
  number-checkboxes (the example digit is drawn), hot-cold, use-colorwheel and use-colorwheel-2 (a
  colour found on a drawn wheel), click-menu-2's item "with the icon";
- the action space lacks what it needs: click-menu-2's submenus open on hover, click-scroll-list
  needs a modifier click, the drag and draw tasks (drag-box, drag-circle, drag-cube, drag-items,
  drag-items-grid, drag-shapes, drag-shapes-2, drag-single-shape, drag-sort-numbers, draw-circle,
  draw-line, resize-textarea, daily-calendar) and hover-shape; the canvas points (bisect-angle,
  circle-center, find-midpoint, right-angle) and the moving or timed games (chase-circle,
  moving-items, simon-says) were not attempted, nor tic-tac-toe (a win over the page's player is
  not certain);
- use-spinner: its field refuses keys and the spinner's arrows are not in the tree;
- use-autocomplete and use-autocomplete-nodelay: typed keys fill the field but its suggestion list never shows in
  the tree;
- click-checkboxes-soft asks for words "similar to" given ones: a thesaurus the page does not give;
- stock-market: its prices tick, so the page never settles and the device's reset refuses it;
- text-editor: the toolbar's buttons and colour swatches are unnamed, and one word's selection
  needs a double-click at a place the tree does not give (the words share one text element);
- tried and dropped (below 19/20): click-pie and click-pie-nodelay (18/20, 17/20: the pie's first
  item, selected from the start, never answers a click), social-media (its More menu's items did
  not reach the tree after the click), highlight-text and highlight-text-2 (a mouse drag; 3 of 6
  development seeds), book-flight and book-flight-nodelay (its date field refuses typed text, so
  the picker must be stepped, and From and To each need their suggestion list, which shows a
  moment after the typing: about 13 to 18 steps, over the device's 15), use-slider-2 (three
  sliders; the one-slider plan did not carry over in the time given).

Suites (`SUITES`, ``sim:miniwob/<suite>``): every task with an expert, and the task sets of
published figures that a source lists exactly, each with its source beside it; `NOT_BUILT` names
the sets that could not be sourced and why.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import random
import re
import time
from pathlib import Path

from embodia.devices.actions import GuiAction
from embodia.devices.browser import BrowserDevice, parse_size
from embodia.sim import miniwob_experts, miniwob_experts_more
from embodia.sim.miniwob_experts import TreeExpert

__all__ = ["EXPERTS", "NOT_BUILT", "SUITES", "MiniWobDevice", "RandomTreePolicy", "group_of", "list_tasks", "open_miniwob",
           "suite_coverage", "suite_tasks"]

EXPERTS = {**miniwob_experts.EXPERTS, **miniwob_experts_more.EXPERTS}     # task -> plan
READY_TIMEOUT_S = 2.0
STATE = "[WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_GLOBAL, WOB_REWARD_REASON, core.EPISODE_MAX_TIME]"


def html_root() -> Path:
    """The package's task pages, found without importing it (its import pulls in Selenium)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("sim:miniwob needs the miniwob package: pip install 'embodia[miniwob]'")
    root = Path(next(iter(spec.submodule_search_locations))) / "html" / "miniwob"
    if not root.is_dir():
        raise ImportError(f"the miniwob package has no task pages at {root}")
    return root


def task_fields(task: str, instruction: str) -> dict[str, str]:
    """The episode's fields as the package's own extractor (``miniwob.fields``, regular expressions
    over the utterance) reads them, e.g. ``{"target": "Foo"}`` for choose-list: the slots that let a
    success memory store "type {target}" instead of one episode's literal text. ``{}`` for a task the
    package has no extractor for, or an utterance it does not parse."""
    try:
        from miniwob.fields import get_field_extractor
        fields = get_field_extractor(task)(instruction)
    except (ImportError, KeyError, ValueError, IndexError, TypeError):   # no extractor, or it cannot parse this one
        return {}
    return {str(k): v for k, v in fields if isinstance(v, str) and v.strip()}


def list_tasks() -> list[str]:
    return sorted(p.stem for p in html_root().glob("*.html"))


class MiniWobDevice(BrowserDevice):
    """One MiniWoB++ task in headless Chromium (see the module doc)."""

    capabilities = BrowserDevice.capabilities | {"success", "expert", "sandbox"}

    def __init__(self, task: str, *, mode: str = "train", max_steps: int = 15, size=(500, 340), **browser):
        page = html_root() / f"{task}.html"
        if not page.is_file():
            raise ValueError(f"unknown MiniWoB task {task!r}; known: {', '.join(list_tasks())}")
        if mode not in ("train", "test"):
            raise ValueError(f"miniwob: mode must be 'train' or 'test', got {mode!r}")
        self.task, self.mode, self.max_steps = task, mode, int(max_steps)
        self.instruction = ""
        self.slots: dict[str, str] = {}
        self._state = [False, 0.0, 0.0, None, 10000]
        super().__init__(page.as_uri(), size=size, **browser)
        self.embodiment = dataclasses.replace(self.embodiment, name=f"miniwob/{task}")

    def reset(self, seed: int | None = None):
        seed = random.randrange(2 ** 31) if seed is None else int(seed)
        self.js_dialogs = []
        self.navigate(self.url)
        self.evaluate(f"Math.seedrandom({seed}); core.setDataMode({json.dumps(self.mode)}); core.startEpisodeReal(); 0")
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.evaluate("typeof WOB_TASK_READY === 'undefined' || WOB_TASK_READY"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"miniwob/{self.task}: the task did not get ready in {READY_TIMEOUT_S:g} s")
            time.sleep(0.05)
        self._settle()
        utterance = self.evaluate("core.getUtterance()") or ""
        if isinstance(utterance, dict):      # the -nl tasks in train mode: the utterance and its fields
            self.instruction = str(utterance.get("utterance") or "")
            self.slots = {str(k): v for k, v in (utterance.get("fields") or {}).items() if isinstance(v, str) and v.strip()}
        else:
            self.instruction = str(utterance)
            self.slots = task_fields(self.task, self.instruction)
        self._state = [False, 0.0, 0.0, None, 10000]
        self.answer, self.status = None, None
        return self.observe()

    def _read_state(self) -> list:
        self._state = self.evaluate(STATE)
        return self._state

    def done(self) -> bool:
        return super().done() or bool(self._read_state()[0])

    def success(self) -> bool:
        done, raw = self._read_state()[:2]
        return bool(done) and float(raw) > 0

    def info(self) -> dict:
        done, raw, reward, reason, limit = self._state
        return {**super().info(), "task": self.task, "seed_mode": self.mode, "done": bool(done),
                "raw_reward": float(raw), "reward": float(reward), "reason": reason, "time_limit_ms": limit,
                "slots": dict(self.slots)}

    def expert(self):
        if self.task not in EXPERTS:
            raise NotImplementedError(f"miniwob/{self.task} has no scripted expert; experts: {', '.join(sorted(EXPERTS))}")
        return TreeExpert(EXPERTS[self.task])


def open_miniwob(task: str, **query) -> MiniWobDevice:
    """``sim:miniwob/<task>[?mode=train|test&max_steps=N&size=WxH&settle=S]``."""
    kinds = {"mode": str, "max_steps": int, "size": parse_size, "settle": float}
    unknown = set(query) - set(kinds)
    if unknown:
        raise ValueError(f"sim:miniwob: unknown options {sorted(unknown)}; known: {sorted(kinds)}")
    return MiniWobDevice(task, **{k: kinds[k](v) for k, v in query.items()})


class RandomTreePolicy:
    """The chance baseline: at each step, one clickable element of the tree chosen uniformly, clicked,
    or typed into (a word from the instruction or a random one) when it takes text. Seeded per episode."""

    def __init__(self, seed: int = 0):
        self.base = seed
        self.rng = random.Random(seed)

    def reset(self, seed=None) -> None:
        self.rng = random.Random(f"{self.base}/{seed}")

    def act(self, obs, instruction: str) -> GuiAction:
        targets = [e for e in obs.ui_tree or [] if e.get("clickable")]
        if not targets:
            return GuiAction("wait", duration_ms=100)
        e = self.rng.choice(targets)
        if e.get("editable"):
            words = re.findall(r"\w+", instruction) or ["text"]
            return GuiAction("type", element=e["index"], text=self.rng.choice(words + ["abc"]))
        return GuiAction("click", element=e["index"])


# -- suites (`sim:miniwob/<suite>`, run by `embodia.agent.evaluation.suite`) -------------------------
# Each published set is copied name for name from the source written beside it; a set that could not
# be read from a source is not built (NOT_BUILT says why). A suite keeps the tasks this package lacks
# or that have no expert: `suite_coverage` names them and a suite run reports them, never drops them.
WGE_ORIGINAL = (
    # Liu et al. 2018 (WGE), "Tasks used in the paper", "Original tasks", as the MiniWoB++ page lists
    # them (stanfordnlp/miniwob-plusplus, index.html at commit 833a477): its first table, then the
    # tasks with animation delays and their "nodelay" versions.
    "choose-list", "click-button", "click-button-sequence", "click-checkboxes", "click-color", "click-dialog",
    "click-dialog-2", "click-link", "click-option", "click-shades", "click-shape", "click-tab", "click-tab-2",
    "click-test", "click-test-2", "click-widget", "count-shape", "email-inbox", "enter-date", "enter-password",
    "enter-text", "enter-text-dynamic", "enter-time", "focus-text", "focus-text-2", "grid-coordinate",
    "guess-number", "identify-shape", "login-user", "navigate-tree", "search-engine", "social-media",
    "tic-tac-toe", "use-spinner",
    "book-flight", "choose-date", "click-collapsible", "click-collapsible-2", "click-pie", "use-autocomplete",
    "book-flight-nodelay", "choose-date-nodelay", "click-collapsible-2-nodelay", "click-collapsible-nodelay",
    "click-pie-nodelay", "use-autocomplete-nodelay",
)
WGE_ADDITIONAL = (
    # the same page, "Tasks used in the paper", "Additional tasks"
    "click-checkboxes-large", "click-checkboxes-soft", "click-checkboxes-transfer", "click-tab-2-hard",
    "login-user-popup", "multi-layouts", "multi-orderings", "social-media-all", "social-media-some",
    "email-inbox-forward-nl", "email-inbox-forward-nl-turk", "email-inbox-nl-turk",
)
SYNAPSE_EXEMPLARS = (
    # Zheng et al. 2023 (Synapse): the 48 tasks its exemplar memory holds demonstrations of ("using
    # demonstrations from only 48 tasks"), the keys of synapse/memory/miniwob/exemplars.json in
    # ltzheng/Synapse at commit 25b7046, in that file's order. NOT the 64 tasks its 99.2% is over.
    "book-flight", "choose-date", "click-button-sequence", "click-button", "click-checkboxes-large",
    "click-checkboxes-soft", "click-collapsible-2", "click-collapsible", "click-color", "click-dialog-2",
    "click-dialog", "click-link", "click-menu", "click-pie", "click-scroll-list", "click-shades", "click-shape",
    "click-tab-2", "click-tab", "click-widget", "copy-paste-2", "count-shape", "email-inbox-nl-turk",
    "enter-date", "enter-password", "enter-text-dynamic", "enter-time", "find-word", "focus-text-2",
    "focus-text", "grid-coordinate", "guess-number", "identify-shape", "login-user-popup", "multi-layouts",
    "navigate-tree", "read-table", "search-engine", "simple-algebra", "social-media-all", "social-media-some",
    "social-media", "terminal", "text-transform", "tic-tac-toe", "use-autocomplete", "use-slider", "use-spinner",
)
SUITES: dict[str, tuple[str, ...]] = {
    "experts": tuple(sorted(EXPERTS)),          # every task with a scripted expert
    "wge-original": WGE_ORIGINAL, "wge-additional": WGE_ADDITIONAL, "synapse-exemplars": SYNAPSE_EXEMPLARS,
}
NOT_BUILT = {
    "synapse-64": "Synapse's 64 evaluation tasks are listed only in its paper's per-task table, which "
                  "could not be read where this was written; its repository lists the 48 exemplar tasks",
    "wge-flight": "the three flight.* tasks of WGE are not in the Farama miniwob package",
    "ccnet": "Humphreys et al. 2022 (CC-Net): no source listing its task set exactly was found",
    "rci": "Kim et al. 2023 (RCI): its repository's task_names_RCI.json sits in a data-comparison folder "
           "and is not stated to be the paper's evaluated set",
}


def suite_tasks(name: str) -> tuple[str, ...]:
    """The tasks of suite ``name``, in the source's order (tasks missing here included)."""
    if name not in SUITES:
        extra = f" ({name} is not built: {NOT_BUILT[name]})" if name in NOT_BUILT else ""
        raise ValueError(f"unknown MiniWoB suite {name!r}{extra}; suites: {', '.join(SUITES)}")
    return SUITES[name]


def suite_coverage(name: str) -> dict[str, list[str]]:
    """The tasks of a suite this package lacks (``missing``) and those without an expert (``no_expert``)."""
    shipped = set(list_tasks())
    tasks = suite_tasks(name)
    return {"missing": [t for t in tasks if t not in shipped],
            "no_expert": [t for t in tasks if t in shipped and t not in EXPERTS]}


def group_of(task: str) -> str:
    """A suite report's group: the tasks a scripted expert covers and the rest, so a policy's rate on
    the covered tasks sits beside the expert's."""
    return "expert" if task in EXPERTS else "no-expert"
