"""Tasks of the GUI simulator: templates with slots, train / held-out slot values, instance sampling,
success from the app state, the scripted expert, and chance rates.

A template names the apps it exercises and an instruction with slots. Slot values come in two
disjoint sets: ``train`` and ``test`` (held out). A train instance never shows a held-out label on
any screen; a test instance draws its slot values from the held-out set only (its screens mix
both), so a policy meets labels it has never seen. Shared by both splits: the category names, the
core apps (Settings, Contacts, Messages, Sign-up) and the {app} slot of ``open-turn-off``.

>>> world, task = new_instance(3, template="turn-on", split="test")
>>> task.instruction in {"Turn on " + s for cat in SETTINGS.values() for s in cat[1]}
True
>>> task.success(world)
False
"""
from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field

from embodia.devices.actions import GuiAction
from embodia.devices.coords import element_point, to_pixels
from embodia.sim.gui.apps import World
from embodia.sim.gui.layout import grid_jitter, tile_colours
from embodia.sim.gui.look import CORE_APPS, Contact, HOME, Look, ROOTS, light_palette, random_palette, slug
from embodia.sim.gui.widgets import Widget, hit

# -- slot values: (train, held-out) ------------------------------------------------------------------
APPS = (["Camera", "Clock", "Calendar", "Maps", "Music", "Photos", "Notes", "Weather", "Calculator",
         "Files", "Mail", "Browser", "Gallery", "News", "Fitness", "Recipes"],
        ["Compass", "Podcasts", "Recorder", "Translate", "Radio", "Journal", "Tickets", "Garden"])
SETTINGS = {
    "Network": (["Wi-Fi", "Bluetooth", "Airplane mode", "Mobile data", "NFC"], ["Hotspot", "Data saver"]),
    "Display": (["Dark mode", "Auto brightness", "Auto-rotate", "Large text"], ["Night light", "Eye comfort"]),
    "Sound": (["Vibrate on ring", "Do not disturb", "Keyboard sounds"], ["Touch sounds", "Silent mode"]),
    "Privacy": (["Location", "Camera access", "Microphone access"], ["Usage reports", "Ad tracking"]),
    "Battery": (["Battery saver", "Adaptive battery"], ["Battery percentage", "Power boost"]),
}
MESSAGE_SETTINGS = (["Read receipts", "Delivery reports", "Smart replies"], ["Chat bubbles", "Message previews"])
FIRST = (["Alice", "Bruno", "Chloe", "Daniel", "Emma", "Felix", "Grace", "Hugo", "Irene", "Jonas", "Karen",
          "Leo", "Maria", "Nina", "Oscar", "Paula", "Quentin", "Rosa", "Samuel", "Tara", "Victor", "Wendy",
          "Yusuf", "Zoe"],
         ["Amara", "Bjorn", "Celeste", "Dmitri", "Esme", "Farid", "Ingrid", "Kenji", "Lucia", "Mateo"])
LAST = (["Adams", "Baker", "Costa", "Dubois", "Evans", "Fischer", "Garcia", "Hansen", "Ito", "Jensen", "Khan",
         "Lopez", "Meyer", "Novak", "Olsen", "Perez"],
        ["Quinn", "Rossi", "Sato", "Tanaka", "Varga", "Weber", "Young", "Zhou"])
TEXTS = (["On my way", "See you at 5", "Running late", "Call me back", "Thanks a lot", "Sounds good",
          "Happy birthday", "Good night", "Be there soon", "Got it", "Meet at the park", "How are you"],
         ["Lunch tomorrow?", "Meeting moved to 3", "Bring an umbrella", "The train is late", "Dinner at 8?",
          "Almost home"])
OPTIONS = (["Newsletter", "Express delivery", "Gift wrap", "Remember me", "SMS updates", "Large print"],
           ["Paper invoice", "Weekend delivery", "Eco packaging", "Priority support"])
SPLITS = ("train", "test")


