"""What a screen-memory entry remembers of an action: slot values abstracted to placeholders, the
element as a reference (role, text, id) that survives layout changes, and the action's canonical
form."""
from __future__ import annotations

import math
import re
from typing import List, Optional, Sequence, Tuple

STRING_FIELDS = ("text", "app")      # action fields whose value may be a slot reference
_KEEP_FIELDS = ("direction", "keys", "button", "duration_ms", "status")
POSITIONAL = ("click", "double_click", "right_click", "long_press", "swipe", "drag", "scroll", "type")



# ------------------------------------------------------------------------------------------------
# slots: instance values <-> placeholders
# ------------------------------------------------------------------------------------------------
def _slug(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", s.lower()).strip("_")


def _slot_items(slots: Optional[dict]) -> List[Tuple[str, str]]:
    """(name, value) pairs, longest value first so "Wi-Fi calling" wins over "Wi-Fi"."""
    items = [(str(k), str(v)) for k, v in (slots or {}).items() if isinstance(v, str) and v.strip()]
    return sorted(items, key=lambda kv: (-len(kv[1]), kv[0]))


def slot_values(slots: Optional[dict]) -> str:
    """The instance's slot values as one comparable string (``""`` without slots).

    >>> slot_values({"setting": "Ad tracking", "app": "Settings"})
    'app=Settings|setting=Ad tracking'
    """
    return "|".join(f"{k}={v}" for k, v in sorted(_slot_items(slots)))


def abstract_instruction(instruction: str, slots: Optional[dict] = None) -> str:
    """The instruction with every slot value replaced by its placeholder (its template).

    >>> abstract_instruction("Send 'On my way' to Alice Baker", {"text": "On my way", "contact": "Alice Baker"})
    "Send '{text}' to {contact}"
    """
    out = instruction or ""
    for name, value in _slot_items(slots):
        out = out.replace(value, "{" + name + "}")
    return out


def _abstract_text(s: str, slots) -> str:
    """Every slot value standing as whole words in a text becomes its placeholder: "Wi-Fi" ->
    "{setting}", "Wi-Fi calling" -> "{setting} calling" (another label still, and it binds only
    where this instance has "<its value> calling"), MiniWoB's tab "Tab #2" for target "2" ->
    "Tab #{target}" and its page's copy of the instruction -> the template. Only at word
    boundaries: "Wi-Fi" in "Wi-Fi6" or "ok" in "okay" stay literal.

    >>> _abstract_text("Tab #2", {"target": "2"}), _abstract_text("okay", {"target": "ok"})
    ('Tab #{target}', 'okay')
    """
    items = [(n, v) for n, v in _slot_items(slots) if v in s]
    if not items:
        return s
    names = {v: n for n, v in reversed(items)}           # a value two slots share: the first name
    alts = "|".join(re.escape(v) for _, v in items)     # longest first: one pass, no re-matching
    return re.sub(r"(?<!\w)(" + alts + r")(?!\w)", lambda m: "{" + names[m.group(1)] + "}", s)


def _abstract_id(s: str, slots) -> str:
    """Resource ids often embed the label (``setting_wi_fi``): its slug becomes the placeholder."""
    for name, value in _slot_items(slots):
        sl = _slug(value)
        if len(sl) >= 3 and sl in s:
            s = s.replace(sl, "{" + name + "}")
    return s


MAX_VALS = 64       # slot-value sets an entry remembers when identical successes merge into it


PLACEHOLDER = re.compile(r"\{(\w+(?: \w+)*)\}")     # MiniWoB's fields have names like "target 0"


def fill(s: str, slots, slug: bool = False) -> Optional[str]:
    """Placeholders -> the current slot values (slugged inside ids); None if one cannot bind."""
    slots = slots or {}
    missing = [m for m in PLACEHOLDER.findall(s) if not isinstance(slots.get(m), str)]
    if missing:
        return None
    return PLACEHOLDER.sub(lambda m: _slug(slots[m.group(1)]) if slug else slots[m.group(1)], s)


# ------------------------------------------------------------------------------------------------
# element references and canonical forms
# ------------------------------------------------------------------------------------------------
def element_ref(el: dict, slots=None) -> dict:
    """The element reference of a tree element, slot values abstracted."""
    return {"role": str(el.get("role") or ""), "text": _abstract_text(str(el.get("text") or ""), slots),
            "id": _abstract_id(str(el.get("id") or ""), slots),
            "desc": _abstract_text(str(el.get("desc") or ""), slots)}


def value_class(el: dict, slots=None) -> Optional[str]:
    """What a field holds, as the memory compares it across instances: None for an element without
    a value (a button; gui-sim's elements, whose fields show their content as text), ``""`` empty,
    the placeholder when it holds a slot value (``"{target}"``), else ``"*"`` (filled with something
    else: one instance's literal content says nothing about the next one's).

    >>> [value_class({"value": v}, {"target": "Fiji"}) for v in ("", "Fiji", "Norway")] + [value_class({})]
    ['', '{target}', '*', None]
    """
    v = el.get("value")
    if v is None:
        return None
    v = str(v).strip()
    if not v:
        return ""
    a = _abstract_text(v, slots)
    return a if PLACEHOLDER.search(a) else "*"


def field_state(elements: Sequence[dict], slots=None) -> List[str]:
    """The state of a form that a screen key with one token per field cannot separate, sorted: each
    field that holds something, as its element reference and `value_class`, and whether each
    element named by a slot (``{target}``) is checked. MiniWoB's choose-list before and after
    choosing look alike but for the list's value, click-option before and after choosing but for
    the target's radio, and click-checkboxes is done when every ``{target N}`` box is checked.
    Empty fields are left out (pages draw distractor fields in varying numbers, and an empty one
    is no progress), and so are the checked states of elements no slot names (gui-sim draws every
    other switch's state anew per instance). A slot-named element is named without its id, which
    may be a position (``ch2``).

    >>> field_state([{"role": "combo box", "id": "options", "value": "Fiji"}, {"role": "entry", "value": ""}],
    ...             {"target": "Fiji"})
    ['combo box|options||={target}']
    >>> field_state([{"role": "radio", "id": "ch2", "text": "Fiji", "checked": True},
    ...              {"role": "radio", "id": "ch0", "text": "Peru", "checked": True},
    ...              {"role": "radio", "id": "ch1", "text": "Chad", "checked": False}], {"a": "Fiji", "b": "Chad"})
    ['radio||{a}|=checked', 'radio||{b}|=unchecked']
    """
    out = []
    for el in elements:
        r = element_ref(el, slots)
        named = bool(PLACEHOLDER.search(r["text"] + r["desc"]))
        name = "|".join((r["role"], "" if named else r["id"], r["text"], r["desc"]))
        c = value_class(el, slots)
        if c:
            out.append(f"{name}={c}")
        if named and isinstance(el.get("checked"), bool):
            out.append(f"{name}={'checked' if el['checked'] else 'unchecked'}")
    return sorted(out)


def fill_ref(ref: dict, slots) -> Optional[dict]:
    out = {"role": ref["role"], "text": fill(ref["text"], slots), "id": fill(ref["id"], slots, slug=True),
           "desc": fill(ref["desc"], slots)}
    return None if any(v is None for v in out.values()) else out


def find_element(elements: Sequence[dict], ref: dict, by_label: bool = False) -> Optional[dict]:
    """The current element a concrete reference names. By resource id when the reference has one
    and exactly one element carries it (a field's text changes as it is typed into); when several
    do (list rows on Android share ids), the one of them with the same text; else by role + text
    (+ desc); a reference with neither label nor id by its role, when exactly one element without an
    id has it. None when nothing matches: the precondition fails.

    ``by_label``: the reference's label was filled from a slot (``{target}``), so the label is what
    names the element in this instance and an id is only a tie-break: MiniWoB's click-option gives
    its radio buttons ids by position (``ch0``..``ch3``), so "the id that held the target last time"
    is another option now.

    >>> radios = [{"role": "radio", "id": "ch0", "text": "foo", "desc": ""},
    ...           {"role": "radio", "id": "ch1", "text": "bar", "desc": ""}]
    >>> find_element(radios, {"role": "radio", "id": "ch0", "text": "bar", "desc": ""}, by_label=True)["id"]
    'ch1'
    """
    def same_label(el):
        return str(el.get("text") or "") == ref["text"] and str(el.get("desc") or "") == ref["desc"]

    if by_label and (ref["text"] or ref["desc"]):
        named = [el for el in elements if str(el.get("role") or "") == ref["role"] and same_label(el)]
        return next((el for el in named if str(el.get("id") or "") == ref["id"]), named[0] if named else None)
    if ref["id"]:
        same = [el for el in elements if str(el.get("id") or "") == ref["id"]]
        if len(same) == 1:
            return same[0]
        for el in same:
            if same_label(el):
                return el
    if ref["text"] or ref["desc"]:
        for el in elements:
            if str(el.get("role") or "") == ref["role"] and same_label(el):
                return el
        return None
    # no label and no id (a desktop app's text area: GTK gives it neither): the only element of
    # that role without an id, if there is exactly one
    same = [el for el in elements if str(el.get("role") or "") == ref["role"] and not el.get("id")]
    return same[0] if ref["role"] and len(same) == 1 else None


def centre(bounds, screen) -> Tuple[float, float]:
    x0, y0, x1, y1 = (float(b) for b in bounds)
    w, h = float(screen[0]), float(screen[1])
    cx, cy = (x0 + x1) / 2.0, (y0 + y1) / 2.0
    return (round(min(1000.0, max(0.0, cx * 1000.0 / w)), 1), round(min(1000.0, max(0.0, cy * 1000.0 / h)), 1))


def element_at(elements: Sequence[dict], point, screen, *, scroll: bool = False) -> Optional[dict]:
    """The smallest element under a 0..1000 ``point`` on a ``screen`` = (width, height) in the
    pixels of the elements' bounds: a clickable one for taps, any for a scroll. None if none."""
    if point is None or screen is None:
        return None
    x, y = float(point[0]) * float(screen[0]) / 1000.0, float(point[1]) * float(screen[1]) / 1000.0
    best, area = None, math.inf
    for el in elements:
        b = el.get("bounds")
        if b is None or not (scroll or el.get("clickable")):
            continue
        x0, y0, x1, y1 = (float(v) for v in b)
        if x0 <= x < x1 and y0 <= y < y1 and (x1 - x0) * (y1 - y0) < area:
            best, area = el, (x1 - x0) * (y1 - y0)
    return best


def _target(action: dict, elements: Sequence[dict], screen) -> Optional[dict]:
    """The tree element an action acts on: its ``element`` index, else the element under its point."""
    idx = action.get("element")
    if idx is not None:
        for el in elements:
            if el.get("index") == idx:
                return el
    if action.get("type") in POSITIONAL and action.get("point") is not None:
        return element_at(elements, action["point"], screen, scroll=action.get("type") == "scroll")
    return None


def canon(atype: str, ref: Optional[dict], fields: dict, point=None, grid: float = 50.0) -> str:
    """One string per distinct action: type, element reference (or a bare point on a grid), and the
    action's own fields. Equal strings = the same action for the vote and the history."""
    parts = [atype]
    if ref is not None:
        # an element a slot names is that element wherever it sits: a literal id beside the slot is
        # a position (MiniWoB's radio "ch2"), and two instances' "click {target}" are one action
        named = PLACEHOLDER.search(ref["text"] + ref["desc"]) and not PLACEHOLDER.search(ref["id"])
        parts.append("el=" + "|".join((ref["role"], "" if named else ref["id"], ref["text"], ref["desc"])))
    elif point is not None:
        parts.append("at=%d,%d" % (int(float(point[0]) // grid), int(float(point[1]) // grid)))
    for k in STRING_FIELDS + _KEEP_FIELDS:
        v = fields.get(k)
        if v not in (None, (), []):
            parts.append(f"{k}={list(v) if isinstance(v, (list, tuple)) else v}")
    return " ".join(parts)


def action_value(action: dict, elements: Sequence[dict], slots, screen) -> dict:
    """The stored value of one executed action: its element reference, its abstracted fields."""
    el = _target(action, elements, screen)
    fields = {k: (_abstract_text(action[k], slots) if isinstance(action.get(k), str) else action[k])
              for k in STRING_FIELDS if action.get(k) is not None}
    fields.update({k: (list(action[k]) if isinstance(action[k], tuple) else action[k])
                   for k in _KEEP_FIELDS if action.get(k) not in (None, (), [])})
    point = action.get("point")
    return {"type": str(action.get("type")), "ref": element_ref(el, slots) if el is not None else None,
            "fields": fields, "point": list(point) if point is not None else None,
            "end": list(action["end"]) if action.get("end") is not None else None,
            "index": int(el["index"]) if el is not None and el.get("index") is not None else None,
            "centre": list(centre(el["bounds"], screen)) if el is not None and screen is not None
            and el.get("bounds") is not None else None}


def canonical(action: dict, elements: Sequence[dict], slots: Optional[dict] = None,
              screen=None, grid: float = 50.0) -> str:
    """The abstract canonical form of ``action`` (a ``GuiAction.to_dict()``) taken on a screen with
    ``elements``: what the memory stores as an entry's history and compares with ``history``.

    >>> tree = [{"index": 3, "role": "Switch", "text": "NFC", "id": "setting_nfc", "bounds": [0, 0, 9, 9]}]
    >>> canonical({"type": "click", "element": 3}, tree, {"setting": "NFC"})
    'click el=Switch|setting_{setting}|{setting}|'
    """
    v = action_value(action, elements, slots, screen)
    return canon(v["type"], v["ref"], v["fields"], v["point"], grid)
