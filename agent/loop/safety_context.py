"""What surrounds an action, for the safety gate (`embodia.agent.loop.safety`): the dialog a
button sits in, the page or window around it, the focused application's unsaved work, and the
command line a terminal is about to run. Read from the element schema the devices give
(`embodia.devices.gui`): bounds everywhere; ``window`` (the top-level window's title) and ``app``
on the desktop (AT-SPI), where a dialog is its own window with role ``alert`` or ``dialog``; on
Android (uiautomator) a dialog is a box smaller than the screen holding a title, a message and
the buttons, with no title of its own.

These helpers only find and read elements; what their words mean (risky verbs, confirm words)
stays in the gate.

>>> tree = [{"index": 0, "role": "frame", "text": "*notes.txt - Mousepad", "window": "*notes.txt - Mousepad",
...          "app": "mousepad", "bounds": [0, 0, 640, 480]},
...         {"index": 1, "role": "text", "focused": True, "window": "*notes.txt - Mousepad", "app": "mousepad",
...          "bounds": [0, 50, 640, 480]}]
>>> unsaved_work(tree)
'*notes.txt - Mousepad'
>>> command_line("ana@laptop:~$ ls\\nfile\\nana@laptop:~$ rm -r old")
'rm -r old'
"""
from __future__ import annotations

import re

from embodia.devices.embodiment import Screen

DIALOG_ROLES = {"alert", "dialog", "file chooser", "android.app.dialog"}
# roles whose text is a title or a statement, read as the context of a page
_STATIC_ROLES = {"label", "heading", "paragraph", "static", "android.widget.textview", "textview", "text view"}
_WINDOW_ROLES = {"frame", "window", "page tab"}
# how editors mark a document with unsaved changes: "*notes.txt - Mousepad", "notes.txt * — Kate",
# "● main.py - Visual Studio Code", "report.txt (modified) - Xed", "notes — Edited"; not an Emacs
# buffer name ("*scratch*")
_UNSAVED_TITLE = re.compile(r"^\s*\*(?![^*\s]*\*(\s|$))\S|\s\*\s|^\s*[\u25cf\u2022]\s|[(\[]modified[)\]]|"
                            r"\u2014\s*edited\b|\bunsaved\b", re.I)
_UNSAVED_STATUS = re.compile(r"\b(has been|was) modified\b|\bunsaved changes\b|\bnot saved\b", re.I)
# a shell prompt up to the command: "user@host:~$ ", "root@srv:~# ", "PS C:\\> ", "db=# ", "mysql> "
_PROMPT = re.compile(r"^[^\n$#>%]{0,80}?[$#>%]\s+")


def bounds(e: dict) -> list | None:
    b = e.get("bounds")
    return b if isinstance(b, (list, tuple)) and len(b) == 4 else None


def area(e: dict) -> float:
    b = bounds(e)
    return max(0, b[2] - b[0]) * max(0, b[3] - b[1]) if b else 0.0


def inside(e: dict, outer: dict) -> bool:
    """Whether ``e`` lies within ``outer``'s bounds (and is not ``outer``)."""
    a, b = bounds(e), bounds(outer)
    return e is not outer and bool(a and b) and a[0] >= b[0] and a[1] >= b[1] and a[2] <= b[2] and a[3] <= b[3]


def label(e: dict) -> str:
    return " ".join(str(e.get(k) or "") for k in ("text", "desc", "id", "hint") if e.get(k))


def role(e: dict) -> str:
    return str(e.get("role") or "").strip().lower()


def screen_area(tree: list[dict], screen) -> float:
    if screen is not None:
        w, h = Screen.of(screen).size
        return float(w * h)
    return max((area(e) for e in tree), default=0.0)


def dialog_of(target: dict, tree: list[dict], screen) -> dict | None:
    """The dialog box ``target`` sits in: the smallest element with a dialog role around it, else
    (Android) the smallest box around it under half the screen that also holds a text that is
    not a button (its title or message); None on a plain page."""
    around = sorted((e for e in tree if inside(target, e)), key=area)
    for e in around:
        if role(e) in DIALOG_ROLES:
            return e
    full = screen_area(tree, screen)
    for e in around:
        if e.get("clickable") or not full or area(e) >= 0.5 * full:
            continue
        if any(inside(t, e) and not t.get("clickable") and label(t) for t in tree if t is not target):
            return e
    return None


def dialog_text(dialog: dict, tree: list[dict]) -> str:
    """A dialog's title and the texts in it that are not buttons (what it says it will do)."""
    parts = [label(dialog)] if role(dialog) in DIALOG_ROLES else []
    parts += [label(e) for e in tree if inside(e, dialog) and not e.get("clickable") and label(e)]
    return " | ".join(p for p in parts if p)


def page_text(target: dict, tree: list[dict]) -> str:
    """What a page around ``target`` is about: its window's title (desktop), its static texts
    (titles, headings, labels) and the names of its fields."""
    window = target.get("window")
    same = [e for e in tree if e is not target and (window is None or e.get("window") == window)]
    parts = [str(window)] if window else []
    parts += [label(e) for e in same if label(e) and (role(e) in _STATIC_ROLES or e.get("editable")
                                                      or role(e) in ("entry", "password text", "android.widget.edittext"))]
    return " | ".join(parts)


def focused(tree: list | None) -> dict | None:
    return next((e for e in tree or () if e.get("focused")), None)


def unsaved_work(tree: list | None) -> str | None:
    """The title or status that shows unsaved work in the focused application (all its windows and
    tabs: quitting closes them all), or None. Without a focused element, every application on the
    screen counts; without window titles (Android), there is nothing to read."""
    if not tree:
        return None
    f = focused(tree)
    app = f.get("app") if f else None
    mine = [e for e in tree if app is None or e.get("app") == app]
    for e in mine:
        if role(e) in _WINDOW_ROLES and _UNSAVED_TITLE.search(str(e.get("text") or "")):
            return str(e.get("text"))
    titles = {str(e.get("window")) for e in mine if e.get("window")}
    for t in sorted(titles):
        if _UNSAVED_TITLE.search(t):
            return t
    for e in mine:
        if _UNSAVED_STATUS.search(label(e)):
            return label(e)
    return None


def command_line(text: str) -> str:
    """The command a terminal runs on Enter: the last line of what it shows, after the prompt."""
    lines = str(text or "").rstrip("\n").split("\n")
    last = lines[-1] if lines else ""
    m = _PROMPT.match(last)
    return last[m.end():] if m else last
