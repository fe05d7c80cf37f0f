"""A fake adb server on loopback that speaks enough of the host protocol for adbutils, and a
scripted phone behind it that reports what its shell would have executed.

Host protocol: a request is 4 hex digits of length + the service name; the reply is ``OKAY`` or
``FAIL`` + a 4-hex-length message. ``host:tport:serial:<s>`` answers OKAY + an 8-byte transport
id and the same socket then carries ``shell:<line>`` / ``exec:<line>`` (OKAY, raw output, close).

The phone parses each shell line the way the device's sh would (`parse_sh`): it records the argv
of every command (``phone.commands``), every character sh would have interpreted
(``phone.hazards``: expansions, redirections, globs, separators other than ``&&``), and what the
keyboard would have typed (``phone.typed``: ``input text`` decoded as Android's ``input`` does,
ADBKeyboard broadcasts decoded from base64, Enter and Tab as ``\\n`` and ``\\t``).

>>> server = FakeAdbServer([FakePhone("emulator-5554")]).start()    # doctest: +SKIP
>>> server.port, server.stop()                                       # doctest: +SKIP
"""
from __future__ import annotations

import base64
import io
import socket
import socketserver
import struct
import threading

import pytest
from PIL import Image, ImageDraw

ADB_KEYBOARD = "com.android.adbkeyboard/.AdbIME"
LATIN_IME = "com.android.inputmethod.latin/.LatinIME"

UI_XML = """<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>
<hierarchy rotation="0">
  <node index="0" text="" resource-id="" class="android.widget.FrameLayout" package="com.example"
        content-desc="" clickable="false" focused="false" password="false" bounds="[0,0][1080,2400]">
    <node index="0" text="Sign in" resource-id="com.example:id/title" class="android.widget.TextView"
          package="com.example" content-desc="" clickable="false" focused="false" password="false"
          bounds="[60,200][1020,320]" />
    <node index="1" text="" resource-id="com.example:id/password" class="android.widget.EditText"
          package="com.example" content-desc="Password" clickable="true" focused="true"
          password="true" bounds="[60,600][1020,760]" />
    <node index="2" text="OK" resource-id="com.example:id/ok" class="android.widget.Button"
          package="com.example" content-desc="" clickable="true" focused="false" password="false"
          bounds="[390,1100][690,1300]" />
  </node>
</hierarchy>
"""


def parse_sh(line: str) -> tuple[list[list[str]], list[str]]:
    """Split ``line`` into commands (argv lists) as POSIX sh would, for what a safe client sends.

    Commands are separated by ``&&``; ``;`` and newlines also separate (and are hazards).
    ``hazards`` names every unquoted character sh would interpret, and ``$``/backtick inside
    double quotes; a client that quotes properly produces none.

    >>> parse_sh("input text 'a; reboot' && echo \\"x\\"")
    ([['input', 'text', 'a; reboot'], ['echo', 'x']], [])
    >>> parse_sh("input text a; reboot")
    ([['input', 'text', 'a'], ['reboot']], ["unquoted ';' at 12"])
    """
    commands: list[list[str]] = [[]]
    hazards: list[str] = []
    word: list[str] = []
    in_word = False
    i, n = 0, len(line)

    def end_word():
        nonlocal word, in_word
        if in_word:
            commands[-1].append("".join(word))
        word, in_word = [], False

    while i < n:
        c = line[i]
        if c in " \t":
            end_word()
            i += 1
        elif c == "'":
            j = line.find("'", i + 1)
            if j < 0:
                hazards.append("unterminated single quote")
                j = n
            word.append(line[i + 1:j])
            in_word, i = True, j + 1
        elif c == '"':
            j = i + 1
            while j < n and line[j] != '"':
                if line[j] == "\\" and j + 1 < n and line[j + 1] in '$`"\\\n':
                    word.append(line[j + 1])
                    j += 2
                    continue
                if line[j] in "$`":
                    hazards.append(f"{line[j]!r} inside double quotes at {j}")
                word.append(line[j])
                j += 1
            if j >= n:
                hazards.append("unterminated double quote")
            in_word, i = True, j + 1
        elif c == "\\":
            if i + 1 < n and line[i + 1] != "\n":
                word.append(line[i + 1])
                in_word = True
            i += 2
        elif line.startswith("&&", i):
            end_word()
            commands.append([])
            i += 2
        elif c in ";\n":
            hazards.append(f"unquoted {c!r} at {i}")
            end_word()
            commands.append([])
            i += 1
        else:
            if c in "|&<>()$`*?[{" or (c in "#~" and not in_word):
                hazards.append(f"unquoted {c!r} at {i}")
            word.append(c)
            in_word, i = True, i + 1
    end_word()
    return [argv for argv in commands if argv], hazards


