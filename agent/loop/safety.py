"""The safety gate: GUI actions judged risky need a yes before they run; the default is No.

Risk classes: ``send`` (messages, posts, mail; Enter or ctrl+enter in a message field),
``delete`` (delete, remove, erase, uninstall, deactivate or close an account, unsend; swipe-to-
delete, a drag onto a trash can, shift+delete, quitting with unsaved work; destructive shell and
SQL commands typed and submitted), ``pay``, ``purchase``, ``install``, ``password`` (typing a
secret: a password, PIN, card number, CVC, wallet phrase), ``system`` (shut down, restart,
ctrl+alt+delete) and ``unknown`` (an action naming a UI element that is not on the screen: what it
would do cannot be judged, so it is refused like any risk).

How a label is read (`embodia.agent.loop.safety_words`): Unicode NFKC, invisible characters
removed, look-alike letters folded, ids split into words, accents dropped; then matched against
risky verbs in ten languages, where a verb counts only as the act: not in "Post office", "the
Trash", "Undo delete", "Order #1234", "Format Cells". Words of a target that only name a setting
("Format: PDF"), a folder ("Trash (3)"), a help page or a question ("How to delete your
account", "Send feedback?") or form a sentence are not read as acts; neither are check boxes,
switches, tabs, menu-bar entries, combo boxes and the title of a list row (a podcast "Trash Talk").

What an action does in its context (`embodia.agent.loop.safety_context` finds the context):
- a click: the clickable element that contains its point decides, read with the non-clickable
  labels inside it, each field apart (the text a person sees, the accessible name a screen reader
  says, the description, the id): the riskier wins, so a button showing "Delete account" named
  "Cancel" is a delete; a confirmation (OK, Yes, "I understand, proceed", 确定..., or the verb its
  dialog's question starts with: "Add" under "Add uBlock Origin?") agrees to what its dialog or
  page asks ("Delete 12 photos?", "All data will be erased", "...will stop working"; a dialog that
  only reports, "12 items were deleted.", asks nothing), and on a page about payment it pays; a
  Replace or Overwrite button deletes where a file of that name exists; changing a password or
  PIN, or turning off a second factor, is ``password``; a switch that allows apps from unknown
  sources is ``install``;
- `type`: into the focused (or named) field; a secret field is ``password``; text with a newline
  is type-and-submit, judged by the field: a message field sends, a terminal or an unknown field
  runs the command (``find . -delete``, ``git push origin +main``, ``DELETE FROM t``), a search
  box or an editor's document runs nothing;
- keys, whatever their spelling (``shift+delete``, ``("Shift", "Del")``, ``KEYCODE_FORWARD_DEL``):
  quitting (ctrl+q, alt+F4) is ``delete`` when the focused application shows unsaved work (a
  ``*`` in its window title, a modified-document status); Delete or shift+delete outside a text
  field deletes the selected items; Enter or Space on a focused button presses it (judged as a
  click on it); Enter submits the focused field (in a terminal: the command line after its prompt);
- gestures by what they do (a sideways swipe on a row offering delete, a drag onto a bin, a drop
  onto a button).

A device without a UI tree gives the gate only the action itself (keys and typed text are still
judged; a click, a dialog or unsaved work is not), so on a plain desktop run unattended with
that in mind.

Every decision is returned as a dict that the loop records on the step: the class, the evidence,
whether it ran, and who decided (``allow-list``, ``user``, ``default-no``).

>>> from embodia.devices import GuiAction
>>> gate = SafetyGate()
>>> tree = [{"index": 0, "text": "Send", "role": "android.widget.Button", "bounds": [0, 0, 100, 50]}]
>>> d = gate.check(GuiAction("click", element=0), tree=tree, screen=(1000, 1000))
>>> d["risk"], d["allowed"], d["by"]
('send', False, 'default-no')
>>> SafetyGate(allow={"send"}).check(GuiAction("click", element=0), tree=tree, screen=(1000, 1000))["allowed"]
True
>>> classify(GuiAction("type", text="rm -rf ~\\n"))[0], classify(GuiAction("key", keys=("shift+delete",)))[0]
('delete', 'delete')
"""
from __future__ import annotations

import re
from typing import Callable, Iterable

from embodia.agent.loop import safety_phrases as phrases
from embodia.agent.loop.safety_keys import CHORDS, QUIT, chord

