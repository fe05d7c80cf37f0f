"""The desktop as a GUI device: screenshots with mss, input with pyautogui, on one X display.

>>> dev = open_desktop(":99")                                        # doctest: +SKIP
>>> dev.observe().images["screen"].shape                             # doctest: +SKIP
(800, 1280, 3)
>>> _ = dev.act(GuiAction("click", point=(500, 500)))                # doctest: +SKIP
>>> _ = dev.act(GuiAction("type", text="héllo ✓\\n"))                 # doctest: +SKIP
>>> dev.last_settle                                                  # doctest: +SKIP
Settle(seconds=0.052, settled=True)

Conventions and decisions:

- **Screen**: the whole X screen (the root window, every monitor), re-read at every screenshot and
  action, so a resized screen (xrandr) maps correctly; ``embodiment.screen`` follows it. 0..1000
  points map to physical pixels (`embodia.devices.coords`) and then to pyautogui's logical pixels by
  dividing by ``pixel_ratio`` (1 on X11 unless told otherwise).
- **pyautogui is process-global**: it opens one X connection at import, from ``$DISPLAY``. It is
  imported lazily with ``DISPLAY`` set to this device's display, and re-bound when a device opens on
  another display, so one desktop device drives input at a time. ``pyautogui.PAUSE`` is set to 0
  (this device waits for the screen to settle instead of sleeping a fixed time).
- **Fail-safe**: pyautogui's own corner check would also fire after an agent's legitimate click in a
  corner, so it is turned off and replaced: before each input action, if the pointer sits on a
  screen corner where this device did not leave it, a person has taken over and `FailSafe` (a
  `DeviceLost`) ends the episode cleanly. ``failsafe=False`` disables the check.
- **Text**: printable ASCII is typed key by key (``pyautogui.write``); a line with anything else
  is pasted through the X clipboard (owned from Python, no external program), then ``ctrl+v``;
  a newline presses Enter. The clipboard is left holding the pasted text.
- **Keys**: pyautogui key names (``enter``, ``ctrl``, ``f5``, ``a``; a few aliases such as
  ``control``, ``escape``, ``super``); unknown names and keys this X keymap cannot produce are
  refused with `ActionError` instead of pyautogui's silent no-op. One key is pressed, several are a
  hotkey chord.
- **Scroll**: ``direction="down"`` shows content further down (wheel towards the user), ``"right"``
  content further right; ``scroll_clicks`` wheel notches per action.
- **System buttons**: ``enter`` presses Enter; ``back`` is Alt+Left (back in browsers and file
  managers); ``home`` and ``menu`` have no desktop meaning and are refused. ``open_app`` is not
  supported: launching programs from model text is a shell-injection surface.
- **Settling**: after each input action the device waits until two consecutive screenshots agree
  (bounded by ``settle`` seconds; 0 disables) and records ``last_settle``.
- **Loss**: an X server that goes away raises `DeviceLost`; no display at all raises `NoDisplay`.
- **UI tree**: where the display has an accessibility bus (at-spi-bus-launcher, Debian package
  at-spi2-core; `embodia.devices.atspi.start_bus` starts one), each observation carries the AT-SPI
  tree of the visible windows (`embodia.devices.atspi`: the element schema of gui-sim and Android,
  pruned to what is visible and actionable) and "ui_tree" joins ``capabilities``. Without a bus the
  desktop works as before and warns once that it has no tree. ``a11y="off"`` never looks.
  ``click`` on element N goes to the centre of its bounds (as a person clicks); with
  ``element_clicks="action"`` it runs the element's accessible action instead, where it has one.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import math
import os
import select
import socket
import sys
import time
import warnings
from typing import NamedTuple

import numpy as np

from embodia.devices.actions import ActionError, GuiAction
from embodia.devices.base import DeviceLost, environ
from embodia.devices.embodiment import Screen
from embodia.devices.gui import ELEMENT_FIELDS, GuiDevice, gui_embodiment, settle

__all__ = ["DesktopDevice", "FailSafe", "NoDisplay", "Settle", "open_desktop"]

KEY_ALIASES = {"control": "ctrl", "escape": "esc", "return": "enter", "super": "win", "meta": "win",
               "cmd": "win", "page_up": "pageup", "page_down": "pagedown", "del": "delete",
               "arrowup": "up", "arrowdown": "down", "arrowleft": "left", "arrowright": "right"}
SYSTEM_KEYS = {"enter": ("enter",), "back": ("alt", "left")}
DEFAULT_MS = {"long_press": 800, "swipe": 300, "drag": 500}
LOOK_FOR_BUS_S = 5.0       # while there is no accessibility bus, look again this often
START_XVFB = "start a virtual screen (Xvfb :99 -screen 0 1280x800x24 -nolisten tcp &) or set DISPLAY"


class NoDisplay(ValueError):
    """No X display to open (none named, $DISPLAY unset, or the server does not answer)."""


class FailSafe(DeviceLost):
    """A person moved the pointer into a screen corner: stop driving this desktop."""


class Settle(NamedTuple):
    seconds: float     # waited after the input action
    settled: bool      # False: the screen was still changing when the bound ran out


@contextlib.contextmanager
def x_env(display: str):
    """Environment for opening X connections from Python: $DISPLAY, and a readable Xauthority.

    python-xlib refuses to connect when ~/.Xauthority is missing, where libX11 connects without a
    cookie; a missing file holds no cookie either, so an empty one (os.devnull) means the same.
    python-xlib prints a warning about the empty file on stdout, which is kept off stdout here.
    """
    auth = os.environ.get("XAUTHORITY") or os.path.join(os.path.expanduser("~"), ".Xauthority")
    new = {"DISPLAY": display, **({} if os.path.exists(auth) else {"XAUTHORITY": os.devnull})}
    with environ(**new), contextlib.redirect_stdout(sys.stderr):
        yield


def _x_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean the X server went away (or never answered)."""
    from mss.exception import ScreenShotError
    from Xlib.error import ConnectionClosedError, DisplayError
    return (ConnectionClosedError, DisplayError, ScreenShotError, ConnectionError)


