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

from embodia.devices.actions import GUI_ACTION_TYPES, SCROLL_DIRECTIONS, SYSTEM_BUTTONS, ActionError, GuiAction
from embodia.devices.coords import SPACES, convert

MAX_REPLY_CHARS = 64 * 1024
CENTRE = (500.0, 500.0)        # where a scroll without a point happens
MAX_ACTIONS = 8                # candidate actions in one reply before we stop reading
_MAX_ARGS = 8
_MAX_KEYS = 8
_MAX_INDEX = 1_000_000
_MAX_SECONDS = 60.0            # GuiAction.duration_ms allows up to 60 s


class ReplyParseError(ValueError):
    """A model reply that yields no executable `GuiAction`.

    ``problem`` says what was wrong, ``excerpt`` quotes the part of the reply it was found in.
    """

    def __init__(self, problem: str, excerpt: str = ""):
        self.problem, self.excerpt = problem, excerpt
        super().__init__(f"{problem}; reply: {excerpt!r}" if excerpt else problem)


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
    embodia.policies.gui.reply.ReplyParseError: point (1200, 40) is outside the 0..1000 screen; reply: "click(start_box='(1200,40)')"
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


# -- vocabularies ------------------------------------------------------------------------------------
_MOBILE_USE = frozenset({"key", "click", "long_press", "swipe", "type", "answer", "system_button",
                         "open", "wait", "terminate"})
_COMPUTER_USE = frozenset({"key", "type", "left_click", "left_click_drag", "right_click",
                           "double_click", "scroll", "hscroll", "wait", "terminate", "answer"})
_TOOLS = {"mobile_use": _MOBILE_USE, "computer_use": _COMPUTER_USE}
_NOT_EXPRESSIBLE = {   # names in the schemas above that no GuiAction means; refused, never approximated
    "mouse_move": "it only moves the pointer", "hover": "it only moves the pointer",
    "middle_click": "GuiAction has no middle button", "triple_click": "GuiAction has no triple click",
    "interact": "it asks the user, which is not a device action",
    "call_user": "it asks the user, which is not a device action",
    "keydown": "GuiAction presses whole key combinations", "keyup": "GuiAction presses whole key combinations",
}
_CALLS = {   # UI-TARS verb -> (GuiAction type, argument roles in positional order)
    "click": ("click", ("point",)), "left_single": ("click", ("point",)),
    "left_double": ("double_click", ("point",)), "right_single": ("right_click", ("point",)),
    "long_press": ("long_press", ("point",)), "drag": ("drag", ("point", "end")),
    "hotkey": ("key", ("key",)), "press": ("key", ("key",)), "type": ("type", ("content",)),
    "scroll": ("scroll", ("point", "direction")), "wait": ("wait", ()),
    "finished": ("terminate", ("content",)), "open_app": ("open_app", ("app_name",)),
    "press_home": ("system_button", ()), "press_back": ("system_button", ()),
}
_ROLES = {"point": "point", "start_box": "point", "start_point": "point", "end_box": "end",
          "end_point": "end", "content": "content", "key": "key", "direction": "direction",
          "app_name": "app_name"}
_OPTIONAL_ROLES = {("scroll", "point"), ("finished", "content")}
_OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}
_OUR_FIELDS = tuple(f for f in GuiAction.__dataclass_fields__ if f != "type")