def input_typed(arg: str) -> str:
    """What Android's ``input text <arg>`` types: it rewrites ``%s`` (scanning left to right,
    non-overlapping) to a space and nothing else."""
    return arg.replace("%s", " ")


def _bounds(s: str) -> tuple[int, int, int, int]:
    a, b = s.strip("[]").split("][")
    return tuple(int(v) for v in a.split(",") + b.split(","))


class FakePhone:
    """A scripted phone: screen, framebuffer, UI dump, input method, installed packages.

    ``ime``: ADBKeyboard is installed and the active input method. ``exec_service=False`` models
    an adbd without ``exec:``; ``raw_header`` is 16 (Android 9+) or 12; ``rotation=1`` serves
    landscape frames while ``wm size`` stays portrait. ``stall`` makes shell requests wait until
    the server dies (an in-flight request when the server is killed).
    """

    def __init__(self, serial="emulator-5554", width=1080, height=2400, density=420, *,
                 override_size=None, ime=False, ime_installed=None, packages=("com.android.settings",),
                 ui_xml=UI_XML, exec_service=True, raw_header=16, rotation=0):
        self.serial, self.width, self.height, self.density = serial, width, height, density
        self.override_size, self.exec_service, self.raw_header = override_size, exec_service, raw_header
        self.ime_installed = ime if ime_installed is None else ime_installed
        self.input_method = ADB_KEYBOARD if ime else LATIN_IME
        self.packages, self.ui_xml, self.rotation = set(packages), ui_xml, rotation
        self.stall = False
        self.files: dict[str, str] = {}
        self.lines: list[str] = []                 # every shell/exec line received
        self.commands: list[list[str]] = []        # every argv the device's sh would run
        self.hazards: list[str] = []
        self.typed = ""
        self.launched: list[str] = []
        self.clicked: list[str] = []               # resource-ids of clickable nodes tapped
        self.lock = threading.Lock()
        w, h = (height, width) if rotation % 2 else (width, height)
        self.frame = Image.new("RGB", (w, h), (245, 245, 245))
        draw = ImageDraw.Draw(self.frame)
        self.targets = []
        for node in self._nodes():
            x0, y0, x1, y1 = _bounds(node["bounds"])
            if node.get("clickable") == "true":
                self.targets.append(((x0, y0, x1, y1), node.get("resource-id", "")))
                draw.rectangle((x0, y0, x1 - 1, y1 - 1), fill=(60, 120, 200))

    def _nodes(self):
        import xml.etree.ElementTree as ET
        if not self.ui_xml:
            return []
        return [n.attrib for n in ET.fromstring(self.ui_xml).iter("node")]

    # -- the shell ------------------------------------------------------------------------------
    def run(self, line: str) -> bytes:
        cmds, hazards = parse_sh(line)
        with self.lock:
            self.lines.append(line)
            self.hazards += [f"{h} in {line!r}" for h in hazards]
        out = b""
        for argv in cmds:
            with self.lock:
                self.commands.append(argv)
                out += self._one(argv)
        return out

    def _one(self, argv: list[str]) -> bytes:
        cmd, args = argv[0], argv[1:]
        if argv == ["wm", "size"]:
            out = f"Physical size: {self.width}x{self.height}\n"
            if self.override_size:
                out += "Override size: %dx%d\n" % self.override_size
            return out.encode()
        if argv == ["wm", "density"]:
            return f"Physical density: {self.density}\n".encode()
        if argv == ["screencap", "-p"]:
            buf = io.BytesIO()
            self.frame.save(buf, "PNG", compress_level=1)
            return buf.getvalue()
        if argv == ["screencap"]:
            w, h = self.frame.size
            head = struct.pack("<IIII", w, h, 1, 0)[: self.raw_header]
            return head + self.frame.convert("RGBA").tobytes()
        if cmd == "input":
            return self._input(args)
        if cmd == "monkey":
            if len(args) == 5 and args[0] == "-p" and args[2:] == ["-c", "android.intent.category.LAUNCHER", "1"]:
                if args[1] in self.packages:
                    self.launched.append(args[1])
                    return b"  bash arg: -p\nEvents injected: 1\n## Network stats: elapsed time=12ms\n"
                return b"  bash arg: -p\n** No activities found to run, monkey aborted.\n"
            return b"usage: monkey [-p ALLOWED_PACKAGE [-p ALLOWED_PACKAGE] ...]\n"
        if cmd == "uiautomator" and args[:1] == ["dump"] and len(args) == 2:
            if not self.ui_xml:
                return b"ERROR: null root node returned by UiTestAutomationBridge.\n"
            self.files[args[1]] = self.ui_xml
            return f"UI hierchary dumped to: {args[1]}\n".encode()
        if cmd == "cat" and len(args) == 1:
            if args[0] in self.files:
                return self.files[args[0]].encode()
            return f"cat: {args[0]}: No such file or directory\n".encode()
        if argv == ["settings", "get", "secure", "default_input_method"]:
            return (self.input_method + "\n").encode()
        if cmd == "ime":
            installed = [LATIN_IME] + ([ADB_KEYBOARD] if self.ime_installed else [])
            if args in (["list", "-s"], ["list", "-a", "-s"]):
                return "".join(i + "\n" for i in installed).encode()
            if args[:1] in (["enable"], ["set"]) and len(args) == 2:
                if args[1] not in installed:
                    return f"Unknown input method {args[1]} cannot be enabled for user #0\n".encode()
                if args[0] == "set":
                    self.input_method = args[1]
                return f"Input method {args[1]}: selected\n".encode()
        if cmd == "am" and args[:5] == ["broadcast", "-a", "ADB_INPUT_B64", "--es", "msg"] and len(args) == 6:
            if self.input_method == ADB_KEYBOARD:       # only the active IME has the receiver
                self.typed += base64.b64decode(args[5], validate=True).decode("utf-8")
            return (b"Broadcasting: Intent { act=ADB_INPUT_B64 flg=0x400000 (has extras) }\n"
                    b"Broadcast completed: result=0\n")
        if argv == ["getprop", "ro.product.model"]:
            return b"Fake Phone\n"
        if cmd == "echo":
            return (" ".join(args) + "\n").encode()
        return f"/system/bin/sh: {cmd}: not found\n".encode()

    def _input(self, args: list[str]) -> bytes:
        sub, rest = (args[0], args[1:]) if args else ("", [])
        try:
            if sub == "tap" and len(rest) == 2:
                x, y = int(rest[0]), int(rest[1])
                ImageDraw.Draw(self.frame).ellipse((x - 12, y - 12, x + 12, y + 12), fill=(220, 30, 30))
                self.clicked += [rid for (x0, y0, x1, y1), rid in self.targets
                                 if x0 <= x < x1 and y0 <= y < y1]
                return b""
            if sub == "swipe" and len(rest) in (4, 5):
                [int(v) for v in rest]
                return b""
            if sub == "text" and len(rest) == 1:
                self.typed += input_typed(rest[0])
                return b""
            if sub in ("keyevent", "keycombination") and rest:
                for k in rest:
                    if not (k.isdigit() or k.startswith("KEYCODE_")):
                        return f"Error: Unknown keycode: {k}\n".encode()
                if sub == "keyevent":
                    self.typed += "".join({"KEYCODE_ENTER": "\n", "KEYCODE_TAB": "\t"}.get(k, "")
                                          for k in rest)
                return b""
        except ValueError as e:
            return f"Exception occurred while executing '{sub}':\njava.lang.NumberFormatException: {e}\n".encode()
        return f"Error: Invalid arguments for command: {sub}\nUsage: input [<source>] <command> [<arg>...]\n".encode()