from embodia.agent.loop.safety_context import area as _area
from embodia.agent.loop.safety_context import command_line, dialog_of, dialog_text, focused, page_text, role, unsaved_work
from embodia.agent.loop.safety_context import inside as _inside
from embodia.agent.loop.safety_context import label as _label
from embodia.agent.loop.safety_words import BIN as _BIN
from embodia.agent.loop.safety_words import COMMAND_FIELD as _COMMAND_FIELD
from embodia.agent.loop.safety_words import CREDENTIAL as _CREDENTIAL
from embodia.agent.loop.safety_words import INSTALL_TOGGLE as _INSTALL_TOGGLE
from embodia.agent.loop.safety_words import MESSAGE_FIELD as _MESSAGE_FIELD
from embodia.agent.loop.safety_words import ORDER as _ORDER
from embodia.agent.loop.safety_words import PATTERNS as _PATTERNS
from embodia.agent.loop.safety_words import SEARCH_FIELD as _SEARCH_FIELD
from embodia.agent.loop.safety_words import SECURITY_OFF as _SECURITY_OFF
from embodia.agent.loop.safety_words import SENTENCE_PATTERNS as _SENTENCE_VERBS
from embodia.agent.loop.safety_words import normalize
from embodia.agent.loop.safety_words import command_risk as _command_risk
from embodia.agent.loop.safety_words import match as _match
from embodia.devices import GuiAction, Screen

RISK_CLASSES = ("send", "delete", "pay", "purchase", "install", "password", "system", "unknown")


class RiskRefused(RuntimeError):
    """A risky action was not confirmed; the episode ends and the refusal is recorded."""

    def __init__(self, decision: dict):
        self.decision = decision
        super().__init__(f"refused {decision['risk']!r} action ({decision['evidence']}); "
                         f"allow it with --allow {decision['risk']}")


# -- what an action targets -------------------------------------------------------------------------
def _screen_size(screen):
    return None if screen is None else Screen.of(screen).size


def _pixel(point, screen):
    size = _screen_size(screen)
    if point is None or not size:
        return None
    return point[0] * size[0] / 1000.0, point[1] * size[1] / 1000.0


def _hits(tree, xy):
    if xy is None:
        return []
    x, y = xy
    hits = [e for e in tree if isinstance(e.get("bounds"), (list, tuple)) and len(e["bounds"]) == 4
            and e["bounds"][0] <= x < e["bounds"][2] and e["bounds"][1] <= y < e["bounds"][3]]
    return sorted(hits, key=_area)


class _Unresolved(Exception):
    pass


def _element(action, tree):
    e = next((e for e in tree or () if e.get("index") == action.element), None)
    if e is None:
        raise _Unresolved(f"element {action.element} is not on the screen")
    return e


def _point_of(action, tree, screen):
    """The pixel an action's point lands on (an element reference: its centre)."""
    if action.element is not None:
        b = _element(action, tree).get("bounds")
        return ((b[0] + b[2]) / 2, (b[1] + b[3]) / 2) if b else None
    return _pixel(action.point, screen)


def target_element(action: GuiAction, tree: list | None, screen) -> dict | None:
    """The UI-tree element an action acts on: the smallest clickable element containing its point
    (a named element: its centre), else the smallest labelled element there, else for `type` and
    keys the focused element."""
    if not tree:
        return None
    try:
        xy = _point_of(action, tree, screen)
    except _Unresolved:
        return None
    hits = _hits(tree, xy)
    if action.element is not None and not hits:
        return _element(action, tree)
    clickable = [e for e in hits if e.get("clickable")]
    if clickable:
        return clickable[0]
    labelled = [e for e in hits if _label(e)] or hits
    if labelled:
        return labelled[0]
    if action.type in ("type", "key", "system_button"):
        return next((e for e in tree if e.get("focused")), None)
    return None


# roles that choose, open or show rather than act: a menu-bar entry opens its menu, a check box or
# switch sets an option, tabs, tree and list items select, a combo box picks, headings and
# paragraphs are text
_NO_ACT_ROLES = {"menu", "check box", "radio button", "switch", "toggle", "page tab", "tree item", "list item",
                 "table cell", "combo box", "heading", "paragraph", "android.widget.checkbox", "android.widget.switch",
                 "android.widget.radiobutton", "android.widget.spinner"}
_TOGGLES = {"switch", "toggle", "check box", "toggle button", "android.widget.switch", "android.widget.checkbox",
            "android.widget.togglebutton"}
