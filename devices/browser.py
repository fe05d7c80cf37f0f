"""A web page in Chromium as a GUI device, driven over the DevTools protocol (`embodia.devices.cdp`).

>>> with open_browser("file:///tmp/form.html") as web:                      # doctest: +SKIP
...     obs = web.observe()                  # screenshot (viewport) + the page's accessibility tree
...     web.act(GuiAction("click", element=3))
...     web.act(GuiAction("type", text='héllo "quoted"\\nsecond line'))

Conventions and decisions:

- **Screen**: the page's viewport, ``size`` (default 1280x800) CSS pixels at device pixel ratio 1,
  so a screenshot pixel, a tree element's bounds and an input event's coordinates are one unit.
- **UI tree**: every observation carries the accessibility tree in the desktop's element schema
  (`embodia.devices.browser_tree`), so the safety gate, ``check:`` predicates, the GUI head and
  the success memory read a page as they read a desktop window.
- **Input**: trusted events through ``Input.dispatchMouseEvent`` and ``Input.dispatchKeyEvent``:
  the page sees a person's clicks, not ``element.click()``. Text arrives exactly as given (unicode,
  quotes, backslashes: nothing is interpreted): printable ASCII as key presses carrying their
  character, the rest through ``Input.insertText``; a newline presses Enter
  (a new line in a textarea, a submit in a form field), as on the desktop. Keys use the desktop's
  names (``enter``, ``tab``, ``ctrl``, ``pageup``, one character); several are one chord.
- **Scroll**: a mouse wheel of ``scroll_px`` pixels at the point (``down`` shows what is below).
- **System buttons**: ``back`` goes back in the tab's history, ``enter`` presses Enter; ``home``
  and ``menu`` mean nothing to a page and are refused.
- **Settling**: after each input action (and after opening the page) the device waits until the
  page has settled: the document has loaded, no request is in flight and the DOM has not changed
  for ``quiet_ms``. A page that does not settle within ``settle`` seconds raises `PageNotSettled`
  (a `DeviceLost`: the loop ends the episode and saves its record) naming what kept it busy;
  ``settle=0`` never waits.
- **JavaScript dialogs** (``alert``, ``confirm``, ``prompt``, ``beforeunload``) block the page;
  they are dismissed at once (Cancel: a ``confirm("Delete?")`` is never agreed to behind the
  gate's back) and their messages kept in ``info()["js_dialogs"]``.
- **Loss**: a browser that exits, a page that crashes or a DevTools socket that closes raises
  `DeviceLost`. ``close()`` ends Chromium and every process it started.
"""
from __future__ import annotations

import base64
import contextlib
import os
import re
import time
from pathlib import Path
from urllib.parse import quote

import numpy as np

from embodia.devices.actions import ActionError, GuiAction
from embodia.devices.base import DeviceLost
from embodia.devices.browser_tree import SNAPSHOT_STYLES, page_elements
from embodia.devices.cdp import CdpError, Chromium, evaluate
from embodia.devices.embodiment import Screen
from embodia.devices.gui import ELEMENT_FIELDS, GuiDevice, gui_embodiment

__all__ = ["BrowserDevice", "PageNotSettled", "open_browser"]

# the page records when its DOM last changed; the settle loop reads it
MUTATION_SCRIPT = """(() => { window.__embodiaMutation = performance.now();
  new MutationObserver(() => { window.__embodiaMutation = performance.now(); })
    .observe(document, {subtree: true, childList: true, attributes: true, characterData: true}); })();"""
