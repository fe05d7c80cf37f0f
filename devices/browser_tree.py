"""A web page's accessibility tree in the element schema of the desktop and Android trees.

Chromium gives two views of a page in two DevTools calls: ``Accessibility.getFullAXTree`` (roles,
accessible names, values and states, keyed by DOM node) and ``DOMSnapshot.captureSnapshot``
(every DOM node's layout box, attributes, input value, and whether a click listener or a link
makes it clickable). `page_elements` joins them on the DOM node's backend id and keeps what a
person sees and can act on, as `embodia.devices.atspi` does on the desktop:

- roles are written in the desktop's (AT-SPI) words, so the safety gate and ``check:`` predicates
  read a web page as they read a GTK window: a ``button`` is a "push button", a ``textbox`` an
  "entry" (a multi-line one "text", an ``<input type=password>`` "password text"), a ``checkbox`` a
  "check box", a ``dialog``/``alertdialog`` a "dialog"/"alert", page text "label";
- an element is kept when its box is on the viewport and it is actionable (an interactive role, a
  focusable or editable node, a click listener on a box under a quarter of the viewport: larger
  ones are a page's own delegating listeners) or it carries text; a text that only repeats the
  name of the element it sits in (a button's label) is not kept twice;
- elements come in document order, at most ``limit`` of them.

Fields: ``index``, ``role``, ``text`` (the accessible name; for a clickable element without one,
the text inside it), ``desc``, ``id`` (the DOM id), ``bounds`` (viewport pixels, right/bottom
exclusive), ``box`` (0..1000), ``clickable``, ``password``, ``focused``, ``enabled``, ``editable``,
``checked`` (checkables only), ``value`` (a field's text; never a password's), ``scrollable`` (its
content overflows its box and its style lets it scroll: a text area holding more than it shows, an
``overflow: auto`` list; from the snapshot's scroll and client rects and computed ``overflow``, so a
policy can tell what a wheel turn moves even where the page flags nothing), ``window`` (the page
title), ``app`` ("chromium") and ``ref`` (the DOM node's backend id).
"""
from __future__ import annotations

import math
import re

__all__ = ["ROLE_NAMES", "SNAPSHOT_STYLES", "page_elements"]

ROLE_NAMES = {
    "button": "push button", "link": "link", "textbox": "entry", "searchbox": "entry", "checkbox": "check box",
    "radio": "radio button", "combobox": "combo box", "listbox": "list box", "option": "list item",
    "menuitem": "menu item", "menuitemcheckbox": "check menu item", "menuitemradio": "radio menu item",
    "menu": "menu", "menubar": "menu bar", "tab": "page tab", "switch": "switch", "slider": "slider",
    "spinbutton": "spin button", "dialog": "dialog", "alertdialog": "alert", "heading": "heading",
    "StaticText": "label", "paragraph": "paragraph", "image": "image", "img": "image", "listitem": "list item",
    "list": "list", "table": "table", "grid": "table", "cell": "table cell", "gridcell": "table cell",
    "columnheader": "column header", "rowheader": "row header", "generic": "section", "treeitem": "tree item",
    "progressbar": "progress bar", "alert": "notification", "status": "status bar",
}
# Chromium roles a person acts on: kept even without a name
INTERACTIVE = {"button", "link", "textbox", "searchbox", "checkbox", "radio", "combobox", "listbox", "option",
               "menuitem", "menuitemcheckbox", "menuitemradio", "tab", "switch", "slider", "spinbutton",
               "treeitem", "PopUpButton", "ToggleButton"}
CHECKABLE = {"checkbox", "radio", "switch", "menuitemcheckbox", "menuitemradio", "ToggleButton"}
KEEP_NAMED = {"heading", "image", "img", "dialog", "alertdialog", "alert", "status", "cell", "gridcell",
              "columnheader", "rowheader", "listitem"}
# never elements: text runs inside a text, list bullets, a closed <select>'s popup, the page itself
SKIP = {"InlineTextBox", "ListMarker", "LabelText", "MenuListPopup", "RootWebArea", "LineBreak", "none"}
TEXT_LIMIT = 200
# the computed styles `page_elements` reads (``DOMSnapshot.captureSnapshot(computedStyles=...,
# includeDOMRects=True)``): an overflowing box scrolls only where its overflow is auto or scroll
SNAPSHOT_STYLES = ("overflow-x", "overflow-y")