_SETTING = re.compile(r"^\s*[^\W\d_][\w' ]{0,30}:\s+\S")           # "Format: PDF", "Order by: date"
_COUNTED = re.compile(r"^\s*\S+(\s\S+)?\s*\(\d+\)\s*$")             # "Trash (3)": a folder and its count
_ABOUT = re.compile(r"^\s*(how|why|what|when|where|learn|about|help|tips|faq)\b|[?\uff1f]\s*$", re.I)
_SENTENCE = re.compile(r"^\s*(\S+\s+){3,}\S+[.!]\s*$")


def _words_of(e: dict) -> list[str]:
    """The words of ``e`` that can name an act, one string per field (read apart: a person sees
    the text, a screen reader says the name, and the riskier wins): its id and hint, and its text
    and description unless they only name a setting or a folder, ask a question, point to help
    or form a sentence ("Format: PDF", "Trash (3)", "Send feedback?", "How to delete your account")."""
    keep = [v for v in (str(e.get(k) or "") for k in ("text", "desc"))
            if v and not (_SETTING.match(v) or _COUNTED.match(v) or _ABOUT.search(v) or _SENTENCE.match(v))]
    return keep + [str(e[k]) for k in ("id", "hint") if e.get(k)]


def _content_item(el: dict, tree: list) -> bool:
    """A list row that opens an item: a clickable container, not a button, with no text of its
    own and a title and a subtitle inside. Its texts name the item (a podcast "Trash Talk")."""
    if "button" in role(el) or role(el) in ("menu item", "link") or el.get("text") or el.get("desc"):
        return False
    return sum(1 for e in tree if not e.get("clickable") and _inside(e, el) and _label(e)) >= 2


def _parts_of(el: dict, tree: list) -> list[str]:
    """What a pressable element says, field by field: its own words and those of the non-clickable
    labels inside it (a button's visible text and icon; in Chromium's tree a button whose
    accessible name differs from its text holds that text as a label)."""
    if role(el) in _TOGGLES and _match([("install", _INSTALL_TOGGLE)], _label(el)) and not el.get("checked"):
        return [f"{_label(el)}: install apps from unknown sources"]
    guard = role(el) in _TOGGLES and el.get("checked") and phrases.GUARD.search(f"{_label(el)} {page_text(el, tree)}")
    if guard:
        return [f"{_label(el)}: shut down {guard.group(0)}"]
    if role(el) in _NO_ACT_ROLES or (el.get("clickable") and _content_item(el, tree)):
        return []
    if role(el) == "link" and len(str(el.get("text") or "").split()) >= 5:      # an article's title
        return [str(el[k]) for k in ("id", "hint") if el.get(k)]
    parts = _words_of(el)
    if el.get("clickable") and el.get("bounds"):
        parts += [w for e in tree if not e.get("clickable") and _inside(e, el) and _label(e) for w in _words_of(e)]
    return parts


def _target_parts(action, tree, screen) -> tuple[dict | None, list[str]]:
    """The element a click lands on and what it says (with the named element's words, when the
    point falls on something smaller inside it)."""
    el = target_element(action, tree, screen)
    if el is None:
        return None, []
    parts = _parts_of(el, tree)
    if parts and action.element is not None and action.element != el.get("index"):
        parts += _words_of(_element(action, tree))
    return el, parts


# -- context: dialogs, pages, fields ----------------------------------------------------------------
def _shown(el: dict, tree: list) -> list[str]:
    """The texts and descriptions a pressable element shows or is named by (its own and those of
    the labels inside it; ids do not count)."""
    inner = [e for e in tree if not e.get("clickable") and _inside(e, el)] if el.get("clickable") else []
    return [str(e[k]) for e in [el, *inner] for k in ("text", "desc") if e.get(k)]


def _confirms(el: dict, tree: list) -> bool:
    """Whether the button shows or is named a confirmation ("OK", "I understand, proceed")."""
    for f in (f for t in _shown(el, tree) for f in normalize(t)):
        words = set(f.split())
        if phrases.CONFIRM.match(f) or (words & phrases.CONFIRM_CORE and words <= phrases.CONFIRM_FILLER):
            return True
    return False


def _echoed(el: dict, tree: list, question: str) -> str:
    """The sentence of a dialog whose first word the button repeats ("Save" under "Save password?",
    "Share" under 'Share "Budget 2027"'): what the button does, else ''."""
    lines = [q for q in question.split(" | ") if q.strip()]
    for q in [q for q in lines if "?" in q] + lines[:1]:
        first = re.findall(r"[^\W\d_]+", q.casefold())[:1]
        if first and any(f == first[0] for t in _shown(el, tree) for f in normalize(t)):
            return q
    return ""


