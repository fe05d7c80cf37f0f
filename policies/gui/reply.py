"""Model replies -> one validated `GuiAction`, or a `ReplyParseError` that says what was wrong.

Every GUI policy's text goes through `parse_reply` once; past it, the loop and the devices trust
the type. A reply that does not parse, names an action a `GuiAction` cannot express, or points off
the screen is refused, never guessed at or clipped (ARCHITECTURE.md section 7). The parser only reads:
it never evaluates model text, and it raises nothing but `ReplyParseError` for any ``str``.

``coords`` names the convention the model's numbers are in (see `embodia.devices.coords`): ``"norm1000"``
for GUI-Owl-1.5 and UI-TARS v1, ``"image_px"`` (with ``image=(w, h)`` of the resized input) for
Qwen2.5-VL and UI-TARS-1.5, ``"screen_px"`` (with ``screen=``) for AndroidWorld ``x``/``y``.

Accepted forms, one example each
--------------------------------
1. GUI-Owl / Qwen ``mobile_use`` tool call, with any ``<thinking>``, ``<conclusion>`` or
   ``Action: ...`` prose around it::

       <tool_call>{"name": "mobile_use", "arguments": {"action": "click", "coordinate": [540, 960]}}</tool_call>

   key (``text``: one key name) -> key; click; long_press (``time`` s) -> long_press; swipe
   (``coordinate`` -> ``coordinate2``); type; answer; system_button (Back/Home/Menu/Enter);
   open (``text``) -> open_app; wait (``time`` s); terminate (``status``).
2. ``computer_use`` tool call::

       <tool_call>{"name": "computer_use", "arguments": {"action": "scroll", "pixels": -5}}</tool_call>

   key (``keys`` list); type; left_click -> click; double_click; right_click; left_click_drag with
   ``coordinate`` (start) and ``coordinate2`` (end) -> drag; scroll (``pixels`` > 0 up, < 0 down)
   and hscroll (> 0 right, < 0 left) -> scroll at ``coordinate``, or at the screen centre when the
   model gives none (the pointer's position is unknown here); the amount is not kept. wait,
   terminate, answer. Refused as not expressible: mouse_move, middle_click, triple_click, interact,
   and a one-point left_click_drag (it drags from wherever the pointer is).
   Several ``<tool_call>`` blocks are accepted only when they all say the same thing. A missing
   ``</tool_call>`` (stripped as a stop sequence) is fine; ``arguments`` may be a JSON string.
3. Mobile-Agent-v3 plain JSON (same fields as forms 1 and 2), after ``### Action ###``, in a
   fence, after ``Action:``, or alone::

       ### Action ###
       {"action": "swipe", "coordinate": [500, 800], "coordinate2": [500, 200]}

4. AndroidWorld ``JSONAction``::

       {"action_type": "input_text", "text": "coffee", "index": 3}

   ``index`` -> ``GuiAction.element``, or ``x``/``y`` (never both). click, double_tap, long_press;
   input_text -> one ``type`` action whose ``element``/``point`` says where to tap first
   (AndroidWorld also presses Enter afterwards; we do not, the model can ask for it next);
   keyboard_enter, navigate_back, navigate_home -> system_button; scroll (``direction``, inside
   the element or at the screen centre); swipe (``direction``) -> scroll the opposite way, as
   AndroidWorld defines it; open_app; wait; answer; status complete/infeasible -> terminate
   success/failure.
5. Our own ``GuiAction.to_dict()`` form, whose points are 0..1000 by definition (``coords`` does
   not apply)::

       ```json
       {"type": "long_press", "point": [500, 500], "duration_ms": 800}
       ```

6. UI-TARS ``Thought: ...\\nAction: verb(arg='literal', ...)``::

       Thought: The search box is at the top.
       Action: click(start_box='(235,512)')

   click / left_single, left_double, right_single, long_press, drag (start_box/start_point,
   end_box/end_point), hotkey / press (``key='ctrl c'``), type (``content``), scroll (``point``
   optional -> screen centre, ``direction``), wait() (UI-TARS sleeps 5 s), finished(content=...)
   -> terminate success with the content as ``text``, open_app (``app_name``), press_home(),
   press_back(). Points may be ``'(x,y)'``, ``'[x1, y1, x2, y2]'`` (the box centre),
   ``'<point>x y</point>'``, ``<bbox>...</bbox>`` or ``<|box_start|>(x,y)<|box_end|>``. Strings
   are single or double quoted with backslash escapes (``\\n \\t \\r \\\\ \\' \\"``). Refused:
   call_user(), hover/mouse_move, keydown/keyup.
7. A click-like verb with a bare point::

       click <point>235 512</point>

Where the action is looked for, in this order; the first place that exists is the only one read
(so once a reply has a ``<tool_call>``, no other text in it is parsed):
``<tool_call>`` blocks; ``### Action ###`` sections; sections after a line-initial ``Action:``;
``` fences; the whole reply when it starts with ``{`` or a verb call; the first JSON object in
prose. Calls in free prose (without ``Action:``) are not looked for: a thought such as "I must not
click(...) there" would be executed. Several actions are accepted only when they are identical.

Points are converted to 0..1000 with `embodia.devices.coords.convert` and must then lie in 0..1000; a
reply longer than `MAX_REPLY_CHARS` is refused unread.
"""
from __future__ import annotations

