"""Tree fidelity on the desktop bench: does clicking the centre of a tree element's bounds activate it?

For each bench application, a list of probes: an enabled button, menu or toggle found in the AT-SPI
tree by its label, clicked at the centre of its bounds (``GuiAction("click", element=N)``), and a
check of the application's state afterwards (the calculator's display, a toggle's checked state, a
menu's items now showing, a dialog now open, the editor's text), all read back through the tree.

>>> from embodia.sim.desktop_bench import open_desktop_bench         # doctest: +SKIP
>>> dev = open_desktop_bench("galculator/add")                      # doctest: +SKIP
>>> report = fidelity(dev); report["fraction"], report["probes"]    # doctest: +SKIP
(1.0, 25)
"""
from __future__ import annotations

import time
from typing import Callable

from embodia.devices.actions import GuiAction
from embodia.sim.desktop_tasks import calc_display, editor, find

__all__ = ["fidelity", "PROBES"]

BUTTONS = ("push button", "toggle button", "menu", "menu item", "check menu item", "radio menu item")


def _press(dev, label: str, roles=BUTTONS) -> bool:
    """Click the centre of the enabled element labelled ``label``; False when the tree lacks it."""
    tree = dev.observe().ui_tree or []
    e = find(tree, text=label, role=roles, where=lambda e: e.get("enabled"))
    if e is None:
        return False
    dev.act(GuiAction("click", element=e["index"]))
    return True


# -- galculator: key sequences whose result on the display proves each button worked -------------------
CALC = [  # (button under test, sequence pressed after AC, expected display)
    *[(d, ["7", d], "7" + d) for d in "0123456789"],
    ("+", ["8", "+", "2", "="], "10"), ("-", ["8", "-", "2", "="], "6"), ("*", ["8", "*", "2", "="], "16"),
    ("/", ["8", "/", "2", "="], "4"), ("=", ["3", "+", "4", "="], "7"), ("AC", ["5", "AC"], "0"),
    ("C", ["5", "C"], "0"), ("<-", ["7", "8", "<-"], "7"), ("+/-", ["5", "+/-"], "-5"),
    (".", ["1", ".", "5"], "1.5"), ("sqrt", ["9", "sqrt"], "3"), ("(", ["2", "*", "(", "3", "+", "4", ")", "="], "14"),
    (")", ["(", "3", ")", "*", "2", "="], "6"), ("%", ["5", "0", "%", "8", "="], "4"),    # 8 % of 50
    # MS and MR open a popup menu: "save here", then the stored values
    ("MS", ["6", "MS", "save here", "AC", "MR", "6.000000"], "6"),
    ("MR", ["4", "MS", "save here", "AC", "MR", "4.000000"], "4"),
]


def _calc_probes():
    def probe(label, seq, expect):
        def run(dev) -> bool:
            if not _press(dev, "AC"):
                return False
            for k in seq:
                if not _press(dev, k):
                    return False
            shown = calc_display(dev.observe().ui_tree)
            try:
                return float(shown) == float(expect)
            except (TypeError, ValueError):
                return False
        return label, run
    return [probe(*c) for c in CALC]


# -- menus: clicking the menu bar entry shows its items ---------------------------------------------
def _menu_probe(menu: str, first_item: str):
    def run(dev) -> bool:
        if not _press(dev, menu, ("menu",)):
            return False
        tree = dev.observe().ui_tree or []
        ok = (first_item is None or find(tree, text=first_item, role=("menu item", "check menu item", "menu"))
              is not None) and any(e["role"] in ("menu item", "check menu item") and e["bounds"][1] > 20 for e in tree)
        dev.act(GuiAction("key", keys=("esc",)))
        return ok
    return f"menu {menu}", run


def _item_probe(menu: str, item: str, check: Callable[[list, list], bool], undo=("esc",)):
    """Open ``menu`` through the tree, click ``item`` at its centre, compare the trees around it."""
    def run(dev) -> bool:
        before = dev.observe().ui_tree or []
        if not _press(dev, menu, ("menu",)) or not _press(dev, item, ("menu item", "check menu item")):
            dev.act(GuiAction("key", keys=("esc",)))
            return False
        after = dev.observe().ui_tree or []
        ok = bool(check(before, after))
        if undo:
            dev.act(GuiAction("key", keys=undo))
        return ok
    return f"{menu} > {item}", run


def _window(title: str):
    return lambda before, after: any(title.lower() in (e.get("window") or "").lower() for e in after) and \
        not any(title.lower() in (e.get("window") or "").lower() for e in before)


def _editor_value(pred):
    return lambda before, after: pred((editor(before) or {}).get("value"), (editor(after) or {}).get("value"))


