"""Success without a simulator: who says an episode succeeded, with what confidence, and whether
that label may teach the memory.

A *success source* (``--success SOURCE`` on ``embodia run``, ``eval`` and ``record``) labels an
episode at its end. Every label carries its source and confidence and is recorded in the
episode's info (``info["success_label"]``: the result, the recording's end line, the GUI step log):

- ``oracle``: the simulated task's own check (the default where the device has the ``success``
  capability: ``sim:``, ``gui-sim:``);
- ``ask``: a person answers ``yes`` / ``no`` / ``skip`` on the terminal, the final screen or frame
  saved to a PNG whose path is printed. With no terminal (stdin is not a tty, as in CI) every
  answer is "unknown", never "yes";
- ``check:<predicate>``: a declarative check on the final observation (grammar below);
- ``judge:openai:<model>`` (with ``--base-url``), or ``judge:hf:<path>`` (a local transformers model,
  `embodia.agent.loop.hf_judge`): a vision-language model shown the instruction, the
  first and final screens or frames and up to 3 evenly spaced ones in between, replying ``{"success": true|false, "confidence": 0..1,
  "reason": "..."}``, parsed strictly (a reason of at most ``MAX_REASON`` characters); anything else is
  "unknown", and so is a reply that is not complete within the judge's deadline (60 s for the whole
  exchange, not per read) or is larger than 1 MB;
- ``learned`` (or ``learned:<checkpoint>``): the learned success detector shipped with
  ``embodia-tiny`` (`embodia.policies.success_head`): a small head on the checkpoint's frozen
  backbone reads the first and final observation and the instruction and gives a calibrated
  probability p of success. Works offline, on the bodies the checkpoint knows (planar pusher,
  Sawyer, any screen). Verified success at p >= ``LEARNED_THRESHOLD``, verified failure at
  p <= 1 - ``LEARNED_THRESHOLD``, unverified in between.

What the memory does with a label: a *verified* label (oracle, check, a person's yes or no, or a
judge at confidence >= ``JUDGE_THRESHOLD``, the learned detector as above) reaches the policy's ``end_episode`` (a success memory
stores a success, credits a failure) and counts in the success rate. Any other label (unknown,
skip, an unsure judge) keeps the episode as unverified: it never steers, its ``result.success`` is
None, and ``summarize`` counts it under ``unverified_episodes``. The model's own "I am done" (a GUI
``terminate`` / ``answer``) is recorded as ``claimed_done`` and never counts as verified.

Predicate grammar (a tokenizer and a recursive-descent parser; user text is never given to
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
embodia.agent.loop.success.PredicateError: predicate: expected a number, state.NAME or body.NAME.x at column 11, found the end
"""
from __future__ import annotations

import base64
import io
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

JUDGE_THRESHOLD = 0.9     # a judge's label stores only at this confidence or above (no measurement
                          # chose it yet: conservative, a false success poisons the memory)
LEARNED_THRESHOLD = 0.9   # the learned detector's label verifies at p >= this (or p <= 1 - this); chosen
                          # from held-out measurements: benchmarks/success_labels.py, BENCHMARKS.md
MAX_PREDICATE = 2000      # characters
MAX_DEPTH = 32            # nesting of not/( ... ): deeper is an error, never a RecursionError
MAX_REASON = 2000         # characters of a judge's reason: a longer one is out of the reply schema


class PredicateError(ValueError):
    """A ``check:`` predicate that does not parse, or names what the device does not have; one line."""


class SuccessSourceError(ValueError):
    """A ``--success`` value the command cannot use; one line."""


# -- labels ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Label:
    """One episode's success label: ``success`` None means unknown; ``verified`` says whether it may
    teach the memory and count in the success rate."""

    success: bool | None
    source: str
    confidence: float | None = None
    verified: bool = False
    reason: str = ""
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"success": self.success, "source": self.source, "confidence": self.confidence,
                "verified": self.verified, "reason": self.reason, **self.extra}


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
    """The body names of a MuJoCo device's scene (None for any other device)."""
    try:
        import mujoco

        from embodia.devices.mujoco import MujocoDevice
    except ImportError:
        return None
    if not isinstance(device, MujocoDevice):
        return None
    return [mujoco.mj_id2name(device.model, mujoco.mjtObj.mjOBJ_BODY, i) or f"body{i}"
            for i in range(device.model.nbody)]