import json
import math
import re
from typing import Iterable, NoReturn

from embodia.devices.actions import ActionError, GuiAction
from embodia.devices.coords import SPACES, convert
from embodia.policies.gui.reply_calls import CallForms
from embodia.policies.gui.reply_common import (
    MAX_KEYS,
    TAGGED,
    VERB,
    WS,
    MAX_ACTIONS,
    MAX_REPLY_CHARS,
    ReplyParseError,
    brief,
    short_excerpt,
    point_text,
    show,
    size_ok,
)
from embodia.policies.gui.reply_json import DECODER, JsonForms


def parse_reply(text: str, *, coords: str = "norm1000", screen=None, image=None) -> GuiAction:
    """Parse one model reply into a `GuiAction` (see the module doc for the accepted forms).

    ``screen`` (a `Screen` or (width, height)) and ``image`` ((width, height) of the model input)
    are needed when ``coords`` is a pixel space; a missing one is the caller's mistake and raises a
    plain ``ValueError`` at once, whatever the reply.

    >>> parse_reply('<tool_call>{"name": "mobile_use", "arguments": '
    ...             '{"action": "click", "coordinate": [640, 360]}}</tool_call>',
    ...             coords="image_px", image=(1280, 720)).point
    (500.0, 500.0)
    >>> parse_reply("Thought: open it\\nAction: left_double(start_box='[100, 200, 300, 400]')")
    GuiAction(type='double_click', point=(200.0, 300.0), end=None, text=None, keys=(), button=None, app=None, direction=None, duration_ms=None, status=None, element=None)
    >>> parse_reply('{"action_type": "status", "goal_status": "infeasible"}').status
    'failure'
    >>> parse_reply("Action: click(start_box='(1200,40)')")
    Traceback (most recent call last):
    ...
    embodia.policies.gui.reply_common.ReplyParseError: point (1200, 40) is outside the 0..1000 screen; reply: "click(start_box='(1200,40)')"
    """
    return _Reader(coords, screen, image).parse(text)


def parse_replies(texts: Iterable[str], *, coords: str = "norm1000", screen=None,
                  image=None) -> list[GuiAction | ReplyParseError]:
    """Parse several replies (e.g. N samples of one step); a refused reply comes back as its error.

    >>> [type(r).__name__ for r in parse_replies(["press_back()", "fly()"])]
    ['GuiAction', 'ReplyParseError']
    """
    reader = _Reader(coords, screen, image)
    out: list[GuiAction | ReplyParseError] = []
    for t in texts:
        try:
            out.append(reader.parse(t))
        except ReplyParseError as e:
            out.append(e)
    return out


