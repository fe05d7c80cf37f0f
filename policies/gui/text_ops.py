"""What the GUI head may do to the words it copies before typing them (`TEXT_OPS`): type them as
written, in upper or lower case, or, for a head with ``compute`` (issue 54, computed answers),

* ``calculate``: the value the words' arithmetic defines: ``3 + 4 =`` types ``7``, ``12 x 3``
  types ``36``; an equation in one unknown letter is solved for it (``x - 4 = 9`` types ``13``);
* ``compact``: the words as a masked field takes them: each lone digit padded to two, every
  separator and space left out (``2:30 PM`` types ``0230PM``, ``3/7/2016`` types ``03072016``);
* ``joined``: the words with no space between them, and the only operation whose words may run
  over several elements, whole texts in the page's order (a word drawn one letter per element,
  ``k`` ``x`` ``7`` types ``kx7``).

An operation either gives the text or None (the words are no arithmetic; nothing to compact): the
head then types what its next-best operation gives (`apply_text_op`), never a half-made answer.
Arithmetic is parsed here (numbers, + - x * / ÷, parentheses, one unknown), never evaluated as code.

>>> apply_text_op("3 + 4 =", "calculate"), apply_text_op("2:30 PM", "compact")
('7', '0230PM')
>>> apply_text_op("Hello", "calculate") is None
True
"""
from __future__ import annotations

import re
from fractions import Fraction

CASES = ("as written", "upper", "lower")       # what a head with ``case`` may do to the words it copies
COMPUTED = ("calculate", "compact", "joined")   # and a head with ``compute`` besides
TEXT_OPS = CASES + COMPUTED

_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?)|([A-Za-z])|([-+*/×÷=()−]))")
_TIMES, _OVER = ("*", "×"), ("/", "÷")


def apply_text_op(text: str, op: str | None) -> str | None:
    """``text`` as the operation ``op`` (one of `TEXT_OPS`; None: as written) types it; None where
    the operation does not apply to it."""
    if op in (None, "as written"):
        return text
    if op == "upper":
        return text.upper()
    if op == "lower":
        return text.lower()
    if op == "calculate":
        return calculate(text)
    if op == "compact":
        return compact(text)
    if op == "joined":
        return joined(text)
    raise ValueError(f"unknown text operation {op!r}; known: {', '.join(TEXT_OPS)}")


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(milliseconds?|ms|seconds?|secs?|s|minutes?|mins?)\b", re.I)
LONGEST_WAIT_MS = 60_000


def duration_ms(text: str) -> int | None:
    """The length of time a text names, in milliseconds (at most a minute); None where it names none.

    >>> duration_ms("2 seconds"), duration_ms("wait 1 second"), duration_ms("500 ms"), duration_ms("soon") is None
    (2000, 1000, 500, True)
    """
    m = _DURATION.search(text or "")
    if m is None:
        return None
    unit = m.group(2).lower()
    scale = 1 if unit.startswith("m") and unit not in ("min", "mins", "minute", "minutes") else \
        60_000 if unit.startswith("min") else 1000
    return min(LONGEST_WAIT_MS, round(float(m.group(1)) * scale))


def first_defined(text: str, ops) -> tuple[str, str]:
    """(operation, typed text) of the first of ``ops`` (best first) that applies to ``text``; the
    words as written when none does."""
    for op in ops:
        out = apply_text_op(text, op)
        if out:
            return op, out
    return "as written", text


def joined(text: str) -> str | None:
    """The text with its spaces left out; None where it has none to leave out.

    >>> joined("k x 7"), joined("kx7") is None
    ('kx7', True)
    """
    out = re.sub(r"\s+", "", text or "")
    return out if out and out != text else None


def compact(text: str) -> str | None:
    """Digits as a masked date or time field takes them: lone digits padded to two, separators
    and spaces dropped; None where nothing would change, no digit is there, or the text begins or
    ends with a mark (``"17"`` is a quoted copy, not a field's mask).

    >>> compact("9:05 AM"), compact("11/05/2016"), compact("hello") is None
    ('0905AM', '11052016', True)
    """
    if not re.search(r"\d", text or "") or not re.fullmatch(r"[A-Za-z0-9].*[A-Za-z0-9]|[0-9]", text, re.S):
        return None                     # no digits, or words in quotes or brackets: nothing of a field's mask
    out = re.sub(r"[^A-Za-z0-9]", "", re.sub(r"(?<!\d)(\d)(?!\d)", r"0\1", text))
    return out if out and out != text else None