class _Handler(socketserver.BaseRequestHandler):
    def setup(self):
        self.server.track(self.request, True)

    def finish(self):
        self.server.track(self.request, False)

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.request.recv(n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return buf

    def _reply(self, ok: bool, payload: str | None = None, raw: bytes = b""):
        msg = b"OKAY" if ok else b"FAIL"
        if payload is not None:
            data = payload.encode()
            msg += b"%04x" % len(data) + data
        self.request.sendall(msg + raw)

    def handle(self):
        server: FakeAdbServer = self.server
        phone = None
        try:
            while not server.dead.is_set():
                cmd = self._read(int(self._read(4), 16)).decode("utf-8")
                server.log.append((phone.serial if phone else "", cmd))
                if cmd == "host:version":
                    return self._reply(True, "%04x" % 41)
                if cmd in ("host:devices", "host:devices-l"):
                    long = cmd.endswith("-l")
                    return self._reply(True, "".join(
                        f"{s}\tdevice" + (f" product:fake model:Fake_Phone transport_id:{i + 1}" if long else "") + "\n"
                        for i, s in enumerate(server.phones)))
                if cmd == "host:kill":
                    self._reply(True)
                    threading.Thread(target=server.stop, daemon=True).start()
                    return
                if cmd.startswith(("host:tport:serial:", "host:transport:")):
                    serial = cmd.rpartition(":")[2]
                    if serial not in server.phones:
                        return self._reply(False, f"device '{serial}' not found")
                    phone = server.phones[serial]
                    self._reply(True, raw=struct.pack("<Q", 1) if "tport" in cmd else b"")
                    continue
                if cmd.startswith("host-serial:"):
                    serial, _, what = cmd[len("host-serial:"):].rpartition(":")
                    if serial not in server.phones:
                        return self._reply(False, f"device '{serial}' not found")
                    answers = {"get-state": "device", "get-serialno": serial, "features": "cmd,stat_v2"}
                    if what not in answers:
                        return self._reply(False, f"unknown host service {what}")
                    return self._reply(True, answers[what])
                if phone and cmd.startswith(("shell:", "exec:")):
                    service, _, line = cmd.partition(":")
                    if service == "exec" and not phone.exec_service:
                        return self._reply(False, "closed")
                    if phone.stall:
                        server.dead.wait(10)
                        return
                    out = phone.run(line)
                    return self._reply(True, raw=out)     # closing the socket ends the output
                return self._reply(False, f"unknown host service {cmd}")
        except (EOFError, OSError, ValueError):
            return


class FakeAdbServer(socketserver.ThreadingTCPServer):
    """Threaded fake adb server on 127.0.0.1 (port 0: an ephemeral one); ``log`` holds every
    request as (serial of its transport or "", service string)."""

    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False

    def __init__(self, phones=(), host: str = "127.0.0.1", port: int = 0):
        super().__init__((host, port), _Handler)
        self.phones = {p.serial: p for p in phones}
        self.log: list[tuple[str, str]] = []
        self.dead = threading.Event()
        self._live: set[socket.socket] = set()
        self._live_lock = threading.Lock()
        self._thread = None

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def phone(self) -> FakePhone:
        """The first phone (most tests have one)."""
        return next(iter(self.phones.values()))

    def track(self, sock, alive: bool):
        with self._live_lock:
            (self._live.add if alive else self._live.discard)(sock)

    def start(self) -> "FakeAdbServer":
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)
        self._thread.start()
        return self

    def unplug(self, serial: str) -> None:
        self.phones.pop(serial, None)

    def stop(self) -> None:
        """Kill the server: stop listening (new connections are refused) and cut every open one."""
        if self.dead.is_set():
            return
        self.dead.set()
        self.shutdown()
        self.server_close()
        with self._live_lock:
            live = list(self._live)
        for s in live:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


@pytest.fixture
def new_fake_adb(monkeypatch):
    """Start fake adb servers: ``new_fake_adb(FakePhone(ime=True), ...)`` (default: one FakePhone).

    adbutils is forbidden to start its bundled adb daemon: a test that reached that path fails
    instead of leaving a daemon behind. Every server is stopped at the end of the test.
    """
    import adbutils._adb

    def no_daemon(*a, **k):
        raise AssertionError("adbutils tried to start its bundled adb daemon")
    monkeypatch.setattr(adbutils._adb, "adb_path", no_daemon)
    servers = []

    def start(*phones: FakePhone) -> FakeAdbServer:
        servers.append(FakeAdbServer(phones or [FakePhone()]).start())
        return servers[-1]
    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def fake_adb(new_fake_adb, monkeypatch):
    """A running FakeAdbServer with one FakePhone ("emulator-5554", 1080x2400, 420 dpi, no IME);
    ANDROID_ADB_SERVER_HOST/PORT point at it."""
    server = new_fake_adb()
    monkeypatch.setenv("ANDROID_ADB_SERVER_HOST", "127.0.0.1")
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(server.port))
    return server
