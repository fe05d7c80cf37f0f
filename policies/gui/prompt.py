"""The conversation a GUI policy holds with a chat vision-language model, wherever the model runs.

`ChatGuiPolicy` is the shared half of `OpenAIPolicy` (a served model) and `LocalVLMPolicy` (a
transformers model in this process): both send the same conversation and read the reply the same
way, and differ only in how one chat turn is completed.

One decision is one conversation:

- a system prompt giving the action schema and the coordinate convention (`system_prompt`): our
  own JSON form (``{"type": "click", "point": [x, y]}``, 0..1000) when ``coords="norm1000"``,
  otherwise the Qwen / GUI-Owl tool call (``computer_use`` on a desktop, ``mobile_use`` on a phone)
  with points in ``coords``; a ``system_prompt=`` of your own replaces it;
- one user message: the instruction, the embodiment prompt, the last ``history`` actions as JSON
  with what followed each, the UI tree when the device gives one (`tree_text`), and the
  screenshot downscaled to at most ``image_max_side`` pixels (`fit_image`).

The reply goes through `embodia.policies.gui.reply.parse_reply` once, with the size of the image the model
saw. Nothing unparsed is ever executed: a refused reply and the parser's error (`CORRECTION`) are
appended to the conversation and the model is asked again, at most ``max_retries`` times, then
`PolicyGaveUp` carries every attempt.

Test-time scaling (``samples=N`` > 1, after GTA1's sample-then-judge): the same conversation is
completed N times at ``sample_temperature`` (N greedy replies would be identical), every candidate
is parsed, and the ones that do not parse are dropped and recorded. When none parses, the bounded
retry above applies to the whole round. The executable candidates are grouped by `vote_key` (type,
UI element or the point's cell on a ``vote_grid`` grid of the 0..1000 screen, text, keys, button,
direction, app, status) into `Candidate` groups, most votes first (ties: the group whose first
member came first); a group's action is its first member's, with points replaced by the mean of the
members' points. ``select`` then picks one group:

- ``"vote"``: the first (largest) group;
- ``"judge"``: one more turn to the same model (`OpenAIPolicy`: ``judge_model=`` names another one
  on the endpoint) lists the groups' actions, numbered from 1, with the screenshot and asks for the
  number of the best; a reply that is not exactly an integer in range falls back to the vote,
  recorded;
- a callable ``select(candidates, obs, instruction) -> index or None`` with ``candidates`` the
  groups' actions in the order above (a `GuiAction` list; index 0 is the vote's choice); None
  defers to the vote. This is the hook for a re-ranker such as a screen success memory that
  prefers the candidate agreeing with what worked on this screen before. It is asked only when
  there are at least two distinct candidates.

``step_record()["selection"]`` says how: the method, samples, parsed and dropped counts, every
group with its votes, the chosen group and its vote share (votes / parsed candidates), and the
judge's reply. `propose` returns the distinct candidates without choosing (for a wrapper that
re-ranks). With ``samples=1`` (the default) every request is what it was before sampling existed.

A subclass sets ``self.model`` (what records call the model) and implements three hooks:
``_image_part(image)`` (the screenshot, a PIL image at the input size, as one content part of the
user message), ``_complete(messages) -> (reply text, {"ms": ..., ...})`` (one chat turn, as
configured, greedy by default; the extra keys go into the attempt's record) and
``_sample(messages, n) -> ([n reply texts], {"ms": ..., "requests": ..., ...})`` (n completions of
one turn at ``sample_temperature``). ``_judge(messages)`` completes the judge's turn (default:
`_complete`).
"""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Callable, Optional

import numpy as np

from embodia.devices import Embodiment, GuiAction, Observation, Screen
from embodia.devices.coords import SPACES, convert
from embodia.devices.gui import SCREEN
from embodia.policies.base import Policy
from embodia.policies.gui.reply import parse_replies
from embodia.policies.gui.selection import VOTE_GRID, Candidate, vote

REPLY_LOG_CHARS = 4000      # a reply as kept in step records and in a correction turn
TREE_MAX_ELEMENTS = 200
TREE_TEXT_CHARS = 80
QWEN_PATCH = 28             # Qwen2.5-VL / UI-TARS-1.5 image sides are multiples of this
MAX_EXEMPLARS = 3           # verified successes a prompt carries (`show_exemplars`)
MAX_EXEMPLAR_STEPS = 16
_GENERIC = ("wait", "answer", "terminate")
SELECTIONS = ("vote", "judge")
SAMPLE_TEMPERATURE = 0.7

