"""The apps of the GUI simulator and the state they share: a launcher, Settings (toggles in
categories), Contacts (a long list with a search behind an icon-only button), Messages
(conversations, a compose "+" and a settings page behind icon-only buttons), a Sign-up form, and
plain distractor apps.

`World` holds one instance: its content (which apps, settings, contacts, conversations, form
options, in which order), its look (`Look`: screen size, palette, fonts, geometry) and its state
(the page stack, text fields, focus, scroll offsets, sent messages, form submissions). `widgets()`
lays out the current page; `execute(action, p, q)` applies a `GuiAction` whose points are
already physical pixels. Nothing here draws or knows about tasks.

Transient state (typed text, focus, scroll, an open search, ticked boxes) belongs to the page:
any navigation clears it, as a freshly opened activity would. The look and the constants every page
shares are in `look.py`, the page layout in `layout.py`.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

from embodia.devices.actions import ActionError, GuiAction
from embodia.sim.gui.layout import Layout
from embodia.sim.gui.look import HOME, KEYS, PAGE_APP, ROOTS, Contact, Look, slug
from embodia.sim.gui.widgets import Widget, hit


@dataclass
class World:
    """One instance of the simulated device: content, look and state."""

    look: Look
    apps: list[str]                                  # launcher order
    settings: dict[str, bool]                        # setting -> on
    main_rows: list[tuple[str, str]]                 # Settings page: ("category" | "setting", name)
    categories: dict[str, list[str]]                 # category page -> its settings, in order
    message_settings: list[str]
    contacts: list[Contact]                          # list order (alphabetical)
    conversations: list[tuple[str, list[tuple[bool, str]]]]   # (name, [(mine, text)]), newest first
    options: list[str]                               # form check boxes, in order
    stack: list[tuple] = field(default_factory=lambda: [HOME])
    fields: dict[str, str] = field(default_factory=dict)
    focus: str | None = None
    scroll: dict[str, int] = field(default_factory=dict)
    search_open: bool = False
    ticked: set = field(default_factory=set)
    opened_query: str | None = None                  # search text when the open contact was tapped
    sent: list[tuple[str, str]] = field(default_factory=list)
    submissions: list[tuple[str, frozenset]] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # actions that had no effect, and why
    version: int = 0                                  # bumped by every action: the layout cache key
    _cache: tuple | None = field(default=None, repr=False, compare=False)

    # -- queries -------------------------------------------------------------------------------------
    @property
    def page(self) -> tuple:
        return self.stack[-1]

    def app_of(self, page: tuple | None = None) -> str | None:
        page = page or self.page
        if page[0] == "app":
            return page[1]
        return PAGE_APP.get(page[0])

    def setting_place(self, name: str) -> tuple:
        """The page whose switch controls setting ``name``."""
        if name in self.message_settings:
            return ("msettings",)
        if ("setting", name) in self.main_rows:
            return ("settings",)
        for cat, names in self.categories.items():
            if name in names:
                return ("category", cat)
        raise KeyError(name)

    def contact(self, name: str) -> Contact | None:
        return next((c for c in self.contacts if c.name.lower() == name.lower()), None)

    def conversation(self, name: str):
        return next((c for c in self.conversations if c[0] == name), None)

    def labels(self) -> set[str]:
        """Every label any screen of this instance can show (held-out checks read it)."""
        out = set(self.apps) | set(self.settings) | set(self.categories) | set(self.options)
        out |= {c.name for c in self.contacts}
        out |= {t for _, msgs in self.conversations for _, t in msgs}
        return out

    def widgets(self) -> list[Widget]:
        if self._cache is None or self._cache[0] != self.version:
            self._cache = (self.version, Layout(self).build())
        return self._cache[1]

    def in_tree(self) -> list[Widget]:
        """The widgets of the UI tree, in tree order (tree index = position here)."""
        return [w for w in self.widgets() if w.in_tree]

    def find(self, wid: str) -> Widget | None:
        return next((w for w in self.widgets() if w.id == wid), None)

    def __deepcopy__(self, memo):      # content and look are shared: only the state is copied
        new = copy.copy(self)
        for name in ("stack", "fields", "scroll", "ticked", "sent", "submissions", "ignored",
                     "settings", "conversations"):
            setattr(new, name, copy.deepcopy(getattr(self, name), memo))
        new._cache = None
        return new

    # -- actions ---------------------------------------------------------------------------------------
    def execute(self, a: GuiAction, p, q) -> None:
        """Apply one action; ``p``/``q`` are physical pixels. See `GuiSimDevice` for the semantics."""
        try:
            self._execute(a, p, q)
        finally:
            self.version += 1            # whatever changed, the cached layout is stale now

    def _execute(self, a: GuiAction, p, q) -> None:
        t = a.type
        if t in ("click", "long_press"):
            self.tap(*p)
        elif t == "double_click":
            self.tap(*p)
            self.tap(*p)
        elif t == "right_click":
            self._ignore("right_click: no context menus here")
        elif t in ("swipe", "drag"):
            if abs(q[1] - p[1]) < abs(q[0] - p[0]):
                self._ignore(f"{t}: horizontal gestures do nothing here")
            else:
                self.scroll_at(p, p[1] - q[1])       # the content follows the finger
        elif t == "scroll":
            if a.direction in ("left", "right"):
                self._ignore("scroll: nothing scrolls sideways")
            else:
                step = round(0.4 * self.look.height)
                self.scroll_at(p, step if a.direction == "down" else -step)
        elif t == "type":
            self.type(a.text)
        elif t == "key":
            if len(a.keys) != 1 or a.keys[0].lower() not in KEYS:
                raise ActionError(f"gui-sim understands single keys {KEYS}, got {'+'.join(a.keys)!r}")
            self.key(a.keys[0].lower())
        elif t == "system_button":
            self.key(a.button)
        elif t == "open_app":
            self.open_app(a.app)
        else:
            raise ActionError(f"gui-sim cannot {t!r}")

    def _ignore(self, why: str) -> None:
        self.ignored.append(why)

    def _go(self, stack: list[tuple]) -> None:
        self.stack = stack
        self.fields, self.focus, self.scroll, self.search_open, self.ticked = {}, None, {}, False, set()

    def tap(self, x: float, y: float) -> None:
        w = hit(self.widgets(), x, y)
        if w is None:
            return                       # a tap on nothing does nothing, as on a phone
        self.do(w.on_tap)
        self.version += 1

    def do(self, cmd: tuple) -> None:
        op, args = cmd[0], cmd[1:]
        if op == "open":
            self.opened_query = None
            self._go([HOME, ROOTS.get(args[0], ("app", args[0]))])
        elif op == "push":
            self._go(self.stack + [args[0]])
        elif op == "back":
            self.key("back")
        elif op == "home":
            self.key("home")
        elif op == "toggle":
            self.settings[args[0]] = not self.settings[args[0]]
        elif op == "focus":
            self.focus = args[0]
        elif op == "search":
            self.search_open, self.focus = True, "search"
        elif op == "contact":
            query = self.fields.get("search", "") if self.search_open else ""
            self._go(self.stack + [("contact", args[0])])
            self.opened_query = query
        elif op == "tick":
            self.ticked ^= {args[0]}
        elif op == "send":
            self.send()
        elif op == "submit":
            self.submissions.append((self.fields.get("form_name", "").strip(), frozenset(self.ticked)))
            self._go(self.stack[:-1] + [("form-done",)])
        elif op == "call":
            self._ignore("call: the simulator has no phone line")
        else:
            raise AssertionError(cmd)

    def send(self) -> None:
        text = self.fields.get("compose_text", "")
        if self.page[0] == "thread":
            to = self.page[1]
        else:
            typed = self.fields.get("to_field", "").strip()
            known = self.contact(typed)
            to = known.name if known else typed
        if not text.strip() or not to:
            self._ignore("send: nothing to send or nobody to send it to")
            return
        self.sent.append((to, text))
        old = self.conversation(to)
        msgs = (old[1] if old else []) + [(True, text)]
        self.conversations = [(to, msgs)] + [c for c in self.conversations if c[0] != to]
        self._go(self.stack[:-1] + [("thread", to)])

    def type(self, text: str) -> None:
        if self.focus is None:
            self._ignore("type: no text field has focus (tap one first)")
            return
        self.fields[self.focus] = self.fields.get(self.focus, "") + text
        if self.focus == "search":
            self.scroll.pop("contacts_list", None)

    def key(self, name: str) -> None:
        if name in ("back", "escape"):
            if len(self.stack) > 1:
                self._go(self.stack[:-1])
                self.opened_query = None
            else:
                self._ignore(f"{name}: already on the home screen")
        elif name == "home":
            self._go([HOME])
            self.opened_query = None
        elif name == "backspace":
            if self.focus is None:
                self._ignore("backspace: no text field has focus")
            else:
                self.fields[self.focus] = self.fields.get(self.focus, "")[:-1]
        else:                                       # enter, menu
            self._ignore(f"{name}: does nothing on this screen")

    def open_app(self, app: str) -> None:
        match = [a for a in self.apps if a.lower() == app.strip().lower() or slug(a) == app.strip().lower()]
        if not match:
            raise ActionError(f"gui-sim has no app {app!r}; installed: {', '.join(self.apps)}")
        self.do(("open", match[0]))

    def scroll_at(self, p, delta: float) -> None:
        lst = next((w for w in reversed(self.widgets()) if w.kind == "list" and w.contains(*p)), None)
        if lst is None or lst.max_scroll == 0:
            self._ignore("scroll: nothing scrollable there")
            return
        self.scroll[lst.id] = int(min(lst.max_scroll, max(0, self.scroll.get(lst.id, 0) + delta)))

