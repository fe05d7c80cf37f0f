"""A person's clicks and keys on an X display, as GuiActions: the RECORD extension, read from Python.

`XInputRecorder` opens its own connection to the X server, asks the RECORD extension for the
core input events of every client and device (key and button presses and releases, pointer
motion), and collects them on a background thread. `InputAssembler` turns that raw stream into
the actions an agent would have sent: a press and release in place is a ``click`` (two in quick
succession a ``double_click``, a long one a ``long_press``), a press that moved is a ``drag``, the
wheel is ``scroll``, printable keys become one ``type`` action, chords and special keys a ``key``
action (pyautogui key names, as the desktop device executes them).

Whose input it is: the X server cannot tell a person's keyboard from injected input. The agent
injects through XTEST, and so do xdotool and remote desktops. So attribution is by turn, not by
source: the recorder is started when a person takes over and stopped when they hand back, and
while a person holds the turn the agent does not act (`embodia.agent.loop.takeover`).

>>> a = InputAssembler((1280, 800))
>>> for ev in [RawEvent("press", 1, 640, 400, 0, 1000), RawEvent("release", 1, 641, 400, 0, 1080),
...            RawEvent("key", "8", 640, 400, 0, 1500), RawEvent("key", "6", 640, 400, 0, 1600),
...            RawEvent("key", "s", 640, 400, CTRL, 1900)]:
...     a.feed(ev)
>>> [x.to_dict() for x in a.take(flush=True)]            # doctest: +NORMALIZE_WHITESPACE
[{'type': 'click', 'point': (500.4, 500.6)}, {'type': 'type', 'text': '86'},
 {'type': 'key', 'keys': ('ctrl', 's')}]
"""
from __future__ import annotations

import math
import threading
import time
from typing import NamedTuple

from embodia.devices.actions import GuiAction
from embodia.devices.coords import from_pixels

__all__ = ["RawEvent", "InputAssembler", "XInputRecorder", "SHIFT", "CTRL", "ALT", "SUPER"]

# X modifier bits of an event's state
SHIFT, LOCK, CTRL, ALT, SUPER = 1, 2, 4, 8, 64
MOVE_PX = 8                # a press that moved less than this before its release is a click
DOUBLE_MS = 400            # a second click this soon, in the same place, makes a double click
LONG_MS = 800              # a press held this long without moving is a long press
SCROLL_BURST_MS = 400      # wheel notches closer than this are one scroll action
TEXT_IDLE_MS = 600         # typed text with no key for this long is a finished ``type`` action
WHEEL = {4: "up", 5: "down", 6: "left", 7: "right"}

# X keysym names -> pyautogui key names (what `DesktopDevice` presses)
KEY_NAMES = {"Return": "enter", "KP_Enter": "enter", "Escape": "esc", "BackSpace": "backspace",
             "Tab": "tab", "ISO_Left_Tab": "tab", "Delete": "delete", "Insert": "insert", "Home": "home",
             "End": "end", "Left": "left", "Right": "right", "Up": "up", "Down": "down",
             "Prior": "pageup", "Page_Up": "pageup", "Next": "pagedown", "Page_Down": "pagedown",
             "space": "space", "Menu": "apps", "Print": "printscreen"}
MODIFIER_KEYS = {"Shift_L", "Shift_R", "Control_L", "Control_R", "Alt_L", "Alt_R", "Super_L", "Super_R",
                 "Meta_L", "Meta_R", "ISO_Level3_Shift", "Caps_Lock", "Num_Lock", "Mode_switch",
                 "Hyper_L", "Hyper_R"}


class RawEvent(NamedTuple):
    """One input event: ``kind`` press/release (``code`` = button), key (``code`` = the character
    typed, or the X keysym name of a special key), or motion; ``x, y`` the pointer in physical
    pixels; ``state`` the X modifier mask; ``ms`` the server's timestamp."""
    kind: str
    code: int | str
    x: int
    y: int
    state: int
    ms: int


def _mods(state: int) -> list[str]:
    return [name for bit, name in ((CTRL, "ctrl"), (ALT, "alt"), (SUPER, "win"), (SHIFT, "shift")) if state & bit]