Selector = Callable[[list, Observation, str], Optional[int]]   # (candidates, obs, instruction) -> index


class PolicyGaveUp(ValueError):
    """The model gave no executable action within the retry bound; ``record`` holds its replies."""

    def __init__(self, message: str, record: dict):
        super().__init__(message)
        self.record = record


def fit_image(width: int, height: int, max_side: int, multiple: int = 1) -> tuple[int, int]:
    """The model-input size of a ``width`` x ``height`` screenshot: scaled down (never up) so the
    longer side is at most ``max_side``, then each side rounded to a multiple of ``multiple``
    without passing ``max_side``.

    >>> fit_image(1600, 900, 1280)
    (1280, 720)
    >>> fit_image(1280, 800, 1280, multiple=28)
    (1260, 812)
    """
    s = min(1.0, max_side / max(width, height))
    w, h = width * s, height * s
    if multiple > 1:
        cap = max(multiple, max_side // multiple * multiple)
        w, h = (min(cap, max(multiple, round(v / multiple) * multiple)) for v in (w, h))
    return max(1, round(w)), max(1, round(h))


def resize_screen(img: np.ndarray, size: tuple[int, int]):
    """The screenshot as a PIL image of ``size`` (bicubic, as Qwen processors resize)."""
    from PIL import Image
    im = Image.fromarray(np.ascontiguousarray(img, dtype=np.uint8))
    return im if im.size == tuple(size) else im.resize(tuple(size), Image.BICUBIC)


def _scale(space: str, screen: Screen, image: tuple[int, int]) -> tuple[float, float]:
    """Factors from screen pixels to ``space`` (for UI-tree bounds)."""
    w, h = screen.width, screen.height
    return {"norm1000": (1000.0 / w, 1000.0 / h), "unit": (1.0 / w, 1.0 / h),
            "image_px": (image[0] / w, image[1] / h), "screen_px": (1.0, 1.0),
            "logical_px": (1.0 / (screen.pixel_ratio or 1.0),) * 2}[space]


def _quote(s: str) -> str:
    s = " ".join(str(s).split())
    return json.dumps(s if len(s) <= TREE_TEXT_CHARS else s[:TREE_TEXT_CHARS - 1] + "…", ensure_ascii=False)


def tree_text(tree: list, screen: Screen, space: str = "norm1000", image=(1, 1)) -> str:
    """The UI tree, one line per element worth naming: ``[index] role "text" desc="..." [x0,y0,x1,y1]
    flags``, bounds converted to ``space``. Password fields never show their text; elements with
    no text, description, id or flag (layout containers) are left out.

    >>> tree_text([{"index": 4, "role": "Button", "text": "OK", "bounds": [0, 0, 200, 100],
    ...             "clickable": True}], Screen(400, 800))
    '[4] Button "OK" [0,0,500,125] clickable'
    """
    sx, sy = _scale(space, screen, image)
    digits = 3 if space == "unit" else 0
    lines, hidden = [], 0
    for e in tree:
        flags = [f for f in ("clickable", "focused", "password") if e.get(f)]
        text = None if e.get("password") else e.get("text")
        if not (text or e.get("desc") or e.get("id") or flags):
            continue
        if len(lines) >= TREE_MAX_ELEMENTS:
            hidden += 1
            continue
        x0, y0, x1, y1 = e["bounds"]
        box = [round(v, digits) if digits else int(round(v)) for v in (x0 * sx, y0 * sy, x1 * sx, y1 * sy)]
        parts = [f"[{e['index']}]", str(e.get("role") or "element")]
        if text:
            parts.append(_quote(text))
        if e.get("desc"):
            parts.append("desc=" + _quote(e["desc"]))
        if e.get("id"):
            parts.append("id=" + _quote(e["id"]))
        parts.append("[" + ",".join(str(v) for v in box) + "]")
        lines.append(" ".join(parts + flags))
    if hidden:
        lines.append(f"({hidden} more elements not shown)")
    return "\n".join(lines)


# -- the system prompt ---------------------------------------------------------------------------------
_OURS = {   # GuiAction type -> one line of our JSON form (its points are always 0..1000)
    "click": '{"type": "click", "point": [x, y]}',
    "double_click": '{"type": "double_click", "point": [x, y]}',
    "right_click": '{"type": "right_click", "point": [x, y]}',
    "long_press": '{"type": "long_press", "point": [x, y], "duration_ms": 800}',
    "type": '{"type": "type", "text": "..."}  types into the focused field (with "point": taps it first)',
    "key": '{"type": "key", "keys": ["ctrl", "s"]}  one key or a combination',
    "scroll": '{"type": "scroll", "point": [x, y], "direction": "down"}  up, down, left, right',
    "swipe": '{"type": "swipe", "point": [x, y], "end": [x, y]}',
    "drag": '{"type": "drag", "point": [x, y], "end": [x, y]}',
    "system_button": '{"type": "system_button", "button": "back"}  back, home, enter, menu',
    "open_app": '{"type": "open_app", "app": "Settings"}',
    "wait": '{"type": "wait", "duration_ms": 1000}',
    "answer": '{"type": "answer", "text": "..."}  reports what the task asked to find out',
    "terminate": '{"type": "terminate", "status": "success"}  when the task is done ("failure": impossible)',
}
_TOOLS = {   # tool name -> its actions as (name, arguments) lines
    "computer_use": (
        "left_click, double_click, right_click: coordinate [x, y]", "type: text",
        'key: keys, a list such as ["ctrl", "s"]',
        "scroll: coordinate, pixels (> 0 up, < 0 down); hscroll: coordinate, pixels (> 0 right, < 0 left)",
        "left_click_drag: coordinate (start), coordinate2 (end)", "wait: time (seconds)",
        "answer: text (what the task asked to find out)",
        'terminate: status, "success" when the task is done or "failure" when it is impossible'),
    "mobile_use": (
        "click: coordinate [x, y]; long_press: coordinate, time (seconds)",
        "swipe: coordinate (start), coordinate2 (end)", "type: text", "key: text (one key name)",
        "system_button: button (Back, Home, Menu or Enter)", "open: text (an app name)",
        "wait: time (seconds)", "answer: text (what the task asked to find out)",
        'terminate: status, "success" when the task is done or "failure" when it is impossible'),
}


def _coords_sentence(space: str, image: tuple[int, int]) -> str:
    if space == "norm1000":
        return ("x and y run from 0 to 1000 across the screenshot: (0, 0) is its top-left corner, "
                "(1000, 1000) its bottom-right.")
    if space == "unit":
        return "x and y are fractions from 0 to 1 of the screenshot's width and height, from its top-left corner."
    if space == "image_px":
        return (f"x and y are pixels of the screenshot you see, which is {image[0]}x{image[1]}, "
                f"from its top-left corner.")
    return ("x and y are pixels of the device screen (its size is in the <embodiment> line), "
            "from the top-left corner.")


def system_prompt(embodiment: Embodiment, coords: str, image: tuple[int, int], supported=None,
                  with_tree: bool = False) -> str:
    """Our default system prompt: the action schema the reply parser reads, the coordinates."""
    kind = embodiment.kind.removeprefix("gui-")
    head = f"You operate a {kind} screen, one action per turn, to do the user's task."
    if coords == "norm1000":
        types = [t for t in _OURS if supported is None or t in supported or t in _GENERIC]
        lines = [head, "Reply with a short thought, then exactly one action as a JSON object in a ```json fence.",
                 "Actions:", *(_OURS[t] for t in types),
                 "Coordinates: " + _coords_sentence(coords, image)]
        if with_tree:
            lines.append('With a UI tree, "element": <index> may replace "point".')
        return "\n".join(lines)
    tool = "computer_use" if "desktop" in kind else "mobile_use"
    lines = [head, "Reply with a short thought, then exactly one action as a tool call:",
             f'<tool_call>{{"name": "{tool}", "arguments": {{"action": "...", ...}}}}</tool_call>',
             "Actions and their arguments:", *_TOOLS[tool],
             "Coordinates: " + _coords_sentence(coords, image)
             + " (This replaces the coords= of the <embodiment> line.)"]
    if with_tree:
        lines.append('To act on a UI-tree element instead, reply {"type": "click", "element": <index>} '
                     '(or "type" with "text" and "element").')
    return "\n".join(lines)


CORRECTION = ("Your reply could not be executed: {error}. Nothing was done. Reply again with exactly one "
              "action in the format described.")


JUDGE_SYSTEM = ("You review the candidate next actions proposed for an agent that operates a {kind} screen, "
                "and pick the one most likely to make progress on the user's task from the screen shown. "
                "Reply with the number of the best candidate and nothing else.")
_INTEGER = re.compile(r"\s*([0-9]{1,6})\s*")


@dataclasses.dataclass
class _Turn:
    """One decision's conversation and what its replies are read against."""

    messages: list
    image_part: dict
    img: np.ndarray
    screen: Screen
    size: tuple[int, int]
    emb: Embodiment
    tree: list | None
    instruction: str
    record: dict


def _kept(reply: str) -> str:
    return reply if len(reply) <= REPLY_LOG_CHARS else reply[:REPLY_LOG_CHARS] + "…"


class ChatGuiPolicy(Policy):
    """GUI actions from a chat vision-language model; see the module doc. Subclasses complete turns.

    ``samples``, ``select``, ``sample_temperature`` and ``vote_grid`` configure test-time scaling
    (module doc); the defaults send one greedy request per decision. `step_record()` says what the
    model replied at the last decision (each attempt's text, the parser's error, its latency; with
    samples, every candidate and the selection) and `info()` sums up the episode.
    """

    model: str = "?"
    takes_exemplars = True          # a screen memory's verified successes go into the prompt

    def __init__(self, *, embodiment: Embodiment | None = None, coords: str = "norm1000", max_retries: int = 2,
                 image_max_side: int = 1280, image_multiple: int | None = None, history: int = 4,
                 system_prompt: str | None = None, supported=None, samples: int = 1,
                 select: str | Selector = "vote", sample_temperature: float = SAMPLE_TEMPERATURE,
                 vote_grid: float = VOTE_GRID):
        if coords not in SPACES:
            raise ValueError(f"unknown coordinate convention {coords!r}; known: {', '.join(SPACES)}")
        if max_retries < 0 or history < 0 or image_max_side < 16:
            raise ValueError("max_retries and history must be >= 0, image_max_side >= 16")
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise ValueError(f"samples must be an integer >= 1, got {samples!r}")
        if not callable(select) and select not in SELECTIONS:
            raise ValueError(f"unknown selection {select!r}; known: {', '.join(SELECTIONS)}, or a callable "
                             f"(candidates, obs, instruction) -> index")
        if not sample_temperature > 0:
            raise ValueError(f"sample_temperature must be > 0 (greedy samples are all the same), "
                             f"got {sample_temperature!r}")
        if not vote_grid > 0:
            raise ValueError(f"vote_grid must be > 0, got {vote_grid!r}")
        self.coords, self.max_retries, self.history = coords, max_retries, history
        self.image_max_side = image_max_side
        self.image_multiple = image_multiple or (QWEN_PATCH if coords == "image_px" else 1)
        self.system_prompt = system_prompt
        self.supported = frozenset(supported) if supported is not None else None
        self.samples, self.select = samples, select
        self.sample_temperature, self.vote_grid = float(sample_temperature), float(vote_grid)
        self.embodiment = None
        if embodiment is not None:
            self.bind(embodiment)
        self.reset()

    def bind(self, embodiment: Embodiment):
        if not embodiment.is_gui:
            raise ValueError(f"{type(self).__name__} drives GUI devices (screens); {embodiment.name!r} is a "
                             f"{embodiment.kind} with no screen")
        self.embodiment = embodiment
        return self

    def reset(self, seed: int | None = None) -> None:
        self._history: list[dict] = []      # {"step", "action", "outcome"}; the last one's outcome pending
        self._shown = None                  # the screenshot of the last decision
        self._executed = False              # the loop said the last action ran
        self._proposed = None               # the screenshot of a `propose` that no `act` followed
        self._record: dict | None = None
        self._stats = {"decisions": 0, "calls": 0, "parse_failures": 0, "gave_up": 0}
        self._ms: list[float] = []
        self._exemplars: list = []

    def show_exemplars(self, exemplars: list) -> None:
        """Verified successes (lists of steps, `ScreenMemory.exemplars`) for the next decision's
        prompt: at most ``MAX_EXEMPLARS`` of them, each cut to ``MAX_EXEMPLAR_STEPS`` steps."""
        self._exemplars = [list(e)[:MAX_EXEMPLAR_STEPS] for e in (exemplars or [])[:MAX_EXEMPLARS] if e]

    # -- the loop's calls --------------------------------------------------------------------------
    def act(self, obs: Observation, instruction: str) -> GuiAction:
        turn = self._turn(obs, instruction)
        self._stats["decisions"] += 1
        groups = self._candidates(turn, self.samples)
        action = groups[self._choose(groups, turn, obs, instruction) if self.samples > 1 else 0].action
        self._history.append({"step": len(self._history), "action": action.to_dict(), "outcome": None})
        self._shown, self._executed, self._proposed = turn.img, False, None
        return action

    def propose(self, obs: Observation, instruction: str, n: int | None = None) -> list[GuiAction]:
        """The distinct executable actions the model proposes for this screen, most voted first:
        ``n`` replies (default ``samples``; ``n=1`` is one reply as `act` sends it) parsed and grouped
        as for the vote, unparsable ones dropped, retried as in `act` when none parses
        (`PolicyGaveUp`). Nothing is chosen: the action the loop then reports through `after_step`
        (a wrapper that executes one of these passes the call on) enters the history shown at the
        next decision, as `act`'s choice would. `step_record()` gives the votes.

        >>> [a.type for a in pol.propose(device.observe(), "open the settings", n=8)]  # doctest: +SKIP
        ['click', 'open_app']
        """
        n = self.samples if n is None else n
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be an integer >= 1, got {n!r}")
        turn = self._turn(obs, instruction)
        groups = self._candidates(turn, n)
        if n > 1:
            turn.record["selection"] = self._selection(groups, turn, "propose")
        self._proposed = turn.img
        return [g.action for g in groups]

    def after_step(self, obs: Observation, executed) -> None:
        """The loop's word that the action ran (``executed``: it, with element references resolved).
        After `propose`, the executed action is the decision's, and enters the history."""
        if self._proposed is not None and isinstance(executed, GuiAction):
            self._history.append({"step": len(self._history), "action": executed.to_dict(), "outcome": None})
            self._shown, self._proposed = self._proposed, None
        self._executed = True

    def step_record(self) -> dict | None:
        """JSON-able account of the last decision: ``{"model", "coords", "input_size": [w, h],
        "attempts": [{"reply", "error", "ms", ...}]}`` (None before the first). With samples, an
        attempt is ``{"candidates": [{"reply", "error"}], "dropped": [i, ...], "error", "ms",
        ...}`` and ``"selection"`` says how the action was chosen (module doc)."""
        return json.loads(json.dumps(self._record)) if self._record is not None else None

    def info(self) -> dict:
        out = {"model": self.model, **self._stats}
        if self._ms:
            out["mean_ms"] = float(np.mean(self._ms))
            out["max_ms"] = float(np.max(self._ms))
        return out

    # -- what subclasses provide -------------------------------------------------------------------
    def _input_size(self, width: int, height: int) -> tuple[int, int]:
        """The size the screenshot is sent at (the model's coordinates for ``image_px``)."""
        return fit_image(width, height, self.image_max_side, self.image_multiple)

    def _image_part(self, image) -> dict:
        raise NotImplementedError

    def _complete(self, messages: list) -> tuple[str, dict]:
        raise NotImplementedError

    def _sample(self, messages: list, n: int) -> tuple[list[str], dict]:
        raise NotImplementedError(f"{type(self).__name__} cannot sample candidates (samples > 1)")

    def _judge(self, messages: list) -> tuple[str, dict]:
        return self._complete(messages)

    # -- one decision ------------------------------------------------------------------------------
    def _turn(self, obs: Observation, instruction: str) -> _Turn:
        """The conversation for this screen; starts the decision's record."""
        name = type(self).__name__
        if self.embodiment is None:
            raise ValueError(f"{name} has no embodiment: call bind(device.embodiment) first")
        img = (obs.images or {}).get(SCREEN)
        if img is None:
            raise ValueError(f"{name} needs a screenshot; the observation has no images['screen']")
        h, w = img.shape[:2]
        screen = obs.screen or Screen(w, h)
        size = self._input_size(w, h)
        self._settle_outcome(img)
        tree = obs.ui_tree or None
        emb = self.embodiment       # a desktop's screen can change size between steps: say the current one
        if emb.screen != screen:
            emb = dataclasses.replace(emb, screen=screen)
        system = self.system_prompt or system_prompt(emb, self.coords, size, self.supported, tree is not None)
        image_part = self._image_part(resize_screen(img, size))
        messages = [{"role": "system", "content": system},
                    {"role": "user", "content": [
                        {"type": "text", "text": self._user_text(instruction, emb, screen, size, tree)},
                        image_part]}]
        record = {"model": self.model, "coords": self.coords, "input_size": [size[0], size[1]], "attempts": []}
        if self._exemplars:
            record["exemplars"] = len(self._exemplars)
        self._record = record
        return _Turn(messages, image_part, img, screen, size, emb, tree, instruction, record)

    def _candidates(self, turn: _Turn, n: int) -> list[Candidate]:
        """``n`` replies (one greedy reply when ``n`` is 1) parsed and voted; the bounded retry
        when none parses."""
        record, messages = turn.record, turn.messages
        error = None
        for _ in range(self.max_retries + 1):
            if n == 1:
                reply, meta = self._complete(messages)
                replies = [reply]
            else:
                replies, meta = self._sample(messages, n)
            self._stats["calls"] += meta.get("requests", 1)
            self._ms.append(meta["ms"])
            kept = [_kept(r) for r in replies]
            parsed = parse_replies(replies, coords=self.coords, screen=turn.screen, image=turn.size)
            good = [a for a in parsed if isinstance(a, GuiAction)]
            bad = [i for i, a in enumerate(parsed) if not isinstance(a, GuiAction)]
            self._stats["parse_failures"] += len(bad)
            if n == 1:
                record["attempts"].append({"reply": kept[0], "error": str(parsed[0]) if bad else None, **meta})
            else:
                self._stats["candidates"] = self._stats.get("candidates", 0) + len(replies)
                record["attempts"].append({
                    "candidates": [{"reply": k, "error": None if isinstance(a, GuiAction) else str(a)}
                                   for k, a in zip(kept, parsed)],
                    "dropped": bad, "error": None if good else f"none of the {len(replies)} candidates parsed",
                    **meta})
            if good:
                return vote(good, self.vote_grid)
            error = parsed[bad[0]]
            messages += [{"role": "assistant", "content": kept[bad[0]]},
                         {"role": "user", "content": CORRECTION.format(error=error)}]
        self._stats["gave_up"] += 1
        tries = f"{len(record['attempts'])} replies" if n == 1 else f"{len(record['attempts'])} rounds of {n} samples"
        raise PolicyGaveUp(f"{self.model} gave no executable action in {tries}; last error: {error}",
                           self.step_record())

    def _selection(self, groups: list[Candidate], turn: _Turn, method: str) -> dict:
        last = turn.record["attempts"][-1]
        return {"method": method, "samples": len(last["candidates"]), "parsed": sum(len(g.members) for g in groups),
                "dropped": len(last["dropped"]),
                "groups": [{"action": g.action.to_dict(), "votes": len(g.members)} for g in groups]}

    def _choose(self, groups: list[Candidate], turn: _Turn, obs: Observation, instruction: str) -> int:
        """The index of the group to execute, by ``select``; recorded in ``record["selection"]``."""
        custom = callable(self.select)
        name = getattr(self.select, "__qualname__", type(self.select).__name__) if custom else self.select
        sel = self._selection(groups, turn, "custom" if custom else name)
        if custom:
            sel["selector"] = name
        choice = 0
        if len(groups) > 1 and self.select == "judge":
            choice = self._judge_choice(groups, turn, sel)
        elif len(groups) > 1 and custom:
            picked = self.select([g.action for g in groups], obs, instruction)
            if picked is None:
                sel["deferred"] = "vote"
            elif isinstance(picked, (int, np.integer)) and not isinstance(picked, bool) \
                    and 0 <= picked < len(groups):
                choice = int(picked)
            else:
                raise ValueError(f"select={name} returned {picked!r}; expected an index 0..{len(groups) - 1} "
                                 f"or None (defer to the vote)")
        sel["chosen"] = choice
        sel["share"] = round(len(groups[choice].members) / sel["parsed"], 4)
        turn.record["selection"] = sel
        return choice

    def _judge_choice(self, groups: list[Candidate], turn: _Turn, sel: dict) -> int:
        """Ask the judge for the best group's number; anything but an integer in range is the vote's
        choice (0), recorded."""
        listed = "\n".join(f"{i}. {json.dumps(self._shown_action(g.action, turn), ensure_ascii=False)}"
                           for i, g in enumerate(groups, 1))
        ask = (f"Candidate next actions ({_coords_sentence(self.coords, turn.size)}):\n{listed}\n"
               f"Reply with the number (1 to {len(groups)}) of the best candidate, and nothing else.")
        text = self._user_text(turn.instruction, turn.emb, turn.screen, turn.size, turn.tree, ask=ask)
        messages = [{"role": "system", "content": JUDGE_SYSTEM.format(kind=turn.emb.kind.removeprefix("gui-"))},
                    {"role": "user", "content": [{"type": "text", "text": text}, turn.image_part]}]
        reply, meta = self._judge(messages)
        self._stats["calls"] += 1
        self._stats["judge_calls"] = self._stats.get("judge_calls", 0) + 1
        self._ms.append(meta["ms"])
        judge = {"reply": _kept(reply), **meta}
        sel["judge"] = judge
        m = _INTEGER.fullmatch(reply)
        number = int(m.group(1)) if m else None
        if number is not None and 1 <= number <= len(groups):
            judge["choice"] = number
            return number - 1
        judge["error"] = ("not a bare integer" if number is None
                          else f"{number} is not a candidate number (1 to {len(groups)})")
        sel["fallback"] = "vote"
        self._stats["judge_refused"] = self._stats.get("judge_refused", 0) + 1
        return 0

    def _shown_action(self, action: GuiAction, turn: _Turn) -> dict:
        """``action`` as JSON with its points in the coordinates of the model's replies."""
        d = action.to_dict()
        if self.coords != "norm1000":
            digits = 4 if self.coords == "unit" else 1
            for f in ("point", "end"):
                if f in d:
                    d[f] = [round(v, digits) for v in convert(d[f], "norm1000", self.coords, screen=turn.screen,
                                                              image=turn.size)]
        return d

    # -- the prompt --------------------------------------------------------------------------------
    def _settle_outcome(self, img: np.ndarray) -> None:
        """Write what followed the last action into its history entry, from the screen now."""
        if not self._history or self._history[-1]["outcome"] is not None:
            return
        if not self._executed:
            outcome = "not confirmed as executed"
        elif self._shown is not None and self._shown.shape == img.shape and np.array_equal(self._shown, img):
            outcome = "executed; the screen did not change"
        else:
            outcome = "executed; the screen changed"
        self._history[-1]["outcome"] = outcome

    def _user_text(self, instruction: str, emb: Embodiment, screen: Screen, size, tree,
                   ask: str = "Choose the next action.") -> str:
        lines = [f"Task: {instruction.strip() if instruction and instruction.strip() else '(none given)'}",
                 f"Device: {emb.prompt()}",
                 f"Screenshot: {size[0]}x{size[1]} pixels showing the whole {screen.width}x{screen.height} screen."]
        recent = self._history[-self.history:] if self.history else []
        if recent:
            lines.append("Previous actions, oldest first:")
            lines += [json.dumps(h, ensure_ascii=False) for h in recent]
        else:
            lines.append("Previous actions: none.")
        if self._exemplars:
            lines.append("Verified successful runs of this task from earlier episodes, each step in order (the "
                         "element it acted on, by role and text); follow one where this screen agrees:")
            for k, run in enumerate(self._exemplars, 1):
                lines.append(f"Run {k}: " + json.dumps(run, ensure_ascii=False))
        if tree:
            lines.append("UI tree (index, role, text, bounds [x0,y0,x1,y1] in the coordinates of your replies):")
            lines.append(tree_text(tree, screen, self.coords, size))
        lines.append(ask)
        return "\n".join(lines)
