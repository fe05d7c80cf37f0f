"""The Linux accessibility tree (AT-SPI) of the visible windows, read over D-Bus with jeepney.

>>> tree = AtspiTree.connect(":99")                                  # doctest: +SKIP
>>> [(e["role"], e["text"]) for e in tree.read((1280, 800))][:2]     # doctest: +SKIP
[('frame', 'Untitled 1 - Mousepad'), ('menu', 'File')]

Why jeepney: AT-SPI is a plain D-Bus protocol (a registry on the accessibility bus; every widget an
object with ``org.a11y.atspi.Accessible``, ``.Component``, ``.Action``, ``.Text``). Debian's
pyatspi goes through GObject introspection built for Debian's own Python, not the venv's; jeepney
is pure Python (no compiled part, no dependencies), maintained, and has a blocking API, which
suits a device whose ``observe()`` is synchronous. dbus-fast is asyncio-first (an event loop
inside the device for a handful of calls). Speed comes from three things:

- pipelining: every request of one tree level goes out before the first reply is read, so a walk
  costs two round trips per level, not one per property of every node (pyatspi's way: ~450 ms for
  mousepad's 322 nodes);
- each application's own socket: at-spi2-atk serves one per application (its address from
  ``Application.GetApplicationBusAddress``), so calls skip the bus daemon, which reads and routes
  every message twice; where an application has none, its calls go through the bus;
- replies read by `embodia.devices.dbus_wire` (a decoder compiled per signature) instead of
  jeepney's general parser, which had been two thirds of a read's time.

gnumeric's main window (189 nodes visited, 75 elements) went from 70 ms to about 25-40 ms p50.

The bus: at-spi-bus-launcher (Debian package at-spi2-core) publishes the accessibility bus's
address on the X root window (property ``AT_SPI_BUS``) and on the session bus (``org.a11y.Bus``);
GTK3 applications started afterwards join it by themselves, Qt ones with
``QT_LINUX_ACCESSIBILITY_ALWAYS_ON=1``. `start_bus` starts one (a private session bus plus the
launcher) for a display that has none.

Elements have the schema of `embodia.devices.gui` (``index``, ``role``, ``text``, ``desc``, ``id``,
``bounds`` in screen pixels, ``clickable``, ``password``, ``focused``), plus ``box`` (the bounds in
the 0..1000 action space), ``enabled``, ``editable``, ``checked`` (checkable ones only), ``value``
(an editable's text), ``actions`` (the accessible actions' names), ``window`` (the title of its
top-level window) and ``app``. Pruned to what is visible and actionable: a subtree is walked only
where it is SHOWING; an element is kept when it has on-screen bounds and either offers an action,
takes text, is checkable, or carries a label (name); at most ``limit`` elements.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import select
import shutil
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field

from embodia.devices.embodiment import Screen

__all__ = ["AtspiTree", "NoBus", "BusHandle", "find_bus", "start_bus", "STATES"]

REGISTRY = ("org.a11y.atspi.Registry", "/org/a11y/atspi/accessible/root")
ACC, COMP, ACTION, TEXT = ("org.a11y.atspi.Accessible", "org.a11y.atspi.Component",
                           "org.a11y.atspi.Action", "org.a11y.atspi.Text")
PROPS = "org.freedesktop.DBus.Properties"
# AtspiStateType bit numbers (at-spi2-core atspi-constants.h)
STATES = {"active": 1, "checked": 4, "editable": 7, "enabled": 8, "expanded": 10, "focusable": 11, "focused": 12,
          "modal": 16, "multi_line": 17, "pressed": 20, "selected": 23, "sensitive": 24, "showing": 25,
          "visible": 30, "manages_descendants": 31, "checkable": 41, "read_only": 43}
# roles whose elements a person acts on (the tree keeps them even without a name)
ACTIONABLE_ROLES = {"push button", "toggle button", "check box", "radio button", "menu item",
                    "check menu item", "radio menu item", "menu", "combo box", "text", "entry",
                    "password text", "spin button", "slider", "page tab", "link", "list item",
                    "table cell", "tree item", "button", "toggle", "switch", "editbar", "terminal",
                    "document text", "paragraph"}
CONTAINER_ROLES = {"filler", "panel", "scroll pane", "viewport", "layered pane", "split pane",
                   "tool bar", "menu bar", "separator", "unknown", "redundant object", "invalid",
                   "application", "internal frame", "glass pane", "root pane", "option pane"}
MAX_CHILDREN = 400       # a table or list that manages its descendants can claim millions


class NoBus(RuntimeError):
    """No accessibility bus for this display (at-spi-bus-launcher is not running)."""


def _jeepney():
    from jeepney import DBusAddress, HeaderFields, MessageType, new_method_call
    from jeepney.io.blocking import open_dbus_connection
    return DBusAddress, HeaderFields, MessageType, new_method_call, open_dbus_connection


def _x_root_property(display: str) -> str:
    """The X root window's ``AT_SPI_BUS`` string ('' if unset or the display does not answer)."""
    from Xlib import X
    from Xlib.display import Display
    auth = os.environ.get("XAUTHORITY") or os.path.join(os.path.expanduser("~"), ".Xauthority")
    saved = os.environ.get("XAUTHORITY")
    try:
        if not os.path.exists(auth):     # python-xlib refuses a missing file where libX11 goes on
            os.environ["XAUTHORITY"] = os.devnull
        with contextlib.redirect_stdout(sys.stderr):     # python-xlib's xauth warning is no output
            d = Display(display)
    except Exception:     # noqa: BLE001 - DisplayError, OSError, xauth errors...: no display, no bus
        return ""
    finally:
        if saved is None:
            os.environ.pop("XAUTHORITY", None)
        else:
            os.environ["XAUTHORITY"] = saved
    try:
        atom = d.intern_atom("AT_SPI_BUS", only_if_exists=True)
        if not atom:
            return ""
        prop = d.screen().root.get_full_property(atom, X.AnyPropertyType)
        if prop is None:
            return ""
        v = prop.value
        return (v.decode() if isinstance(v, bytes) else str(v)).strip("\0")
    finally:
        d.close()


