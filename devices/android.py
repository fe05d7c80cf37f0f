"""Android phones over the adb host protocol (adbutils), with text that no device shell interprets.

>>> with open_android("emulator-5554") as phone:                 # doctest: +SKIP
...     obs = phone.observe()                                      # screenshot + UI tree
...     phone.act(GuiAction("click", point=(500, 500)))            # -> input tap 540 1200
...     phone.act(GuiAction("type", text="héllo; $(id)"))          # typed literally (see `type`)

How each action reaches the device (``p``/``q`` are physical pixels of the current rotation):

- click ``input tap x y``; double_click two taps in one shell command (one round trip, so the gap
  is only the second ``input`` start-up); long_press ``input swipe x y x y 800`` (or duration_ms);
  swipe ``input swipe x0 y0 x1 y1 300``; drag the same with 1000 ms, slow enough to grab.
- scroll: ``direction`` names where the view goes (``down`` shows what is below). The finger swipes
  the other way, from the action point, by 40% of the screen (clamped to it), in 300 ms.
- key: one key ``input keyevent K``; several (``("ctrl", "a")`` or ``("ctrl+a",)``) are one chord
  ``input keycombination K1 K2`` (Android 13+). Names are ``KEYCODE_*``, a code 0..999, a letter
  or digit, or a short name in `SHORT_KEYS`; anything else is refused before it reaches the device.
- system_button: back/home/enter/menu -> ``KEYCODE_BACK``/``HOME``/``ENTER``/``MENU``.
- open_app: a Java package name only (``com.android.settings``), launched with ``monkey -p <pkg> -c
  android.intent.category.LAUNCHER 1``; a monkey that injected no event is an `ActionError`.
- type: see `AndroidDevice.type_commands`. Printable ASCII goes through ``input text`` (space as
  ``%s``; a literal ``%`` directly followed by ``s`` is split across two calls, the only sequence
  ``input`` rewrites). Newlines are ``KEYCODE_ENTER`` and tabs ``KEYCODE_TAB`` between pieces. Text
  with any non-ASCII character goes, line by line, through the ADBKeyboard IME
  (``am broadcast -a ADB_INPUT_B64 --es msg <base64>``) when it is the active input method;
  otherwise it is refused with instructions and nothing is typed. Other control characters are
  refused.

Every command is an argv list; `sh_quote` single-quotes each argument for the device's sh (adbd
joins nothing itself: the ``shell:`` service line is run by ``sh -c``), and the only operator
between arguments is a fixed `` && `` joining several commands sent in one round trip.

Screenshots use the raw framebuffer (``exec:screencap``: a 12 or 16 byte header, then RGBA, as
``adb exec-out screencap`` gets it) and fall back to ``screencap -p`` (PNG) where the first raw
reply does not parse, or over ``shell:`` where adbd has no ``exec:``; ``capture`` says which.
Measured through tests/fakeadb.py at 1080x2400 (loopback, PNG encoded by the host at zlib level
1): a flat synthetic screen costs about the same either way (raw 70-100 ms, PNG 65-90 ms); a busy
one, raw 120 ms against PNG 670 ms (encode + decode). On a phone the PNG encoder runs on the
device's CPU, so raw is the faster path except over slow USB 2 links, where its 10 MB frame costs
about as much as encoding.

A server or device that is gone (refused, reset, EOF, "device not found", no answer within the
timeout) raises `DeviceLost` naming the serial and the server; adbutils' habit of starting its
bundled adb daemon when nothing listens is switched off, so a killed server stays a lost device.
Output that says ``Error``/``Exception`` is an `ActionError`. ``timing`` holds the seconds of the
last screenshot, UI dump and action; each action is one request on one new connection to the
server (about 12 ms through the fake server, against 23 ms for adbutils' own calls, which ask
the server version on a second connection every time).
"""
from __future__ import annotations

import base64
import functools
import io
import os
import re
import struct
import time
import xml.etree.ElementTree as ET

import numpy as np

from embodia.devices.actions import ActionError, GuiAction
from embodia.devices.base import DeviceLost
from embodia.devices.embodiment import Screen
from embodia.devices.gui import GuiDevice, gui_embodiment

