"""Spelling: which on-screen key enters the next character of the instruction's expression.

A keypad task ("Compute 661 + 74 with the calculator.") needs clicks on one-character buttons in
order: 6, 6, 1, +, 7, 4, then =. Nothing else the GUI head reads says which character comes next:
the instruction's number is one word unit, and a calculator's display shows only the operand being
entered. A head with ``spell`` (in ``gui_head.json``; off by default, and a head without it encodes
exactly as before) reads two more columns per element, after its feature set's flags:

* ``next``: the element is clickable, its name is one character (or a symbol written another way
  in the instruction: ``×`` for ``*``, ``÷`` for ``/``, ``−`` for ``-``) and that character is the
  next one of the expression, given what the episode has entered so far;
* ``entered``: the whole expression has been entered (the same for every element), so the key that
  finishes it ("=", "Enter") can be learnt from the button's own text.

What the episode has entered is read from the head's own history ("click 6", as `describe` writes
it): the names of the one-character elements clicked, in order. History is robust where the screen
is not: after an operator a calculator's display still shows the first operand. Clicks that do not
continue the expression (a wrong key, a press repeated because the app missed it) make the entered
text no prefix of the expression, and then nothing is marked: the head falls back on what else it
reads rather than being steered by a guess.

>>> spell_columns("Compute 12 × 3 with it.", ["click 1"], [
...     {"text": "2", "clickable": True}, {"text": "*", "clickable": True}, {"text": "=", "clickable": True}])
array([[1., 0.],
       [0., 0.],
       [0., 0.]], dtype=float32)
"""
from __future__ import annotations

import numpy as np

from embodia.policies.gui.head_encoding import element_name, words

SPELL_COLUMNS = 2             # next character, expression entered
# a symbol as instructions write it -> as keypads label it (and back): one character each
SAME_SYMBOL = (("×", "*"), ("÷", "/"), ("−", "-"), ("–", "-"))
OPERATORS = frozenset("+-*/×÷−–=%^.()")


def _canon(ch: str) -> str:
    """One spelling of a symbol: ``×`` and ``*`` are the same key."""
    return dict(SAME_SYMBOL).get(ch, ch)


def expression(instruction: str) -> str:
    """The characters to enter: the longest run of instruction words that are numbers and operator
    symbols with at least one operator between two numbers, spaces dropped ("" for none).

    >>> expression("Compute 661 + 74 with the calculator."), expression("Put 42 in cell C5"), expression("3 ÷ 1.5")
    ('661+74', '', '3÷1.5')
    """
    best, run = "", []
    for w, _, _ in words(instruction) + [("", 0, 0)]:          # a sentinel ends the last run
        if w.isdigit() or (w in OPERATORS and run):
            run.append(w)
            continue
        while run and not run[-1].isdigit():                    # "12 + 3 ." ends at its last number
            run.pop()
        text = "".join(run)
        if any(c.isdigit() for c in text) and any(u in OPERATORS for u in run[1:-1]) and len(text) > len(best):
            best = text
        run = [w] if w.isdigit() else []
    return best


def entered(history: list[str]) -> str:
    """The one-character element names clicked, in order, from the history's "click <name>" items."""
    out = []
    for item in history:
        if item.startswith("click "):
            name = item[len("click "):].strip()
            if len(name) == 1:
                out.append(name)
    return "".join(out)


def spell_columns(instruction: str, history: list[str], elems: list[dict]) -> np.ndarray:
    """[E, SPELL_COLUMNS] per element: is it the key of the next character, and has the whole
    expression been entered (see the module doc)."""
    out = np.zeros((len(elems), SPELL_COLUMNS), np.float32)
    target = [_canon(c) for c in expression(instruction)]
    done = [_canon(c) for c in entered(history)]
    if not target or done != target[:len(done)]:
        return out
    if len(done) == len(target):
        out[:, 1] = 1.0
        return out
    want = target[len(done)]
    for i, e in enumerate(elems):
        name = element_name(e).strip()
        if e.get("clickable") and len(name) == 1 and _canon(name) == want:
            out[i, 0] = 1.0
    return out