def _hung_up(conn) -> bool:
    """True when the server closed this python-xlib connection.

    python3-xlib 0.15 (what pyautogui installs) mishandles a write to a closed server: it raises
    TypeError from its error path and keeps its request lock, so the next request on that
    connection spins forever.
    Peeking at the socket first (EOF = the server is gone) keeps a lost display from hanging us.
    """
    sock = conn.display.socket
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):     # ValueError: the socket is already closed
        return True


def _drop(conn) -> None:
    """Close a python-xlib connection without a request (a graceful close could hang, see above)."""
    with contextlib.suppress(OSError):
        conn.display.socket.close()


def _bind_pyautogui(display: str):
    """pyautogui with its X11 backend connected to ``display`` (see the module doc)."""
    with x_env(display):
        import pyautogui
        backend = pyautogui.platformModule
        if backend._display.get_display_name() != display or _hung_up(backend._display):
            _drop(backend._display)
            importlib.reload(backend)           # reconnects and rebuilds the keymap for `display`
    pyautogui.PAUSE = 0
    pyautogui.FAILSAFE = False                  # replaced by DesktopDevice._check_failsafe
    return pyautogui


class DesktopDevice(GuiDevice):
    """An X desktop driven by pyautogui and captured with mss; see the module doc."""

    supported = frozenset({"click", "double_click", "right_click", "long_press", "drag", "swipe",
                           "scroll", "type", "key", "system_button"})
    capabilities = frozenset({"screenshot", "text_input"})
    # the AT-SPI tree's elements (`embodia.devices.atspi`): the shared fields and the ones it adds
    element_fields = ELEMENT_FIELDS | {"box", "enabled", "editable", "window", "app", "ref", "checked", "value"}
    paste_keys = ("ctrl", "v")

    def __init__(self, display: str = "", *, pixel_ratio: float = 1.0, settle: float = 1.5,
                 settle_interval: float = 0.025, scroll_clicks: int = 5, failsafe: bool = True,
                 a11y: str = "auto", tree_limit: int = 300, element_clicks: str = "pointer"):
        super().__init__()
        if a11y not in ("auto", "off"):
            raise ValueError(f"a11y must be 'auto' or 'off', got {a11y!r}")
        if element_clicks not in ("pointer", "action"):
            raise ValueError(f"element_clicks must be 'pointer' or 'action', got {element_clicks!r}")
        self.a11y, self.tree_limit, self.element_clicks = a11y, int(tree_limit), element_clicks
        self.tree = None                           # an AtspiTree once an accessibility bus answers
        self.tree_apps: set[str] | None = None     # AT-SPI bus names to read (None: every application)
        self._said_no_tree = False
        self._next_look = 0.0                      # when to look for an accessibility bus again
        self.display = display or os.environ.get("DISPLAY", "")
        if not self.display:
            raise NoDisplay(f"no X display: none given and $DISPLAY is unset; {START_XVFB}")
        if not (math.isfinite(pixel_ratio) and pixel_ratio > 0):
            raise ValueError(f"pixel_ratio must be a positive number, got {pixel_ratio!r}")
        self.pixel_ratio = float(pixel_ratio)
        self.settle_timeout, self.settle_interval = float(settle), float(settle_interval)
        self.scroll_clicks, self.failsafe = int(scroll_clicks), bool(failsafe)
        self.last_settle: Settle | None = None     # None until an input action ran, or settle=0
        self._lost: str | None = None              # why the display is gone, once it is
        self._clip = None                          # a ClipboardOwner, from the first paste on

        import mss
        from Xlib.display import Display
        try:
            with x_env(self.display):
                self._x = Display(self.display)    # our own connection: the screen size
                self._sct = mss.MSS(display=self.display)
        except _x_errors() as e:
            if hasattr(self, "_x"):
                _drop(self._x)
            raise NoDisplay(f"cannot connect to X display {self.display!r} ({e}); {START_XVFB}") from e
        self._gui = _bind_pyautogui(self.display)
        self._atspi()                              # the tree capability is known from the start
        with self._xcall("read the pointer"):
            self._pointer = tuple(self._gui.position())   # where we left the pointer: not a person
        self.embodiment = gui_embodiment(name=f"desktop:{self.display}", kind="gui-desktop",
                                         screen=self._screen())

    # -- GuiDevice ---------------------------------------------------------------------------------
    def _screen(self) -> Screen:
        w, h = self._size()
        screen = Screen(w, h, self.pixel_ratio)
        emb = getattr(self, "embodiment", None)
        if emb is not None and emb.screen != screen:      # Embodiment is frozen: replace it
            self.embodiment = dataclasses.replace(emb, screen=screen)
        return screen

    def _ui_tree(self) -> list | None:
        tree = self._atspi()
        if tree is None:
            return None
        tree.apps = self.tree_apps
        try:
            return tree.read(self._screen())
        except (OSError, ConnectionError, ValueError) as e:     # the bus went away: no tree from now
            self._no_tree(f"the accessibility bus stopped answering ({type(e).__name__}: {e})")
            self.tree = None
            return None

    def _atspi(self):
        """The AT-SPI connection, opened on first need; None (said once) while there is no bus."""
        if self.tree is None and self.a11y != "off" and time.monotonic() >= self._next_look:
            # a bus started later is found, but looked for at most every few seconds (an X round trip)
            self._next_look = time.monotonic() + LOOK_FOR_BUS_S
            from embodia.devices.atspi import AtspiTree, find_bus
            with x_env(self.display):
                addr = find_bus(self.display)
            if addr:
                try:
                    self.tree = AtspiTree(addr, limit=self.tree_limit)
                except (OSError, ConnectionError, ValueError) as e:
                    self._no_tree(f"cannot connect to its accessibility bus {addr!r} ({e})")
            else:
                self._no_tree("no accessibility bus (start at-spi-bus-launcher from the Debian package "
                              "at-spi2-core, see embodia.devices.atspi)")
        has = "ui_tree" in self.capabilities
        if has != (self.tree is not None):     # "ui_tree" only while a tree answers; others kept
            self.capabilities = self.capabilities ^ {"ui_tree"}
        return self.tree

    def _no_tree(self, why: str) -> None:
        if not self._said_no_tree:
            self._said_no_tree = True
            warnings.warn(f"desktop {self.display}: {why}; observations carry no UI tree", RuntimeWarning,
                          stacklevel=3)

    def act(self, action) -> GuiAction:
        """As `GuiDevice.act`; with ``element_clicks="action"`` a click on a tree element that offers
        an accessible action runs that action instead of moving the pointer."""
        if (self.element_clicks == "action" and isinstance(action, GuiAction) and action.type == "click"
                and action.element is not None and action.point is None and self.tree is not None):
            el = next((e for e in (self.last_obs.ui_tree or []) if e.get("index") == action.element), None) \
                if self.last_obs is not None else None
            if el is not None and self.tree.do_action(el):
                self._settle()
                return action
        return super().act(action)

    def _grab(self) -> np.ndarray:
        w, h = self._size()
        with self._xcall("screenshot"):
            shot = self._sct.grab({"left": 0, "top": 0, "width": w, "height": h})
        bgra = np.frombuffer(shot.raw, np.uint8).reshape(shot.height, shot.width, 4)
        rgb = np.empty((shot.height, shot.width, 3), np.uint8)
        for c in range(3):       # per-channel copies beat a fancy-indexed BGRA->RGB by about 3x
            rgb[..., c] = bgra[..., 2 - c]
        return rgb

    def _execute(self, action: GuiAction, p, q) -> None:
        t = action.type
        keys = self._keys(action.keys) if t == "key" else None
        if t == "system_button":
            if action.button not in SYSTEM_KEYS:
                raise ActionError(f"system_button {action.button!r} has no desktop equivalent; "
                                  f"the desktop has {sorted(SYSTEM_KEYS)} (use a key action otherwise)")
            keys = SYSTEM_KEYS[action.button]
        self._check_failsafe()
        g = self._gui
        with self._xcall(t):
            if t in ("click", "double_click", "right_click"):
                g.click(*self._logical(p), clicks=2 if t == "double_click" else 1, interval=0.0,
                        button="right" if t == "right_click" else "left")
            elif t in ("long_press", "drag", "swipe"):
                seconds = (action.duration_ms if action.duration_ms is not None else DEFAULT_MS[t]) / 1e3
                g.mouseDown(*self._logical(p))
                if t == "long_press":
                    time.sleep(seconds)
                else:
                    g.moveTo(*self._logical(q), duration=seconds)
                g.mouseUp()
            elif t == "scroll":      # pyautogui: positive clicks turn the wheel up / right
                sign = 1 if action.direction in ("up", "right") else -1
                scroll = g.scroll if action.direction in ("up", "down") else g.hscroll
                scroll(sign * self.scroll_clicks, *self._logical(p))
            elif t == "type":
                self._type(action.text)
            elif len(keys) == 1:    # key, system_button
                g.press(keys[0])
            else:
                g.hotkey(*keys)
            self._pointer = tuple(g.position())
        self._settle()

    # -- helpers -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _xcall(self, what: str):
        """Run X calls; a server that went away becomes `DeviceLost`, for this and every later call."""
        if self._lost is None and self._hung_up():
            self._lost = "the X server closed the connection"
        if self._lost is not None:
            raise DeviceLost(f"X display {self.display!r} is gone ({self._lost}); cannot {what}")
        try:
            yield
        except self._gui.FailSafeException as e:   # only if someone turned pyautogui's own back on
            raise FailSafe(f"pyautogui's fail-safe fired on {self.display!r}: {e}") from e
        except Exception as e:
            # A closed server surfaces oddly: python-xlib raises TypeError, mss AssertionError.
            if not (isinstance(e, _x_errors()) or self._hung_up()):
                raise
            self._lost = f"{type(e).__name__}: {e}" if isinstance(e, _x_errors()) else "connection closed"
            raise DeviceLost(f"X display {self.display!r} went away during {what} ({self._lost})") from e

    def _hung_up(self) -> bool:
        return _hung_up(self._x) or _hung_up(self._gui_display())

    def _gui_display(self):
        """pyautogui's connection; re-bound to this display if another desktop device took it."""
        if self._gui.platformModule._display.get_display_name() != self.display:
            self._gui = _bind_pyautogui(self.display)
        return self._gui.platformModule._display

    def _size(self) -> tuple[int, int]:
        with self._xcall("read the screen size"):
            g = self._x.screen().root.get_geometry()
        return int(g.width), int(g.height)

    def _logical(self, px) -> tuple[int, int]:
        return int(px[0] / self.pixel_ratio), int(px[1] / self.pixel_ratio)

    def _keys(self, names) -> tuple[str, ...]:
        """Validate key names against pyautogui's and this keymap's; raise `ActionError` otherwise."""
        mapping = getattr(self._gui.platformModule, "keyboardMapping", {})
        out = []
        for name in names:
            key = name.lower() if len(name) > 1 or name.isalpha() else name    # "A": the A key
            key = KEY_ALIASES.get(key, key)
            if key not in self._gui.KEYBOARD_KEYS:
                raise ActionError(f"unknown key {name!r}; use pyautogui key names such as 'enter', 'esc', "
                                  f"'tab', 'ctrl', 'alt', 'shift', 'win', 'f5', 'pageup' or one character")
            if not mapping.get(key):
                raise ActionError(f"key {name!r} cannot be pressed on this X display (no keycode for it)")
            out.append(key)
        return tuple(out)

    def _check_failsafe(self) -> None:
        if not self.failsafe:
            return
        w, h = (int(v / self.pixel_ratio) for v in self._size())
        with self._xcall("read the pointer"):
            pos = tuple(self._gui.position())
        if pos != self._pointer and pos in {(0, 0), (w - 1, 0), (0, h - 1), (w - 1, h - 1)}:
            raise FailSafe(f"someone moved the pointer to the screen corner {pos} of {self.display!r} "
                           f"(fail-safe); stopping. Move it away from the corner to go on.")

    def _type(self, text: str) -> None:
        mapping = getattr(self._gui.platformModule, "keyboardMapping", {})
        for i, line in enumerate(text.replace("\r\n", "\n").split("\n")):
            if i:
                self._gui.press("enter")
            if not line:
                continue
            if all(" " <= c <= "~" and mapping.get(c) for c in line):
                self._gui.write(line)
            else:
                self._paste(line)

    def _paste(self, text: str) -> None:
        """Own the X clipboard with ``text`` (python-xlib: no external program), then press ctrl+v."""
        from embodia.devices.x_clipboard import ClipboardError, ClipboardOwner
        try:
            if self._clip is None:
                with x_env(self.display):
                    self._clip = ClipboardOwner(self.display)
            self._clip.own(text)
        except ValueError as e:
            raise ActionError(str(e)) from None
        except (ClipboardError, OSError) as e:
            self._size()          # raises DeviceLost if the server is gone
            raise RuntimeError(f"could not set the clipboard of {self.display!r}: {e}") from e
        self._gui.hotkey(*self.paste_keys)

    def _settle(self) -> None:
        if self.settle_timeout <= 0:
            self.last_settle = None
            return
        _, waited, ok = settle(self._grab, timeout_s=self.settle_timeout, interval_s=self.settle_interval)
        self.last_settle = Settle(waited, ok)

    def close(self) -> None:
        """Release the screenshot and X connections (pyautogui's stays, it is process-wide)."""
        with contextlib.suppress(*_x_errors(), OSError):
            self._sct.close()
        if self._clip is not None:
            self._clip.close()
            self._clip = None
        if self.tree is not None:
            with contextlib.suppress(OSError):
                self.tree.close()
            self.tree = None
        _drop(self._x)