SETTLE_PROBE = "[document.readyState, performance.now() - (window.__embodiaMutation ?? -1e9), location.href]"
MODIFIER_BITS = {"Alt": 1, "Control": 2, "Meta": 4, "Shift": 8}     # CDP's modifiers bit field, by DOM key
# key name -> (DOM key, DOM code, Windows virtual key code, text the key types)
NAMED_KEYS = {
    "enter": ("Enter", "Enter", 13, "\r"), "tab": ("Tab", "Tab", 9, ""), "esc": ("Escape", "Escape", 27, ""),
    "backspace": ("Backspace", "Backspace", 8, ""), "delete": ("Delete", "Delete", 46, ""),
    "space": (" ", "Space", 32, " "), "up": ("ArrowUp", "ArrowUp", 38, ""), "down": ("ArrowDown", "ArrowDown", 40, ""),
    "left": ("ArrowLeft", "ArrowLeft", 37, ""), "right": ("ArrowRight", "ArrowRight", 39, ""),
    "home": ("Home", "Home", 36, ""), "end": ("End", "End", 35, ""), "pageup": ("PageUp", "PageUp", 33, ""),
    "pagedown": ("PageDown", "PageDown", 34, ""), "insert": ("Insert", "Insert", 45, ""),
    "ctrl": ("Control", "ControlLeft", 17, ""), "alt": ("Alt", "AltLeft", 18, ""),
    "shift": ("Shift", "ShiftLeft", 16, ""), "win": ("Meta", "MetaLeft", 91, ""),
    **{f"f{n}": (f"F{n}", f"F{n}", 111 + n, "") for n in range(1, 13)},
}
ASCII_RUNS = re.compile(r"[ -~]+|[^ -~]+")     # printable ASCII (space to tilde), and the rest
DEFAULT_MS = {"long_press": 800, "swipe": 300, "drag": 500}
BUTTON_BITS = {"left": 1, "right": 2}


class PageNotSettled(DeviceLost):
    """The page kept loading, fetching or changing its DOM past the settle bound."""


def key_event(name: str) -> tuple[str, str, int, str]:
    """(key, code, keyCode, text) for a key name (the desktop's names and aliases, or one
    character); `ActionError` for anything else."""
    from embodia.devices.desktop import KEY_ALIASES
    low = name.lower() if len(name) > 1 else name
    low = KEY_ALIASES.get(low, low)
    if low in NAMED_KEYS:
        return NAMED_KEYS[low]
    if len(name) == 1 and name.isprintable():
        c = name
        if c.isascii() and c.isalpha():
            return c, f"Key{c.upper()}", ord(c.upper()), c
        if c.isdigit():
            return c, f"Digit{c}", ord(c), c
        return c, "", 0, c
    raise ActionError(f"unknown key {name!r}; use names such as 'enter', 'esc', 'tab', 'ctrl', 'alt', 'shift', "
                      f"'win', 'f5', 'pageup', 'backspace' or one character")


def split_keys(keys) -> list[str]:
    """``("ctrl+a",)`` and ``("ctrl", "a")`` are the same chord; a lone "+" is the plus key."""
    out = []
    for k in keys:
        out += [p for p in k.split("+") if p] if len(k) > 1 else [k]
    return out