ADB_KEYBOARD = "com.android.adbkeyboard/.AdbIME"
DUMP_PATH = "/sdcard/window_dump.xml"
LINE_LIMIT = 3000            # bytes per shell line (old adbd refuses service strings over 4 KiB)
TEXT_CHUNK = 200             # characters per `input text` argument
IME_CHUNK = 400              # characters per ADBKeyboard broadcast (base64 of <= 1600 bytes)

SHORT_KEYS = {
    "back": "KEYCODE_BACK", "home": "KEYCODE_HOME", "enter": "KEYCODE_ENTER",
    "return": "KEYCODE_ENTER", "menu": "KEYCODE_MENU", "tab": "KEYCODE_TAB",
    "space": "KEYCODE_SPACE", "escape": "KEYCODE_ESCAPE", "esc": "KEYCODE_ESCAPE",
    "backspace": "KEYCODE_DEL", "delete": "KEYCODE_FORWARD_DEL", "insert": "KEYCODE_INSERT",
    "up": "KEYCODE_DPAD_UP", "down": "KEYCODE_DPAD_DOWN", "left": "KEYCODE_DPAD_LEFT",
    "right": "KEYCODE_DPAD_RIGHT", "page_up": "KEYCODE_PAGE_UP", "page_down": "KEYCODE_PAGE_DOWN",
    "end": "KEYCODE_MOVE_END", "volume_up": "KEYCODE_VOLUME_UP",
    "volume_down": "KEYCODE_VOLUME_DOWN", "volume_mute": "KEYCODE_VOLUME_MUTE",
    "power": "KEYCODE_POWER", "wakeup": "KEYCODE_WAKEUP", "sleep": "KEYCODE_SLEEP",
    "camera": "KEYCODE_CAMERA", "search": "KEYCODE_SEARCH", "app_switch": "KEYCODE_APP_SWITCH",
    "recent_apps": "KEYCODE_APP_SWITCH", "notification": "KEYCODE_NOTIFICATION",
    "ctrl": "KEYCODE_CTRL_LEFT", "control": "KEYCODE_CTRL_LEFT", "shift": "KEYCODE_SHIFT_LEFT",
    "alt": "KEYCODE_ALT_LEFT", "meta": "KEYCODE_META_LEFT",
}
_KEYCODE = re.compile(r"KEYCODE_[A-Z0-9_]{1,40}")
_PACKAGE = re.compile(r"[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+")
_BOUNDS = re.compile(r"\[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]")
_SH_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
_FAILED = re.compile(r"(?im)^\s*(error\b|exception\b)|exception occurred|: not found$|"
                     r"^usage: input")
_RAW_FORMATS = {1: "RGBA", 2: "RGBX", 5: "BGRA"}     # android PixelFormat codes with 4 bytes/px


# -- pure helpers (tested without a device) -------------------------------------------------------
def sh_quote(arg: str) -> str:
    """Quote one argument for POSIX sh: plain words stay, anything else is single-quoted.

    >>> sh_quote("tap"), sh_quote("a; reboot"), sh_quote("it's")
    ('tap', "'a; reboot'", "'it'\\\\''s'")
    """
    arg = str(arg)
    if _SH_PLAIN.fullmatch(arg):
        return arg
    return "'" + arg.replace("'", "'\\''") + "'"


def sh_line(*argvs) -> str:
    """Several argv lists as one sh line, each argument quoted, commands joined by ``&&``."""
    return " && ".join(" ".join(sh_quote(a) for a in argv) for argv in argvs)


def keycode(name) -> str:
    """A key name as ``input keyevent`` takes it, or `ActionError`.

    >>> keycode("back"), keycode("KEYCODE_VOLUME_UP"), keycode("a"), keycode("66"), keycode("F5")
    ('KEYCODE_BACK', 'KEYCODE_VOLUME_UP', 'KEYCODE_A', '66', 'KEYCODE_F5')
    """
    s = str(name)
    low = s.lower().replace("-", "_").replace(" ", "_")
    if s.isascii():
        if low in SHORT_KEYS:
            return SHORT_KEYS[low]
        if re.fullmatch(r"[a-z0-9]|f[1-9]|f1[0-2]", low):
            return "KEYCODE_" + low.upper()
        if re.fullmatch(r"[0-9]{1,3}", s):
            return s
        if low.startswith("keycode_") and _KEYCODE.fullmatch(s.upper()):
            return s.upper()
    raise ActionError(f"unknown key {name!r}: use KEYCODE_<NAME>, a key code 0..999, a letter or "
                      f"digit, or one of {sorted(SHORT_KEYS)}")