# -- lexical pieces (ASCII digits only: float() would also take '١٢' and '1_000') ----------------------
_NUM = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_WS = re.compile(r"\s*")
_SEP = re.compile(r"\s*,\s*|\s+")
_VERB = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)[ \t]*(?=[(<])")
_KEYWORD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*=(?!=)")
_TAGGED = re.compile(r"(?:<point>|<bbox>|<\|box_start\|>)([^<]{0,200})(?:</point>|</bbox>|<\|box_end\|>)")
_QUOTED = {"'": re.compile(r"[^'\\]*"), '"': re.compile(r'[^"\\]*')}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"'}
_TOOL_OPEN = re.compile(r"<tool_call>", re.I)
_TOOL_CLOSE = re.compile(r"</tool_call>", re.I)
_THINK_OPEN = re.compile(r"<(?:think|thinking)>", re.I)
_THINK_CLOSE = re.compile(r"</(?:think|thinking)>", re.I)
_END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>")
_FENCE_HEAD = re.compile(r"[A-Za-z0-9_+-]*[ \t]*(?:\n|(?=[{\[]))")
_HEADED = re.compile(r"^[ \t]*#{2,}[ \t]*Action[ \t]*#*[ \t]*$", re.M | re.I)
_NEXT_HEADER = re.compile(r"^[ \t]*#{2,}", re.M)
_ACTION_LINE = re.compile(r"^[ \t]*[#*>]*[ \t]*Action[ \t]*\**[ \t]*:[ \t]*\**", re.M)


class _JsonBad(ValueError):
    pass


def _json_float(s: str) -> float:
    v = float(s)
    if not math.isfinite(v):
        raise _JsonBad(f"number {s[:24]} is out of range")
    return v


def _json_int(s: str) -> int:
    if len(s) > 30:     # int('9' * 5000) is slow and then too large for any screen anyway
        raise _JsonBad(f"number {s[:24]}... has {len(s)} digits")
    return int(s)


def _json_constant(name: str):
    raise _JsonBad(f"{name} is not a finite number")


def _json_pairs(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise _JsonBad(f"key {k!r} given twice")
        d[k] = v
    return d


_DECODER = json.JSONDecoder(parse_float=_json_float, parse_int=_json_int,
                            parse_constant=_json_constant, object_pairs_hook=_json_pairs)


def _excerpt(s: str, limit: int = 80) -> str:
    s = " ".join(s[: limit * 4].split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _show(v) -> str:
    if isinstance(v, (list, dict)):
        return f"a {type(v).__name__} of {len(v)}"
    r = repr(v)
    return r if len(r) <= 40 else r[:39] + "…"


def _brief(a: GuiAction) -> str:
    return a.type + "".join(f" {_fmt(p)}" for p in (a.point, a.end) if p is not None)


def _fmt(p) -> str:
    return "(" + ", ".join(f"{c:g}" for c in p) + ")"


def _size_ok(v) -> bool:
    try:
        w, h = (v.width, v.height) if hasattr(v, "width") else v
        return float(w) >= 1 and float(h) >= 1
    except (TypeError, ValueError):
        return False


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


class _Fields:
    """One JSON object read field by field; fields left unread but not empty are refused."""

    def __init__(self, reader: "_Reader", obj: dict, form: str, where: str):
        self.r, self.obj, self.form, self.where, self.seen = reader, obj, form, where, set()
        self.action = ""

    def has(self, k) -> bool:
        return self.obj.get(k) is not None

    def get(self, k, required=True):
        self.seen.add(k)
        v = self.obj.get(k)
        if v is None and required:
            what = f"{self.form} action {self.action!r}" if self.action else self.form
            self.r.fail(f"{what} needs {k!r}", self.where)
        return v

    def text(self, k, required=True, strip=False):
        v = self.get(k, required)
        return None if v is None else self.r.text(v, f"{k!r}", self.where, strip=strip)

    def number(self, k, required=True):
        v = self.get(k, required)
        return None if v is None else self.r.number(v, f"{k!r}", self.where)

    def point(self, k, required=True, space=None):
        v = self.get(k, required)
        if v is None:
            return None
        if not isinstance(v, list) or len(v) != 2:
            self.r.fail(f"{k!r} must be [x, y], got {_show(v)}", self.where)
        return self.r.point([self.r.number(c, f"{k!r}", self.where) for c in v], k, self.where, space)

    def choice(self, k, options, required=True):
        v = self.text(k, required, strip=True)
        return None if v is None else self.r.choice(v, k, options, self.where)

    def index(self, k):
        v = self.get(k)
        if isinstance(v, str) and re.fullmatch(r"[0-9]{1,9}", v.strip()):
            v = int(v.strip())      # AndroidWorld's own JSONAction takes "3" too
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < _MAX_INDEX:
            self.r.fail(f"{k!r} must be an element index 0..{_MAX_INDEX - 1}, got {_show(v)}", self.where)
        return v

    def millis(self, k, required=False, unit=1000.0):
        v = self.number(k, required)
        if v is None:
            return None
        ms = v * unit
        if not 0 <= ms <= _MAX_SECONDS * 1000:
            self.r.fail(f"{k!r} {v:g} is out of range (0..{_MAX_SECONDS:g} s)", self.where)
        if unit == 1.0 and ms != int(ms):
            self.r.fail(f"{k!r} must be whole milliseconds, got {v:g}", self.where)
        return int(round(ms))

    def keys(self, k="keys"):
        v = self.get(k)
        if not isinstance(v, list) or not 1 <= len(v) <= _MAX_KEYS:
            self.r.fail(f"{k!r} must be a list of 1..{_MAX_KEYS} key names, got {_show(v)}", self.where)
        return tuple(self.r.text(x, f"key in {k!r}", self.where, strip=True) for x in v)

    def done(self) -> None:
        for k, v in self.obj.items():
            if k not in self.seen and v not in (None, "", [], {}):
                what = f"{self.form} action {self.action!r}" if self.action else self.form
                self.r.fail(f"field {k!r} means nothing to {what}", self.where)


class _Reader:
    def __init__(self, coords: str, screen, image):
        if coords not in SPACES:
            raise ValueError(f"unknown coordinate space {coords!r}; known: {SPACES}")
        if coords in ("screen_px", "logical_px") and not _size_ok(screen):
            raise ValueError(f"coords={coords!r} needs screen= (a Screen or (width, height)), got {screen!r}")
        if coords == "image_px" and not _size_ok(image):
            raise ValueError(f"coords='image_px' needs image=(width, height) of the model input, got {image!r}")
        self.coords, self.screen, self.image = coords, screen, image
        self.reply = ""

    def fail(self, problem: str, where: str | None = None) -> NoReturn:
        raise ReplyParseError(problem, _excerpt(self.reply if where is None else where))

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
                      f"({'; '.join(map(_brief, unique))}); expected exactly one")
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
        if s.startswith("{") or re.match(r"\[\s*\{", s) or _VERB.match(s):
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
        while (pos := _WS.match(s, pos).end()) < len(s):
            if len(out) >= MAX_ACTIONS:
                self.fail(f"more than {MAX_ACTIONS} actions in one reply")
            action, pos = self._call(s, pos)
            out.append(action)
        return out

    # -- JSON --------------------------------------------------------------------------------------
    def _decode(self, s: str, pos: int = 0):
        try:
            return _DECODER.raw_decode(s, pos)
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
            pos = _WS.match(s, end).end()
            if pos >= len(s):
                return out
            if not s.startswith(("{", "["), pos):
                self.fail("unexpected text after the JSON action", s[end:])
            if len(out) >= MAX_ACTIONS:
                self.fail(f"more than {MAX_ACTIONS} actions in one reply")

    def from_json(self, obj, where: str) -> GuiAction:
        if not isinstance(obj, dict):
            self.fail(f"expected a JSON object holding the action, got {_show(obj)}", where)
        kinds = [k for k in ("name", "action_type", "action", "type") if k in obj]
        if not kinds:
            self.fail("JSON action has none of 'action', 'action_type', 'type' or a tool call's 'name'", where)
        if len(kinds) > 1:
            self.fail(f"ambiguous JSON action: it has both {kinds[0]!r} and {kinds[1]!r}", where)
        kind = kinds[0]
        if kind == "name":
            f = _Fields(self, obj, "tool call", where)
            name = f.text("name", strip=True)
            args = f.get("arguments")
            if isinstance(args, str) and args.strip().startswith("{"):
                args, end = self._decode(args.strip())    # OpenAI-style: the arguments as a JSON string
                if not isinstance(args, dict) or f.obj["arguments"].strip()[end:].strip():
                    self.fail("tool call 'arguments' string must hold exactly one JSON object", where)
            if not isinstance(args, dict):
                self.fail(f"tool call 'arguments' must be a JSON object, got {_show(args)}", where)
            f.done()
            if name not in _TOOLS:
                self.fail(f"unknown tool {name!r}; expected one of {sorted(_TOOLS)}", where)
            return self._tool(_Fields(self, args, name, where), _TOOLS[name])
        if kind == "action":
            return self._tool(_Fields(self, obj, "JSON", where), _MOBILE_USE | _COMPUTER_USE)
        if kind == "action_type":
            return self._androidworld(_Fields(self, obj, "AndroidWorld", where))
        return self._ours(_Fields(self, obj, "GuiAction", where))

    def _tool(self, f: _Fields, allowed) -> GuiAction:
        act = f.text("action", strip=True)
        f.action = act
        if act in _NOT_EXPRESSIBLE:
            self.fail(f"{f.form} action {act!r} cannot be expressed as a GuiAction ({_NOT_EXPRESSIBLE[act]})",
                      f.where)
        if act not in allowed:
            self.fail(f"unknown {f.form} action {act!r}; known: {', '.join(sorted(allowed))}", f.where)
        if act in ("click", "left_click"):
            out = dict(type="click", point=f.point("coordinate"))
        elif act in ("double_click", "right_click"):
            out = dict(type=act, point=f.point("coordinate"))
        elif act == "long_press":
            out = dict(type="long_press", point=f.point("coordinate"), duration_ms=f.millis("time"))
        elif act == "swipe":
            out = dict(type="swipe", point=f.point("coordinate"), end=f.point("coordinate2"))
        elif act == "left_click_drag":
            if not f.has("coordinate2"):
                self.fail("left_click_drag with one coordinate drags from wherever the pointer is, which "
                          "a GuiAction cannot express; give coordinate (start) and coordinate2 (end)", f.where)
            out = dict(type="drag", point=f.point("coordinate"), end=f.point("coordinate2"))
        elif act in ("type", "answer"):
            out = dict(type=act, text=f.text("text"))
        elif act == "open":
            out = dict(type="open_app", app=f.text("text", strip=True))
        elif act == "key":
            if f.has("keys") == f.has("text"):
                self.fail("key action needs either 'keys' (a list) or 'text' (one key), not "
                          + ("both" if f.has("keys") else "neither"), f.where)
            keys = f.keys() if f.has("keys") else (f.text("text", strip=True),)
            f.seen.update(("keys", "text"))
            out = dict(type="key", keys=keys)
        elif act == "system_button":
            out = dict(type="system_button", button=f.choice("button", SYSTEM_BUTTONS))
        elif act == "wait":
            out = dict(type="wait", duration_ms=f.millis("time"))
        elif act == "terminate":
            out = dict(type="terminate", status=f.choice("status", ("success", "failure")))
        else:   # scroll, hscroll: the sign says the direction; GuiAction keeps no amount
            pixels = f.number("pixels")
            if pixels == 0:
                self.fail(f"{act} by 0 pixels has no direction", f.where)
            if act == "scroll":
                direction = "up" if pixels > 0 else "down"
            else:
                direction = "right" if pixels > 0 else "left"
            out = dict(type="scroll", point=f.point("coordinate", required=False) or CENTRE,
                       direction=direction)
        f.done()
        return self.make(out, f.where)

    def _androidworld(self, f: _Fields) -> GuiAction:
        act = f.text("action_type", strip=True).lower()
        f.action = act

        def target(required: bool) -> dict:
            f.seen.update(("index", "x", "y"))
            has_x, has_y = f.has("x"), f.has("y")
            if f.has("index") and (has_x or has_y):
                self.fail("AndroidWorld actions take an index or x/y, never both", f.where)
            if f.has("index"):
                return {"element": f.index("index")}
            if has_x and has_y:
                return {"point": self.point((f.number("x"), f.number("y")), "x/y", f.where)}
            if has_x or has_y:
                self.fail(f"AndroidWorld {act!r} gives only one of x and y", f.where)
            if required:
                self.fail(f"AndroidWorld {act!r} needs an 'index' or both 'x' and 'y'", f.where)
            return {}

        taps = {"click": "click", "double_tap": "double_click", "long_press": "long_press"}
        buttons = {"keyboard_enter": "enter", "navigate_back": "back", "navigate_home": "home"}
        if act in taps:
            out = dict(type=taps[act], **target(True))
        elif act == "input_text":
            out = dict(type="type", text=f.text("text"), **target(False))
        elif act in buttons:
            out = dict(type="system_button", button=buttons[act])
        elif act in ("scroll", "swipe"):
            direction = f.choice("direction", SCROLL_DIRECTIONS)
            out = dict(type="scroll", direction=direction if act == "scroll" else _OPPOSITE[direction],
                       **(target(False) or {"point": CENTRE}))
        elif act == "open_app":
            out = dict(type="open_app", app=f.text("app_name", strip=True))
        elif act == "wait":
            out = dict(type="wait")
        elif act == "answer":
            out = dict(type="answer", text=f.text("text"))
        elif act == "status":
            status = f.choice("goal_status", {"complete": "success", "infeasible": "failure"})
            out = dict(type="terminate", status=status)
        elif act == "unknown":
            self.fail("AndroidWorld action 'unknown': the model chose no action", f.where)
        else:
            self.fail(f"unknown AndroidWorld action_type {act!r}", f.where)
        f.done()
        return self.make(out, f.where)

    def _ours(self, f: _Fields) -> GuiAction:
        kind = f.text("type", strip=True)
        f.action = kind
        if kind not in GUI_ACTION_TYPES:
            self.fail(f"unknown GuiAction type {kind!r}; known: {', '.join(sorted(GUI_ACTION_TYPES))}", f.where)
        out = {"type": kind}
        for k in _OUR_FIELDS:
            if not f.has(k):
                f.seen.add(k)
            elif k in ("point", "end"):
                out[k] = f.point(k, space="norm1000")
            elif k in ("text", "app"):
                out[k] = f.text(k, strip=(k == "app"))
            elif k == "keys":
                out[k] = f.keys()
            elif k in ("button", "direction", "status"):
                options = {"button": SYSTEM_BUTTONS, "direction": SCROLL_DIRECTIONS,
                           "status": ("success", "failure")}[k]
                out[k] = f.choice(k, options)
            elif k == "duration_ms":
                out[k] = f.millis(k, unit=1.0)
            elif k == "element":
                out[k] = f.index(k)
            else:       # a field GuiAction gained after this parser was written
                self.fail(f"GuiAction field {k!r} is not understood by the reply parser", f.where)
        f.done()
        return self.make(out, f.where)

    # -- UI-TARS calls -----------------------------------------------------------------------------
    def _call(self, s: str, pos: int):
        """One ``verb(args)`` or ``verb <point>x y</point>`` at ``pos``; returns (action, end)."""
        m = _VERB.match(s, pos)
        if not m:
            self.fail("expected an action call such as click(start_box='(x,y)')", s[pos:])
        verb, pos = m.group(1), m.end()
        if s[pos] == "(":
            args, pos = self._args(s, pos + 1, verb, m.start())
        else:
            t = _TAGGED.match(s, pos)
            if not t:
                self.fail(f"expected '(' or <point>x y</point> after {verb!r}", s[m.start():])
            args, pos = [(None, t.group(0), False)], t.end()
        return self._from_call(verb, args, s[m.start():pos]), pos

    def _args(self, s: str, pos: int, verb: str, start: int):
        args = []
        while True:
            pos = _WS.match(s, pos).end()
            if pos >= len(s):
                self.fail(f"{verb}( is never closed", s[start:])
            if s[pos] == ")":
                return args, pos + 1
            if len(args) >= _MAX_ARGS:
                self.fail(f"{verb}() has more than {_MAX_ARGS} arguments", s[start:])
            name = None
            if kw := _KEYWORD.match(s, pos):
                name, pos = kw.group(1), _WS.match(s, kw.end()).end()
            if pos < len(s) and s[pos] in _QUOTED:
                value, pos = self._quoted(s, pos, verb)
                args.append((name, value, True))
            else:
                value, pos = self._bare(s, pos, verb)
                args.append((name, value, False))
            pos = _WS.match(s, pos).end()
            if pos < len(s) and s[pos] == ",":
                pos += 1
            elif pos < len(s) and s[pos] != ")":
                self.fail(f"expected ',' or ')' in the arguments of {verb}()", s[start:])

    def _quoted(self, s: str, pos: int, verb: str):
        q, i, parts = s[pos], pos + 1, []
        body = _QUOTED[q]
        while True:
            m = body.match(s, i)
            parts.append(m.group())
            i = m.end()
            if i >= len(s) or s[i] == "\\" and i + 1 >= len(s):
                self.fail(f"unterminated string in {verb}()", s[pos:])
            if s[i] == q:
                return "".join(parts), i + 1
            parts.append(_ESCAPES.get(s[i + 1], "\\" + s[i + 1]))
            i += 2

    def _bare(self, s: str, pos: int, verb: str):
        depth, i = 0, pos
        while i < len(s) and i - pos <= 200:
            c = s[i]
            if c in "([":
                depth += 1
            elif c in ")]":
                if depth == 0:
                    break
                depth -= 1
            elif c == "," and depth == 0:
                break
            elif c in "'\"":
                self.fail(f"stray quote in an argument of {verb}()", s[pos:])
            i += 1
        if i - pos > 200:
            self.fail(f"unquoted argument of {verb}() is too long", s[pos:])
        value = s[pos:i].strip()
        if not value:
            self.fail(f"missing argument value in {verb}()", s[pos:])
        return value, i

    def _from_call(self, verb: str, args: list, where: str) -> GuiAction:
        name = verb.lower()
        if name in _NOT_EXPRESSIBLE:
            self.fail(f"{verb}() cannot be expressed as a GuiAction ({_NOT_EXPRESSIBLE[name]})", where)
        if name not in _CALLS:
            self.fail(f"unknown action {verb}(); known: {', '.join(sorted(_CALLS))}", where)
        gtype, roles = _CALLS[name]
        vals: dict = {}
        for i, (key, value, quoted) in enumerate(args):
            if key is None:
                if any(k is not None for k, _, _ in args[:i]):
                    self.fail(f"positional argument after a keyword in {verb}()", where)
                if i >= len(roles):
                    self.fail(f"{verb}() takes {len(roles)} argument(s), got {len(args)}", where)
                role = roles[i]
            else:
                role = _ROLES.get(key.lower())
                if role not in roles:
                    self.fail(f"{verb}() has no argument {key!r}", where)
            if role in vals:
                self.fail(f"{verb}() got its {role} twice", where)
            vals[role] = (value, quoted)
        for role in roles:
            if role not in vals and (name, role) not in _OPTIONAL_ROLES:
                self.fail(f"{verb}() needs its {role} argument", where)

        def text(role, allow_empty=False, strip=False):
            value, quoted = vals[role]
            if not quoted:
                self.fail(f"{verb}() {role} must be a quoted string", where)
            if allow_empty and not value.strip():
                return None
            return self.text(value, role, where, strip=strip)

        out: dict = {"type": gtype}
        for role in ("point", "end"):
            if role in vals:
                out[role] = self.literal_point(vals[role][0], role, where)
        if gtype == "scroll" and "point" not in out:
            out["point"] = CENTRE
        if "direction" in vals:
            out["direction"] = self.choice(vals["direction"][0].strip(), "direction", SCROLL_DIRECTIONS, where)
        if "key" in vals:
            out["keys"] = self.split_keys(vals["key"][0], where)
        if "app_name" in vals:
            out["app"] = text("app_name", strip=True)
        if name == "type":
            out["text"] = text("content")
        elif name == "finished":
            out.update(status="success", text=text("content", allow_empty=True) if "content" in vals else None)
        elif name == "wait":
            out["duration_ms"] = 5000
        elif name in ("press_home", "press_back"):
            out["button"] = name[len("press_"):]
        return self.make(out, where)

    # -- values ------------------------------------------------------------------------------------
    def make(self, fields: dict, where: str) -> GuiAction:
        try:
            return GuiAction(**{k: v for k, v in fields.items() if v is not None})
        except (ActionError, ValueError, TypeError) as e:
            self.fail(f"not a valid GuiAction: {e}", where)

    def number(self, v, what: str, where: str) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.fail(f"{what} must be a number, got {_show(v)}", where)
        v = float(v)
        if not math.isfinite(v):
            self.fail(f"{what} is not a finite number", where)
        return v

    def text(self, v, what: str, where: str, strip: bool = False) -> str:
        if not isinstance(v, str):
            self.fail(f"{what} must be a string, got {_show(v)}", where)
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
        if len(keys) > _MAX_KEYS:
            self.fail(f"more than {_MAX_KEYS} keys in {v!r}", where)
        return tuple(self.text(k, "key", where) for k in keys)

    def literal_point(self, v: str, what: str, where: str):
        """'(x,y)', '[x1,y1,x2,y2]', '<point>x y</point>', '<|box_start|>(x,y)<|box_end|>' -> 0..1000."""
        s = v.strip()
        if t := _TAGGED.fullmatch(s):
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
                self.fail(f"{what} {_fmt((x, y))} cannot be converted from {space}: {e}", where)
        if not all(math.isfinite(c) and 0.0 <= c <= 1000.0 for c in p):
            if space == "norm1000":
                self.fail(f"{what} {_fmt((x, y))} is outside the 0..1000 screen", where)
            self.fail(f"{what} {_fmt((x, y))} in {space} is outside the screen ({_fmt(p)} of 0..1000)", where)
        return (float(p[0]) + 0.0, float(p[1]) + 0.0)      # + 0.0: no -0.0