def _pays(text: str):
    """("pay", words) when ``text`` is about paying: payment words, or price words beside an amount."""
    return _match([("pay", phrases.PAY_CONTEXT)], text, False) or \
        (phrases.MONEY.search(text) and _match([("pay", phrases.PRICE_CONTEXT)], text, False)) or None


def _asked(text: str):
    """(class, words) of the act a dialog's (or a page's) question asks about: a risky verb in any
    form ("will be erased", "Powering off"), or words that say what is lost or allowed."""
    return _labels_risk(text) or _match([(r, _SENTENCE_VERBS[r]) for r in _ORDER if r != "password"], text) \
        or _match(phrases.CONTEXT_ONLY, text)


def _question(el: dict, tree: list, box: dict | None) -> str:
    """The text of ``el``'s dialog ``box`` (what it says happens if you do not press left out),
    else the page's when it asks a question ("¿Confirmar transferencia?" above an Aceptar button),
    else ''."""
    if box is not None:
        return " | ".join(t for t in dialog_text(box, tree).split(" | ") if not phrases.OTHERWISE.search(t))
    text = page_text(el, tree)
    return text if re.search(r"[?\uff1f]", text) else ""


def _confirm_in_context(el: dict, tree: list, box: dict | None, text: str):
    """What a confirm button (OK, Yes, Proceed, Submit...) agrees to: the act its dialog ``box``
    (or a page's question; ``text``: `_question`) asks about (a dialog that only reports asks
    nothing), or paying, on a page about payment."""
    if text:
        money = phrases.MONEY.search(text)
        if phrases.ASKS.search(text) or money:
            m = _asked(text) or (money and _pays(text))
            if m:
                return m[0], f"confirms {text[:160]!r} ({m[1]!r})"
        if box is not None:
            return None
    text = page_text(el, tree)
    m = _pays(text)
    if m:
        return "pay", f"confirms on a payment page {text[:160]!r} ({m[1]!r})"
    m = phrases.NEW_SECRET.search(text)
    return ("password", f"confirms a new secret on {text[:160]!r} ({m.group(0)!r})") if m else None


def _replaces(el: dict, tree: list, box: dict | None):
    """("delete", words) for a Replace / Overwrite button where a file or item of that name already
    exists (its dialog ``box`` or page says so), not the Replace of a find-and-replace bar."""
    words = [m for t in _shown(el, tree) if (m := _match(phrases.REPLACE, t))]
    if not words:
        return None
    text = dialog_text(box, tree) if box is not None else page_text(el, tree)
    return ("delete", f"{words[0][1]!r} where {text[:160]!r} already exists") if phrases.EXISTS.search(text) else None


def _press(el: dict, parts: list[str], tree: list, screen, how: str):
    """A pressed element is judged by what it says (every field apart, the riskier wins), a
    confirm button by what it confirms, a Replace button by what it would overwrite."""
    m = _riskiest(parts)
    if m:
        return m[0], f"{how} on element {m[2].strip()!r} ({m[1]!r})"
    if el is None:
        return None, ""
    box = dialog_of(el, tree, screen)
    question = _question(el, tree, box)
    echo = _echoed(el, tree, question)
    m = echo and (_asked(echo) or _match([("send", phrases.SHARE), ("password", _CREDENTIAL)], echo))
    if m:               # the dialog's own verb: "Save" under "Save password?", "Share" under 'Share "Plan"'
        return m[0], f"{how} on {' | '.join(parts[:2])!r}, which does {echo[:120]!r} ({m[1]!r})"
    c = (echo or _confirms(el, tree)) and _confirm_in_context(el, tree, box, question)
    if c:
        return c[0], f"{how} on {' | '.join(parts[:2])!r}, which {c[1]}"
    r = _replaces(el, tree, box)
    if r:
        return r[0], f"{how} on {r[1]}"
    if any(re.fullmatch(r"turn off|switch off|disable|deactivate", f) for t in _shown(el, tree) for f in normalize(t)):
        text = page_text(el, tree)          # "Turn off" on the 2-Step Verification page
        m = _match([("password", _SECURITY_OFF)], "turn off " + text)
        if m:
            return "password", f"{how} on {' | '.join(parts[:2])!r} on a page about {text[:120]!r}"
    return None, ""


def _click(action, tree, screen):
    el, parts = _target_parts(action, tree, screen)
    return _press(el, parts, tree, screen, action.type)