def open_desktop(target: str = "", **query) -> DesktopDevice:
    """``desktop:`` URI factory: target is an X display (``desktop::99`` or ``desktop:99``; empty =
    $DISPLAY).

    Query: ``settle`` (seconds to wait for the screen after an input action; 0 disables),
    ``pixel_ratio``, ``scroll_clicks``, ``failsafe`` (0/1), ``a11y`` (auto/off: read the AT-SPI
    tree where there is an accessibility bus), ``tree_limit`` (most elements a tree keeps),
    ``element_clicks`` (pointer/action).
    """
    kinds = {"settle": float, "pixel_ratio": float, "scroll_clicks": int, "a11y": str, "tree_limit": int,
             "element_clicks": str,
             "failsafe": lambda v: str(v).lower() not in ("0", "false", "no", "off")}
    unknown = set(query) - set(kinds)
    if unknown:
        raise ValueError(f"desktop: unknown options {sorted(unknown)}; known: {sorted(kinds)}")
    try:
        opts = {k: kinds[k](v) for k, v in query.items()}
    except ValueError as e:
        raise ValueError(f"desktop: bad option value ({e})") from e
    if target.isdigit():            # desktop:99 means display :99, as desktop::99 does
        target = ":" + target
    return DesktopDevice(target, **opts)
