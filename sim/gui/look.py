"""What every page of the GUI simulator shares: the apps and pages it knows, the screen metrics
per form factor, and the look (`Look`: palette, fonts, geometry; `Palette` light or random), with
`Contact`. `embodia.sim.gui.apps` holds the world, `embodia.sim.gui.layout` lays its pages out."""
from __future__ import annotations

from dataclasses import dataclass, field

from embodia.sim.gui.widgets import Color, hsv, mix, on

HOME = ("home",)
CORE_APPS = ("Settings", "Contacts", "Messages", "Sign-up")
ROOTS = {"Settings": ("settings",), "Contacts": ("contacts",), "Messages": ("messages",),
         "Sign-up": ("form",)}
PAGE_APP = {"settings": "Settings", "category": "Settings", "contacts": "Contacts",
            "contact": "Contacts", "messages": "Messages", "thread": "Messages",
            "compose": "Messages", "msettings": "Messages", "form": "Sign-up", "form-done": "Sign-up"}
KEYS = ("enter", "backspace", "escape", "back", "home")     # what `key` understands

# sizes in dp (physical px = dp * pixel ratio); fonts are scaled by the look's font scale too
METRICS = {
    "phone": dict(status=24, appbar=56, nav=48, topbar=0, row=56, row2=72, pad=16, icon=48,
                  cell=96, field=46, small=12, body=15, title=19, column=10_000),
    "desktop": dict(status=0, appbar=0, nav=0, topbar=48, row=46, row2=60, pad=20, icon=40,
                    cell=110, field=40, small=15, body=17, title=21, column=720),
}


def slug(label: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in label.lower()).strip("_")


@dataclass
class Palette:
    """Colours of one instance; they say nothing about any label."""

    bg: Color
    appbar: Color
    bar: Color
    text: Color
    muted: Color
    accent: Color
    field: Color

    @property
    def on_appbar(self) -> Color:
        return on(self.appbar)

    @property
    def on_bar(self) -> Color:
        return on(self.bar)

    @property
    def on_accent(self) -> Color:
        return on(self.accent)

    @property
    def line(self) -> Color:
        return mix(self.bg, self.text, 0.18)

    @property
    def bubble(self) -> Color:
        return mix(self.bg, self.text, 0.1)


def light_palette(rng) -> Palette:
    """The training distribution: light screens, dark text, a random accent hue."""
    bg = hsv(rng.random(), rng.uniform(0, 0.06), rng.uniform(0.95, 1.0))
    text = hsv(rng.random(), rng.uniform(0, 0.2), rng.uniform(0.05, 0.2))
    return Palette(bg=bg, appbar=hsv(rng.random(), rng.uniform(0.08, 0.3), rng.uniform(0.86, 0.96)),
                   bar=hsv(rng.random(), rng.uniform(0, 0.2), rng.uniform(0.12, 0.3)), text=text,
                   muted=mix(bg, text, 0.5),
                   accent=hsv(rng.random(), rng.uniform(0.55, 0.85), rng.uniform(0.45, 0.7)),
                   field=mix(bg, text, 0.04))


def random_palette(rng) -> Palette:
    """The `theme` shift: any background (dark ones too); text picked for contrast."""
    def any_colour():
        return hsv(rng.random(), rng.uniform(0, 1), rng.uniform(0.05, 1))
    bg = any_colour()
    text = on(bg)
    return Palette(bg=bg, appbar=any_colour(), bar=any_colour(), text=text, muted=mix(bg, text, 0.5),
                   accent=hsv(rng.random(), rng.uniform(0.4, 1), rng.uniform(0.3, 0.9)),
                   field=mix(bg, text, 0.06))


@dataclass
class Look:
    """How an instance looks: screen, palette, fonts, geometry. Never part of a task's meaning."""

    form: str                       # phone | desktop
    width: int                      # physical px
    height: int
    ratio: float                    # device pixel ratio (physical px per dp)
    palette: Palette
    font_scale: float = 1.0
    cols: int = 4                   # launcher grid columns
    row_scale: float = 1.0          # list row heights
    title_centre: bool = False
    mirror: bool = False            # the compose "+" and Submit sit on the other side
    colours: dict = field(default_factory=dict)     # label -> tile / avatar colour
    offsets: dict = field(default_factory=dict)     # app -> (dx, dy) dp jitter

    def dp(self, v: float) -> int:
        return int(round(v * self.ratio))

    def m(self, name: str) -> int:
        """A metric in physical px (rows scaled by row_scale)."""
        v = METRICS[self.form][name]
        if name in ("row", "row2", "cell"):
            v *= self.row_scale
        return self.dp(v)

    def font(self, name: str) -> int:
        return int(round(METRICS[self.form][name] * self.ratio * self.font_scale))

    def launcher_capacity(self) -> int:
        top, bottom = self.content_y(True)
        return self.cols * max(1, (bottom - top - self.dp(8)) // self.m("cell"))

    def content_y(self, home: bool) -> tuple[int, int]:
        if self.form == "phone":
            top = self.m("status") + (0 if home else self.m("appbar"))
            return top, self.height - self.m("nav")
        return self.m("topbar"), self.height


@dataclass
class Contact:
    name: str
    phone: str
    email: str