def _prop(node: dict, name: str):
    for p in node.get("properties", ()):
        if p.get("name") == name:
            return (p.get("value") or {}).get("value")
    return None


def _value(node: dict, key: str) -> str:
    v = (node.get(key) or {}).get("value")
    return "" if v is None else str(v)


def _squash(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


class _Dom:
    """The main document of a DOM snapshot, by backend node id: its box in viewport pixels, its
    attributes, its input value, whether it takes clicks."""

    def __init__(self, snapshot: dict):
        strings = snapshot.get("strings", [])
        doc = (snapshot.get("documents") or [{}])[0]
        nodes, layout = doc.get("nodes", {}), doc.get("layout", {})
        ids = nodes.get("backendNodeId", [])
        self.index = {b: i for i, b in enumerate(ids)}
        sx, sy = doc.get("scrollOffsetX", 0) or 0, doc.get("scrollOffsetY", 0) or 0
        self.boxes = {}
        for node_i, (x, y, w, h) in zip(layout.get("nodeIndex", []), layout.get("bounds", [])):
            self.boxes.setdefault(node_i, (x - sx, y - sy, w, h))
        self.clickable = set(nodes.get("isClickable", {}).get("index", []))
        self.scrollable = _scrollable(layout, strings)
        iv = nodes.get("inputValue", {})
        self.input_value = {i: strings[s] for i, s in zip(iv.get("index", []), iv.get("value", [])) if s >= 0}
        attrs = nodes.get("attributes", [])
        self.attrs = [{strings[a[k]].lower(): strings[a[k + 1]] for k in range(0, len(a) - 1, 2)} for a in attrs]

    def node(self, backend_id) -> int | None:
        return self.index.get(backend_id)

    def attr(self, i: int | None, name: str) -> str:
        return self.attrs[i].get(name, "") if i is not None and i < len(self.attrs) else ""


def _scrollable(layout: dict, strings: list) -> set[int]:
    """DOM node indices whose content is larger than their client box (by more than a pixel) along
    an axis whose computed overflow lets it scroll; empty for a snapshot taken without DOM rects or
    styles (`SNAPSHOT_STYLES`)."""
    out = set()
    rows = zip(layout.get("nodeIndex", []), layout.get("scrollRects", []), layout.get("clientRects", []),
               layout.get("styles", []))
    for node_i, scroll, client, styles in rows:
        if len(scroll) < 4 or len(client) < 4 or len(styles) < len(SNAPSHOT_STYLES):
            continue
        ox, oy = (strings[k] if 0 <= k < len(strings) else "" for k in styles[:2])
        if (scroll[3] > client[3] + 1 and oy in ("auto", "scroll")) or \
                (scroll[2] > client[2] + 1 and ox in ("auto", "scroll")):
            out.add(node_i)
    return out


def _bounds(box, size) -> list[int] | None:
    """Viewport pixel bounds of a layout box, clipped to the viewport; None when nothing shows."""
    if box is None:
        return None
    w, h = size
    x, y, bw, bh = box
    x0, y0 = max(0, math.floor(x)), max(0, math.floor(y))
    x1, y1 = min(w, math.ceil(x + bw)), min(h, math.ceil(y + bh))
    return [x0, y0, x1, y1] if x1 > x0 and y1 > y0 else None


def _page_sized(bounds, size) -> bool:
    """A box over a quarter of the viewport: a click listener there is the page's own (a framework
    delegating every click from its root, a click logger on <body>), not a target."""
    return (bounds[2] - bounds[0]) * (bounds[3] - bounds[1]) > 0.25 * size[0] * size[1]


def _document_order(nodes: list[dict]):
    """(node, kept ancestor names) in document order: a depth-first walk from the root over
    ``childIds`` (the flat list Chromium returns is not in that order)."""
    by_id = {n["nodeId"]: n for n in nodes}
    roots = [n for n in nodes if not n.get("parentId")] or nodes[:1]
    stack = [(r, None) for r in reversed(roots)]
    while stack:
        node, parent = stack.pop()
        yield node, parent
        kids = [by_id[c] for c in node.get("childIds", ()) if c in by_id]
        stack.extend((k, node) for k in reversed(kids))


def page_elements(ax_nodes: list[dict], snapshot: dict, size: tuple[int, int], *, title: str = "",
                  limit: int = 300) -> list[dict]:
    """The elements of one page (see the module doc); ``size`` is the viewport in pixels."""
    dom = _Dom(snapshot)
    out: list[dict] = []
    kept_name: dict[str, str] = {}        # AX node id -> the name of the nearest kept element at or above it
    for node, parent in _document_order(ax_nodes):
        nid = node["nodeId"]
        above = kept_name.get(parent["nodeId"], "") if parent is not None else ""
        kept_name[nid] = above
        if node.get("ignored") or len(out) >= limit:
            continue
        e = _element(node, dom, size, title, above)
        if e is None:
            continue
        e["index"] = len(out)
        out.append(e)
        kept_name[nid] = e["text"]
    return _text_inside(out)


def _element(node: dict, dom: _Dom, size, title: str, above: str) -> dict | None:
    role = _value(node, "role")
    if role in SKIP:
        return None
    i = dom.node(node.get("backendDOMNodeId"))
    bounds = _bounds(dom.boxes.get(i) if i is not None else None, size)
    if bounds is None:
        return None
    name = _squash(_value(node, "name"))[:TEXT_LIMIT]
    editable = bool(_prop(node, "editable"))
    clickable = role in INTERACTIVE or (i in dom.clickable and role != "StaticText" and not _page_sized(bounds, size))
    if role == "generic" and editable and not clickable:
        return None                      # the inner editor of an <input>: its field is the element
    if role == "StaticText" and (not name or name == above):
        return None
    if not (clickable or editable or _prop(node, "focusable") or role == "StaticText"
            or (name and role in KEEP_NAMED)):
        return None
    password = dom.attr(i, "type").lower() == "password"
    mapped = "password text" if password else ROLE_NAMES.get(role, role.lower())
    if role == "textbox" and _prop(node, "multiline"):
        mapped = "text"
    w, h = size
    x0, y0, x1, y1 = bounds
    e = {"index": -1, "role": mapped, "text": name, "desc": _squash(_value(node, "description"))[:TEXT_LIMIT],
         "id": dom.attr(i, "id"), "bounds": bounds,
         "box": [round(x0 * 1000 / w), round(y0 * 1000 / h), round(x1 * 1000 / w), round(y1 * 1000 / h)],
         "clickable": bool(clickable), "password": password, "focused": bool(_prop(node, "focused")),
         "enabled": not _prop(node, "disabled"), "editable": editable, "scrollable": i in dom.scrollable,
         "window": title, "app": "chromium", "ref": node.get("backendDOMNodeId")}
    if role in CHECKABLE or _prop(node, "checked") is not None:
        e["checked"] = str(_prop(node, "checked")).lower() in ("true", "mixed")
    if not password and (editable or role in ("combobox", "slider", "spinbutton", "listbox")):
        e["value"] = dom.input_value.get(i, _value(node, "value")) if i is not None else _value(node, "value")
    return e


def _text_inside(elements: list[dict]) -> list[dict]:
    """A clickable element without a name (a ``<div onclick>``, an ``<li onclick>``) is named by the texts inside it,
    in order, so a policy and the gate can read what it is; those texts are not kept twice.
    Returns the elements, indexed again."""
    absorbed = set()
    for e in elements:
        if e["clickable"] and not e["text"] and not e["editable"]:
            inner = [t for t in elements if t["role"] == "label" and id(t) not in absorbed and _within(t, e)]
            e["text"] = _squash(" ".join(t["text"] for t in inner))[:TEXT_LIMIT]
            absorbed.update(id(t) for t in inner)
    out = [e for e in elements if id(e) not in absorbed]
    for i, e in enumerate(out):
        e["index"] = i
    return out


def _within(e: dict, outer: dict) -> bool:
    a, b = e["bounds"], outer["bounds"]
    return a[0] >= b[0] and a[1] >= b[1] and a[2] <= b[2] and a[3] <= b[3]