def _field_kind(e) -> str | None:
    """What Enter does in a text field: "command" (runs it), "search" (looks it up), "message"
    (sends it), "document" (a new line in a document), else None (unknown)."""
    if e is None:
        return None
    text = " ".join([_label(e), role(e)])
    if _match([("command", _COMMAND_FIELD)], text, False):
        return "command"
    if _match([("search", _SEARCH_FIELD)], text, False):
        return "search"
    if _match([("message", _MESSAGE_FIELD)], text, False):
        return "message"
    b = e.get("bounds")
    # a tall editable text area: an editor's document (mousepad, gedit), where Enter is a new line
    if e.get("editable") and role(e) in ("text", "document text", "paragraph", "entry") and b and b[3] - b[1] >= 100:
        return "document"
    return None


def _submit(field, content: str, how: str):
    """The risk of submitting ``content`` (typed text, or the command line on Enter) in ``field``;
    an unknown field is judged as a command line, a search box or a document runs nothing."""
    kind = _field_kind(field)
    if kind in ("search", "document"):
        return None, ""
    c = _command_risk(content)
    if c:
        return c[0], f"{how} runs {c[1]!r}"
    if kind == "message":
        return "send", f"{how} in message field {_label(field)!r}"
    return None, ""


def _secret_field(el) -> bool:
    """A field for a password, PIN, card number, CVC or wallet key (a search box never is)."""
    if el.get("password"):
        return True
    return _field_kind(el) != "search" and bool(_match([("password", _PATTERNS["password"])], _label(el), False))


def _type(action, tree, screen):
    el = target_element(action, tree, screen) if action.element is not None or action.point is not None \
        else focused(tree)
    el = el or focused(tree)
    if el is not None and _secret_field(el):
        return "password", f"typing into secret field {_label(el)!r}"
    if "\n" in action.text or "\r" in action.text:
        return _submit(el, action.text, "typing with a newline (type and submit)")
    return None, ""


_TEXT_ROLE = re.compile(r"edit|entry|text|terminal|input|field|search|combo|document|paragraph", re.I)


def _pressable(e: dict) -> bool:
    """A focused element that Enter or Space presses: a button or link, not a text field (whatever
    its toolkit calls it: EditText, TerminalView, entry...)."""
    if "button" in role(e) or role(e) in ("link", "menu item"):
        return True
    return bool(e.get("clickable")) and not (e.get("editable") or e.get("password") or e.get("hint")
                                             or _TEXT_ROLE.search(role(e)) or _field_kind(e))


def _key(action, tree, screen=None):
    """Key chords by what they do: fixed ones (shift+delete outside a text field, Delete on selected
    items), quitting where work is unsaved, Enter or Space on a focused button as a press of it,
    and Enter (or ctrl+enter) in a field by what it submits."""
    keys = chord(action.keys) if action.type == "key" else frozenset({"enter"})
    field = focused(tree)
    in_text = field is not None and bool(field.get("editable") or field.get("password")
                                         or (not _pressable(field) and _TEXT_ROLE.search(role(field))))
    for need, risk, why, where in CHORDS:
        if keys != need and not (where == "submit" and keys == need | {"shift"}):
            continue
        if where == "any" or (where == "text" and not in_text) \
                or (where == "items" and field is not None and not in_text) \
                or (where == "submit" and _field_kind(field) not in ("document", "search")):
            return risk, why
    for need, why in QUIT:
        work = unsaved_work(tree) if need <= keys else None
        if work:
            return "delete", f"{why} with unsaved work ({work!r})"
    if keys in ({"enter"}, {"space"}) and field is not None and _pressable(field):
        return _press(field, _parts_of(field, tree), tree, screen, f"{'Enter' if 'enter' in keys else 'Space'} "
                      "on the focused button")
    if "enter" in keys:
        shown = str((field or {}).get("value") or (field or {}).get("text") or "")
        return _submit(field, command_line(shown), "Enter")
    return None, ""


def _labels_risk(text: str, patterns=None):
    """(class, words) when a label names a risky act (naming a secret is no act: typing one is)."""
    return _match([(r, _PATTERNS[r]) for r in (patterns or _ORDER) if r != "password"], text)


def _riskiest(parts: list[str]):
    """(class, words, part): the riskiest act any of ``parts`` names (classes in the gate's order),
    or a change of password or PIN ("Update password"), else None."""
    found = [(*m, p) for p in parts
             if (m := _labels_risk(p) or _match([("password", _CREDENTIAL), ("password", _SECURITY_OFF)], p))]
    return min(found, key=lambda m: _ORDER.index(m[0])) if found else None


