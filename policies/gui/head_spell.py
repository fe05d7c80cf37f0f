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
is not: after an operator a calculator's display still shows the first operand. The screen corrects
it in one case, a press the application missed (galculator missed 4 of 570 demo clicks): when the
number being entered per the history ("66" of "661") is shown by no text on screen but another start
of it is ("6"), the display says what was taken and the next key is the one after that (`taken`).
Clicks that leave the expression (a wrong key) mark nothing: the head falls back on what else it
reads rather than being steered by a guess.

>>> spell_columns("Compute 12 × 3 with it.", ["click 1"], [
...     {"text": "2", "clickable": True}, {"text": "*", "clickable": True}, {"text": "=", "clickable": True}])
array([[1., 0.],
       [0., 0.],
       [0., 0.]], dtype=float32)
"""
from __future__ import annotations

import re
from itertools import groupby

import numpy as np

from embodia.policies.gui.head_layout import element_name, words

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


def _tokens(chars: str) -> list[str]:
    """Numbers and one-character operators: "14+66" -> ["14", "+", "66"]."""
    return re.findall(r"[0-9.]+|[^0-9.]", chars)


def retried(clicked: str, wanted: str) -> bool:
    """Whether ``clicked`` is ``wanted`` with some keys pressed again right after themselves (how a
    press the application missed is made good: "1422" for "142"; "661" stays "661").

    >>> retried("1422", "142"), retried("661", "661"), retried("61", "661"), retried("1423", "142")
    (True, True, False, False)
    """
    a = [(k, len(list(g))) for k, g in groupby(clicked)]
    b = [(k, len(list(g))) for k, g in groupby(wanted)]
    return [k for k, _ in a] == [k for k, _ in b] and all(m >= n for (_, m), (_, n) in zip(a, b))


def taken(target: str, clicked: str, elems: list[dict]) -> str | None:
    """What of ``target`` has been entered, from the one-character keys ``clicked`` and the screen;
    None where the clicks left the expression (a wrong key). The operators and the numbers before
    the last one are the history's, a key pressed twice in a row counting once where the expression
    has it once (a retried press). The number being entered is the history's unless a text on screen
    (not clickable: a display) shows a different start of it no longer than what was clicked of it:
    then the application missed a press, and the display says what it took.

    >>> taken("14+66", "14+66", [{"text": "66"}]), taken("14+66", "14+66", [{"text": "6"}])
    ('14+66', '14+6')
    >>> taken("142*69", "1422", [{"text": "142"}]), taken("142*69", "1422*6", []), taken("14+66", "14+7", [])
    ('142', '142*6', None)
    """
    have, want = _tokens(clicked), _tokens(target)
    number = have.pop() if have and have[-1][0] in "0123456789." else ""
    if len(have) > len(want) or not all(h == w or (w[0] in "0123456789." and retried(h, w))
                                        for h, w in zip(have, want)):
        return None
    before = "".join(want[:len(have)])
    goal = _leading_number(target[len(before):])            # the number the clicks are entering
    shown = {str(e.get("value") or e.get("text") or "").replace(",", "").strip()
             for e in elems if not e.get("clickable")}
    if goal.startswith(number) and (number in shown or not number):
        return before + number
    starts = [t for t in shown if t and len(t) <= len(number) and goal.startswith(t)]
    if starts:
        return before + max(starts, key=len)
    return before + number if goal.startswith(number) else None


def _leading_number(text: str) -> str:
    """The digits (and decimal point) ``text`` starts with: "66=" -> "66"."""
    return text[:len(text) - len(text.lstrip("0123456789."))]


def spell_columns(instruction: str, history: list[str], elems: list[dict]) -> np.ndarray:
    """[E, SPELL_COLUMNS] per element: is it the key of the next character, and has the whole
    expression been entered (see the module doc)."""
    out = np.zeros((len(elems), SPELL_COLUMNS), np.float32)
    target = "".join(_canon(c) for c in expression(instruction))
    done = taken(target, "".join(_canon(c) for c in entered(history)), elems) if target else None
    if done is None:
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