def body_positions(device) -> dict | None:
    """``{"NAME.x": ..., "NAME.y": ..., "NAME.z": ...}``: each body's world position now (None: no MuJoCo scene)."""
    names = scene_bodies(device)
    if names is None:
        return None
    xpos = np.asarray(device.data.xpos, dtype=np.float64)
    return {f"{n}.{ax}": float(xpos[i, k]) for i, n in enumerate(names) for k, ax in enumerate("xyz")}


def named_state(obs, embodiment) -> dict:
    """The observation's state vector by channel name."""
    values = np.asarray(obs.state, dtype=np.float64).reshape(-1)
    return {c.name: float(v) for c, v in zip(embodiment.state, values)}


# -- sources -----------------------------------------------------------------------------------------

def claimed_done(device) -> dict:
    """The model's own "I am done" (a GUI terminate/answer), recorded beside the label, never verified."""
    return {"claimed_done": bool(device.done())}


def oracle(device, first, final, instruction, seed) -> Label:
    """The simulated task's own check."""
    ok = bool(device.success())
    return Label(ok, "oracle", 1.0, True, extra=claimed_done(device))


class CheckLabeler:
    """``check:<predicate>``: the predicate on the final observation; verified when it can be read."""

    def __init__(self, src: str, device):
        self.src = src
        self.node = parse_predicate(src)
        self.uses_bodies = any(a[0] == "body" for a in atoms(self.node))
        check_predicate(self.node, device.embodiment, device.capabilities,
                        scene_bodies(device) if self.uses_bodies else None,
                        device.element_fields, device.roles)

    def __call__(self, device, first, final, instruction, seed) -> Label:
        try:        # called at the episode's end: the scene's bodies are where the final observation saw them
            ok = evaluate(self.node, ui_tree=final.ui_tree, state=named_state(final, device.embodiment),
                          bodies=body_positions(device) if self.uses_bodies else None)
        except Unavailable as e:
            return Label(None, "check", None, False, str(e), {"predicate": self.src, **claimed_done(device)})
        return Label(ok, "check", 1.0, True, extra={"predicate": self.src, **claimed_done(device)})


def frame(obs) -> np.ndarray | None:
    """The picture of an observation a person or a judge looks at: the screen, else the first camera."""
    if obs is None or not obs.images:
        return None
    img = obs.images.get("screen")
    return np.asarray(img if img is not None else next(iter(obs.images.values())))