# -- lexical pieces (ASCII digits only: float() would also take '١٢' and '1_000') ----------------------
_NUM = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_SEP = re.compile(r"\s*,\s*|\s+")
_TOOL_OPEN = re.compile(r"<tool_call>", re.I)
_TOOL_CLOSE = re.compile(r"</tool_call>", re.I)
_THINK_OPEN = re.compile(r"<(?:think|thinking)>", re.I)
_THINK_CLOSE = re.compile(r"</(?:think|thinking)>", re.I)
_END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>")
_FENCE_HEAD = re.compile(r"[A-Za-z0-9_+-]*[ \t]*(?:\n|(?=[{\[]))")
_HEADED = re.compile(r"^[ \t]*#{2,}[ \t]*Action[ \t]*#*[ \t]*$", re.M | re.I)
_NEXT_HEADER = re.compile(r"^[ \t]*#{2,}", re.M)
_ACTION_LINE = re.compile(r"^[ \t]*[#*>]*[ \t]*Action[ \t]*\**[ \t]*:[ \t]*\**", re.M)


def _strip_end_tokens(s: str) -> str:
    """Drop end-of-turn tokens that some servers leave at the end of the text."""
    while True:
        s = s.rstrip()
        tok = next((t for t in _END_TOKENS if s.endswith(t)), None)
        if tok is None:
            return s
        s = s[: -len(tok)]


def _drop_thinking(s: str) -> str:
    """Remove closed <think>/<thinking> blocks (and text before an orphan closing tag)."""
    m = _THINK_CLOSE.search(s)
    if m and not _THINK_OPEN.search(s, 0, m.start()):
        s = s[m.end():]        # the chat template opened the block in the prompt
    kept, pos = [], 0
    while (o := _THINK_OPEN.search(s, pos)) and (c := _THINK_CLOSE.search(s, o.end())):
        kept.append(s[pos:o.start()])
        pos = c.end()
    kept.append(s[pos:])
    return "\n".join(kept)


def _fence(s: str, i: int) -> tuple[str, int]:
    """The inside of the ``` fence opening at ``s[i]`` and the index after it (the end of the text
    when the reply was cut off)."""
    head = _FENCE_HEAD.match(s, i + 3)
    start = head.end() if head else i + 3
    end = s.find("```", start)
    return (s[start:], len(s)) if end < 0 else (s[start:end], end + 3)