class BrowserDevice(GuiDevice):
    """One Chromium tab opened at ``url`` (see the module doc)."""

    supported = frozenset({"click", "double_click", "right_click", "long_press", "swipe", "drag", "scroll",
                           "type", "key", "system_button"})
    capabilities = frozenset({"screenshot", "ui_tree", "text_input", "person_input"})
    element_fields = ELEMENT_FIELDS | {"box", "enabled", "editable", "window", "app", "ref", "checked", "value",
                                       "scrollable"}

    def __init__(self, url: str = "about:blank", *, size: tuple[int, int] = (1280, 800), headless: bool = True,
                 display: str = "", settle: float = 10.0, quiet_ms: float = 150.0, scroll_px: int = 400,
                 tree_limit: int = 300, executable: str | None = None):
        super().__init__()
        self.url, self.size = url, (int(size[0]), int(size[1]))
        self.settle_timeout, self.quiet_s = float(settle), float(quiet_ms) / 1e3
        self.scroll_px, self.tree_limit = int(scroll_px), int(tree_limit)
        self.last_settle: float | None = None          # seconds the last settle waited
        self.js_dialogs: list[str] = []
        self._inflight: dict[str, str] = {}            # request id -> url
        self._net_change = time.monotonic()
        self._loading = False
        self._crashed: str | None = None
        self._person = None                            # a PersonEvents while a person holds the tab
        env = dict(os.environ)
        if not headless:
            env["DISPLAY"] = display or env.get("DISPLAY", "")
            if not env["DISPLAY"]:
                raise ValueError("browser: headless=0 needs an X display (display=:99 or $DISPLAY)")
        self.chrome = Chromium.launch(executable=executable, headless=headless, size=self.size, env=env)
        try:
            self.page = self.chrome.page()
            self._setup()
            self.embodiment = gui_embodiment(name="browser", kind="gui-browser", screen=self._screen())
            self.navigate(url)
        except BaseException:
            self.chrome.close()
            raise

    def _setup(self) -> None:
        p = self.page
        for domain in ("Page", "Network", "Runtime", "DOM", "Inspector"):
            p.call(f"{domain}.enable")
        p.call("Emulation.setDeviceMetricsOverride", width=self.size[0], height=self.size[1],
               deviceScaleFactor=1, mobile=False)
        p.call("Page.addScriptToEvaluateOnNewDocument", source=MUTATION_SCRIPT)
        self._frame_id = p.call("Page.getFrameTree")["frameTree"]["frame"]["id"]

    # -- navigation and settling -------------------------------------------------------------------
    def navigate(self, url: str) -> None:
        """Open ``url`` in the tab and wait for it to settle (the device's own use: reset, a task's
        page; a policy moves between pages by clicking links and going back)."""
        r = self.page.call("Page.navigate", url=url)
        if r.get("errorText"):
            raise ValueError(f"browser: cannot open {url!r}: {r['errorText']}")
        self._loading = True
        self._wait_loaded()
        self._settle()

    def _wait_loaded(self, timeout_s: float = 30.0) -> None:
        """Wait for the main frame to stop loading, also with ``settle=0`` (a page that is not there
        yet has no screenshot to take)."""
        t0 = time.monotonic()
        while self._loading:
            self._track(self.page.drain(0.03))
            if time.monotonic() - t0 >= timeout_s:
                raise PageNotSettled(f"browser: {self.url} did not finish loading within {timeout_s:g} s")

    def reset(self, seed: int | None = None):
        self.js_dialogs = []
        self.navigate(self.url)
        return super().reset(seed)

    def _track(self, events: list[dict]) -> None:
        """Follow the page's network, loading, dialogs and crashes through its events."""
        now = time.monotonic()
        if self._person is not None:
            self._person.feed(events)
        for ev in events:
            m, p = ev.get("method"), ev.get("params", {})
            if m == "Network.requestWillBeSent":
                self._inflight[p["requestId"]] = p.get("request", {}).get("url", "")
                self._net_change = now
            elif m in ("Network.loadingFinished", "Network.loadingFailed"):
                self._inflight.pop(p.get("requestId"), None)
                self._net_change = now
            elif m == "Page.frameStartedLoading" and self._main_frame(p):
                self._loading = True
            elif m == "Page.frameStoppedLoading" and self._main_frame(p):
                self._loading = False
            elif m == "Page.javascriptDialogOpening":
                self.js_dialogs.append(f"{p.get('type')}: {p.get('message', '')}")
                self.page.send("Page.handleJavaScriptDialog", accept=p.get("type") == "alert")
            elif m in ("Inspector.targetCrashed", "Inspector.detached"):
                self._crashed = "the page crashed" if m == "Inspector.targetCrashed" else \
                    f"DevTools detached ({p.get('reason', '')})"
        if self._crashed:
            raise DeviceLost(f"browser: {self._crashed} ({self.url})")

    def _main_frame(self, p: dict) -> bool:
        return p.get("frameId") == self._frame_id

    def _settle(self) -> None:
        """Wait until the page has loaded, has no request in flight and its DOM has been still for
        ``quiet_ms``; `PageNotSettled` past ``settle`` seconds (see the module doc)."""
        if self.settle_timeout <= 0:
            self.last_settle = None
            return
        t0 = time.monotonic()
        while True:
            self._track(self.page.drain(0.03))
            busy = self._busy()
            waited = time.monotonic() - t0
            if busy is None:
                self.last_settle = waited
                return
            if waited >= self.settle_timeout:
                raise PageNotSettled(f"browser: the page did not settle within {self.settle_timeout:g} s "
                                     f"({busy}); raise settle= or use settle=0 for pages that never rest")

    def _busy(self) -> str | None:
        """What keeps the page from being settled now, or None."""
        if self._loading:
            return "it is still loading"
        if self._inflight:
            urls = list(self._inflight.values())
            return f"{len(urls)} request(s) in flight, e.g. {urls[0][:120]}"
        if time.monotonic() - self._net_change < self.quiet_s:
            return "a request just finished"
        try:
            state, since_ms, _ = evaluate(self.page, SETTLE_PROBE, timeout=5.0)
        except CdpError:          # a navigation replaced the document between two calls
            return "a new document is replacing the page"
        if state != "complete":
            return f"document.readyState is {state!r}"
        if since_ms < self.quiet_s * 1e3:
            return f"its DOM changed {since_ms:.0f} ms ago"
        return None

    # -- GuiDevice ---------------------------------------------------------------------------------
    def _screen(self) -> Screen:
        return Screen(self.size[0], self.size[1], 1.0)

    def _grab(self) -> np.ndarray:
        from embodia.shared.images import image_from_bytes
        for _ in range(40):      # a navigation that is committing has no page to capture for a moment
            try:
                shot = self.page.call("Page.captureScreenshot", format="png", optimizeForSpeed=True)
                break
            except CdpError as e:
                err = e
                time.sleep(0.05)
        else:
            raise DeviceLost(f"browser: no screenshot ({err})")
        try:
            return image_from_bytes(base64.b64decode(shot["data"]))
        except ValueError:
            raise DeviceLost("browser: the screenshot did not decode") from None

    def _ui_tree(self) -> list:
        p = self.page
        ax_id = p.send("Accessibility.getFullAXTree")
        snap_id = p.send("DOMSnapshot.captureSnapshot", computedStyles=list(SNAPSHOT_STYLES), includeDOMRects=True)
        title_id = p.send("Runtime.evaluate", expression="document.title", returnByValue=True)
        ax = p.reply(ax_id, "Accessibility.getFullAXTree")
        snap = p.reply(snap_id, "DOMSnapshot.captureSnapshot")
        title = p.reply(title_id, "Runtime.evaluate").get("result", {}).get("value") or ""
        return page_elements(ax.get("nodes", []), snap, self.size, title=str(title), limit=self.tree_limit)

    def observe(self):
        self._track(self.page.drain())
        return super().observe()

    def _execute(self, action: GuiAction, p, q) -> None:
        self._track(self.page.drain())
        t = action.type
        if t in ("click", "double_click", "right_click"):
            button = "right" if t == "right_click" else "left"
            self._mouse("mouseMoved", p)
            for n in ((1, 2) if t == "double_click" else (1,)):
                self._mouse("mousePressed", p, button=button, clickCount=n)
                self._mouse("mouseReleased", p, button=button, clickCount=n)
        elif t in ("long_press", "drag", "swipe"):
            self._press_move(action, p, q)
        elif t == "scroll":
            dx = {"left": -1, "right": 1}.get(action.direction, 0) * self.scroll_px
            dy = {"up": -1, "down": 1}.get(action.direction, 0) * self.scroll_px
            self._mouse("mouseWheel", p, deltaX=dx, deltaY=dy)
        elif t == "type":
            self._type(action.text)
        elif t == "key":
            self._chord(split_keys(action.keys))
        elif action.button == "back":
            self._back()
        elif action.button == "enter":
            self._chord(["enter"])
        else:
            raise ActionError(f"system_button {action.button!r} means nothing to a web page; the browser "
                              f"has 'back' and 'enter'")
        self._settle()

    # -- input -------------------------------------------------------------------------------------
    def _mouse(self, kind: str, p, *, button: str = "none", buttons: int = 0, **extra) -> None:
        if kind in ("mousePressed",) or (kind == "mouseMoved" and buttons):
            buttons = buttons or BUTTON_BITS.get(button, 0)
        self.page.call("Input.dispatchMouseEvent", type=kind, x=p[0], y=p[1], button=button,
                       buttons=buttons, **extra)

    def _press_move(self, action: GuiAction, p, q) -> None:
        seconds = (action.duration_ms if action.duration_ms is not None else DEFAULT_MS[action.type]) / 1e3
        self._mouse("mouseMoved", p)
        self._mouse("mousePressed", p, button="left", clickCount=1)
        if action.type == "long_press":
            time.sleep(seconds)
            q = p
        else:
            steps = max(2, int(seconds / 0.02))
            for k in range(1, steps + 1):
                pt = (p[0] + (q[0] - p[0]) * k / steps, p[1] + (q[1] - p[1]) * k / steps)
                self._mouse("mouseMoved", pt, button="left", buttons=1)
                time.sleep(seconds / steps)
        self._mouse("mouseReleased", q, button="left", clickCount=1)

    def _type(self, text: str) -> None:
        """Printable ASCII as key presses (what a keyboard sends: date and time fields, type-ahead in
        a list, pages that listen for keys all see them), anything else inserted as text; a newline
        presses Enter. Either way the characters arrive as given."""
        for i, line in enumerate(text.replace("\r\n", "\n").split("\n")):
            if i:
                self._chord(["enter"])
            for run in ASCII_RUNS.findall(line):
                if " " <= run[0] <= "~":
                    self._press_text(run)
                else:
                    self.page.call("Input.insertText", text=run)

    def _press_text(self, run: str) -> None:
        """One keyDown (carrying the character) and keyUp per character, pipelined."""
        ids = []
        for c in run:
            key, code, vk, _ = key_event(c)
            ids.append(self.page.send("Input.dispatchKeyEvent", type="keyDown", key=key, code=code,
                                      windowsVirtualKeyCode=vk, text=c, unmodifiedText=c))
            ids.append(self.page.send("Input.dispatchKeyEvent", type="keyUp", key=key, code=code,
                                      windowsVirtualKeyCode=vk))
        for call_id in ids:
            self.page.reply(call_id, "Input.dispatchKeyEvent")

    def _chord(self, names: list[str]) -> None:
        """Press the keys in order, release them in reverse; modifiers held apply to the keys after."""
        events = [key_event(n) for n in names]      # refuse an unknown name before pressing anything
        mods = 0
        for key, code, vk, text in events:
            mods |= MODIFIER_BITS.get(key, 0)
            if text and mods & 8 and len(text) == 1:
                text = key = text.upper()
            typed = text if text and not mods & (1 | 2 | 4) else ""
            self.page.call("Input.dispatchKeyEvent", type="keyDown" if typed else "rawKeyDown", key=key,
                           code=code, windowsVirtualKeyCode=vk, modifiers=mods, text=typed, unmodifiedText=typed)
        for key, code, vk, _ in reversed(events):
            self.page.call("Input.dispatchKeyEvent", type="keyUp", key=key, code=code,
                           windowsVirtualKeyCode=vk, modifiers=mods)
            mods &= ~MODIFIER_BITS.get(key, 0)

    def _back(self) -> None:
        hist = self.page.call("Page.getNavigationHistory")
        i = hist.get("currentIndex", 0)
        if i <= 0:
            raise ActionError("browser: there is no page to go back to")
        self.page.call("Page.navigateToHistoryEntry", entryId=hist["entries"][i - 1]["id"])
        self._loading = True

    # -- a person's turn (take-over) -----------------------------------------------------------------
    def person_start(self) -> None:
        """Start reporting the person's input (`embodia.devices.browser_person`)."""
        from embodia.devices.browser_person import PersonEvents
        self._person = PersonEvents(self.page, self.size)
        self._person.start()

    def person_poll(self) -> list[GuiAction]:
        """The person's finished actions since the last poll."""
        self._track(self.page.drain())
        return self._person.take() if self._person is not None else []

    def person_stop(self) -> list[GuiAction]:
        """Stop reporting; the person's last actions."""
        if self._person is None:
            return []
        self._track(self.page.drain(0.05))      # reports still on their way
        person, self._person = self._person, None
        return person.stop()

    def wait_still(self, timeout_s: float = 1.5) -> bool:
        """Wait until the page has settled (after a person's input); False when it had not."""
        saved, self.settle_timeout = self.settle_timeout, timeout_s
        try:
            self._settle()
            return True
        except PageNotSettled:
            return False
        finally:
            self.settle_timeout = saved

    # -- the rest ----------------------------------------------------------------------------------
    def info(self) -> dict:
        out = super().info()
        if self.js_dialogs:
            out["js_dialogs"] = list(self.js_dialogs)
        return out

    def evaluate(self, expression: str):
        """A JavaScript expression's value in the page (tests, task checks; never model text)."""
        return evaluate(self.page, expression)

    def close(self) -> None:
        """End Chromium and every process it started; remove its profile."""
        with contextlib.suppress(Exception):
            self.chrome.close()


