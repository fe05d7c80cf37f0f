"""A declarative check on an observation (``--success check:<predicate>``): its language, parsed by
a tokenizer and a recursive-descent parser, and its evaluation against the final UI tree, state
channels and MuJoCo body positions. The labels built on it are in `embodia.agent.loop.success`.

Grammar (a tokenizer and a recursive-descent parser; user text is never given to
Python's eval, exec or ast)::

    expr    := and_ ("or" and_)*
    and_    := unary ("and" unary)*
    unary   := "not" unary | "(" expr ")" | element | compare
    element := "element" "(" [ field OP value ("," field OP value)* ] ")"
               OP: "=" or "==" (equal; text fields exactly, booleans and numbers by value),
                   "!=" (not equal, or absent), "~" (text contains, any case)
               value: "quoted text" | 'quoted text' | number | true | false | BareWord
    compare := operand CMP operand      CMP: < <= > >= == !=   (at least one side not a number)
    operand := number | state.NAME | state.NAME[INDEX] | state["any name"] | body.NAME.(x|y|z)

``element(...)`` is true when some element of the final UI tree matches every field (fields are
the tree's keys: role, text, desc, id, checked, clickable, focused, ...; an element without the
field does not match ``=``). ``state.NAME`` is the named state channel of the embodiment
(``sim:twogap-push``: ``state.puck_y``; a ``mujoco:`` scene: ``state.qpos[1]`` or a sensor's name);
``body.NAME.x`` (``.y``, ``.z``) is a MuJoCo body's world position at the episode's end (``body.puck.y``).

>>> p = parse_predicate('element(role=Switch, text="Bluetooth", checked=false) and not element(text~"error")')
>>> tree = [{"role": "Switch", "text": "Bluetooth", "checked": False}]
>>> evaluate(p, ui_tree=tree)
True
>>> evaluate(parse_predicate("state.puck_y > 0.3 or state.qpos[1] <= -2"),
...          state={"puck_y": 0.5, "qpos[1]": 0.0})
True
>>> parse_predicate("state.x > ")
Traceback (most recent call last):
embodia.agent.loop.predicate.PredicateError: predicate: expected a number, state.NAME or body.NAME.x at column 11, found the end
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from embodia.devices import as_device

MAX_PREDICATE = 2000      # characters
MAX_DEPTH = 32            # nesting of not/( ... ): deeper is an error, never a RecursionError


class PredicateError(ValueError):
    """A ``check:`` predicate that does not parse, or names what the device does not have; one line."""


# -- predicate tokenizer -----------------------------------------------------------------------------

_PUNCT = ("<=", ">=", "==", "!=", "(", ")", "[", "]", ",", ".", "=", "~", "<", ">")


@dataclass(frozen=True)
class Token:
    kind: str       # name, number, string, op, end
    text: str
    value: object
    col: int        # 1-based column


def tokenize(src: str) -> list[Token]:
    """Tokens of a predicate; PredicateError for a character or string that does not belong.

    >>> [t.text for t in tokenize('state.x>=1.5')]
    ['state', '.', 'x', '>=', '1.5', '']
    """
    if not isinstance(src, str):
        raise PredicateError("predicate: expected text")
    if len(src) > MAX_PREDICATE:
        raise PredicateError(f"predicate: longer than {MAX_PREDICATE} characters")
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if c in " \t\r\n":
            i += 1
        elif c.isascii() and (c.isalpha() or c == "_"):
            j = i
            while j < n and src[j].isascii() and (src[j].isalnum() or src[j] == "_"):
                j += 1
            out.append(Token("name", src[i:j], src[i:j], i + 1))
            i = j
        elif c.isascii() and (c.isdigit() or (c == "-" and i + 1 < n and (src[i + 1].isdigit() or src[i + 1] == "."))
                              or (c == "." and i + 1 < n and src[i + 1].isdigit())):
            j = _number_end(src, i)
            try:
                v = float(src[i:j])
            except ValueError:
                raise PredicateError(f"predicate: bad number {src[i:j]!r} at column {i + 1}") from None
            if not math.isfinite(v):
                raise PredicateError(f"predicate: number out of range at column {i + 1}")
            out.append(Token("number", src[i:j], v, i + 1))
            i = j
        elif c in "\"'":
            text, j = _string(src, i)
            out.append(Token("string", src[i:j], text, i + 1))
            i = j
        else:
            op = next((p for p in _PUNCT if src.startswith(p, i)), None)
            if op is None:
                raise PredicateError(f"predicate: unexpected character {c!r} at column {i + 1}")
            out.append(Token("op", op, op, i + 1))
            i += len(op)
    out.append(Token("end", "", None, n + 1))
    return out


def _number_end(src: str, i: int) -> int:
    j = i + 1 if src[i] == "-" else i
    while j < len(src) and src[j].isascii() and src[j].isdigit():
        j += 1
    if j < len(src) and src[j] == "." and j + 1 < len(src) and src[j + 1].isascii() and src[j + 1].isdigit():
        j += 1
        while j < len(src) and src[j].isascii() and src[j].isdigit():
            j += 1
    if j < len(src) and src[j] in "eE":
        k = j + 1 + (j + 1 < len(src) and src[j + 1] in "+-")
        if k < len(src) and src[k].isascii() and src[k].isdigit():
            j = k
            while j < len(src) and src[j].isascii() and src[j].isdigit():
                j += 1
    return j


def _string(src: str, i: int) -> tuple[str, int]:
    """A quoted string from ``i`` (its quote) with \\" \\' \\\\ escapes: (text, index after it)."""
    quote, j, buf = src[i], i + 1, []
    while j < len(src):
        c = src[j]
        if c == "\\" and j + 1 < len(src) and src[j + 1] in "\"'\\":
            buf.append(src[j + 1])
            j += 2
        elif c == quote:
            return "".join(buf), j + 1
        else:
            buf.append(c)
            j += 1
    raise PredicateError(f"predicate: unterminated string starting at column {i + 1}")