def png_bytes(img: np.ndarray) -> bytes:
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(np.asarray(img, dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


NO_TERMINAL = ("--success ask: no terminal (stdin is not a tty): every episode is labelled unknown, "
               "so nothing is stored in the memory and no success is counted")


class AskLabeler:
    """``ask``: a person answers yes / no / skip at the episode's end, the final frame saved for them
    under ``folder``. Without a terminal every label is unknown (``interactive`` False); the caller
    says so once (``NO_TERMINAL``)."""

    def __init__(self, *, interactive: bool | None = None, prompt: Callable[[str], str] = input,
                 say: Callable[[str], None] = print, folder: str | Path | None = None):
        self.interactive = sys.stdin.isatty() if interactive is None else interactive
        self.prompt, self.say = prompt, say
        self.folder = Path(folder) if folder else Path(tempfile.gettempdir()) / f"embodia-ask-{os.getpid()}"

    def __call__(self, device, first, final, instruction, seed) -> Label:
        if not self.interactive:
            return Label(None, "ask", None, False, "no terminal", claimed_done(device))
        img = frame(final)
        shown = ""
        if img is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.folder / f"final-seed{seed}-{time.strftime('%H%M%S')}.png"
            path.write_bytes(png_bytes(img))
            shown = str(path)
            self.say(f"final frame of the episode (seed {seed}): {path}")
        elif final is not None and len(final.state):
            self.say(f"final state: {named_state(final, device.embodiment)}")
        while True:
            try:
                answer = self.prompt(f"Did it succeed at {instruction!r}? [yes/no/skip] ").strip().lower()
            except EOFError:
                return Label(None, "ask", None, False, "no answer (end of input)", claimed_done(device))
            if answer in ("y", "yes", "n", "no"):
                ok = answer.startswith("y")
                return Label(ok, "ask", 1.0, True, "a person answered", {"frame": shown, **claimed_done(device)})
            if answer in ("s", "skip", ""):
                return Label(None, "ask", None, False, "skipped", {"frame": shown, **claimed_done(device)})


JUDGE_PROMPT = (
    "You judge whether an agent completed a task. The task: {instruction!r}. The {n} images are screens "
    "or camera frames of the episode in time order: the first at its start, the last at its end. Reply "
    'with only a JSON object: {{"success": true or false, "confidence": a number from 0 to 1, '
    '"reason": "one sentence"}}.')


def parse_judgement(text) -> tuple[bool, float, str] | None:
    """A judge's reply as (success, confidence, reason), or None for anything but exactly that JSON
    object (one optional ```json fence around it is allowed).

    >>> parse_judgement('{"success": true, "confidence": 0.95, "reason": "the switch is on"}')
    (True, 0.95, 'the switch is on')
    >>> parse_judgement('Yes, it worked!') is None, parse_judgement('{"success": "yes", "confidence": 1, "reason": ""}') is None
    (True, True)
    """
    if not isinstance(text, str):
        return None
    s = text.strip()
    if s.startswith("```"):
        s = s[3:]
        s = s.removeprefix("json")
        if not s.rstrip().endswith("```"):
            return None
        s = s.rstrip()[:-3]
    try:
        obj = json.loads(s)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or set(obj) != {"success", "confidence", "reason"}:
        return None
    ok, conf, reason = obj["success"], obj["confidence"], obj["reason"]
    if not isinstance(ok, bool) or isinstance(conf, bool) or not isinstance(conf, (int, float)) \
            or not isinstance(reason, str) or not (0.0 <= conf <= 1.0) or len(reason) > MAX_REASON:
        return None
    return ok, float(conf), reason


class JudgeLabeler:
    """``judge:openai:<model>``: a VLM behind an OpenAI-compatible endpoint, shown the instruction, the
    first and final frames and up to ``middle`` evenly spaced frames in between (kept by ``on_step``,
    which the loop calls after every step; without it the judge sees the first and final frames);
    verified at confidence >= ``threshold``."""

    def __init__(self, model: str, base_url: str, *, api_key_env: str | None = "OPENAI_API_KEY",
                 threshold: float = JUDGE_THRESHOLD, timeout_s: float = 60.0, middle: int = 3,
                 reply: Callable | None = None):
        """``reply(text, images) -> str | None``: a model in this process instead of the endpoint
        (``judge:hf:<path>``, `embodia.agent.loop.hf_judge`)."""
        self.model, self.threshold, self.timeout_s, self.middle = model, threshold, timeout_s, middle
        self._kept: list = []       # frames after steps stride-1, 2*stride-1, ... (at most 2 * middle + 1)
        self._stride = 1
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.key = os.environ.get(api_key_env) if api_key_env else None
        self.reply = reply
        self.error: str | None = None       # why the last ask got no reply
        self.source = f"judge:{'hf' if reply is not None else 'openai'}:{model}"

    def on_step(self, t, obs, action, next_obs) -> bool:
        """Keep a bounded, evenly thinned set of the episode's frames (halved, stride doubled, when it
        outgrows 2 * middle + 1); never stops the episode."""
        if t == 0:
            self._kept, self._stride = [], 1
        if self.middle and (t + 1) % self._stride == 0:
            img = frame(next_obs)
            if img is not None:
                self._kept.append(np.array(img))        # a copy: a device may reuse its buffer
            if len(self._kept) > 2 * self.middle + 1:
                self._kept, self._stride = self._kept[1::2], self._stride * 2
        return False

    def between(self) -> list:
        """Up to ``middle`` kept frames, evenly spaced, the last one (the final frame) left out."""
        kept = self._kept[:-1]
        if len(kept) <= self.middle:
            return kept
        return [kept[round(i * (len(kept) - 1) / (self.middle - 1))] for i in range(self.middle)] \
            if self.middle > 1 else [kept[len(kept) // 2]]

    def request(self, instruction: str, first, final, between=()) -> dict:
        images = [img for img in (frame(first), *between, frame(final)) if img is not None]
        parts = [{"type": "text", "text": JUDGE_PROMPT.format(instruction=instruction, n=len(images))}]
        for img in images:
            url = "data:image/png;base64," + base64.b64encode(png_bytes(img)).decode()
            parts.append({"type": "image_url", "image_url": {"url": url}})
        return {"model": self.model, "temperature": 0, "messages": [{"role": "user", "content": parts}]}

    def ask(self, body: dict) -> str | None:
        """The reply's text, or None (why in ``self.error``) when the endpoint failed, ran past the
        deadline (``timeout_s`` for the whole exchange, `embodia.agent.loop.bounded_http`), sent
        more than ``MAX_REPLY_BYTES`` or anything but a chat completion."""
        from embodia.agent.loop.bounded_http import ReplyError, post
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        self.error = None
        try:
            raw = post(self.url, json.dumps(body).encode(), headers, deadline_s=self.timeout_s)
        except ReplyError as e:
            self.error = str(e)
            return None
        try:
            content = json.loads(raw)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError, RecursionError) as e:
            self.error = f"not a chat completion ({type(e).__name__})"
            return None
        if not isinstance(content, str):
            self.error = "not a chat completion (no text content)"
            return None
        return content

    def __call__(self, device, first, final, instruction, seed) -> Label:
        between, self._kept = self.between(), []
        if self.reply is not None:
            images = [img for img in (frame(first), *between, frame(final)) if img is not None]
            text = self.reply(JUDGE_PROMPT.format(instruction=instruction, n=len(images)), images)
        else:
            text = self.ask(self.request(instruction, first, final, between))
        got = parse_judgement(text)
        if got is None:
            why = (f"no reply from the judge ({self.error})" if text is None and self.error else
                   "no reply from the judge" if text is None else f"unparsable reply: {text[:200]!r}")
            return Label(None, self.source, None, False, why, claimed_done(device))
        ok, conf, reason = got
        return Label(ok, self.source, conf, conf >= self.threshold, reason,
                     {"threshold": self.threshold, **claimed_done(device)})


def probability_label(p: float, source: str, threshold: float = LEARNED_THRESHOLD, extra: dict | None = None) -> Label:
    """A calibrated P(success) as a label: a verified success at ``p >= threshold``, a verified failure
    at ``p <= 1 - threshold``, else unverified (it never steers); confidence is that of its verdict.

    >>> probability_label(0.95, "learned").verified, probability_label(0.7, "learned").verified
    (True, False)
    >>> lab = probability_label(0.02, "learned"); lab.success, lab.verified, round(lab.confidence, 2)
    (False, True, 0.98)
    """
    ok = p >= 0.5
    conf = p if ok else 1.0 - p
    sure = p >= threshold or p <= 1.0 - threshold
    return Label(ok, source, float(conf), bool(sure), f"P(success) = {p:.3f}",
                 {"probability": float(p), "threshold": threshold, **(extra or {})})


class LearnedLabeler:
    """``learned[:<checkpoint>]``: the checkpoint's learned success detector (default: the bundled
    ``embodia-tiny``) on the first and final observation; see `probability_label` for the threshold rule."""

    def __init__(self, device, checkpoint: str | Path | None = None, *, threshold: float = LEARNED_THRESHOLD):
        from embodia.policies import BUNDLED_CHECKPOINTS
        from embodia.policies.success_head import SuccessDetector, SuccessHeadError
        path = Path(checkpoint) if checkpoint else BUNDLED_CHECKPOINTS / "embodia-tiny"
        self.source = "learned" if checkpoint is None else f"learned:{checkpoint}"
        self.threshold = threshold
        try:
            self.detector = SuccessDetector.from_pretrained(path)
            self.detector.check(device.embodiment)
        except (SuccessHeadError, OSError) as e:
            raise SuccessSourceError(f"--success {self.source}: {e}") from None

    def __call__(self, device, first, final, instruction, seed) -> Label:
        p = self.detector.probability(device.embodiment, first, final, instruction)
        return probability_label(p, self.source, self.threshold, claimed_done(device))

    def stopper(self, device, instruction: str | None = None, every: int | None = None) -> Callable:
        """An ``on_step`` for the loop that ends the episode once the detector is sure it succeeded
        (p >= threshold): where no simulator ends episodes, the detector says when the task is done.
        It looks after every ``every``-th step (default: every GUI step, every chunk of a robot's,
        its ``exec_horizon``). The instruction defaults to the device's current one (read at each
        step, after the reset)."""
        first: list = []
        emb = device.embodiment
        every = every or (1 if emb.is_gui else max(1, int(emb.exec_horizon)))

        def on_step(t, obs, action, next_obs) -> bool:
            if t == 0:
                first[:] = [obs]
            if (t + 1) % every:
                return False
            text = instruction if instruction is not None else device.instruction or ""
            return self.detector.probability(device.embodiment, first[0], next_obs, text) >= self.threshold
        return on_step


def check_source(spec: str | None) -> None:
    """SuccessSourceError for a ``--success`` value that cannot be one (before any device opens).

    >>> check_source("check:state.x > 1"); check_source("judge:openai:qwen")
    >>> check_source("guess")
    Traceback (most recent call last):
    embodia.agent.loop.success.SuccessSourceError: --success 'guess': expected oracle, ask, check:<predicate>, judge:openai:<model>, judge:hf:<path> or learned[:<checkpoint>]
    """
    if spec is None or spec in ("oracle", "ask", "learned"):
        return
    if spec.startswith("learned:"):
        if not spec[len("learned:"):].strip():
            raise SuccessSourceError(f"--success {spec!r}: learned:<checkpoint directory>, or learned for embodia-tiny's")
        return
    if spec.startswith("check:"):
        try:
            parse_predicate(spec[len("check:"):])
        except PredicateError as e:
            raise SuccessSourceError(f"--success: {e}") from None
        return
    if spec.startswith("judge:"):
        model = spec[len("judge:"):]
        kind, _, name = model.partition(":")
        if kind not in ("openai", "hf") or not name.strip():
            raise SuccessSourceError(f"--success {spec!r}: judges are judge:openai:<model> (with --base-url) "
                                     f"or judge:hf:<path> (a local model folder)")
        return
    raise SuccessSourceError(f"--success {spec!r}: expected oracle, ask, check:<predicate>, "
                             f"judge:openai:<model>, judge:hf:<path> or learned[:<checkpoint>]")


def make_labeler(spec: str | None, device, *, base_url: str | None = None,
                 api_key_env: str | None = "OPENAI_API_KEY", say: Callable[[str], None] = print,
                 ask_folder: str | Path | None = None, interactive: bool | None = None):
    """The labeler for ``--success spec`` on ``device`` (None for no spec: the loop's own path, the
    device's check where it has one, recorded as the episode's ``success`` without a label). SuccessSourceError, one line, before any episode runs.
    A labeler is called ``labeler(device, first_obs, final_obs, instruction, seed) -> Label``."""
    check_source(spec)
    if spec is None:        # the loop's own path: the device's check where it has one (no label recorded)
        return None
    if spec == "oracle":
        if "success" not in device.capabilities:
            raise SuccessSourceError(f"--success oracle: {device.embodiment.name!r} has no simulator check; "
                                     f"use ask, check:<predicate> or judge:openai:<model>")
        return oracle
    if spec == "ask":
        lab = AskLabeler(interactive=interactive, say=say, folder=ask_folder)
        if not lab.interactive:
            say(NO_TERMINAL)
        return lab
    if spec == "learned" or spec.startswith("learned:"):
        return LearnedLabeler(device, spec[len("learned:"):] or None)
    if spec.startswith("check:"):
        try:
            return CheckLabeler(spec[len("check:"):], device)
        except PredicateError as e:
            raise SuccessSourceError(f"--success: {e}") from None
    if spec.startswith("judge:hf:"):       # a local VLM (agent/loop/hf_judge.py)
        from embodia.agent.loop.hf_judge import LocalJudgeModel
        path = spec[len("judge:hf:"):]
        try:
            return JudgeLabeler(path, "", api_key_env=None, reply=LocalJudgeModel(path))
        except ValueError as e:         # ModelLoadError: the folder or a file in it, named
            raise SuccessSourceError(f"--success {spec}: {e}") from None
    url = base_url or os.environ.get("OPENAI_BASE_URL")
    if not url:
        raise SuccessSourceError(f"--success {spec}: needs the judge's base URL (--base-url or $OPENAI_BASE_URL)")
    return JudgeLabeler(spec[len("judge:openai:"):], url, api_key_env=api_key_env)
