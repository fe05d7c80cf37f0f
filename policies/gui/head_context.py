"""Element feature set 3 of the GUI head: what a web page's layout says about the instruction that
set 2 left for the head to learn from a handful of demos, read here from the tree alone.

* **The page's copy of the instruction.** MiniWoB-style pages print the instruction again as a few
  text elements ("Find the", "3rd word", "in the paragraph, ..."); their words are not the content
  the instruction is about, so an ordinal never counts them and a key they name is not a table's.
* **Ordinals in reading order.** "The 3rd word" counts the words of a block of text (consecutive
  text elements that continue one another on the line or the next line), punctuation belonging to
  its word; only that word is marked, not the n-th word of every element.
* **A key's value.** The value to type is the text right of the key on its row: the key is the
  element whose text the instruction names ("Enter the value of Year of Birth"), or, for a field
  with a label ("Language:"), the other element that carries the label's text (a table's key cell).
* **A name found once.** A word of the instruction that only one element's text holds (the sender
  "Gates" in an inbox row "Gates Facilisis ...") flags that element and the elements it holds (the
  row's unnamed trash icon): set 2 matched an element only when all its words were instructed.
* **Coordinates.** Numeric tick labels in a row and in a column are axes; an unnamed clickable point
  whose fitted (x, y) is a pair the instruction names ("(-2,0)") is flagged.

    >>> instruction_copy([{"text": "Find the", "bounds": [0, 0, 9, 9]}, {"text": "2nd word", "bounds": [9, 0, 20, 9]},
    ...                   {"text": "Find", "bounds": [0, 20, 9, 29]}], "Find the 2nd word")
    [True, True, False]
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from embodia.policies.gui.head_layout import is_text, beside, container, right_of, words

_SPACE = re.compile(r"\s+")
_NUMBER = re.compile(r"^[-+]?\d+(?:\.\d+)?$")
_PAIR = re.compile(r"\(\s*([-+]?\d+(?:\.\d+)?)\s*,\s*([-+]?\d+(?:\.\d+)?)\s*\)")
AXIS_SLACK = 4            # px: tick labels of one axis share a row (or column) to within this


@dataclass
class PageContext:
    """What set 3 reads of a page, per element position of the encoded tree."""

    copy: list[bool]                 # part of the page's copy of the instruction
    marks: set[tuple[int, int]]      # (element, character start) of each word an ordinal asks for
    lookup: list[int]                # per field: the element holding the value to type into it, -1
    at_point: list[bool]             # an unnamed point at a coordinate the instruction names
    named: list[bool]                # holds a word of the instruction no other element holds
    in_named: list[bool]             # the element holding it is `named` (a row's icon)

    def flags(self, i: int) -> tuple[bool, ...]:
        """The element flags set 3 appends for element ``i`` (`N_ELEM_FEATS_V3`)."""
        return self.copy[i], self.at_point[i], self.named[i], self.in_named[i]


def _squash(text: str) -> str:
    return _SPACE.sub("", text or "").lower()


def instruction_copy(elems: list[dict], instruction: str) -> list[bool]:
    """Per element, whether it belongs to a run of consecutive text elements that together spell at
    least half of the instruction (whitespace aside): the page printing the instruction again."""
    target = _squash(instruction)
    out = [False] * len(elems)
    i = 0
    while i < len(elems) and target:
        j, joined = i, ""
        while j < len(elems) and _squash(elems[j].get("text")) and joined + _squash(elems[j]["text"]) in target:
            joined += _squash(elems[j]["text"])
            j += 1
        if j > i and 2 * len(joined) >= len(target):
            out[i:j] = [True] * (j - i)
        i = max(j, i + 1)
    return out


def _continues(block: list[dict], nxt: dict) -> bool:
    """Whether text ``nxt`` goes on from the ``block`` read so far: to the right of its last text
    on the same line, or on the next line (within a line's height below) under the block's columns."""
    _, py0, px1, py1 = block[-1]["bounds"]
    nx0, ny0, nx1, ny1 = nxt["bounds"]
    left, right = min(e["bounds"][0] for e in block), max(e["bounds"][2] for e in block)
    line = max(1, py1 - py0)
    same_line = abs((ny0 + ny1) - (py0 + py1)) / 2 <= line / 2 and nx0 >= px1 - 2
    next_line = 0 <= ny0 - py1 <= line and nx0 < right and nx1 > left
    return same_line or next_line


def text_blocks(elems: list[dict], copy: list[bool]) -> list[list[int]]:
    """Runs of consecutive text elements (not the instruction's copy) that read as one text."""
    blocks: list[list[int]] = []
    for i, e in enumerate(elems):
        if not is_text(e) or copy[i]:
            if blocks and blocks[-1]:
                blocks.append([])
            continue
        if blocks and blocks[-1] and _continues([elems[k] for k in blocks[-1]], e):
            blocks[-1].append(i)
        else:
            blocks.append([i])
    return [b for b in blocks if b]


def ordinal_marks(elems: list[dict], copy: list[bool], asked: set[int]) -> set[tuple[int, int]]:
    """(element, character start) of the word units at the asked positions of each text block,
    counting whitespace-separated words across the block (a person's count: "a." is one word);
    punctuation units are never marked."""
    marks: set[tuple[int, int]] = set()
    if not asked:
        return marks
    for block in text_blocks(elems, copy):
        before = 0
        for i in block:
            text = str(elems[i].get("text") or "")
            for w, a, _ in words(text):
                if w[0].isalnum() and before + len(text[:a].split()) + (0 if a and not text[a - 1].isspace() else 1) in asked:
                    marks.add((i, a))
            before += len(text.split())
    return marks


def _key(text) -> str:
    return _SPACE.sub(" ", str(text or "")).strip().rstrip(":").strip().lower()


def key_values(elems: list[dict], instruction: str, copy: list[bool]) -> list[int]:
    """Per editable element, the position of the text to type into it, -1 for none: right of the
    element that carries its label's text elsewhere (a table's key cell), else right of the element
    whose whole text the instruction names (the longest such)."""
    near_left, right = beside(elems), right_of(elems)
    said = " " + _SPACE.sub(" ", (instruction or "").lower()) + " "
    named = [i for i, e in enumerate(elems) if is_text(e) and not copy[i] and right[i] >= 0 and len(_key(e.get("text"))) > 1
             and re.search(r"(?<![a-z0-9])" + re.escape(_key(e["text"])) + r"(?![a-z0-9])", said)]
    default = right[max(named, key=lambda i: len(_key(elems[i]["text"])))] if named else -1
    out = []
    for i, e in enumerate(elems):
        if not e.get("editable"):
            out.append(-1)
            continue
        lab = near_left[i]
        name = _key(elems[lab].get("text")) if lab >= 0 else ""
        keys = [k for k, t in enumerate(elems) if name and k not in (i, lab) and is_text(t) and not copy[k]
                and _key(t.get("text")) == name and right[k] not in (-1, i)]
        out.append(right[keys[0]] if keys else default)
    return out


def _axis(ticks: list[tuple[float, float, float]]):
    """(slope, intercept) of value against position along the largest group of numeric labels that
    share a line across (``ticks``: along, across, value), or None without three distinct values."""
    groups: list[list[tuple[float, float, float]]] = []
    for t in sorted(ticks, key=lambda t: t[1]):
        if groups and abs(t[1] - groups[-1][0][1]) <= AXIS_SLACK:
            groups[-1].append(t)
        else:
            groups.append([t])
    best = max(groups, key=len, default=[])
    if len({v for _, _, v in best}) < 3:
        return None
    pos, val = np.array([t[0] for t in best]), np.array([t[2] for t in best])
    slope, icpt = np.polyfit(pos, val, 1)
    return (slope, icpt) if np.abs(slope * pos + icpt - val).max() < 0.5 else None


def at_coordinate(elems: list[dict], instruction: str) -> list[bool]:
    """Per element, whether it is an unnamed clickable point whose position, read on the page's
    numeric axes, is an (x, y) pair the instruction names."""
    pairs = [(float(a), float(b)) for a, b in _PAIR.findall(instruction or "")]
    out = [False] * len(elems)
    if not pairs:
        return out
    nums = [((e["bounds"][0] + e["bounds"][2]) / 2, (e["bounds"][1] + e["bounds"][3]) / 2, float(e["text"]))
            for e in elems if is_text(e) and _NUMBER.match(str(e["text"]).strip())]
    xs, ys = _axis([(x, y, v) for x, y, v in nums]), _axis([(y, x, v) for x, y, v in nums])
    if xs is None or ys is None:
        return out
    for i, e in enumerate(elems):
        if e.get("clickable") and not e.get("text"):
            x, y = (e["bounds"][0] + e["bounds"][2]) / 2, (e["bounds"][1] + e["bounds"][3]) / 2
            px, py = xs[0] * x + xs[1], ys[0] * y + ys[1]
            out[i] = any(abs(px - a) < 0.5 and abs(py - b) < 0.5 for a, b in pairs)
    return out


def named_once(elems: list[dict], instruction: str, copy: list[bool]) -> list[bool]:
    """Per element, whether its text holds a word (two or more letters or digits) of the
    instruction that no other element's text outside the instruction's copy holds."""
    said = {w.lower() for w, _, _ in words(instruction) if w[0].isalnum() and len(w) > 1}
    holds = [set() if copy[i] else {w.lower() for w, _, _ in words(str(e.get("text") or ""))} & said
             for i, e in enumerate(elems)]
    count: dict[str, int] = {}
    for h in holds:
        for w in h:
            count[w] = count.get(w, 0) + 1
    return [any(count[w] == 1 for w in h) for h in holds]


def page_context(elems: list[dict], instruction: str, asked: set[int]) -> PageContext:
    """Everything set 3 reads of a page (``asked``: the ordinals the instruction names)."""
    copy = instruction_copy(elems, instruction)
    named = named_once(elems, instruction, copy)
    return PageContext(copy, ordinal_marks(elems, copy, asked), key_values(elems, instruction, copy),
                       at_coordinate(elems, instruction), named, [c >= 0 and named[c] for c in container(elems)])