def calculate(text: str) -> str | None:
    """The number a text's arithmetic gives: an expression (a trailing ``=`` allowed) evaluated,
    an equation in one unknown letter solved; None where the text is not such arithmetic.

    >>> calculate("-3 + 4 ="), calculate("6 x 7"), calculate("x + 3 = 12"), calculate("15 - x = 9")
    ('1', '42', '9', '6')
    >>> calculate("7 / 2"), calculate("2 * x = 7"), calculate("1 + ") is None, calculate("x = x") is None
    ('3.5', '3.5', True, True)
    """
    tokens = _tokens(text)
    if tokens is None or not any(kind == "num" for kind, _ in tokens):
        return None
    sides = _split(tokens, "=")
    if len(sides) > 2 or not sides[0] or len(tokens) < 2:
        return None
    try:
        left = _Parser(sides[0]).whole()
        right = _Parser(sides[1]).whole() if len(sides) == 2 and sides[1] else None
    except (ValueError, ZeroDivisionError):
        return None
    if right is None:                   # an expression: no unknown allowed
        return _number(left[1]) if left[0] == 0 else None
    a, b = left[0] - right[0], right[1] - left[1]          # a * x = b
    return _number(b / a) if a != 0 else None


def _tokens(text: str) -> list[tuple[str, str]] | None:
    """(kind, value) tokens: numbers, letters, operators; an ``x`` between two operands is the
    times sign, any other letter the unknown (at most one distinct letter)."""
    out, at, text = [], 0, (text or "").strip()
    while at < len(text):
        m = _TOKEN.match(text, at)
        if m is None or m.end() == at:
            return None
        num, letter, op = m.groups()
        out.append(("num", num) if num else ("op", "-" if op == "−" else op) if op else ("letter", letter))
        at = m.end()
    for i, (kind, v) in enumerate(out):
        before = out[i - 1] if i else ("op", "")
        after = out[i + 1] if i + 1 < len(out) else ("op", "")
        if kind == "letter" and v in "xX" and (before[0] != "op" or before[1] == ")") and \
                (after[0] != "op" or after[1] == "("):
            out[i] = ("op", "*")
    letters = {v for k, v in out if k == "letter"}
    return out if len(letters) <= 1 and len(out) <= 40 else None


def _split(tokens, sep):
    parts, cur = [], []
    for kind, v in tokens:
        if kind == "op" and v == sep:
            parts.append(cur)
            cur = []
        else:
            cur.append((kind, v))
    return parts + [cur]


def _number(v: Fraction) -> str:
    if v.denominator == 1:
        return str(v.numerator)
    return f"{float(v):.4f}".rstrip("0").rstrip(".")


class _Parser:
    """Linear arithmetic over (coefficient of the unknown, constant) pairs: sums of products of
    numbers, the unknown, and parenthesised parts; a product of two unknowns is refused."""

    def __init__(self, tokens):
        self.t, self.i = tokens, 0

    def whole(self) -> tuple[Fraction, Fraction]:
        v = self.sum()
        if self.i != len(self.t):
            raise ValueError("trailing tokens")
        return v

    def _peek(self):
        return self.t[self.i] if self.i < len(self.t) else (None, None)

    def _times_sign(self) -> bool:
        kind, v = self._peek()
        return kind == "op" and v in _TIMES + _OVER

    def sum(self):
        a, b = self.product()
        while self._peek() in (("op", "+"), ("op", "-")):
            sign = 1 if self.t[self.i][1] == "+" else -1
            self.i += 1
            c, d = self.product()
            a, b = a + sign * c, b + sign * d
        return a, b

    def product(self):
        a, b = self.factor()
        while self._times_sign():
            over = self.t[self.i][1] in _OVER
            self.i += 1
            c, d = self.factor()
            if over:
                if c != 0:
                    raise ValueError("division by the unknown")
                a, b = a / d, b / d
            elif a != 0 and c != 0:
                raise ValueError("a product of unknowns")
            else:
                a, b = a * d + c * b, b * d
        return a, b

    def factor(self):
        kind, v = self._peek()
        self.i += 1
        if kind == "num":
            return Fraction(0), Fraction(v)
        if kind == "letter":
            return Fraction(1), Fraction(0)
        if (kind, v) == ("op", "-"):
            a, b = self.factor()
            return -a, -b
        if (kind, v) == ("op", "("):
            inner = self.sum()
            if self._peek() != ("op", ")"):
                raise ValueError("unclosed parenthesis")
            self.i += 1
            return inner
        raise ValueError(f"unexpected {v!r}")
