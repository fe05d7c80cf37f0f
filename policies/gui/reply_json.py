"""JSON forms of a model reply: Qwen/GUI-Owl mobile_use and computer_use tool calls, AndroidWorld's
JSON action, and GuiAction.to_dict(); read field by field, with JSON's own constants and huge
numbers refused."""
from __future__ import annotations

import json
import math
import re

from embodia.devices.actions import GUI_ACTION_TYPES, SCROLL_DIRECTIONS, SYSTEM_BUTTONS, GuiAction
from embodia.policies.gui.reply_common import (
    MAX_INDEX,
    MAX_KEYS,
    MAX_SECONDS,
    NOT_EXPRESSIBLE,
    OPPOSITE,
    OUR_FIELDS,
    CENTRE,
    show,
)

# -- vocabularies ------------------------------------------------------------------------------------
_MOBILE_USE = frozenset({"key", "click", "long_press", "swipe", "type", "answer", "system_button",
                         "open", "wait", "terminate"})


_COMPUTER_USE = frozenset({"key", "type", "left_click", "left_click_drag", "right_click",
                           "double_click", "scroll", "hscroll", "wait", "terminate", "answer"})


_TOOLS = {"mobile_use": _MOBILE_USE, "computer_use": _COMPUTER_USE}


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


DECODER = json.JSONDecoder(parse_float=_json_float, parse_int=_json_int,
                            parse_constant=_json_constant, object_pairs_hook=_json_pairs)


class _Fields:
    """One JSON object read field by field; fields left unread but not empty are refused."""

    def __init__(self, reader, obj: dict, form: str, where: str):
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
            self.r.fail(f"{k!r} must be [x, y], got {show(v)}", self.where)
        return self.r.point([self.r.number(c, f"{k!r}", self.where) for c in v], k, self.where, space)

    def choice(self, k, options, required=True):
        v = self.text(k, required, strip=True)
        return None if v is None else self.r.choice(v, k, options, self.where)

    def index(self, k):
        v = self.get(k)
        if isinstance(v, str) and re.fullmatch(r"[0-9]{1,9}", v.strip()):
            v = int(v.strip())      # AndroidWorld's own JSONAction takes "3" too
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < MAX_INDEX:
            self.r.fail(f"{k!r} must be an element index 0..{MAX_INDEX - 1}, got {show(v)}", self.where)
        return v

    def millis(self, k, required=False, unit=1000.0):
        v = self.number(k, required)
        if v is None:
            return None
        ms = v * unit
        if not 0 <= ms <= MAX_SECONDS * 1000:
            self.r.fail(f"{k!r} {v:g} is out of range (0..{MAX_SECONDS:g} s)", self.where)
        if unit == 1.0 and ms != int(ms):
            self.r.fail(f"{k!r} must be whole milliseconds, got {v:g}", self.where)
        return int(round(ms))

    def keys(self, k="keys"):
        v = self.get(k)
        if not isinstance(v, list) or not 1 <= len(v) <= MAX_KEYS:
            self.r.fail(f"{k!r} must be a list of 1..{MAX_KEYS} key names, got {show(v)}", self.where)
        return tuple(self.r.text(x, f"key in {k!r}", self.where, strip=True) for x in v)

    def done(self) -> None:
        for k, v in self.obj.items():
            if k not in self.seen and v not in (None, "", [], {}):
                what = f"{self.form} action {self.action!r}" if self.action else self.form
                self.r.fail(f"field {k!r} means nothing to {what}", self.where)


class JsonForms:
    """The JSON forms, as methods of the reply reader (``reply._Reader``): ``self.fail``, ``self.make``
    and the value checks (``number``, ``text``, ``point``, ...) are the reader's."""

    def from_json(self, obj, where: str) -> GuiAction:
        if not isinstance(obj, dict):
            self.fail(f"expected a JSON object holding the action, got {show(obj)}", where)
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
                self.fail(f"tool call 'arguments' must be a JSON object, got {show(args)}", where)
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
        if act in NOT_EXPRESSIBLE:
            self.fail(f"{f.form} action {act!r} cannot be expressed as a GuiAction ({NOT_EXPRESSIBLE[act]})",
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
            out = dict(type="scroll", direction=direction if act == "scroll" else OPPOSITE[direction],
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
        for k in OUR_FIELDS:
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