def _mousepad_probes():
    menus = [_menu_probe(m, i) for m, i in [("File", "New"), ("Edit", "Select All"), ("Search", "Find"),
                                            ("View", "Toolbar"), ("Document", "Word Wrap"), ("Help", "About")]]

    def typed(dev) -> bool:           # the items below act on text: put two lines in the editor first
        ed = editor(dev.observe().ui_tree)
        dev.act(GuiAction("type", text="alpha\nbeta", element=ed["index"]))
        return (editor(dev.observe().ui_tree) or {}).get("value") == "alpha\nbeta"

    items = [
        ("setup: type", typed),
        _item_probe("Edit", "Undo", _editor_value(lambda b, a: a != b), undo=None),
        _item_probe("Edit", "Redo", _editor_value(lambda b, a: a != b), undo=None),
        _item_probe("Edit", "Duplicate Line / Selection", _editor_value(lambda b, a: a and a.count("beta") == 2),
                    undo=None),
        _item_probe("Edit", "Delete Line", _editor_value(lambda b, a: a is not None and a.count("beta") == 1),
                    undo=None),
        _item_probe("Edit", "Increase Indent", _editor_value(lambda b, a: a is not None and len(a) > len(b or "")),
                    undo=None),
        _item_probe("Edit", "Select All", lambda b, a: True, undo=None),   # checked by Cut below
        _item_probe("Edit", "Cut", _editor_value(lambda b, a: a == ""), undo=None),
        _item_probe("Edit", "Paste", _editor_value(lambda b, a: a and "alpha" in a), undo=None),
        _item_probe("View", "Toolbar", lambda b, a: len([e for e in a if e["role"] == "push button"]) >
                    len([e for e in b if e["role"] == "push button"]), undo=None),
        _item_probe("Search", "Find", lambda b, a: len([e for e in a if e.get("editable")]) >
                    len([e for e in b if e.get("editable")]), undo=("esc",)),
        _item_probe("Search", "Find and Replace", _window("Replace")),
        _item_probe("Search", "Go to", _window("Go to")),
        _item_probe("Edit", "Preferences", _window("Preferences")),
        _item_probe("Help", "About", _window("About")),
        _item_probe("File", "Open", _window("Open")),
        _item_probe("File", "Save As", _window("Save As")),
        _item_probe("File", "New", lambda b, a: len([e for e in a if e["role"] == "page tab"]) >
                    len([e for e in b if e["role"] == "page tab"]), undo=None),
    ]
    return menus + items


def _gnumeric_probes():
    menus = [_menu_probe(m, i) for m, i in [("File", "New"), ("Edit", "Undo"), ("View", "Zoom"),
                                            ("Insert", "Cells"), ("Format", "Cells"), ("Tools", None),
                                            ("Statistics", "Descriptive Statistics"), ("Data", "Sort"),
                                            ("Help", "Contents")]]

    def toggle(label):
        def run(dev) -> bool:
            e0 = find(dev.observe().ui_tree, text=label, role="toggle button")
            if e0 is None or not _press(dev, label, ("toggle button",)):
                return False
            e1 = find(dev.observe().ui_tree, text=label, role="toggle button")
            return e1 is not None and e1.get("checked") != e0.get("checked")
        return f"toggle {label}", run

    toggles = [toggle(t) for t in ("Bold", "Italic", "Underline", "Left Align", "Center", "Right Align",
                                   "Superscript", "Subscript", "Center Across Selection")]

    def sum_button(dev) -> bool:
        if not _press(dev, "Sum", ("push button",)):
            return False
        tree = dev.observe().ui_tree or []
        ok = any("sum(" in (e.get("value") or "").lower() for e in tree if e.get("editable"))
        dev.act(GuiAction("key", keys=("esc",)))
        return ok

    def new_button(dev) -> bool:
        frames = len([e for e in dev.observe().ui_tree or [] if e["role"] == "frame"])
        if not _press(dev, "New", ("push button",)):
            return False
        deadline = time.monotonic() + 5.0     # a new workbook window takes a moment to map
        while time.monotonic() < deadline:
            if len([e for e in dev.observe_tree() if e["role"] == "frame"]) > frames:
                return True
            time.sleep(0.1)
        return False

    return menus + toggles + [("button Sum", sum_button), ("button New", new_button)]


PROBES = {"galculator": _calc_probes, "mousepad": _mousepad_probes, "gnumeric": _gnumeric_probes}


def fidelity(dev) -> dict:
    """Run every probe of ``dev``'s application (a fresh instance first); setup steps are not counted."""
    dev.reset(0)
    results = {}
    for label, run in PROBES[dev.task.app]():
        try:
            ok = bool(run(dev))
        except Exception as e:         # noqa: BLE001 - a probe that breaks counts as not activated
            ok = False
            label += f" ({type(e).__name__}: {e})"
        if not label.startswith("setup"):
            results[label] = ok
    n = len(results)
    return {"app": dev.task.app, "probes": n, "activated": sum(results.values()),
            "fraction": sum(results.values()) / n if n else 0.0,
            "failed": [k for k, v in results.items() if not v]}