@dataclass(frozen=True)
class Template:
    id: str
    apps: tuple[str, ...]       # the targets (app families) it belongs to
    text: str                   # instruction with {slots}


TEMPLATES = {t.id: t for t in (
    Template("open-app", ("launcher",), "Open {app}"),
    Template("turn-on", ("settings",), "Turn on {setting}"),
    Template("open-turn-off", ("settings", "messages"), "Open {app} and turn off {setting}"),
    Template("send-message", ("messages",), "Send '{text}' to {contact}"),
    Template("search-contact", ("contacts",), "Search contacts for {name} and open it"),
    Template("open-contact", ("contacts",), "Open the contact {name}"),
    Template("fill-form", ("form",), "Fill the form with name {name} and tick {option}, then submit"),
)}
TARGETS = ("all", "launcher", "settings", "contacts", "messages", "form")
SHIFTS = {
    "layout": "launcher columns, icon jitter, row heights, title alignment and the side of the compose "
              "and Submit buttons change",
    "theme": "random palettes (dark and saturated backgrounds too) instead of light ones",
    "font": "font scale drawn from 0.85-1.3 instead of 1.0",
    "size": "another screen size and pixel ratio",
}
SCREENS = {"phone": (540, 960, 1.5), "desktop": (1024, 640, 1.0)}     # physical px and pixel ratio
SIZES = {"phone": [(432, 960, 1.2), (600, 960, 1.5), (720, 1280, 2.0)],
         "desktop": [(1280, 800, 1.0), (800, 600, 1.0), (1440, 900, 1.25)]}
LAYOUT_COLS = {"phone": (4, (3, 5)), "desktop": (8, (6, 10))}       # base, under `layout`


def heldout_labels() -> set[str]:
    """Every label that only test instances may show."""
    out = set(APPS[1]) | set(MESSAGE_SETTINGS[1]) | set(TEXTS[1]) | set(OPTIONS[1])
    out |= {s for pair in SETTINGS.values() for s in pair[1]}
    return out | set(FIRST[1]) | set(LAST[1])


def templates_for(target: str) -> list[str]:
    return [t.id for t in TEMPLATES.values() if target == "all" or target in t.apps]


@dataclass
class Task:
    """One task instance: the template, its slot values, where it starts, what success means."""

    template: Template
    slots: dict
    split: str
    initial: dict = field(default_factory=dict)      # settings before the episode

    @property
    def id(self) -> str:
        return self.template.id

    @property
    def instruction(self) -> str:
        return self.template.text.format(**self.slots)

    def success(self, w: World) -> bool:
        """Read from the app state, never from pixels. Irreversible acts (a sent message, a submitted
        form) count from the first one; a setting task fails if any other setting changed."""
        s, tid = self.slots, self.id
        if tid == "open-app":
            return w.app_of() == s["app"]
        if tid in ("turn-on", "open-turn-off"):
            goal = tid == "turn-on"
            return w.settings[s["setting"]] == goal and all(
                v == self.initial[k] for k, v in w.settings.items() if k != s["setting"])
        if tid == "send-message":
            return w.sent == [(s["contact"], s["text"])]
        if tid == "search-contact":
            return w.page == ("contact", s["name"]) and bool(w.opened_query)
        if tid == "open-contact":
            return w.page == ("contact", s["name"])
        if tid == "fill-form":
            return w.submissions[:1] == [(s["name"], frozenset({s["option"]}))]
        raise AssertionError(tid)

    def field_text(self, wid: str) -> str | None:
        """The text this task needs in text field ``wid`` (None: none)."""
        s = self.slots
        return {"search": s.get("name"), "to_field": s.get("contact"), "compose_text": s.get("text"),
                "form_name": s.get("name") if self.id == "fill-form" else None}.get(wid)


# -- sampling ----------------------------------------------------------------------------------------
def _pool(pair, split):                  # what screens may show
    return list(pair[0]) if split == "train" else list(pair[0]) + list(pair[1])


def _slots(pair, split):                 # what slots may name
    return list(pair[0] if split == "train" else pair[1])


