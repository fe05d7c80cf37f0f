"""Function-call forms of a model reply (UI-TARS style: click(start_box='(x,y)'), type(content='...')):
read argument by argument, never evaluated."""
from __future__ import annotations

import re

from embodia.devices.actions import SCROLL_DIRECTIONS, GuiAction
from embodia.policies.gui.reply_common import MAX_ARGS, NOT_EXPRESSIBLE, TAGGED, VERB, WS, CENTRE

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


_KEYWORD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*=(?!=)")


_QUOTED = {"'": re.compile(r"[^'\\]*"), '"': re.compile(r'[^"\\]*')}


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"'}


class CallForms:
    """The function-call forms, as methods of the reply reader (``reply._Reader``), whose value
    checks and ``fail`` they use."""

    # -- UI-TARS calls -----------------------------------------------------------------------------
    def _call(self, s: str, pos: int):
        """One ``verb(args)`` or ``verb <point>x y</point>`` at ``pos``; returns (action, end)."""
        m = VERB.match(s, pos)
        if not m:
            self.fail("expected an action call such as click(start_box='(x,y)')", s[pos:])
        verb, pos = m.group(1), m.end()
        if s[pos] == "(":
            args, pos = self._args(s, pos + 1, verb, m.start())
        else:
            t = TAGGED.match(s, pos)
            if not t:
                self.fail(f"expected '(' or <point>x y</point> after {verb!r}", s[m.start():])
            args, pos = [(None, t.group(0), False)], t.end()
        return self._from_call(verb, args, s[m.start():pos]), pos

    def _args(self, s: str, pos: int, verb: str, start: int):
        args = []
        while True:
            pos = WS.match(s, pos).end()
            if pos >= len(s):
                self.fail(f"{verb}( is never closed", s[start:])
            if s[pos] == ")":
                return args, pos + 1
            if len(args) >= MAX_ARGS:
                self.fail(f"{verb}() has more than {MAX_ARGS} arguments", s[start:])
            name = None
            if kw := _KEYWORD.match(s, pos):
                name, pos = kw.group(1), WS.match(s, kw.end()).end()
            if pos < len(s) and s[pos] in _QUOTED:
                value, pos = self._quoted(s, pos, verb)
                args.append((name, value, True))
            else:
                value, pos = self._bare(s, pos, verb)
                args.append((name, value, False))
            pos = WS.match(s, pos).end()
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
        if name in NOT_EXPRESSIBLE:
            self.fail(f"{verb}() cannot be expressed as a GuiAction ({NOT_EXPRESSIBLE[name]})", where)
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
