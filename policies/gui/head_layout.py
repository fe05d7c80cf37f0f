"""What the GUI head's encoders read off a page's elements, shared by the feature sets
(`head_encoding`, and `head_context`'s set 3 and `head_spell`'s columns on top of it): an
instruction's or an element's words, an element's name, and where texts sit relative to each
other on screen (a row's text to the right, the box holding an element, the label beside it)."""
from __future__ import annotations

import re

_WORD = re.compile(r"[A-Za-z0-9]+(?:[-'][A-Za-z0-9]+)*|[^\sA-Za-z0-9]")


def words(text: str) -> list[tuple[str, int, int]]:
    """Word units of a text with their character spans: letters/digits (joined by - or '), or one
    punctuation mark.

    >>> [w for w, _, _ in words("Send 'Dinner at 8?' to Wi-Fi")]
    ['Send', "'", 'Dinner', 'at', '8', '?', "'", 'to', 'Wi-Fi']
    """
    return [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text or "")]


def element_name(e: dict) -> str:
    """What an element is called in the history: its text, else its description, else its role."""
    return str(e.get("text") or e.get("desc") or e.get("role") or "element")


def is_text(e: dict) -> bool:
    return bool(e.get("text")) and not e.get("clickable") and not e.get("editable")


def right_of(elems: list[dict]) -> list[int]:
    """Per element, the position of the nearest text (not clickable, not editable) to its right
    on its row, -1 for none: what sits between a row's buttons (a number between Odd and Even).

    >>> right_of([{"text": "Odd", "clickable": True, "bounds": [0, 0, 20, 10]}, {"text": "7", "bounds": [25, 0, 30, 10]}])
    [1, -1]
    """
    out = []
    for i, e in enumerate(elems):
        x0, y0, x1, y1 = e["bounds"]
        row = [(j, t) for j, t in enumerate(elems) if j != i and is_text(t)
               and y0 <= (t["bounds"][1] + t["bounds"][3]) / 2 <= y1 and t["bounds"][0] >= x1 - 2]
        out.append(min(row, key=lambda jt: jt[1]["bounds"][0])[0] if row else -1)
    return out


def container(elems: list[dict]) -> list[int]:
    """Per element, the position of the smallest other element whose box holds its box, -1 for
    none: the row an unnamed icon sits in (an inbox row's trash icon and the sender it names).

    >>> container([{"bounds": [0, 0, 100, 40]}, {"bounds": [80, 10, 90, 20]}, {"bounds": [0, 0, 200, 200]}])
    [2, 0, -1]
    """
    def area(b):
        return (b[2] - b[0]) * (b[3] - b[1])
    out = []
    for i, e in enumerate(elems):
        x0, y0, x1, y1 = e["bounds"]
        holds = [j for j, t in enumerate(elems) if j != i and t["bounds"][0] <= x0 and t["bounds"][1] <= y0
                 and t["bounds"][2] >= x1 and t["bounds"][3] >= y1 and area(t["bounds"]) > area(e["bounds"])]
        out.append(min(holds, key=lambda j: area(elems[j]["bounds"])) if holds else -1)
    return out


def beside(elems: list[dict]) -> list[int]:
    """Per element, the position of the text that names it on screen: the nearest text (not
    clickable, not editable) on its row to its left, else the nearest one ending at most 12 px above
    it and overlapping it across; -1 for none. What a form's label is to its field, a table's key cell to
    the cell beside it, without the page saying so.

    >>> beside([{"text": "Year:", "bounds": [0, 10, 30, 20]}, {"text": "", "editable": True, "bounds": [40, 8, 90, 22]}])
    [-1, 0]
    """
    out = []
    for i, e in enumerate(elems):
        x0, y0, x1, y1 = e["bounds"]
        row = [(j, t) for j, t in enumerate(elems) if j != i and is_text(t)
               and y0 <= (t["bounds"][1] + t["bounds"][3]) / 2 <= y1 and t["bounds"][2] <= x0 + 2]
        if row:
            out.append(max(row, key=lambda jt: jt[1]["bounds"][2])[0])
            continue
        above = [(j, t) for j, t in enumerate(elems) if j != i and is_text(t) and y0 - 12 <= t["bounds"][3] <= y0 + 2
                 and t["bounds"][0] < x1 and t["bounds"][2] > x0]
        out.append(max(above, key=lambda jt: jt[1]["bounds"][3])[0] if above else -1)
    return out