def _names(rng, firsts, lasts, k, avoid=()) -> list[str]:
    out = []
    while len(out) < k:
        n = f"{rng.choice(firsts)} {rng.choice(lasts)}"
        if n not in out and n not in avoid:
            out.append(n)
    return out


def _contact(rng, name: str) -> Contact:
    first, last = name.split(" ")
    return Contact(name, f"555-{rng.randint(1000, 9999)}", f"{first.lower()}.{last.lower()}@example.com")


def sample_look(rng: random.Random, form: str, shifts: frozenset, labels) -> Look:
    w, h, r = rng.choice(SIZES[form]) if "size" in shifts else SCREENS[form]
    base_cols, alt_cols = LAYOUT_COLS[form]
    layout = "layout" in shifts
    look = Look(form=form, width=w, height=h, ratio=r,
                palette=random_palette(rng) if "theme" in shifts else light_palette(rng),
                font_scale=rng.uniform(0.85, 1.3) if "font" in shifts else 1.0,
                cols=rng.choice(alt_cols) if layout else base_cols,
                # rows clearly shorter or taller than the base ones, never about the same
                row_scale=(rng.uniform(0.8, 0.92) if rng.random() < 0.5 else rng.uniform(1.1, 1.3)) if layout else 1.0,
                title_centre=layout and rng.random() < 0.5, mirror=layout and rng.random() < 0.5)
    look.colours = tile_colours(rng, sorted(labels))
    look.offsets = grid_jitter(rng, sorted(labels), 7.0 if layout else 0.0)
    return look