# -- predicate parser: a tree of tuples --------------------------------------------------------------
# ("or", a, b) ("and", a, b) ("not", a) ("element", ((field, op, value), ...))
# ("cmp", op, left, right) where an operand is ("num", float), ("state", name) or ("body", "name.axis")

_CMP = ("<", "<=", ">", ">=", "==", "!=")
_FIELD_OPS = ("=", "==", "!=", "~")


class _Parser:
    def __init__(self, src: str):
        self.toks, self.i, self.depth = tokenize(src), 0, 0

    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def error(self, expected: str):
        found = "the end" if self.tok.kind == "end" else repr(self.tok.text)
        raise PredicateError(f"predicate: expected {expected} at column {self.tok.col}, found {found}")

    def take(self, kind: str, text: str | None = None, expected: str = "") -> Token:
        t = self.tok
        if t.kind != kind or (text is not None and t.text != text):
            self.error(expected or repr(text))
        self.i += 1
        return t

    def at(self, kind: str, text: str | None = None) -> bool:
        return self.tok.kind == kind and (text is None or self.tok.text == text)

    def parse(self):
        node = self.expr()
        if not self.at("end"):
            self.error("and, or or the end")
        return node

    def expr(self):
        node = self.and_()
        while self.at("name", "or"):
            self.i += 1
            node = ("or", node, self.and_())
        return node

    def and_(self):
        node = self.unary()
        while self.at("name", "and"):
            self.i += 1
            node = ("and", node, self.unary())
        return node

    def unary(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise PredicateError(f"predicate: nested deeper than {MAX_DEPTH} levels")
        try:
            if self.at("name", "not"):
                self.i += 1
                return ("not", self.unary())
            if self.at("op", "("):
                self.i += 1
                node = self.expr()
                self.take("op", ")", "')'")
                return node
            if self.at("name", "element"):
                return self.element()
            return self.compare()
        finally:
            self.depth -= 1

    def element(self):
        self.i += 1
        self.take("op", "(", "'(' after element")
        fields = []
        while not self.at("op", ")"):
            if fields:
                self.take("op", ",", "',' or ')'")
            name = self.take("name", expected="a field name (role, text, checked, ...)").text
            if not (self.tok.kind == "op" and self.tok.text in _FIELD_OPS):
                self.error("=, !=, or ~ after the field name")
            op = self.take("op").text
            fields.append((name, "=" if op == "==" else op, self.value(op)))
        self.take("op", ")", "')'")
        return ("element", tuple(fields))

    def value(self, op: str):
        t = self.tok
        if t.kind in ("string", "number"):
            self.i += 1
            if op == "~" and t.kind != "string":
                self.error("quoted text after ~")
            return t.value
        if t.kind == "name":
            self.i += 1
            return {"true": True, "false": False}.get(t.text, t.text)
        self.error("a value (quoted text, a number, true, false or a word)")

    def compare(self):
        left = self.operand()
        if not (self.tok.kind == "op" and self.tok.text in _CMP):
            self.error("a comparison (< <= > >= == !=)")
        op = self.take("op").text
        right = self.operand()
        if left[0] == "num" and right[0] == "num":
            raise PredicateError(f"predicate: a comparison needs a state channel or a body on one side "
                                 f"(column {self.toks[self.i - 1].col})")
        return ("cmp", op, left, right)

    def operand(self):
        if self.at("number"):
            return ("num", self.take("number").value)
        if self.at("name", "body"):
            self.i += 1
            self.take("op", ".", "'.' after body")
            name = self.take("name", expected="a body name").text
            self.take("op", ".", "'.x', '.y' or '.z' after the body name")
            axis = self.take("name", expected="x, y or z").text
            if axis not in ("x", "y", "z"):
                raise PredicateError(f"predicate: body.{name}.{axis}: expected .x, .y or .z")
            return ("body", f"{name}.{axis}")
        if self.at("name", "state"):
            self.i += 1
            if self.at("op", "["):
                self.i += 1
                name = self.take("string", expected='a quoted channel name, state["name"]').value
                self.take("op", "]", "']'")
                return ("state", name)
            self.take("op", ".", "'.' or '[' after state")
            name = self.take("name", expected="a state channel name").text
            if self.at("op", "["):
                self.i += 1
                t = self.take("number", expected="an index")
                if t.value != int(t.value) or t.value < 0:
                    raise PredicateError(f"predicate: index {t.text} at column {t.col} is not a whole number >= 0")
                self.take("op", "]", "']'")
                name = f"{name}[{int(t.value)}]"
            return ("state", name)
        self.error("a number, state.NAME or body.NAME.x")


def parse_predicate(src: str):
    """The predicate's tree (nested tuples); PredicateError, one line, for anything malformed."""
    return _Parser(src).parse()


def atoms(node) -> list:
    """Every element(...) and state channel a predicate uses, in order."""
    if node[0] in ("or", "and"):
        return atoms(node[1]) + atoms(node[2])
    if node[0] == "not":
        return atoms(node[1])
    if node[0] == "element":
        return [node]
    return [o for o in node[2:] if o[0] in ("state", "body")]


def check_predicate(node, embodiment, capabilities=(), bodies: list | None = None,
                    fields: frozenset | None = None, roles: frozenset | None = None) -> None:
    """PredicateError when the predicate names a state channel the body does not have, a MuJoCo body
    the scene does not have (``bodies``: the scene's body names, None for no MuJoCo scene), looks
    at a UI tree the device does not give, or names an element field or role its tree never has
    (``fields``, ``roles``: the device's ``element_fields`` and ``roles``; None: not known, only
    private names such as ``__class__`` are refused): found before the episode starts, so a typo is
    never a verified failure of every episode."""
    names = [c.name for c in embodiment.state]
    for a in atoms(node):
        if a[0] == "element":
            check_element(a[1], embodiment.name, fields, roles)
        if a[0] == "body":
            body = a[1].rsplit(".", 1)[0]
            if bodies is None:
                raise PredicateError(f"predicate: body.{a[1]}: {embodiment.name!r} is not a MuJoCo scene")
            if body not in bodies:
                raise PredicateError(f"predicate: the scene has no body {body!r}; it has: {', '.join(bodies[:12])}")
        if a[0] == "state" and a[1] not in names:
            shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
            raise PredicateError(f"predicate: {embodiment.name!r} has no state channel {a[1]!r}; "
                                 f"it has: {shown or 'none'}")
        if a[0] == "element" and "ui_tree" not in capabilities:
            raise PredicateError(f"predicate: element(...) reads a UI tree, which {embodiment.name!r} does not give")


def _listed(names) -> str:
    names = sorted(names)
    return ", ".join(names[:24]) + (", ..." if len(names) > 24 else "")


def check_element(fields_used, device_name: str, fields: frozenset | None, roles: frozenset | None) -> None:
    """PredicateError for an ``element(...)`` field the device's elements never carry, a role they
    never have, or a true/false field compared with something else; the message lists what exists."""
    from embodia.devices.gui import BOOLEAN_FIELDS
    for name, op, value in fields_used:
        if name.startswith("_") or (fields is not None and name not in fields):
            known = _listed(fields) if fields is not None else "role, text, desc, id, checked, clickable, ..."
            raise PredicateError(f"predicate: {device_name!r} elements have no field {name!r}; they have: {known}")
        if name in BOOLEAN_FIELDS and op != "~" and not isinstance(value, bool):
            raise PredicateError(f"predicate: element field {name!r} is true or false, not {value!r}")
        if name == "role" and roles is not None and isinstance(value, str):
            hit = value in roles if op != "~" else any(value.lower() in r.lower() for r in roles)
            if not hit:
                raise PredicateError(f"predicate: {device_name!r} has no element role {value!r}; "
                                     f"its roles: {_listed(roles)}")


# -- predicate semantics -----------------------------------------------------------------------------

class Unavailable(Exception):
    """The final observation lacks what the predicate reads (no UI tree): the label is unknown."""


def evaluate(node, *, ui_tree: list | None = None, state: dict | None = None, bodies: dict | None = None) -> bool:
    """The predicate's truth on a UI tree (a list of element dicts), named state values and body
    positions (``{"puck.y": 0.3, ...}``)."""
    kind = node[0]
    kw = {"ui_tree": ui_tree, "state": state, "bodies": bodies}
    if kind == "or":
        return evaluate(node[1], **kw) or evaluate(node[2], **kw)
    if kind == "and":
        return evaluate(node[1], **kw) and evaluate(node[2], **kw)
    if kind == "not":
        return not evaluate(node[1], **kw)
    if kind == "element":
        if ui_tree is None:
            raise Unavailable("the final observation has no UI tree")
        return any(all(_field_ok(el, f, op, v) for f, op, v in node[1]) for el in ui_tree)
    _, op, left, right = node
    a, b = _operand(left, state, bodies), _operand(right, state, bodies)
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[op]


def _operand(o, state: dict | None, bodies: dict | None = None) -> float:
    if o[0] == "num":
        return o[1]
    if o[0] == "body":
        if not bodies or o[1] not in bodies:
            raise Unavailable(f"no body position {o[1]!r} at the episode's end")
        return float(bodies[o[1]])
    if not state or o[1] not in state:
        raise Unavailable(f"no state channel {o[1]!r} in the final observation")
    return float(state[o[1]])


def _field_ok(el: dict, name: str, op: str, want) -> bool:
    has = name in el
    got = el.get(name)
    if op == "~":
        return has and isinstance(got, str) and str(want).lower() in got.lower()
    same = has and _same(got, want)
    return same if op == "=" else not same


def _same(got, want) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return isinstance(got, bool) and isinstance(want, bool) and got == want
    if isinstance(want, float):
        return isinstance(got, (int, float)) and float(got) == want
    return isinstance(got, str) and got == want


def scene_bodies(device) -> list | None:
    """The body names of the device's simulated scene (None: it has none, `Device.bodies`)."""
    bodies = as_device(device).bodies()
    return None if bodies is None else list(bodies)


def body_positions(device) -> dict | None:
    """``{"NAME.x": ..., "NAME.y": ..., "NAME.z": ...}``: each body's world position now (None: no scene)."""
    bodies = as_device(device).bodies()
    if bodies is None:
        return None
    return {f"{n}.{ax}": float(p[k]) for n, p in bodies.items() for k, ax in enumerate("xyz")}


def named_state(obs, embodiment) -> dict:
    """The observation's state vector by channel name."""
    values = np.asarray(obs.state, dtype=np.float64).reshape(-1)
    return {c.name: float(v) for c, v in zip(embodiment.state, values)}