def _session_bus_address() -> str:
    """Ask the session bus's ``org.a11y.Bus`` for the accessibility bus ('' when there is none)."""
    if not os.environ.get("DBUS_SESSION_BUS_ADDRESS"):
        return ""
    DBusAddress, _, MessageType, new_method_call, open_conn = _jeepney()
    try:
        with open_conn("SESSION") as conn:
            m = new_method_call(DBusAddress("/org/a11y/bus", bus_name="org.a11y.Bus",
                                            interface="org.a11y.Bus"), "GetAddress")
            r = conn.send_and_get_reply(m, timeout=1.0)
            return r.body[0] if r.header.message_type == MessageType.method_return else ""
    except (OSError, TimeoutError, ValueError, KeyError):
        return ""


def find_bus(display: str) -> str:
    """The accessibility bus address for ``display``: $AT_SPI_BUS_ADDRESS, else the X root window's
    ``AT_SPI_BUS`` property, else the session bus's ``org.a11y.Bus``; '' when there is none."""
    return (os.environ.get("AT_SPI_BUS_ADDRESS", "") or _x_root_property(display)
            or _session_bus_address())


@dataclass
class BusHandle:
    """A session bus and an accessibility bus started by `start_bus`; ``stop()`` ends both."""

    address: str                     # the accessibility bus
    session: str                     # the private session bus (DBUS_SESSION_BUS_ADDRESS for apps)
    procs: list = field(default_factory=list, repr=False)

    def stop(self) -> None:
        for p in reversed(self.procs):
            if isinstance(p, int):
                try:
                    os.kill(p, 15)
                except ProcessLookupError:
                    pass
            elif p.poll() is None:
                p.terminate()
                try:
                    p.wait(3)
                except subprocess.TimeoutExpired:
                    p.kill()


LAUNCHER = "/usr/libexec/at-spi-bus-launcher"