def input_text_args(line: str) -> list[str]:
    """Printable ASCII -> arguments for ``input text`` that it types back literally.

    ``input`` turns ``%s`` into a space and leaves everything else alone, so spaces become ``%s``
    and a literal ``%`` followed by ``s`` ends one argument (the ``s`` starts the next).

    >>> input_text_args("100% off"), input_text_args("50%sale")
    (['100%%soff'], ['50%', 'sale'])
    """
    args, cur = [], []
    for i, ch in enumerate(line):
        if (ch == "s" and i and line[i - 1] == "%") or len(cur) >= TEXT_CHUNK:
            args.append("".join(cur))
            cur = []
        cur.append("%s" if ch == " " else ch)
    if cur:
        args.append("".join(cur))
    return args


def parse_ui_xml(xml: str) -> list[dict] | None:
    """A uiautomator dump -> element dicts (see embodia.devices.gui); None when it does not parse."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return None
    out = []
    for node in root.iter("node"):
        m = _BOUNDS.fullmatch(node.get("bounds", ""))
        if not m:
            continue
        a = node.attrib
        out.append({"index": len(out), "role": a.get("class", ""), "text": a.get("text", ""),
                    "desc": a.get("content-desc", ""), "id": a.get("resource-id", ""),
                    "bounds": [int(v) for v in m.groups()],
                    "clickable": a.get("clickable") == "true",
                    "password": a.get("password") == "true", "focused": a.get("focused") == "true"})
    return out


def parse_raw_screencap(data: bytes) -> np.ndarray | None:
    """``screencap`` without ``-p``: u32 width, height, format (+ u32 colour space since Android 9),
    then 4 bytes a pixel -> RGB uint8 HxWx3, or None when the bytes are something else."""
    if len(data) < 12:
        return None
    w, h, fmt = struct.unpack_from("<III", data)
    if fmt not in _RAW_FORMATS or not (0 < w <= 16384 and 0 < h <= 16384):
        return None
    header = len(data) - w * h * 4
    if header not in (12, 16):
        return None
    px = np.frombuffer(data, np.uint8, count=w * h * 4, offset=header).reshape(h, w, 4)
    return np.ascontiguousarray(px[..., 2::-1] if _RAW_FORMATS[fmt] == "BGRA" else px[..., :3])


def _decode_png(data: bytes) -> np.ndarray | None:
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(io.BytesIO(data)) as im:
            return np.asarray(im.convert("RGB"))
    except (UnidentifiedImageError, OSError):
        return None


# -- adbutils, imported on first use ----------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _adbutils():
    try:
        import adbutils
    except ImportError as e:
        raise ImportError("android: devices need adbutils (pip install adbutils)") from e

    class Connection(adbutils.AdbConnection):
        def _safe_connect(self):
            # adbutils would run its bundled `adb start-server` here; a server that is gone stays
            # gone, and the episode ends with DeviceLost instead of a daemon appearing mid-run.
            return self._create_socket()

    class Client(adbutils.AdbClient):
        _version = None

        def make_connection(self, timeout=None):
            c = Connection(self.host, self.port)
            if timeout:
                c.conn.settimeout(timeout)
            return c

        def server_version(self):   # asked before every transport; one round trip saved per call
            if self._version is None:
                self._version = super().server_version()
            return self._version

    return Client, adbutils.AdbError


def _server(host, port) -> tuple[str, int]:
    host = host or os.environ.get("ANDROID_ADB_SERVER_HOST") or "127.0.0.1"
    return host, int(port or os.environ.get("ANDROID_ADB_SERVER_PORT") or 5037)


def connected(host=None, port=None) -> list[tuple[str, str]]:
    """(serial, state) of every device the adb server knows; `DeviceLost` if it is not reachable."""
    host, port = _server(host, port)
    Client, AdbError = _adbutils()
    try:
        return [(d.serial, d.state) for d in Client(host, port).list()]
    except (AdbError, OSError, EOFError) as e:
        raise DeviceLost(f"adb server at {host}:{port} is not reachable ({e}); "
                         "start it with `adb start-server`") from e


def list_targets() -> list[str]:
    return [s for s, state in connected() if state == "device"]


class AndroidDevice(GuiDevice):
    """An Android phone or emulator; see the module doc for what each action sends."""

    supported = frozenset({"click", "double_click", "long_press", "swipe", "drag", "scroll",
                           "type", "key", "system_button", "open_app"})
    capabilities = frozenset({"screenshot", "ui_tree", "text_input"})

    def __init__(self, serial: str, *, host: str | None = None, port: int | None = None,
                 ime: str = "auto", timeout_s: float = 20.0):
        super().__init__()
        if ime not in ("auto", "adbkeyboard", "none"):
            raise ValueError(f"android: ime must be auto, adbkeyboard or none, got {ime!r}")
        self.serial, self.ime, self.timeout_s = serial, ime, float(timeout_s)
        self.host, self.port = _server(host, port)
        Client, self._AdbError = _adbutils()
        self._adb = Client(self.host, self.port).device(serial)
        self.timing: dict[str, float] = {}
        self._frame_shape = None
        self._ime_before = None
        self._size = self._wm("size", r"(\d+)x(\d+)")
        ratio = self._wm("density", r"(\d+)")[0] / 160.0
        self.embodiment = gui_embodiment(name=f"android:{serial}", kind="gui-phone",
                                         screen=Screen(*self._size, ratio))
        self.capture: str | None = None    # "raw", "png-exec" or "png-shell"; see _grab
        if ime == "adbkeyboard":
            self._select_adb_keyboard()

    # -- transport ----------------------------------------------------------------------------------
    def _lost(self, err) -> DeviceLost:
        return DeviceLost(f"android device {self.serial!r} via adb server {self.host}:{self.port} "
                          f"is gone: {type(err).__name__}: {err}")

    def _run(self, *argvs, service: str = "shell") -> bytes:
        """Run argv lists in one round trip (joined by ``&&``); the output, stdout and stderr."""
        line = sh_line(*argvs)
        try:
            c = self._adb.open_transport(timeout=self.timeout_s)
            try:
                c.send_command(f"{service}:{line}")
                c.check_okay()
                chunks = []       # adbutils' read_until_close concatenates 4 KiB at a time:
                while chunk := c.conn.recv(1 << 20):    # quadratic on a 10 MB frame (2 s)
                    chunks.append(chunk)
                return b"".join(chunks)
            finally:
                c.close()
        except (self._AdbError, OSError, EOFError) as e:
            raise self._lost(e) from e

    def shell(self, *argvs, check: str = "") -> str:
        """Run argv lists (never a string) and return the output; with ``check`` (what was being
        done, for the message) output that reports an error raises `ActionError`."""
        out = self._run(*argvs).decode("utf-8", "replace")
        if check and _FAILED.search(out):
            raise ActionError(f"{check} failed on {self.serial}: {out.strip()[:500]}")
        return out

    def _batches(self, argvs):
        """Group argv lists into shell lines under LINE_LIMIT bytes."""
        batch, size = [], 0
        for argv in argvs:
            n = len(sh_line(argv).encode()) + 4
            if batch and size + n > LINE_LIMIT:
                yield batch
                batch, size = [], 0
            batch.append(argv)
            size += n
        if batch:
            yield batch

    def _wm(self, what: str, pattern: str) -> tuple[int, ...]:
        """`wm size` / `wm density`; an override (set by `wm size WxH`) wins over the physical."""
        out = self.shell(["wm", what])
        values = {}
        for ln in out.splitlines():
            key, _, val = ln.partition(":")
            m = re.search(pattern, val)
            if m:
                values[key.strip().lower()] = tuple(int(g) for g in m.groups())
        value = values.get(f"override {what}") or values.get(f"physical {what}")
        if not value:
            raise DeviceLost(f"android device {self.serial!r}: `wm {what}` gave no {what}: "
                             f"{out.strip()[:200]!r}")
        return value

    # -- observation --------------------------------------------------------------------------------
    def _grab(self) -> np.ndarray:
        t0 = time.perf_counter()
        img = None
        if self.capture in (None, "raw"):       # None: not yet known, the first grab finds out
            try:
                img = parse_raw_screencap(self._run(["screencap"], service="exec"))
            except DeviceLost:
                if self.capture == "raw":
                    raise
                try:     # adbd without the exec: service closes the stream; is the device there?
                    self._adb.get_state()
                except (self._AdbError, OSError, EOFError) as e:
                    raise self._lost(e) from e
                self.capture = "png-shell"
            else:     # one unparsable frame after raw worked (say, "Capturing failed") stays raw
                self.capture = "raw" if img is not None or self.capture == "raw" else "png-exec"
        if img is None:
            service = "shell" if self.capture == "png-shell" else "exec"
            data = self._run(["screencap", "-p"], service=service)
            img = _decode_png(data)
            if img is None:
                raise DeviceLost(f"android device {self.serial!r}: screencap returned no image: "
                                 f"{data[:200]!r}")
        self._frame_shape = img.shape[:2]
        self.timing["screenshot"] = time.perf_counter() - t0
        return img

    def _screen(self) -> Screen:
        w, h = self._size
        if self._frame_shape == (w, h) and w != h:     # rotated: input takes rotated coordinates
            w, h = h, w
        return Screen(w, h, self.embodiment.screen.pixel_ratio)

    def _ui_tree(self) -> list | None:
        t0 = time.perf_counter()
        try:
            said = self.shell(["uiautomator", "dump", DUMP_PATH])
            if "dumped to" not in said.lower():     # e.g. "ERROR: null root node returned by ..."
                return None
            return parse_ui_xml(self.shell(["cat", DUMP_PATH]))
        finally:
            self.timing["ui_tree"] = time.perf_counter() - t0

    # -- actions ------------------------------------------------------------------------------------
    def _execute(self, action: GuiAction, p, q) -> None:
        t0 = time.perf_counter()
        kind = action.type
        if kind == "type":
            for batch in self._batches(self.type_commands(action.text)):
                self.shell(*batch, check="typing")
        elif kind == "open_app":
            self.open_app(action.app)
        else:
            self.shell(*self.commands(action, p, q), check=kind)
        self.timing["act"] = time.perf_counter() - t0

    def commands(self, action: GuiAction, p, q) -> list[list[str]]:
        """The argv lists for a pointer, key or button action (pixels already mapped)."""
        kind, ms = action.type, action.duration_ms
        if kind in ("click", "double_click"):
            return [["input", "tap", str(p[0]), str(p[1])]] * (2 if kind == "double_click" else 1)
        if kind == "long_press":
            return [["input", "swipe", *map(str, p + p), str(800 if ms is None else ms)]]
        if kind in ("swipe", "drag"):
            default = 300 if kind == "swipe" else 1000
            return [["input", "swipe", *map(str, p + q), str(default if ms is None else ms)]]
        if kind == "scroll":
            screen = self._screen()
            w, h = screen.width, screen.height
            dx, dy = {"down": (0, -0.4 * h), "up": (0, 0.4 * h),
                      "right": (-0.4 * w, 0), "left": (0.4 * w, 0)}[action.direction]
            end = (min(w - 1, max(0, round(p[0] + dx))), min(h - 1, max(0, round(p[1] + dy))))
            return [["input", "swipe", *map(str, p + end), str(300 if ms is None else ms)]]
        if kind == "key":
            names = [n for k in action.keys for n in (k.split("+") if len(k) > 1 else [k])]
            codes = [keycode(n) for n in names]
            return [["input", "keyevent" if len(codes) == 1 else "keycombination", *codes]]
        if kind == "system_button":
            return [["input", "keyevent", SHORT_KEYS[action.button]]]
        raise ActionError(f"android cannot {kind!r}")

    def type_commands(self, text: str) -> list[list[str]]:
        """The argv lists that type ``text`` exactly, or `ActionError` before anything is sent."""
        text = text.replace("\r\n", "\n")
        bad = sorted({c for c in text if (ord(c) < 32 and c not in "\n\t") or 127 <= ord(c) < 160})
        if bad:
            raise ActionError(f"cannot type control characters {[hex(ord(c)) for c in bad]}")
        ime = not text.isascii()
        if ime and not self.adb_keyboard_active():
            raise ActionError(
                f"typing non-ASCII text {text[:40]!r} on {self.serial} needs the ADBKeyboard input "
                f"method, which is not the active one. Install it (github.com/senzhk/ADBKeyBoard: "
                f"adb -s {self.serial} install ADBKeyboard.apk), then `adb shell ime enable "
                f"{ADB_KEYBOARD}` and `adb shell ime set {ADB_KEYBOARD}` (or open the device with "
                f"?ime=adbkeyboard). Nothing was typed.")
        out = []
        for i, line in enumerate(text.split("\n")):
            if i:
                out.append(["input", "keyevent", "KEYCODE_ENTER"])
            for j, piece in enumerate(line.split("\t")):
                if j:
                    out.append(["input", "keyevent", "KEYCODE_TAB"])
                if not piece:
                    continue
                if ime:
                    for k in range(0, len(piece), IME_CHUNK):
                        msg = base64.b64encode(piece[k:k + IME_CHUNK].encode()).decode("ascii")
                        out.append(["am", "broadcast", "-a", "ADB_INPUT_B64", "--es", "msg", msg])
                else:
                    out += [["input", "text", a] for a in input_text_args(piece)]
        return out

    def adb_keyboard_active(self) -> bool:
        if self.ime == "none":
            return False
        current = self.shell(["settings", "get", "secure", "default_input_method"])
        return ADB_KEYBOARD in current

    def _select_adb_keyboard(self) -> None:
        if ADB_KEYBOARD not in self.shell(["ime", "list", "-a", "-s"]):
            raise ActionError(f"ime=adbkeyboard: {ADB_KEYBOARD} is not installed on {self.serial} "
                              "(github.com/senzhk/ADBKeyBoard: adb install ADBKeyboard.apk)")
        before = self.shell(["settings", "get", "secure", "default_input_method"]).strip()
        if ADB_KEYBOARD not in before:
            self.shell(["ime", "enable", ADB_KEYBOARD], ["ime", "set", ADB_KEYBOARD],
                       check="selecting ADBKeyboard")
            self._ime_before = before

    def open_app(self, package: str) -> None:
        if not _PACKAGE.fullmatch(package or ""):
            raise ActionError(f"open_app needs an Android package name such as "
                              f"com.android.settings, got {package!r}")
        out = self.shell(["monkey", "-p", package, "-c", "android.intent.category.LAUNCHER", "1"])
        if "Events injected: 1" not in out:
            lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
            reason = next((ln for ln in lines if "monkey aborted" in ln or "Error" in ln),
                          lines[-1] if lines else "no output")
            raise ActionError(f"open_app {package!r} failed on {self.serial}: {reason}")

    def close(self) -> None:
        if self._ime_before and re.fullmatch(r"[\w.]+/[\w.$]+", self._ime_before):
            try:
                self.shell(["ime", "set", self._ime_before])
            except DeviceLost:
                pass                  # nothing to restore on a device that is gone
            self._ime_before = None


def open_android(target: str = "", host=None, port=None, ime: str = "auto", timeout=None,
                 shift=None, size=None) -> AndroidDevice:
    """Factory for ``android:<serial>[?host=..&port=..&ime=auto|adbkeyboard|none&timeout=20]``.

    An empty serial picks the only connected device. The server defaults to
    ANDROID_ADB_SERVER_HOST/PORT, else 127.0.0.1:5037. ``ime=adbkeyboard`` makes ADBKeyboard the
    input method for the session (restored by `close`); ``none`` refuses non-ASCII text; ``auto``
    uses ADBKeyboard where it is already active. ``timeout`` is seconds per adb request.
    """
    if shift:
        raise ValueError(f"android: a phone has no named shifts (got shift={shift!r})")
    if size:
        raise ValueError(f"android: the screen size is the phone's own (got size={size!r})")
    host, port = _server(host, port)
    serial = target.strip()
    if not serial:
        devices = connected(host, port)
        ready = [s for s, state in devices if state == "device"]
        others = ", ".join(f"{s} ({state})" for s, state in devices if state != "device")
        if len(ready) != 1:
            what = "no Android device is" if not ready else f"{len(ready)} devices ({', '.join(ready)}) are"
            raise DeviceLost(f"{what} connected to the adb server at {host}:{port}"
                             + (f"; not ready: {others}" if others else "")
                             + ("; name one: android:<serial>" if ready else ""))
        serial = ready[0]
    return AndroidDevice(serial, host=host, port=port, ime=ime,
                         **({"timeout_s": float(timeout)} if timeout else {}))
