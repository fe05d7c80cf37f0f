"""A person's clicks, wheel turns and keys in a browser page, as GuiActions (take-over on ``browser:``).

While a person holds the device (`embodia.agent.loop.takeover`), a listener in the page reports
every trusted input event through a DevTools binding (``Runtime.addBinding``): the report leaves
the page at once as a ``Runtime.bindingCalled`` event, so a click that navigates away is not lost
with its page, and the listener is installed in every document the tab opens during the turn.
The agent sends nothing during the turn, so every event is the person's.

Events become actions in the 0..1000 space of the viewport: ``click`` -> click (two clicks and a
``dblclick`` at one point -> double_click), ``contextmenu`` -> right_click, ``wheel`` -> scroll in
the wheel's direction, printable keys without ctrl/alt/meta -> one ``type`` per run of characters,
other keys -> ``key`` with the held modifiers (``("ctrl", "a")``).

>>> PersonEvents.actions([{"t": "key", "k": "h"}, {"t": "key", "k": "i"}, {"t": "key", "k": "Enter"}], (1000, 1000))
[GuiAction(type='type', point=None, end=None, text='hi', keys=(), button=None, app=None, direction=None, duration_ms=None, status=None, element=None), GuiAction(type='key', point=None, end=None, text=None, keys=('enter',), button=None, app=None, direction=None, duration_ms=None, status=None, element=None)]
"""
from __future__ import annotations

import json
import time

from embodia.devices.actions import GuiAction
from embodia.devices.coords import from_pixels

BINDING = "__embodiaPerson"
LISTENER = """(() => { if (window.__embodiaPersonOn) return; window.__embodiaPersonOn = true;
  const send = o => { try { window.BINDING(JSON.stringify(o)); } catch (e) {} };
  const mods = e => [e.ctrlKey && 'ctrl', e.altKey && 'alt', e.shiftKey && 'shift', e.metaKey && 'win'].filter(Boolean);
  addEventListener('click', e => e.isTrusted && e.button === 0 && send({t: 'click', x: e.clientX, y: e.clientY}), true);
  addEventListener('dblclick', e => e.isTrusted && send({t: 'dblclick', x: e.clientX, y: e.clientY}), true);
  addEventListener('contextmenu', e => e.isTrusted && send({t: 'right', x: e.clientX, y: e.clientY}), true);
  addEventListener('wheel', e => e.isTrusted && send({t: 'wheel', x: e.clientX, y: e.clientY, dx: e.deltaX, dy: e.deltaY}),
                   {capture: true, passive: true});
  addEventListener('keydown', e => e.isTrusted && send({t: 'key', k: e.key, m: mods(e)}), true);
})();""".replace("BINDING", BINDING)
# DOM key names -> the key names GuiActions use (the desktop's)
KEY_NAMES = {"Enter": "enter", "Tab": "tab", "Escape": "esc", "Backspace": "backspace", "Delete": "delete",
             "ArrowUp": "up", "ArrowDown": "down", "ArrowLeft": "left", "ArrowRight": "right", "Home": "home",
             "End": "end", "PageUp": "pageup", "PageDown": "pagedown", "Insert": "insert", " ": "space",
             **{f"F{n}": f"f{n}" for n in range(1, 13)}}
MODIFIER_KEYS = {"Control", "Alt", "Shift", "Meta", "AltGraph", "CapsLock"}
DOUBLE_CLICK_S = 0.5      # a click this recent may still become half of a double click
TYPING_PAUSE_S = 1.0      # characters this recent may still be followed by more of one typed text


class PersonEvents:
    """The listener's lifetime on one page connection: ``start`` installs it, ``take`` returns the
    actions reported since, ``stop`` removes it from new documents."""

    def __init__(self, page, size: tuple[int, int]):
        self.page, self.size = page, size
        self._script: str | None = None
        self._pending: list[dict] = []

    def start(self) -> None:
        self.page.call("Runtime.addBinding", name=BINDING)
        self._script = self.page.call("Page.addScriptToEvaluateOnNewDocument", source=LISTENER)["identifier"]
        self.page.call("Runtime.evaluate", expression=LISTENER)

    def feed(self, events: list[dict]) -> None:
        """Keep the person's reports among the page's events (the device reads them all)."""
        for ev in events:
            if ev.get("method") == "Runtime.bindingCalled" and ev["params"].get("name") == BINDING:
                report = json.loads(ev["params"].get("payload") or "{}")
                report["at"] = time.monotonic()
                self._pending.append(report)

    def take(self, flush: bool = False) -> list[GuiAction]:
        """The actions of the reports so far; the last clicks are held back (unless ``flush``) while
        they are recent enough to become a double click."""
        keep, p = [], self._pending
        last = p[-1] if p else None
        if not flush and last is not None and time.monotonic() - last["at"] < _open_for(last):
            kind = _open_for(last)
            while p and _open_for(p[-1]) == kind:
                keep.insert(0, p.pop())
        out, self._pending = self.actions(p, self.size), keep
        return out

    def stop(self) -> list[GuiAction]:
        if self._script is not None:
            self.page.call("Page.removeScriptToEvaluateOnNewDocument", identifier=self._script)
            self._script = None
        self.page.call("Runtime.removeBinding", name=BINDING)
        return self.take(flush=True)

    @staticmethod
    def actions(reports: list[dict], size: tuple[int, int]) -> list[GuiAction]:
        """Reports -> actions (see the module doc)."""
        out: list[GuiAction] = []
        for r in reports:
            t = r.get("t")
            point = from_pixels((r.get("x", 0), r.get("y", 0)), size) if "x" in r else None
            if t == "click":
                out.append(GuiAction("click", point=point))
            elif t == "dblclick":
                for _ in range(2):     # the two clicks a double click also fires
                    if out and out[-1].type == "click" and out[-1].point == point:
                        out.pop()
                out.append(GuiAction("double_click", point=point))
            elif t == "right":
                out.append(GuiAction("right_click", point=point))
            elif t == "wheel":
                dx, dy = r.get("dx", 0), r.get("dy", 0)
                direction = ("down" if dy > 0 else "up") if abs(dy) >= abs(dx) else ("right" if dx > 0 else "left")
                out.append(GuiAction("scroll", point=point, direction=direction))
            elif t == "key":
                _key(out, str(r.get("k", "")), [m for m in r.get("m", ()) if m != "shift" or len(r.get("k", "")) > 1])
        return out


def _open_for(report: dict) -> float:
    """How long a report may still merge with the next ones: a click into a double click, a
    character into the text being typed; 0 for the rest."""
    if report.get("t") == "click":
        return DOUBLE_CLICK_S
    k = str(report.get("k", ""))
    if report.get("t") == "key" and len(k) == 1 and not [m for m in report.get("m", ()) if m != "shift"]:
        return TYPING_PAUSE_S
    return 0.0


def _key(out: list[GuiAction], key: str, mods: list[str]) -> None:
    """One keydown: a character joins the run of typed text, anything else is a key (chord)."""
    if key in MODIFIER_KEYS or not key:
        return
    if len(key) == 1 and not mods:
        if out and out[-1].type == "type":
            out[-1] = GuiAction("type", text=out[-1].text + key)
        else:
            out.append(GuiAction("type", text=key))
        return
    out.append(GuiAction("key", keys=(*mods, KEY_NAMES.get(key, key.lower() if len(key) == 1 else key))))
