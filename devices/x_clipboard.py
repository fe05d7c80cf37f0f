"""Own the X clipboard from Python (python-xlib, which pyautogui already brings on Linux): no xclip
or xsel binary needed to paste text that the keyboard cannot type.

An X selection is not a buffer: its owner answers each paste request. ``ClipboardOwner`` keeps a
hidden window on its own connection and a thread that answers ``SelectionRequest`` events
(TARGETS, UTF8_STRING, STRING, TEXT, text/plain) with the text it was last given, until another
program takes the clipboard or it is closed.

>>> with ClipboardOwner(":99") as clip:                                  # doctest: +SKIP
...     clip.own("Grüße, 東京")        # now ctrl+v in any window pastes it
"""
from __future__ import annotations

import queue
import select
import threading

MAX_BYTES = 256 * 1024      # larger transfers need the INCR protocol; nobody pastes that much here
TEXT_TARGETS = ("UTF8_STRING", "text/plain;charset=utf-8", "STRING", "TEXT", "text/plain")


class ClipboardError(RuntimeError):
    pass


class ClipboardOwner:
    """Owns CLIPBOARD on ``display`` and answers paste requests from a background thread."""

    def __init__(self, display: str):
        from Xlib import X
        from Xlib.display import Display
        self._X = X
        self._d = Display(display)          # this object's connection, used by its thread only
        self._win = self._d.screen().root.create_window(0, 0, 1, 1, 0, X.CopyFromParent)
        self._atom = {n: self._d.intern_atom(n) for n in ("CLIPBOARD", "TARGETS", "ATOM", *TEXT_TARGETS)}
        self._names = {v: k for k, v in self._atom.items()}
        self._text = ""
        self._ready: queue.Queue = queue.Queue()
        self._requests: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="embodia-clipboard", daemon=True)
        self._thread.start()

    def own(self, text: str, timeout: float = 2.0) -> None:
        """Become the clipboard's owner with ``text``; returns once the X server confirms it."""
        size = len(text.encode("utf-8"))
        if size > MAX_BYTES:
            raise ValueError(f"text of {size} bytes is too long to paste (at most {MAX_BYTES})")
        self._requests.put(text)
        try:
            ok = self._ready.get(timeout=timeout)
        except queue.Empty:
            raise ClipboardError("the clipboard thread did not answer") from None
        if not ok:
            raise ClipboardError("the X server did not give us the clipboard")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        try:
            self._d.close()
        except Exception:      # the server may already be gone; nothing is left to release
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- the thread ----------------------------------------------------------------------------
    def _serve(self) -> None:
        fd = self._d.fileno()
        while not self._stop.is_set():
            try:
                self._take(self._requests.get_nowait())
            except queue.Empty:
                pass
            if not self._d.pending_events():
                select.select([fd], [], [], 0.02)
            while self._d.pending_events():
                ev = self._d.next_event()
                if ev.type == self._X.SelectionRequest:
                    self._answer(ev)

    def _take(self, text: str) -> None:
        self._text = text
        self._win.set_selection_owner(self._atom["CLIPBOARD"], self._X.CurrentTime)
        self._d.flush()
        owner = self._d.get_selection_owner(self._atom["CLIPBOARD"])
        self._ready.put(owner.id == self._win.id)

    def _answer(self, ev) -> None:
        from Xlib.protocol import event
        prop = ev.property or ev.target        # obsolete clients pass no property: use the target
        name = self._names.get(ev.target)
        if name == "TARGETS":
            atoms = [self._atom["TARGETS"]] + [self._atom[t] for t in TEXT_TARGETS]
            ev.requestor.change_property(prop, self._atom["ATOM"], 32, atoms)
        elif name == "STRING":                 # Latin-1 by the ICCCM
            ev.requestor.change_property(prop, ev.target, 8, self._text.encode("latin-1", "replace"))
        elif name in TEXT_TARGETS:
            ev.requestor.change_property(prop, self._atom["UTF8_STRING"], 8, self._text.encode("utf-8"))
        else:
            prop = self._X.NONE                # a target we do not offer: refuse
        reply = event.SelectionNotify(time=ev.time, requestor=ev.requestor, selection=ev.selection,
                                      target=ev.target, property=prop)
        ev.requestor.send_event(reply, event_mask=0)
        self._d.flush()
