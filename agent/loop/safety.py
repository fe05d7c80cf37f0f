"""The safety gate: GUI actions judged risky need a yes before they run; the default is No.

Risk classes: ``send`` (messages, posts, mail), ``delete`` (delete, remove, erase, uninstall),
``pay`` (pay, checkout, place order), ``purchase`` (buy, purchase, subscribe), ``install``
(install, download an app), ``password`` (typing into a password field or one labelled as a
password/PIN). The gate judges deterministically from the action and what it targets: the UI-tree
element it names or that contains its point (text, content description, resource id), and for
`type` the focused element. A device without a UI tree gives the gate only the action itself, so on
such a device (a plain desktop) only `type` into nothing-known passes unjudged: run unattended
there with that in mind.

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
"""
from __future__ import annotations

import re
from typing import Callable, Iterable

from embodia.devices import GuiAction

RISK_CLASSES = ("send", "delete", "pay", "purchase", "install", "password")

# word patterns over an element's label (text, description, id), first match wins
_PATTERNS = [
    ("password", re.compile(r"\b(password|passcode|passwd|pin code|pin)\b", re.I)),
    ("pay", re.compile(r"\b(pay|pay now|checkout|check out|place order|confirm payment|transfer money)\b", re.I)),
    ("purchase", re.compile(r"\b(buy|buy now|purchase|subscribe|order now|add to cart)\b", re.I)),
    ("install", re.compile(r"\b(install|download app|get app|update app)\b", re.I)),
    ("delete", re.compile(r"\b(delete|remove|erase|uninstall|discard|trash|clear all|wipe|factory reset)\b", re.I)),
    ("send", re.compile(r"\b(send|post|tweet|publish|reply all|share now)\b", re.I)),
]
_POINTING = {"click", "double_click", "long_press", "right_click"}


class RiskRefused(RuntimeError):
    """A risky action was not confirmed; the episode ends and the refusal is recorded."""

    def __init__(self, decision: dict):
        self.decision = decision
        super().__init__(f"refused {decision['risk']!r} action ({decision['evidence']}); "
                         f"allow it with --allow {decision['risk']}")


def _label(e: dict) -> str:
    parts = [str(e.get(k) or "") for k in ("text", "desc", "id", "hint")]
    # resource ids read as words: com.app:id/send_button -> "send button"
    return " ".join(p.replace("_", " ").replace("/", " ").replace(":", " ") for p in parts if p)


def _screen_size(screen):
    if screen is None:
        return None
    if hasattr(screen, "width"):
        return screen.width, screen.height
    return tuple(screen)


def target_element(action: GuiAction, tree: list | None, screen) -> dict | None:
    """The UI-tree element an action acts on: the one it names, else the smallest element
    containing its point (pixel bounds), else for `type` the focused element."""
    if not tree:
        return None
    if action.element is not None:
        return next((e for e in tree if e.get("index") == action.element), None)
    size = _screen_size(screen)
    if action.point is not None and size:
        x, y = action.point[0] * size[0] / 1000.0, action.point[1] * size[1] / 1000.0
        hits = [e for e in tree if e.get("bounds") and
                e["bounds"][0] <= x < e["bounds"][2] and e["bounds"][1] <= y < e["bounds"][3]]
        labelled = [e for e in hits if _label(e)] or hits
        if labelled:
            return min(labelled, key=lambda e: (e["bounds"][2] - e["bounds"][0]) * (e["bounds"][3] - e["bounds"][1]))
    if action.type == "type":
        return next((e for e in tree if e.get("focused")), None)
    return None


def classify(action: GuiAction, tree: list | None = None, screen=None) -> tuple[str | None, str]:
    """(risk class or None, evidence in words)."""
    if action.type in ("wait", "answer", "terminate", "scroll", "swipe"):
        return None, ""
    el = target_element(action, tree, screen)
    if action.type == "type":
        if el is not None and (el.get("password") or _PATTERNS[0][1].search(_label(el))):
            return "password", f"typing into password field {_label(el)!r}"
        return None, ""
    if action.type == "open_app":
        return None, ""
    if action.type in _POINTING and el is not None:
        label = _label(el)
        for risk, pat in _PATTERNS[1:]:
            m = pat.search(label)
            if m:
                return risk, f"{action.type} on element {label.strip()!r} ({m.group(0)!r})"
    if action.type == "key" and {k.lower() for k in action.keys} >= {"shift", "delete"}:
        return "delete", "shift+delete (permanent delete)"
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
    if "sandbox" in getattr(device, "capabilities", ()):
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