def new_instance(seed: int, *, target: str = "all", template: str = "any", split: str = "train",
                 shifts=(), form: str = "phone") -> tuple[World, Task]:
    """A fresh instance, deterministic per seed. Content (task, slots, orders) and look (colours,
    geometry) come from separate streams, so a shift changes how the same task looks, not what it is."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    crng = random.Random(f"gui-sim/{seed}/content")
    lrng = random.Random(f"gui-sim/{seed}/look")
    tpl = TEMPLATES[template if template != "any" else crng.choice(templates_for(target))]

    # content every template shares
    categories = {c: crng.sample(_pool(p, split), len(_pool(p, split))) for c, p in SETTINGS.items()}
    msettings = crng.sample(_pool(MESSAGE_SETTINGS, split), len(_pool(MESSAGE_SETTINGS, split)))
    quick = [categories[c].pop() for c in crng.sample(sorted(categories), 2)]
    main_rows = [("category", c) for c in categories] + [("setting", s) for s in quick]
    crng.shuffle(main_rows)
    names = [s for c in categories.values() for s in c] + quick + msettings
    settings = {s: crng.random() < 0.5 for s in sorted(names)}
    people = _names(crng, _pool(FIRST, split), _pool(LAST, split), crng.randint(10, 18))
    talk = crng.sample(people, crng.randint(3, 6))
    texts = _pool(TEXTS, split)
    conversations = [(n, [(crng.random() < 0.5, crng.choice(texts)) for _ in range(crng.randint(1, 3))])
                     for n in talk]
    options = crng.sample(_pool(OPTIONS, split), crng.randint(3, 4))
    apps = list(CORE_APPS) + crng.sample(_pool(APPS, split), crng.randint(8, 12))

    # the task's slots, and the content they need
    slots: dict = {}
    tid = tpl.id
    start = [HOME]
    if tid == "open-app":
        pool = _slots(APPS, split) + (list(CORE_APPS) if split == "train" else [])
        slots["app"] = crng.choice(pool)
        if slots["app"] not in apps:
            apps[crng.randrange(len(CORE_APPS), len(apps))] = slots["app"]
    elif tid in ("turn-on", "open-turn-off"):
        app = "Settings" if tid == "turn-on" else crng.choice(["Settings", "Messages"])
        pool = (_slots(MESSAGE_SETTINGS, split) if app == "Messages"
                else [s for p in SETTINGS.values() for s in _slots(p, split)])
        if tid == "open-turn-off":
            slots["app"] = app
        slots["setting"] = crng.choice(pool)
        settings[slots["setting"]] = tid != "turn-on"           # the opposite of the goal
        if tid == "turn-on":
            start = [HOME, ("settings",)]
    elif tid in ("send-message", "search-contact", "open-contact"):
        name = _names(crng, _slots(FIRST, split), _slots(LAST, split), 1)[0]
        if name not in people:
            people[crng.randrange(len(people))] = name
        key = "contact" if tid == "send-message" else "name"
        slots[key] = name
        if tid == "send-message":
            slots["text"] = crng.choice(_slots(TEXTS, split))
            conversations = [c for c in conversations if c[0] != name]
            conversations = [c for c in conversations if c[0] in people]
            if crng.random() < 0.5:       # half the time there is a conversation to continue
                conversations.insert(crng.randint(0, len(conversations)),
                                     (name, [(False, crng.choice(texts))]))
        if tid == "open-contact":
            start = [HOME, ("contacts",)]
    elif tid == "fill-form":
        slots["name"] = _names(crng, _slots(FIRST, split), _slots(LAST, split), 1)[0]
        slots["option"] = crng.choice(_slots(OPTIONS, split))
        if slots["option"] not in options:
            options[crng.randrange(len(options))] = slots["option"]
        start = [HOME, ("form",)]
    conversations = [c for c in conversations if c[0] in people]
    crng.shuffle(apps)
    contacts = [_contact(crng, n) for n in sorted(people)]

    look = sample_look(lrng, form, frozenset(shifts), set(apps) | set(people))
    # a smaller launcher keeps the core apps and the task's app, drops others
    keep = set(CORE_APPS) | {slots.get("app")}
    while len(apps) > look.launcher_capacity():
        apps.remove(next(a for a in reversed(apps) if a not in keep))
    world = World(look=look, apps=apps, settings=settings, main_rows=main_rows, categories=categories,
                  message_settings=msettings, contacts=contacts, conversations=conversations,
                  options=options, stack=list(start))
    return world, Task(tpl, slots, split, initial=dict(settings))


# -- acting on a world without a device (the expert's plan, chance rates) ----------------------------
def screen_of(w: World) -> tuple[int, int]:
    return (w.look.width, w.look.height)


def click(w: World, wdg: Widget) -> GuiAction:
    """A click on a widget: by tree element where it is in the tree, by point where it is not."""
    if wdg.in_tree:
        return GuiAction("click", element=w.in_tree().index(wdg))
    return GuiAction("click", point=element_point(wdg.bounds, screen_of(w)))


def type_into(w: World, wdg: Widget, text: str) -> GuiAction:
    return GuiAction("type", element=w.in_tree().index(wdg), text=text)


def step(w: World, a: GuiAction) -> None:
    """Execute ``a`` on ``w`` exactly as `GuiSimDevice.act` would (element -> centre -> pixel)."""
    if a.type in ("wait", "answer", "terminate"):
        return
    if a.element is not None and a.point is None:
        wdg = w.in_tree()[a.element]
        a = GuiAction.from_dict({**a.to_dict(), "point": element_point(wdg.bounds, screen_of(w))})
    p = to_pixels(a.point, screen_of(w)) if a.point is not None else None
    q = to_pixels(a.end, screen_of(w)) if a.end is not None else None
    if a.type == "type" and p is not None:
        w.execute(GuiAction("click", point=a.point), p, None)
    w.execute(a, p, q)


def target_of(w: World, a: GuiAction) -> tuple:
    """What an action does, comparable across spellings: (type, widget id, text, direction)."""
    wid = None
    if a.element is not None:
        wid = w.in_tree()[a.element].id
    elif a.point is not None:
        x, y = to_pixels(a.point, screen_of(w))
        if a.type == "scroll":
            hits = [x_ for x_ in w.widgets() if x_.kind == "list" and x_.contains(x, y)]
            wid = hits[-1].id if hits else None
        else:
            h = hit(w.widgets(), x, y)
            wid = h.id if h else None
    return (a.type, wid, a.text, a.direction)


def candidate_actions(w: World, task: Task) -> list[GuiAction]:
    """The chance model's menu on the current screen: a click on every clickable widget (in the tree
    or not), a scroll each way a list can still move, and typing into each text field the text the
    task needs there (the chance of picking the field, not of guessing the text)."""
    out = []
    for wdg in w.widgets():
        if wdg.clickable:
            out.append(click(w, wdg))
            text = task.field_text(wdg.id) if wdg.kind == "edit" else None
            if text is not None:
                out.append(type_into(w, wdg, text))
        if wdg.kind == "list" and wdg.max_scroll > 0:
            off = w.scroll.get(wdg.id, 0)
            pt = element_point(wdg.bounds, screen_of(w))
            if off < wdg.max_scroll:
                out.append(GuiAction("scroll", point=pt, direction="down"))
            if off > 0:
                out.append(GuiAction("scroll", point=pt, direction="up"))
    return out


# -- the scripted expert -----------------------------------------------------------------------------
def _reach(w: World, wid: str, order: list[str]) -> GuiAction | None:
    """Click widget ``wid`` of a list whose rows have ids ``order``, scrolling until it shows."""
    wdg = w.find(wid)
    if wdg is not None:
        return click(w, wdg)
    if wid not in order:
        return None
    shown = [x for x in w.widgets() if x.id in order]
    lst = next((x for x in w.widgets() if x.kind == "list"), None)
    if not shown or lst is None or lst.max_scroll == 0:
        return None
    up = order.index(wid) < order.index(shown[0].id)
    return GuiAction("scroll", point=element_point(lst.bounds, screen_of(w)), direction="up" if up else "down")


def _route(w: World, taps: list[tuple[tuple, str, list | None]], final: tuple) -> GuiAction | None:
    """Follow a route from home: ``taps`` [(page, widget id to tap there, row ids of its list or
    None)] lead to page ``final``. Returns the next tap while the page stack is on the route, Back
    when the stack is one page off it, Home otherwise; None once the stack is at ``final``."""
    pages = [t[0] for t in taps] + [final]
    if w.stack == pages:
        return None
    for i in reversed(range(len(taps))):
        if w.stack == pages[:i + 1]:
            page, wid, order = taps[i]
            return _reach(w, wid, order or [wid]) or _nav(w, "back")
    if len(w.stack) > 1 and w.stack[:-1] == pages[:len(w.stack) - 1]:
        return _nav(w, "back")
    return _nav(w, "home")


def _nav(w: World, which: str) -> GuiAction:
    return click(w, w.find("nav_" + which))


def _field(w: World, wid: str, text: str) -> GuiAction | None:
    """Make field ``wid`` hold exactly ``text``: type it, or delete a wrong tail first."""
    have = w.fields.get(wid, "")
    if have == text:
        return None
    if text.startswith(have):
        return type_into(w, w.find(wid), text[len(have):])
    if w.focus != wid:
        return click(w, w.find(wid))
    return GuiAction("key", keys=("backspace",))


def _rows(w: World, page: tuple) -> list[str]:
    """Row ids, in list order, of the list on ``page``."""
    kind = page[0]
    if kind == "settings":
        return [("category_" if k == "category" else "setting_") + slug(n) for k, n in w.main_rows]
    if kind == "category":
        return ["setting_" + slug(n) for n in w.categories[page[1]]]
    if kind == "msettings":
        return ["setting_" + slug(n) for n in w.message_settings]
    if kind == "contacts":
        return ["contact_" + slug(c.name) for c in w.contacts]
    if kind == "messages":
        return ["conv_" + slug(n) for n, _ in w.conversations]
    return []


def expert_action(w: World, task: Task) -> GuiAction:
    """The next action of the scripted expert, read from the simulator's state (closed loop: it
    recovers from wrong pages by Back / Home). ``terminate`` once the task is done."""
    if task.success(w):
        return GuiAction("terminate", status="success")
    s, tid = task.slots, task.id

    def launch(app):
        return (HOME, "app_" + slug(app), None)

    def rows(page, wid):
        return (page, wid, _rows(w, page))

    fail = GuiAction("terminate", status="failure")
    if tid == "open-app":
        return _route(w, [launch(s["app"])], ROOTS.get(s["app"], ("app", s["app"]))) or fail
    if tid in ("turn-on", "open-turn-off"):
        place = w.setting_place(s["setting"])
        if place == ("msettings",):
            taps = [launch("Messages"), (("messages",), "more_options", None)]
        elif place == ("settings",):
            taps = [launch("Settings")]
        else:
            taps = [launch("Settings"), rows(("settings",), "category_" + slug(place[1]))]
        return (_route(w, taps, place) or _reach(w, "setting_" + slug(s["setting"]), _rows(w, place))
                or _nav(w, "back"))
    if tid == "send-message":
        name, text = s["contact"], s["text"]
        if w.page == ("thread", name):
            return _field(w, "compose_text", text) or click(w, w.find("send"))
        if w.page == ("compose",):
            return (_field(w, "to_field", name) or _field(w, "compose_text", text)
                    or click(w, w.find("send")))
        if w.conversation(name) is not None:
            return _route(w, [launch("Messages"), rows(("messages",), "conv_" + slug(name))], ("thread", name))
        return _route(w, [launch("Messages"), (("messages",), "compose_fab", None)], ("compose",))
    if tid in ("search-contact", "open-contact"):
        name = s["name"]
        target = "contact_" + slug(name)
        a = _route(w, [launch("Contacts")], ("contacts",))
        if a is not None:
            return a
        query = w.fields.get("search", "") if w.search_open else ""
        if tid == "open-contact" and name.lower().find(query.lower()) >= 0:
            return _reach(w, target, _rows(w, w.page)) or _nav(w, "back")
        if not w.search_open:
            return click(w, w.find("search_button"))
        return _field(w, "search", name) or _reach(w, target, _rows(w, w.page)) or _nav(w, "back")
    if tid == "fill-form":
        if w.submissions:
            return fail                                  # submitted wrong: irreversible
        a = _route(w, [launch("Sign-up")], ("form",)) or _field(w, "form_name", s["name"])
        if a is not None:
            return a
        wrong = sorted(w.ticked ^ {s["option"]})
        return click(w, w.find("option_" + slug(wrong[0]) if wrong else "submit"))
    raise AssertionError(tid)


@dataclass
class Plan:
    """What the expert does from an instance's start: its actions, in words; the chance rate."""

    steps: list[str]
    chance: float
    absent: list[str]           # ids of widgets absent from the tree that the plan taps
    solved: bool


def describe(w: World, a: GuiAction) -> str:
    t, wid, text, direction = target_of(w, a)
    return " ".join(x for x in (t, wid or "", repr(text) if text else "", direction or "") if x)


def plan(world: World, task: Task, max_steps: int = 12) -> Plan:
    """Run the expert on a copy of ``world``; the chance rate is the product over its steps of
    1 / len(candidate_actions) (a uniform random agent following exactly the expert's path: other
    paths can exist, so it slightly understates what a random agent achieves in that many steps)."""
    w = copy.deepcopy(world)
    steps, absent, chance = [], [], 1.0
    for _ in range(max_steps):
        if task.success(w):
            break
        a = expert_action(w, task)
        if a.type == "terminate":
            break
        keys = {target_of(w, c) for c in candidate_actions(w, task)}
        k = target_of(w, a)
        chance *= 1.0 / len(keys) if k in keys else 0.0
        wdg = w.find(k[1]) if k[1] else None
        if wdg is not None and not wdg.in_tree:
            absent.append(wdg.id)
        steps.append(describe(w, a))
        step(w, a)
    return Plan(steps, chance, absent, task.success(w))