def start_bus(display: str, timeout: float = 10.0) -> BusHandle:
    """Start a private session bus (``dbus-daemon --session``) and at-spi-bus-launcher on it for
    ``display``; wait until the accessibility bus's address is on the X root window.

    Raises `NoBus` naming the missing Debian package when dbus-daemon or the launcher is absent.
    """
    if shutil.which("dbus-daemon") is None or not os.path.exists(LAUNCHER):
        raise NoBus("cannot start an accessibility bus: install the Debian packages dbus and at-spi2-core "
                    f"(need dbus-daemon and {LAUNCHER})")
    daemon = subprocess.run(["dbus-daemon", "--session", "--fork", "--print-address=1", "--print-pid=1"],
                            capture_output=True, text=True, timeout=timeout, check=True)
    session, pid = daemon.stdout.split()[:2]
    env = {**os.environ, "DISPLAY": display, "DBUS_SESSION_BUS_ADDRESS": session}
    env.pop("AT_SPI_BUS_ADDRESS", None)
    launcher = subprocess.Popen([LAUNCHER, "--launch-immediately"], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    handle = BusHandle("", session, [int(pid), launcher])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        addr = _x_root_property(display)
        if addr and launcher.poll() is None:
            handle.address = addr
            return handle
        if launcher.poll() is not None:
            break
        time.sleep(0.05)
    handle.stop()
    raise NoBus(f"at-spi-bus-launcher did not publish an accessibility bus on {display} within {timeout}s")


class _Link:
    """A socket to a D-Bus peer (the bus, or one application) and its reply reader."""

    def __init__(self, sock):
        from embodia.devices.dbus_wire import ReplyReader
        self.sock, self.reader = sock, ReplyReader()


class AtspiTree:
    """One connection to an accessibility bus; `read(screen)` returns the pruned element list."""

    def __init__(self, address: str, *, limit: int = 300, timeout: float = 2.0, direct: bool = True):
        DBusAddress, self._HF, self._MT, self._call, open_conn = _jeepney()
        self._addr = DBusAddress
        self.address, self.limit, self.timeout = address, int(limit), float(timeout)
        self.conn = open_conn(address)
        self.direct = bool(direct)      # calls over each application's own socket where it has one
        self._serials = itertools.count(1 << 20)    # above what jeepney's Hello used
        self._bus = _Link(self.conn.sock)
        pipe = self.conn.parser.buf               # what jeepney read past the Hello reply, if anything
        if pipe.bytes_buffered:
            self._bus.reader.feed(pipe.read(pipe.bytes_buffered))
        self._peers: dict[str, _Link | None] = {}  # app bus name -> its own socket (None: use the bus)
        self._wire: dict = {}            # serialised calls, by (ref, interface, method, body)
        self.last_ms = 0.0               # how long the last read took
        self.nodes_visited = 0
        self.apps: set[str] | None = None  # bus names to read (None: every application)

    @classmethod
    def connect(cls, display: str, **kw) -> "AtspiTree":
        addr = find_bus(display)
        if not addr:
            raise NoBus(f"no accessibility bus on {display} (start at-spi-bus-launcher, see embodia.devices.atspi)")
        return cls(addr, **kw)

    def close(self) -> None:
        for link in self._peers.values():
            if link is not None:
                link.sock.close()
        self._peers.clear()
        self.conn.close()

    # -- pipelined calls ---------------------------------------------------------------------------
    def _msg(self, ref, iface, method, sig=None, body=()) -> tuple[str, bytearray]:
        """A serialised method call. The same call is asked at every read, so its bytes are kept
        and only the serial (bytes 8..11 of a little-endian header) changes: jeepney's serialiser
        was the largest cost of a read. Returns (destination bus name, bytes)."""
        key = (ref, iface, method, body)
        raw = self._wire.get(key)
        if raw is not None:
            return ref[0], bytearray(raw)
        if raw is None:
            if len(self._wire) > 50_000:
                self._wire.clear()
            m = self._call(self._addr(ref[1], bus_name=ref[0], interface=iface), method, sig, body)
            raw = self._wire[key] = m.serialise(serial=1)
        return ref[0], bytearray(raw)

    def batch(self, msgs: list) -> list:
        """Send every message, then read the replies; a reply's body, or None for an error/timeout.

        A message goes to its application's own socket where it has one (see `_peer`), else through
        the bus; on each, the whole batch is one write. Replies are read straight off the sockets by
        `embodia.devices.dbus_wire` (jeepney's general parser was two thirds of a read's time)."""
        pending: dict = {}                      # link -> {serial: index}
        wires: dict = {}
        for i, (dest, m) in enumerate(msgs):
            link = self._peers.get(dest) or self._bus
            s = next(self._serials)
            pending.setdefault(link, {})[s] = i
            struct.pack_into("<I", m, 8, s)
            wires.setdefault(link, []).append(m)
        for link, ms in wires.items():
            try:
                link.sock.sendall(b"".join(ms))
            except OSError:                     # an application gone: its calls stay None
                if link is self._bus:
                    raise
                pending.pop(link)
                self._drop(link)
        out: list = [None] * len(msgs)
        deadline = time.monotonic() + self.timeout
        while pending:
            for link in list(pending):
                waiting = pending[link]
                for kind, serial, body in link.reader.replies():
                    i = waiting.pop(serial, None)
                    if i is not None and kind == 2:
                        out[i] = body
                if not waiting:
                    del pending[link]
            left = deadline - time.monotonic()
            if not pending or left <= 0:
                break
            ready = select.select([link.sock for link in pending], [], [], left)[0]
            if not ready:
                break
            for link in list(pending):
                if link.sock in ready:
                    try:
                        data = link.sock.recv(1 << 20)
                    except OSError:             # reset by an application that is exiting
                        if link is self._bus:
                            raise
                        data = b""
                    if data:
                        link.reader.feed(data)
                    else:                       # closed: the application exited
                        pending.pop(link)
                        self._drop(link)
        return out

    def _drop(self, link: "_Link") -> None:
        for name, peer in list(self._peers.items()):
            if peer is link:
                self._peers[name] = None
                link.sock.close()

    def _peer(self, bus_name: str) -> None:
        """Open the application's own socket once (at-spi2-atk serves one, named by
        ``Application.GetApplicationBusAddress``): calls then skip the bus daemon, which had to read
        and route each of them twice (gnumeric's read: 38 -> 25 ms). Where the application has none
        (no runtime folder, another toolkit), its calls go through the bus as before."""
        if bus_name in self._peers or not self.direct:
            return
        self._peers[bus_name] = None
        body = self.call((bus_name, "/org/a11y/atspi/accessible/root"), "org.a11y.atspi.Application",
                         "GetApplicationBusAddress")
        if not body or not body[0]:
            return
        from jeepney.bus import get_bus
        from jeepney.io.blocking import prep_socket
        try:
            self._peers[bus_name] = _Link(prep_socket(get_bus(body[0]), False, timeout=1.0))
        except (OSError, ValueError, RuntimeError):   # no socket file, refused, failed auth
            pass

    def call(self, ref, iface, method, sig=None, body=()):
        return self.batch([self._msg(ref, iface, method, sig, body)])[0]

    # -- the walk ----------------------------------------------------------------------------------
    def applications(self) -> list[tuple[str, str]]:
        body = self.call(REGISTRY, ACC, "GetChildren")
        apps = [tuple(a) for a in (body[0] if body else [])]
        return [a for a in apps if self.apps is None or a[0] in self.apps]

    def app_pid(self, bus_name: str) -> int | None:
        body = self.call(("org.freedesktop.DBus", "/org/freedesktop/DBus"), "org.freedesktop.DBus",
                         "GetConnectionUnixProcessID", "s", (bus_name,))
        return int(body[0]) if body else None

    def read(self, screen) -> list[dict]:
        """The visible, actionable elements of every showing window, in tree order (see the module doc).

        ``screen``: a `Screen` or (width, height) in pixels, for ``box`` (0..1000) and for dropping
        what lies off the screen.
        """
        t0 = time.perf_counter()
        w, h = Screen.of(screen).size
        out: list[dict] = []
        self.nodes_visited = 0
        apps = self.applications()
        for gone in set(self._peers) - {a[0] for a in apps} - set(self.apps or ()):
            link = self._peers.pop(gone)
            if link is not None:
                link.sock.close()
        for app in apps:
            self._peer(app[0])
            kids, name = self.batch([self._msg(app, ACC, "GetChildren"),
                                     self._msg(app, PROPS, "Get", "ss", (ACC, "Name"))])
            app_name = str((name or [("s", "")])[0][1])
            windows = [tuple(k) for k in (kids[0] if kids else [])]
            # (ref, window title, depth, the parent's role)
            self._walk([(k, "", 0, "application") for k in windows], app_name, (w, h), out)
            if len(out) >= self.limit:
                break
        for i, e in enumerate(out):
            e["index"] = i
        self.last_ms = (time.perf_counter() - t0) * 1e3
        return out

    def _walk(self, level, app_name, size, out) -> None:
        """Breadth first, two pipelined rounds a level: properties and states of every node, then
        role, extents and children of the SHOWING ones only. A menu that is not open (neither
        selected nor expanded) is not walked into: its items do not show (gnumeric: 317 -> ~180
        nodes)."""
        w, h = size
        while level and len(out) < self.limit:
            self.nodes_visited += len(level)
            msgs = []
            for ref, _, _, _ in level:
                msgs += [self._msg(ref, PROPS, "GetAll", "s", (ACC,)), self._msg(ref, ACC, "GetState")]
            replies = self.batch(msgs)
            showing = []
            for k, (ref, window, depth, parent_role) in enumerate(level):
                props, state = replies[2 * k], replies[2 * k + 1]
                if props is None or state is None:
                    continue
                p = {key: v[1] for key, v in props[0].items()}
                bits = state[0][0] | (state[0][1] << 32) if len(state[0]) > 1 else state[0][0]
                has = {s for s, b in STATES.items() if bits >> b & 1}
                if "showing" not in has:
                    continue                      # closed menus, hidden pages: prune the subtree
                name = str(p.get("Name", "") or "")
                kids = int(p.get("ChildCount", 0) or 0)
                if "manages_descendants" in has and kids > 64:
                    kids = 0                      # a big table or list: its rows are not walked
                showing.append((ref, name if depth == 0 else window, depth, p, has, min(kids, MAX_CHILDREN),
                                parent_role))
            msgs = []
            for ref, _, _, _, _, kids, _ in showing:
                msgs += [self._msg(ref, ACC, "GetRoleName"), self._msg(ref, COMP, "GetExtents", "u", (0,))]
                if kids:
                    msgs.append(self._msg(ref, ACC, "GetChildren"))
            replies = iter(self.batch(msgs))
            nxt, extra = [], []
            for ref, window, depth, p, has, kids, parent_role in showing:
                role, ext = next(replies), next(replies)
                children = next(replies) if kids else None
                # a menu bar entry or a submenu that is not open: its items are not showing
                closed_menu = (parent_role in ("menu bar", "menu") and role and role[0] == "menu"
                               and not {"selected", "expanded"} & has)
                for child in (children[0][:kids] if children and not closed_menu else []):
                    nxt.append((tuple(child), window, depth + 1, role[0] if role else ""))
                if ext is None or "visible" not in has:
                    continue
                x, y, ew, eh = ext[0]
                x0, y0, x1, y1 = max(0, x), max(0, y), min(w, x + ew), min(h, y + eh)
                if x1 <= x0 or y1 <= y0:
                    continue                      # no extent on this screen
                role = role[0] if role else ""
                e = self._element(ref, role, str(p.get("Name", "") or ""), p, has, (x0, y0, x1, y1),
                                  size, window, app_name)
                if e is not None and len(out) < self.limit:
                    out.append(e)
                    if e["editable"] or role in ("text", "entry", "password text", "label", "spin button"):
                        extra.append(e)
            self._text_values(extra)
            level = nxt

    def _element(self, ref, role, name, p, has, bounds, size, window, app_name) -> dict | None:
        actionable = role in ACTIONABLE_ROLES or "focusable" in has or "editable" in has
        if not actionable and (not name or role in CONTAINER_ROLES):
            return None
        w, h = size
        x0, y0, x1, y1 = bounds
        e = {"index": -1, "role": role, "text": name, "desc": str(p.get("Description", "") or ""),
             "id": str(p.get("AccessibleId", "") or ""), "bounds": [x0, y0, x1, y1],
             "box": [round(x0 * 1000 / w), round(y0 * 1000 / h), round(x1 * 1000 / w), round(y1 * 1000 / h)],
             # an editable field takes a click (it focuses it), as an Android EditText does
             "clickable": actionable and (role not in ("text", "entry", "password text", "label") or "editable" in has),
             "password": role == "password text", "focused": "focused" in has,
             "enabled": "enabled" in has and "sensitive" in has, "editable": "editable" in has,
             "window": window, "app": app_name, "ref": list(ref)}
        if "checkable" in has or role in ("check box", "radio button", "toggle button", "check menu item",
                                          "radio menu item"):
            e["checked"] = "checked" in has or "pressed" in has
        return e

    def _text_values(self, elements: list[dict]) -> None:
        """Fill ``value`` (the Text interface's content) of editables and labels, in one batch."""
        if not elements:
            return
        replies = self.batch([self._msg(tuple(e["ref"]), TEXT, "GetText", "ii", (0, -1)) for e in elements])
        for e, body in zip(elements, replies):
            if body is not None:
                e["value"] = body[0]
                if not e["text"] and not e["password"]:
                    e["text"] = body[0][:200]

    # -- actions -----------------------------------------------------------------------------------
    def actions(self, element: dict) -> list[str]:
        """Names of the element's accessible actions (``["click"]``, ``["press"]``, ...)."""
        body = self.call(tuple(element["ref"]), ACTION, "GetActions")
        return [a[0] for a in body[0]] if body else []

    def do_action(self, element: dict, name: str | None = None) -> bool:
        """Run the element's accessible action ``name`` (the first one when None); False if it has none."""
        names = self.actions(element)
        if not names:
            return False
        i = names.index(name) if name in names else 0
        body = self.call(tuple(element["ref"]), ACTION, "DoAction", "i", (i,))
        return bool(body and body[0])