def page_url(target: str, extra: dict[str, str]) -> str:
    """The URL a ``browser:`` URI names: a URL as given (query parameters that are not device
    options go back into it), a path to a local file as a file:// URL, nothing as about:blank."""
    url = target or "about:blank"
    if "://" not in url and not url.startswith(("about:", "data:")):
        path = Path(url).expanduser()
        if not path.exists():
            raise ValueError(f"browser: {target!r} is neither a URL (https://..., file:///...) nor a file here")
        url = path.resolve().as_uri()
    if extra:
        url += "?" + "&".join(f"{quote(k, safe='')}={quote(v, safe='/:@!$()*,;=~#')}" for k, v in extra.items())
    return url


def open_browser(target: str = "", **query) -> BrowserDevice:
    """``browser:`` URI factory: ``browser:https://example.org/``, ``browser:file:///tmp/page.html``,
    ``browser:http://127.0.0.1:8000/?size=1024x768``, ``browser:page.html`` (a local file).

    Device options in the query: ``size`` (WxH viewport), ``settle`` (seconds; 0 never waits),
    ``quiet_ms``, ``scroll_px``, ``tree_limit``, ``headless`` (0: a window on ``display`` or
    $DISPLAY), ``display``. Any other query parameter belongs to the page's URL.
    """
    kinds = {"size": parse_size, "settle": float, "quiet_ms": float, "scroll_px": int, "tree_limit": int,
             "headless": lambda v: str(v).lower() not in ("0", "false", "no", "off"), "display": str}
    opts, extra = {}, {}
    for k, v in query.items():
        if k in kinds:
            try:
                opts[k] = kinds[k](v)
            except ValueError as e:
                raise ValueError(f"browser: bad value for {k}: {e}") from None
        else:
            extra[k] = str(v)
    return BrowserDevice(page_url(target, extra), **opts)


def parse_size(v) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        w, h = v
    else:
        w, _, h = str(v).lower().partition("x")
    try:
        w, h = int(w), int(h)
    except ValueError:
        raise ValueError(f"size {v!r} must be WxH, e.g. 1280x800") from None
    if not (64 <= w <= 7680 and 64 <= h <= 4320):
        raise ValueError(f"size {v!r}: width and height must be 64..7680 x 64..4320")
    return w, h