class InputAssembler:
    """Raw events in, GuiActions out (see the module doc); ``screen`` = (width, height) in pixels."""

    def __init__(self, screen: tuple[int, int]):
        self.screen = screen
        self._done: list[GuiAction] = []
        self._text = ""
        self._text_ms = 0                      # the last typed character's time
        self._press: RawEvent | None = None
        self._last_click: tuple[RawEvent, int] | None = None    # (release, index in _done)
        self._scroll: tuple[str, RawEvent, int] | None = None  # (direction, last notch, index in _done)

    def _point(self, x: int, y: int) -> tuple[float, float]:
        return tuple(round(v, 1) for v in from_pixels((x, y), self.screen))

    def _flush_text(self) -> None:
        if self._text:
            self._done.append(GuiAction("type", text=self._text))
            self._text = ""

    def feed(self, ev: RawEvent) -> None:
        if ev.kind == "key":
            self._key(ev)
        elif ev.kind == "press" and ev.code in WHEEL:
            self._wheel(ev)
        elif ev.kind == "press" and ev.code in (1, 3):
            self._flush_text()
            self._press = ev
        elif ev.kind == "release" and self._press is not None and ev.code == self._press.code:
            self._release(self._press, ev)
            self._press = None

    def _key(self, ev: RawEvent) -> None:
        name = str(ev.code)
        if name in MODIFIER_KEYS:
            return
        chord = [m for m in _mods(ev.state) if m != "shift"]
        if len(name) == 1 and not chord:             # a character, shifted or not
            self._text += name
            self._text_ms = ev.ms
            return
        if name in ("Return", "KP_Enter") and not chord and self._text:
            self._text += "\n"                       # the desktop types "\n" as Enter
            self._flush_text()
            return
        self._flush_text()
        key = KEY_NAMES.get(name) or (name.lower() if len(name) > 1 else name.lower())
        mods = _mods(ev.state) if len(name) > 1 else chord     # shift stays in chords of special keys
        self._done.append(GuiAction("key", keys=(*mods, key)))

    def _wheel(self, ev: RawEvent) -> None:
        self._flush_text()
        direction = WHEEL[int(ev.code)]
        if self._scroll and self._scroll[0] == direction and ev.ms - self._scroll[1].ms <= SCROLL_BURST_MS:
            self._scroll = (direction, ev, self._scroll[2])      # the same burst: one action
            return
        self._done.append(GuiAction("scroll", point=self._point(ev.x, ev.y), direction=direction))
        self._scroll = (direction, ev, len(self._done) - 1)

    def _release(self, down: RawEvent, up: RawEvent) -> None:
        moved = math.hypot(up.x - down.x, up.y - down.y) >= MOVE_PX
        held = max(0, up.ms - down.ms)
        p = self._point(down.x, down.y)
        if down.code == 3:
            self._done.append(GuiAction("right_click", point=p))
        elif moved:
            self._done.append(GuiAction("drag", point=p, end=self._point(up.x, up.y), duration_ms=min(held, 60_000)))
        elif held >= LONG_MS:
            self._done.append(GuiAction("long_press", point=p, duration_ms=min(held, 60_000)))
        else:
            last = self._last_click
            if (last is not None and last[1] == len(self._done) - 1 and down.ms - last[0].ms <= DOUBLE_MS
                    and math.hypot(down.x - last[0].x, down.y - last[0].y) < MOVE_PX):
                self._done[-1] = GuiAction("double_click", point=self._done[-1].point)
                self._last_click = None
                return
            self._done.append(GuiAction("click", point=p))
            self._last_click = (up, len(self._done) - 1)
            return
        self._last_click = None

    def pending(self) -> bool:
        """True while an action is still being made (a button held, text being typed)."""
        return self._press is not None or bool(self._text)

    def take(self, *, flush: bool = False, now_ms: int | None = None) -> list[GuiAction]:
        """The actions completed so far (and, with ``flush``, the text typed so far). A click is held
        back for DOUBLE_MS after its release (``now_ms``: the server time now) in case a second
        click makes it a double click; ``flush`` gives it at once. Typed text is finished after
        TEXT_IDLE_MS without a key (so the screen after it is observed before the next action)."""
        if flush or (self._text and now_ms is not None and now_ms - self._text_ms >= TEXT_IDLE_MS):
            self._flush_text()
        keep = 0
        if not flush and self._last_click is not None and self._last_click[1] == len(self._done) - 1:
            if now_ms is None or now_ms - self._last_click[0].ms <= DOUBLE_MS:
                keep = 1
        out = self._done[: len(self._done) - keep]
        self._done = self._done[len(self._done) - keep:]
        if self._last_click is not None:
            self._last_click = (self._last_click[0], self._last_click[1] - len(out)) if keep else None
        if self._scroll is not None:
            self._scroll = None if self._scroll[2] < len(out) else (*self._scroll[:2], self._scroll[2] - len(out))
        return out