class _Reader(JsonForms, CallForms):
    def __init__(self, coords: str, screen, image):
        if coords not in SPACES:
            raise ValueError(f"unknown coordinate space {coords!r}; known: {SPACES}")
        if coords in ("screen_px", "logical_px") and not size_ok(screen):
            raise ValueError(f"coords={coords!r} needs screen= (a Screen or (width, height)), got {screen!r}")
        if coords == "image_px" and not size_ok(image):
            raise ValueError(f"coords='image_px' needs image=(width, height) of the model input, got {image!r}")
        self.coords, self.screen, self.image = coords, screen, image
        self.reply = ""

    def fail(self, problem: str, where: str | None = None) -> NoReturn:
        raise ReplyParseError(problem, short_excerpt(self.reply if where is None else where))

    # -- the reply ---------------------------------------------------------------------------------
    def parse(self, text) -> GuiAction:
        if not isinstance(text, str):
            raise ReplyParseError(f"a reply must be text (str), got {type(text).__name__}")
        self.reply = text
        if not text.strip():
            self.fail("reply is empty")
        if len(text) > MAX_REPLY_CHARS:
            self.fail(f"reply is {len(text)} characters long; refusing replies over {MAX_REPLY_CHARS}")
        try:
            body = _drop_thinking(_strip_end_tokens(text))
            for find in (self._tool_calls, self._headed, self._action_line, self._fences, self._whole,
                         self._loose):
                actions = find(body)
                if actions is not None:
                    break
            else:
                self.fail("no action found (expected a <tool_call>, a JSON action, or a call such as "
                          "click(start_box='(x,y)'))")
        except RecursionError:     # nesting beyond what json can hold; never a real action
            self.fail("reply is nested too deeply")
        unique = []
        for a in actions:
            if a not in unique:
                unique.append(a)
        if len(unique) > 1:
            self.fail(f"{len(unique)} different actions in one reply "
                      f"({'; '.join(map(brief, unique))}); expected exactly one")
        return unique[0]

    def _tool_calls(self, body):
        opens = list(_TOOL_OPEN.finditer(body))
        if not opens:
            return None
        if len(opens) > MAX_ACTIONS:
            self.fail(f"{len(opens)} tool calls in one reply; expected one")
        out = []
        for i, m in enumerate(opens):
            seg = body[m.end(): opens[i + 1].start() if i + 1 < len(opens) else len(body)]
            close = _TOOL_CLOSE.search(seg)
            seg = (seg[:close.start()] if close else seg).strip()
            if seg.startswith("```"):
                seg = _fence(seg, 0)[0].strip()
            if not seg.startswith("{"):
                self.fail("a <tool_call> must hold one JSON object", seg or body[m.start():])
            out += self._objects(seg)
        return out

    def _headed(self, body):
        """Mobile-Agent-v3: what follows each ``### Action ###`` up to the next ``###`` header."""
        out = []
        for m in _HEADED.finditer(body):
            nxt = _NEXT_HEADER.search(body, m.end())
            out += self._section(body[m.end(): nxt.start() if nxt else len(body)])
            if len(out) > MAX_ACTIONS:
                self.fail(f"more than {MAX_ACTIONS} actions in one reply")
        return out or None

    def _action_line(self, body):
        """UI-TARS: what follows each line-initial ``Action:`` up to the next one."""
        marks = list(_ACTION_LINE.finditer(body))
        if len(marks) > MAX_ACTIONS:
            self.fail(f"{len(marks)} 'Action:' lines in one reply; expected one")
        out = []
        for i, m in enumerate(marks):
            out += self._section(body[m.end(): marks[i + 1].start() if i + 1 < len(marks) else len(body)])
        return out or None

    def _fences(self, body):
        out, pos = [], 0
        while (i := body.find("```", pos)) >= 0:
            inner, pos = _fence(body, i)
            out += self._section(inner)
        return out or None

    def _whole(self, body):
        s = body.strip()
        if s.startswith("{") or re.match(r"\[\s*\{", s) or VERB.match(s):
            return self._section(s)
        return None

    def _loose(self, s: str):
        """A JSON action inside prose: the first object (it must decode) and any later ones; braces
        in the prose after it that start no JSON object are ignored. Calls such as click(...) are
        not looked for in prose: "I must not click(...) 'Delete'" would be executed."""
        if (pos := s.find("{")) < 0:
            return None
        if s[:pos].rstrip().endswith(("[", ",")):
            self.fail("the action is inside a JSON list; expected one JSON object", s[pos:])
        obj, end = self._decode(s, pos)
        out = [self.from_json(obj, s[pos:end])]
        for _ in range(MAX_ACTIONS):
            if (pos := s.find("{", end)) < 0:
                break
            try:
                obj, end = self._decode(s, pos)
            except ReplyParseError:
                end = pos + 1
                continue
            out.append(self.from_json(obj, s[pos:end]))
        return out

    def _section(self, s: str):
        s = s.strip()
        if s.startswith("```"):
            s = _fence(s, 0)[0].strip()
        if s.startswith(("{", "[")):
            return self._objects(s)
        if not s:
            self.fail("the action section is empty")
        out, pos = [], 0
        while (pos := WS.match(s, pos).end()) < len(s):
            if len(out) >= MAX_ACTIONS:
                self.fail(f"more than {MAX_ACTIONS} actions in one reply")
            action, pos = self._call(s, pos)
            out.append(action)
        return out

    # -- JSON --------------------------------------------------------------------------------------
    def _decode(self, s: str, pos: int = 0):
        try:
            return DECODER.raw_decode(s, pos)
        except json.JSONDecodeError as e:
            self.fail(f"invalid JSON ({e.msg} at character {e.pos - pos})", s[pos:])
        except (ValueError, OverflowError) as e:      # _JsonBad from the hooks, int digit limits
            self.fail(f"invalid JSON ({e})", s[pos:])

    def _objects(self, s: str) -> list:
        """JSON values separated by white space, each an action object; nothing else may follow."""
        out, pos = [], 0
        while True:
            obj, end = self._decode(s, pos)
            out.append(self.from_json(obj, s[pos:end]))
            pos = WS.match(s, end).end()
            if pos >= len(s):
                return out
            if not s.startswith(("{", "["), pos):
                self.fail("unexpected text after the JSON action", s[end:])
            if len(out) >= MAX_ACTIONS:
                self.fail(f"more than {MAX_ACTIONS} actions in one reply")


    # -- values ------------------------------------------------------------------------------------
    def make(self, fields: dict, where: str) -> GuiAction:
        try:
            return GuiAction(**{k: v for k, v in fields.items() if v is not None})
        except (ActionError, ValueError, TypeError) as e:
            self.fail(f"not a valid GuiAction: {e}", where)

    def number(self, v, what: str, where: str) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.fail(f"{what} must be a number, got {show(v)}", where)
        v = float(v)
        if not math.isfinite(v):
            self.fail(f"{what} is not a finite number", where)
        return v

    def text(self, v, what: str, where: str, strip: bool = False) -> str:
        if not isinstance(v, str):
            self.fail(f"{what} must be a string, got {show(v)}", where)
        if not v.strip():
            self.fail(f"{what} is empty", where)
        if "\x00" in v:
            self.fail(f"{what} contains a NUL character", where)
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            self.fail(f"{what} is not valid Unicode (a lone surrogate)", where)
        return v.strip() if strip else v

    def choice(self, v: str, what: str, options, where: str) -> str:
        key = v.strip().lower()
        if key not in options:
            self.fail(f"{what} must be one of {', '.join(options)}; got {v!r}", where)
        return options[key] if isinstance(options, dict) else key

    def split_keys(self, v: str, where: str) -> tuple:
        """``'ctrl c'`` (UI-TARS) or ``'ctrl+c'`` -> ('ctrl', 'c'); a lone '+' is the plus key."""
        keys = []
        for token in self.text(v, "key", where).split():
            parts = [token] if token == "+" else token.split("+")
            if any(not p for p in parts):
                self.fail(f"empty key name in {v!r}", where)
            keys += parts
        if len(keys) > MAX_KEYS:
            self.fail(f"more than {MAX_KEYS} keys in {v!r}", where)
        return tuple(self.text(k, "key", where) for k in keys)

    def literal_point(self, v: str, what: str, where: str):
        """'(x,y)', '[x1,y1,x2,y2]', '<point>x y</point>', '<|box_start|>(x,y)<|box_end|>' -> 0..1000."""
        s = v.strip()
        if t := TAGGED.fullmatch(s):
            s = t.group(1).strip()
        if s[:1] + s[-1:] in ("()", "[]"):
            s = s[1:-1].strip()
        parts = _SEP.split(s) if s else []
        if not all(_NUM.fullmatch(p) for p in parts):
            self.fail(f"{what} {v.strip()[:40]!r} is not a list of numbers", where)
        nums = [float(p) for p in parts]
        if any(not math.isfinite(n) for n in nums):
            self.fail(f"{what} {v.strip()[:40]!r} holds a number out of range", where)
        if len(nums) == 4:      # a box: its centre
            nums = [(nums[0] + nums[2]) / 2.0, (nums[1] + nums[3]) / 2.0]
        if len(nums) != 2:
            self.fail(f"{what} must hold 2 numbers (x, y) or 4 (a box), got {len(nums)}", where)
        return self.point(nums, what, where)

    def point(self, xy, what: str, where: str, space: str | None = None):
        space = space or self.coords
        x, y = float(xy[0]), float(xy[1])
        if space == "norm1000":
            p = (x, y)
        else:
            try:
                p = convert((x, y), space, "norm1000", screen=self.screen, image=self.image)
            except (ValueError, OverflowError, ZeroDivisionError) as e:
                self.fail(f"{what} {point_text((x, y))} cannot be converted from {space}: {e}", where)
        if not all(math.isfinite(c) and 0.0 <= c <= 1000.0 for c in p):
            if space == "norm1000":
                self.fail(f"{what} {point_text((x, y))} is outside the 0..1000 screen", where)
            self.fail(f"{what} {point_text((x, y))} in {space} is outside the screen ({point_text(p)} of 0..1000)", where)
        return (float(p[0]) + 0.0, float(p[1]) + 0.0)      # + 0.0: no -0.0
