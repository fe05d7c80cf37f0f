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

The reply goes through `policies.gui_reply.parse_reply` once, with the size of the image the model
saw. Nothing unparsed is ever executed: a refused reply and the parser's error (`CORRECTION`) are
appended to the conversation and the model is asked again, at most ``max_retries`` times, then
`PolicyGaveUp` carries every attempt.

A subclass sets ``self.model`` (what records call the model) and implements two hooks:
``_image_part(image)`` (the screenshot, a PIL image at the input size, as one content part of the
user message) and ``_complete(messages) -> (reply text, {"ms": ..., ...})`` (one chat turn; the
extra keys go into the attempt's record).
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np

from devices import Embodiment, GuiAction, Observation, Screen
from devices.coords import SPACES
from devices.gui import SCREEN

from .gui_reply import ReplyParseError, parse_reply

REPLY_LOG_CHARS = 4000      # a reply as kept in step records and in a correction turn
TREE_MAX_ELEMENTS = 200
TREE_TEXT_CHARS = 80
QWEN_PATCH = 28             # Qwen2.5-VL / UI-TARS-1.5 image sides are multiples of this
_GENERIC = ("wait", "answer", "terminate")


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


class ChatGuiPolicy:
    """GUI actions from a chat vision-language model; see the module doc. Subclasses complete turns.

    `step_record()` says what the model replied at the last decision (each attempt's text, the
    parser's error, its latency) and `info()` sums up the episode.
    """

    model: str = "?"

    def __init__(self, *, embodiment: Embodiment | None = None, coords: str = "norm1000", max_retries: int = 2,
                 image_max_side: int = 1280, image_multiple: int | None = None, history: int = 4,
                 system_prompt: str | None = None, supported=None):
        if coords not in SPACES:
            raise ValueError(f"unknown coordinate convention {coords!r}; known: {', '.join(SPACES)}")
        if max_retries < 0 or history < 0 or image_max_side < 16:
            raise ValueError("max_retries and history must be >= 0, image_max_side >= 16")
        self.coords, self.max_retries, self.history = coords, max_retries, history
        self.image_max_side = image_max_side
        self.image_multiple = image_multiple or (QWEN_PATCH if coords == "image_px" else 1)
        self.system_prompt = system_prompt
        self.supported = frozenset(supported) if supported is not None else None
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
        self._record: dict | None = None
        self._stats = {"decisions": 0, "calls": 0, "parse_failures": 0, "gave_up": 0}
        self._ms: list[float] = []

    # -- the loop's calls --------------------------------------------------------------------------
    def act(self, obs: Observation, instruction: str) -> GuiAction:
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
        messages = [{"role": "system", "content": system},
                    {"role": "user", "content": [
                        {"type": "text", "text": self._user_text(instruction, emb, screen, size, tree)},
                        self._image_part(resize_screen(img, size))]}]
        record = {"model": self.model, "coords": self.coords, "input_size": [size[0], size[1]], "attempts": []}
        self._record = record
        self._stats["decisions"] += 1
        error = None
        for _ in range(self.max_retries + 1):
            reply, meta = self._complete(messages)
            self._stats["calls"] += 1
            self._ms.append(meta["ms"])
            kept = reply if len(reply) <= REPLY_LOG_CHARS else reply[:REPLY_LOG_CHARS] + "…"
            try:
                action = parse_reply(reply, coords=self.coords, screen=screen, image=size)
            except ReplyParseError as e:
                error = e
                self._stats["parse_failures"] += 1
                record["attempts"].append({"reply": kept, "error": str(e), **meta})
                messages += [{"role": "assistant", "content": kept},
                             {"role": "user", "content": CORRECTION.format(error=e)}]
                continue
            record["attempts"].append({"reply": kept, "error": None, **meta})
            self._history.append({"step": len(self._history), "action": action.to_dict(), "outcome": None})
            self._shown, self._executed = img, False
            return action
        self._stats["gave_up"] += 1
        raise PolicyGaveUp(f"{self.model} gave no executable action in {len(record['attempts'])} replies; "
                           f"last error: {error}", self.step_record())

    def observe(self, obs: Observation, executed) -> None:
        """The loop's word that the action ran (``executed``: it, with element references resolved)."""
        self._executed = True

    def step_record(self) -> dict | None:
        """JSON-able account of the last decision: ``{"model", "coords", "input_size": [w, h],
        "attempts": [{"reply", "error", "ms", ...}]}`` (None before the first)."""
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

    def _user_text(self, instruction: str, emb: Embodiment, screen: Screen, size, tree) -> str:
        lines = [f"Task: {instruction.strip() if instruction and instruction.strip() else '(none given)'}",
                 f"Device: {emb.prompt()}",
                 f"Screenshot: {size[0]}x{size[1]} pixels showing the whole {screen.width}x{screen.height} screen."]
        recent = self._history[-self.history:] if self.history else []
        if recent:
            lines.append("Previous actions, oldest first:")
            lines += [json.dumps(h, ensure_ascii=False) for h in recent]
        else:
            lines.append("Previous actions: none.")
        if tree:
            lines.append("UI tree (index, role, text, bounds [x0,y0,x1,y1] in the coordinates of your replies):")
            lines.append(tree_text(tree, screen, self.coords, size))
        lines.append("Choose the next action.")
        return "\n".join(lines)