class XInputRecorder:
    """Records the input events of an X display on a thread (RECORD extension; python-xlib).

    >>> rec = XInputRecorder(":99"); rec.start()            # doctest: +SKIP
    >>> ...                                                   # doctest: +SKIP
    >>> rec.stop(); rec.drain()                              # doctest: +SKIP
    [RawEvent(kind='press', code=1, x=100, y=200, state=0, ms=9576498), ...]
    """

    def __init__(self, display: str):
        from Xlib.display import Display
        self.display_name = display
        self._ctl = Display(display)          # control connection: the context, keymap, time
        self._data = Display(display)         # blocked in record_enable_context on the thread
        if not self._ctl.has_extension("RECORD"):
            self._close()
            raise RuntimeError(f"X display {display!r} has no RECORD extension: a person's input cannot "
                               f"be recorded there")
        self._events: list[RawEvent] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._ctx = None
        self._last = (0, 0.0)              # (server ms, local arrival) of the newest event
        self.error: BaseException | None = None
        self._keymap = self._read_keymap()
        self._names: dict[int, str] | None = None

    def _read_keymap(self) -> dict[int, list[int]]:
        setup = self._ctl.display.info
        first, last = setup.min_keycode, setup.max_keycode
        rows = self._ctl.get_keyboard_mapping(first, last - first + 1)
        return {first + i: list(r) for i, r in enumerate(rows)}

    def key_name(self, keycode: int, state: int) -> str | None:
        """The character a key types (shift applied), or the keysym's name for a special key."""
        syms = self._keymap.get(keycode) or []
        sym = (syms[1] if state & SHIFT and len(syms) > 1 and syms[1] else syms[0]) if syms else 0
        if 0x20 <= sym <= 0x7E or 0xA0 <= sym <= 0xFF:
            return chr(sym)
        if 0x01000000 <= sym <= 0x0110FFFF:
            return chr(sym - 0x01000000)
        # a special key: its unshifted name (shift+Tab is ISO_Left_Tab; the chord keeps the shift)
        return self._name(sym) or (self._name(syms[0]) if syms else None)

    def _name(self, sym: int) -> str | None:
        """A keysym's name (XK.keysym_to_string gives "\r" for Return, None for F1)."""
        from Xlib import XK
        if self._names is None:
            self._names = {v: k[3:] for k, v in vars(XK).items() if k.startswith("XK_") and isinstance(v, int)}
        return self._names.get(sym) if sym else None

    def start(self) -> None:
        from Xlib import X
        from Xlib.ext import record
        self._ctx = self._ctl.record_create_context(0, [record.AllClients], [{
            "core_requests": (0, 0), "core_replies": (0, 0), "ext_requests": (0, 0, 0, 0),
            "ext_replies": (0, 0, 0, 0), "delivered_events": (0, 0),
            "device_events": (X.KeyPress, X.MotionNotify), "errors": (0, 0),
            "client_started": False, "client_died": False}])
        self._ctl.sync()
        self._thread = threading.Thread(target=self._serve, name="embodia-x-input", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            self._data.record_enable_context(self._ctx, self._on_reply)
        except Exception as e:       # the server went away: said by `drain`'s caller through .error
            self.error = e

    def _on_reply(self, reply) -> None:
        from Xlib import X
        from Xlib.ext import record
        from Xlib.protocol import rq
        if reply.category != record.FromServer or reply.client_swapped or not reply.data:
            return
        data, out = reply.data, []
        while len(data):
            ev, data = rq.EventField(None).parse_binary_value(data, self._data.display, None, None)
            t = ev.type & 0x7F
            if t == X.KeyPress:
                name = self.key_name(ev.detail, ev.state)
                if name is not None:
                    out.append(RawEvent("key", name, ev.root_x, ev.root_y, ev.state, ev.time))
            elif t in (X.ButtonPress, X.ButtonRelease):
                kind = "press" if t == X.ButtonPress else "release"
                out.append(RawEvent(kind, int(ev.detail), ev.root_x, ev.root_y, ev.state, ev.time))
            elif t == X.MotionNotify:
                out.append(RawEvent("motion", 0, ev.root_x, ev.root_y, ev.state, ev.time))
        with self._lock:
            self._events.extend(out)
            if out:
                self._last = (out[-1].ms, time.monotonic())

    def drain(self) -> list[RawEvent]:
        """The events recorded since the last call."""
        with self._lock:
            out, self._events = self._events, []
        return out

    def server_ms(self) -> int:
        """About the X server's time now (for `InputAssembler.take`): the last event's time plus
        the time since it arrived; 0 before any event."""
        with self._lock:
            ms, at = self._last
        return int(ms + (time.monotonic() - at) * 1e3) if at else 0

    def stop(self) -> None:
        """Stop recording; events already recorded stay for `drain`."""
        if self._ctx is not None:
            try:
                self._ctl.record_disable_context(self._ctx)
                self._ctl.sync()
            except Exception:        # the server is gone: nothing more will come anyway
                pass
        if self._thread is not None:
            self._thread.join(2.0)
            self._thread = None
        if self._ctx is not None:
            try:
                self._ctl.record_free_context(self._ctx)
                self._ctl.sync()
            except Exception:
                pass
            self._ctx = None

    def _close(self) -> None:
        for conn in (self._ctl, self._data):
            try:
                conn.close()
            except Exception:
                pass

    def close(self) -> None:
        self.stop()
        self._close()