def _gesture(action, tree, screen):
    """Swipes and drags, judged by what they do."""
    start, end = _pixel(action.point, screen), _pixel(action.end, screen)
    size = _screen_size(screen)
    if action.type == "drag" and end is not None:
        hits = [e for e in _hits(tree, end) if not size or _area(e) < 0.5 * size[0] * size[1]]
        text = " | ".join(_label(e) for e in hits if _label(e))
        if _match([("delete", _BIN)], text, False):
            return "delete", f"drag onto {text!r}"
        m = _labels_risk(text)
        if m:
            return m[0], f"drop onto {text!r} ({m[1]!r})"
    sideways = (action.type in ("swipe", "drag") and start and end and abs(end[0] - start[0]) > abs(end[1] - start[1])) \
        or (action.type == "scroll" and action.direction in ("left", "right"))
    if sideways:
        hits = _hits(tree, start)
        rows = [e for e in hits if not size or _area(e) < 0.5 * size[0] * size[1]]
        if rows:
            # the row is the clickable element under the finger (list rows are), else the largest
            row = next((e for e in rows if e.get("clickable")), rows[-1])
            text = " | ".join(_label(e) for e in [row] + [e for e in tree if _inside(e, row)] if _label(e))
            m = _labels_risk(text, ("delete",))
            if m:
                return "delete", f"{action.type} sideways on a row offering {m[1]!r} ({text!r})"
    return None, ""


def classify(action: GuiAction, tree: list | None = None, screen=None) -> tuple[str | None, str]:
    """(risk class or None, evidence in words)."""
    t = action.type
    if t in ("wait", "answer", "terminate", "open_app"):
        return None, ""
    try:
        if action.element is not None:
            if not tree:
                raise _Unresolved(f"element {action.element} named but the device gave no UI tree")
            _element(action, tree)
        if t in ("swipe", "drag", "scroll"):
            return _gesture(action, tree or [], screen) if tree else (None, "")
        if t == "type":
            return _type(action, tree, screen)
        if t == "key" or (t == "system_button" and action.button == "enter"):
            return _key(action, tree, screen)
        if t in ("click", "double_click", "long_press", "right_click") and tree:
            return _click(action, tree, screen)
    except _Unresolved as e:
        return "unknown", f"unresolvable target: {e}"
    return None, ""


class SafetyGate:
    """``check(action, tree=, screen=)`` -> decision dict; ``allow`` is the unattended allow-list
    (risk classes, or ``"all"``); ``confirm(decision) -> bool`` asks a person (None: nobody to ask,
    the answer is No)."""

    def __init__(self, allow: Iterable[str] = (), confirm: Callable[[dict], bool] | None = None):
        allow = {a.strip().lower() for a in allow if a and a.strip()}
        unknown = allow - set(RISK_CLASSES) - {"all"}
        if unknown:
            raise ValueError(f"unknown risk class(es) {sorted(unknown)}; known: {', '.join(RISK_CLASSES)}, all")
        self.allow = set(RISK_CLASSES) if "all" in allow else allow
        self.confirm = confirm
        self.decisions: list[dict] = []

    def check(self, action: GuiAction, *, tree: list | None = None, screen=None) -> dict:
        risk, evidence = classify(action, tree, screen)
        if risk is None:
            return {"risk": None, "allowed": True}
        d = {"risk": risk, "evidence": evidence, "action": action.to_dict()}
        if risk in self.allow:
            d.update(allowed=True, by="allow-list")
        elif self.confirm is not None:
            d.update(allowed=bool(self.confirm(d)), by="user")
        else:
            d.update(allowed=False, by="default-no")
        self.decisions.append(d)
        return d


def default_gate(device, allow=(), confirm=None) -> SafetyGate:
    """The gate a run gets: on a device declaring the "sandbox" capability (a simulator, where
    nothing real is sent, paid or deleted) every class is allowed, still judged and recorded;
    elsewhere ``allow`` and ``confirm`` decide."""
    if "sandbox" in device.capabilities:
        return SafetyGate(allow=("all",))
    return SafetyGate(allow, confirm=confirm)


def console_confirm(decision: dict) -> bool:
    """Ask on the terminal; anything but y/yes is No (also EOF and Ctrl-C)."""
    try:
        ans = input(f"\nRisky action ({decision['risk']}): {decision['evidence']}\n"
                    f"  {decision['action']}\nExecute it? [y/N] ")
    except (EOFError, KeyboardInterrupt):
        return False
    return ans.strip().lower() in ("y", "yes")
