"""Widgets of the GUI simulator: how each is drawn, what the UI tree says about it, which one a tap hits.

A screen is a list of `Widget`s in drawing order (later ones on top). `render` draws them with PIL
at the screen's native size; `ui_tree` lists the ones marked ``in_tree`` the way uiautomator would
(role, text, content description, id, pixel bounds, clickable, focused, checked, scrollable);
`hit` finds the topmost clickable widget under a point. Widgets with ``in_tree=False`` are drawn
and clickable but absent from the tree, like the icon-only buttons of real apps that carry no
content description: only pixels show them.

>>> w = [Widget("button", (10, 10, 110, 50), text="OK", id="ok", clickable=True, fg=(255, 255, 255),
...             fill=(0, 90, 200), font=18)]
>>> render(w, (200, 100), (250, 250, 250)).shape
(100, 200, 3)
>>> ui_tree(w)[0]["role"], hit(w, 50, 30).id
('Button', 'ok')
"""
from __future__ import annotations

import colorsys
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

Color = tuple[int, int, int]

# widget kind -> the class name the tree reports (uiautomator style, without the package)
ROLES = {"text": "TextView", "title": "TextView", "button": "Button", "icon": "ImageButton",
         "switch": "Switch", "edit": "EditText", "checkbox": "CheckBox", "row": "TextView",
         "app": "TextView", "image": "ImageView", "bubble": "TextView", "list": "ListView",
         "panel": "View"}
MIN_FONT_PX = 12        # text shrinks to fit its box, never below this


@dataclass
class Widget:
    """One thing on the screen. ``bounds`` are physical pixels [x0, y0, x1, y1), right/bottom exclusive."""

    kind: str
    bounds: tuple[int, int, int, int]
    text: str = ""
    desc: str = ""
    id: str = ""
    clickable: bool = False
    in_tree: bool = True
    focused: bool = False
    checked: bool | None = None
    on_tap: tuple = ()              # what a tap does, interpreted by the app model
    fill: Color | None = None       # background (None: transparent)
    fg: Color = (0, 0, 0)           # text / glyph colour
    font: int = 16                  # px
    pad: int = 0                    # left inset of the text, px
    align: str = "left"             # left | centre
    glyph: str = ""                 # icons: search, plus, more, back, home; app tiles: their letter
    hint: str = ""                  # text fields: shown while empty
    accent: Color | None = None     # switch track when on, checkbox fill, focused field border
    muted: Color | None = None      # hints, off tracks, separators
    max_scroll: int = 0             # lists: how far (px) the content can scroll
    dy: int = 0                     # rows: vertical offset of the text from the centre, px

    @property
    def role(self) -> str:
        return ROLES[self.kind]

    def contains(self, x: float, y: float) -> bool:
        x0, y0, x1, y1 = self.bounds
        return x0 <= x < x1 and y0 <= y < y1

    @property
    def centre(self) -> tuple[float, float]:
        x0, y0, x1, y1 = self.bounds
        return (x0 + x1) / 2.0, (y0 + y1) / 2.0


def ui_tree(widgets: list[Widget]) -> list[dict]:
    """The tree elements of the widgets marked ``in_tree``, indexed in drawing order."""
    out = []
    for w in widgets:
        if not w.in_tree:
            continue
        e = {"index": len(out), "role": w.role, "text": w.text, "desc": w.desc, "id": w.id,
             "bounds": list(w.bounds), "clickable": w.clickable, "password": False,
             "focused": w.focused}
        if w.checked is not None:
            e["checked"] = w.checked
        if w.kind == "list":
            e["scrollable"] = w.max_scroll > 0
        out.append(e)
    return out


def hit(widgets: list[Widget], x: float, y: float) -> Widget | None:
    """The topmost clickable widget containing pixel (x, y); None where a tap lands on nothing."""
    for w in reversed(widgets):
        if w.clickable and w.contains(x, y):
            return w
    return None


# -- colours -----------------------------------------------------------------------------------------
def hsv(h: float, s: float, v: float) -> Color:
    r, g, b = colorsys.hsv_to_rgb(h % 1.0, s, v)
    return (round(r * 255), round(g * 255), round(b * 255))


def luminance(c: Color) -> float:
    return (0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2]) / 255.0


def on(c: Color) -> Color:
    """A text colour readable on background ``c``."""
    return (20, 20, 24) if luminance(c) > 0.55 else (250, 250, 250)


def mix(a: Color, b: Color, t: float) -> Color:
    return tuple(round(x + (y - x) * t) for x, y in zip(a, b))


# -- drawing -----------------------------------------------------------------------------------------
@lru_cache(maxsize=128)
def font(px: int) -> ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=max(MIN_FONT_PX, int(px)))


@lru_cache(maxsize=4096)
def _fit(text: str, px: int, max_w: int) -> int:
    """The largest font size <= px at which ``text`` fits ``max_w`` pixels (MIN_FONT_PX at least)."""
    px = max(MIN_FONT_PX, int(px))
    while px > MIN_FONT_PX and font(px).getlength(text) > max_w:
        px -= 1
    return px


@lru_cache(maxsize=4096)
def _ellipsize(text: str, px: int, max_w: int) -> str:
    """``text`` cut to fit ``max_w`` at ``px`` with a trailing ellipsis (the tree keeps it whole,
    as Android's does)."""
    f = font(px)
    if f.getlength(text) <= max_w:
        return text
    while text and f.getlength(text + "\u2026") > max_w:
        text = text[:-1]
    return text + "\u2026" if text else ""


@lru_cache(maxsize=8192)
def _mask(text: str, px: int):
    """The coverage mask of ``text`` at ``px`` and its box relative to a left-middle anchor; labels
    repeat from frame to frame, so each is rasterized once."""
    f = font(px)
    left, top, right, bottom = f.getbbox(text, anchor="lm")
    mask = Image.new("L", (max(1, right - left), max(1, bottom - top)))
    ImageDraw.Draw(mask).text((-left, -top), text, fill=255, font=f, anchor="lm")
    return mask, left, top, right


def _put(img: Image.Image, text: str, px: int, colour: Color, x0: float, x1: float, cy: float,
         centre: bool) -> None:
    mask, left, top, right = _mask(text, px)
    x = (x0 + x1 - left - right) / 2 if centre else x0
    img.paste(colour, (int(round(x + left)), int(round(cy + top))), mask)


def _text(img: Image.Image, w: Widget, text: str, fg: Color, x0: int, x1: int,
          cy: float, align: str = "left") -> None:
    if not text:
        return
    px = _fit(text, w.font, max(1, x1 - x0))
    _put(img, _ellipsize(text, px, max(1, x1 - x0)), px, fg, x0, x1, cy, align == "centre")


def _glyph(d: ImageDraw.ImageDraw, name: str, cx: float, cy: float, r: float, c: Color) -> None:
    lw = max(2, round(r / 5))
    if name == "search":
        d.ellipse((cx - r * 0.75, cy - r * 0.75, cx + r * 0.25, cy + r * 0.25), outline=c, width=lw)
        d.line((cx + r * 0.1, cy + r * 0.1, cx + r * 0.8, cy + r * 0.8), fill=c, width=lw + 1)
    elif name == "plus":
        d.line((cx - r * 0.7, cy, cx + r * 0.7, cy), fill=c, width=lw + 1)
        d.line((cx, cy - r * 0.7, cx, cy + r * 0.7), fill=c, width=lw + 1)
    elif name == "more":
        for k in (-1, 0, 1):
            y = cy + k * r * 0.6
            d.ellipse((cx - lw, y - lw, cx + lw, y + lw), fill=c)
    elif name == "back":
        d.polygon([(cx - r * 0.6, cy), (cx + r * 0.5, cy - r * 0.65), (cx + r * 0.5, cy + r * 0.65)],
                  outline=c, width=lw)
    elif name == "home":
        d.ellipse((cx - r * 0.6, cy - r * 0.6, cx + r * 0.6, cy + r * 0.6), outline=c, width=lw)
    else:
        raise ValueError(f"unknown glyph {name!r}")


def _draw(img: Image.Image, d: ImageDraw.ImageDraw, w: Widget) -> None:
    x0, y0, x1, y1 = w.bounds
    h = y1 - y0
    cy = (y0 + y1) / 2
    k = w.kind
    if k in ("panel", "row") and w.fill is not None:
        d.rectangle((x0, y0, x1 - 1, y1 - 1), fill=w.fill)
    if k in ("text", "title", "row"):
        if k == "row" and w.muted is not None:
            d.line((x0 + w.pad, y1 - 1, x1 - 1, y1 - 1), fill=w.muted, width=1)
        _text(img, w, w.text, w.fg, x0 + w.pad, x1, cy + w.dy, w.align)
    elif k == "button":
        d.rounded_rectangle((x0, y0, x1 - 1, y1 - 1), radius=h // 4, fill=w.fill)
        _text(img, w, w.text, w.fg, x0 + 4, x1 - 4, cy, "centre")
    elif k == "icon":
        if w.fill is not None:
            d.ellipse((x0, y0, x1 - 1, y1 - 1), fill=w.fill)
        _glyph(d, w.glyph, (x0 + x1) / 2, cy, min(x1 - x0, h) * 0.3, w.fg)
    elif k == "switch":
        th = max(8, round(h * 0.34))
        tw = round(th * 1.8)
        tx1 = x1 - w.pad
        tx0, ty0 = tx1 - tw, round(cy - th / 2)
        d.rounded_rectangle((tx0, ty0, tx1, ty0 + th), radius=th // 2,
                            fill=w.accent if w.checked else w.muted)
        kx = tx1 - th if w.checked else tx0
        d.ellipse((kx + 2, ty0 + 2, kx + th - 2, ty0 + th - 2), fill=(255, 255, 255))
        if w.muted is not None:
            d.line((x0 + w.pad, y1 - 1, x1 - 1, y1 - 1), fill=w.muted, width=1)
        _text(img, w, w.text, w.fg, x0 + w.pad, tx0 - w.pad, cy)
    elif k == "checkbox":
        s = round(min(h * 0.6, w.font * 1.1))
        bx0, by0 = x0 + w.pad, round(cy - s / 2)
        if w.checked:
            d.rectangle((bx0, by0, bx0 + s, by0 + s), fill=w.accent)
            lw = max(2, s // 7)
            d.line((bx0 + s * 0.2, by0 + s * 0.5, bx0 + s * 0.42, by0 + s * 0.75, bx0 + s * 0.8, by0 + s * 0.25),
                   fill=(255, 255, 255), width=lw)
        else:
            d.rectangle((bx0, by0, bx0 + s, by0 + s), outline=w.muted, width=max(2, s // 10))
        _text(img, w, w.text, w.fg, bx0 + s + s // 2, x1, cy)
    elif k == "edit":
        border = w.accent if w.focused else w.muted
        d.rounded_rectangle((x0, y0, x1 - 1, y1 - 1), radius=max(2, h // 6), fill=w.fill,
                            outline=border, width=3 if w.focused else 2)
        tx0, tx1 = x0 + max(w.pad, 6), x1 - max(w.pad, 6)
        if w.text:
            _text(img, w, w.text, w.fg, tx0, tx1, cy)
        else:
            _text(img, w, w.hint, w.muted, tx0, tx1, cy)
        if w.focused:
            tw = font(_fit(w.text, w.font, max(1, tx1 - tx0))).getlength(w.text) if w.text else 0
            cx = min(tx1, tx0 + tw + 2)
            d.line((cx, cy - w.font * 0.6, cx, cy + w.font * 0.6), fill=w.fg, width=2)
    elif k == "app":
        side = min(x1 - x0 - 8, round(h * 0.58))
        tx0, ty0 = round((x0 + x1 - side) / 2), y0 + max(2, round(h * 0.06))
        d.rounded_rectangle((tx0, ty0, tx0 + side, ty0 + side), radius=side // 4, fill=w.fill)
        _put(img, w.glyph, round(side * 0.5), on(w.fill), tx0, tx0 + side, ty0 + side / 2, True)
        label_cy = (ty0 + side + y1) / 2
        _text(img, w, w.text, w.fg, x0 + 2, x1 - 2, label_cy, "centre")
    elif k == "image":
        d.ellipse((x0, y0, x1 - 1, y1 - 1), fill=w.fill)
        if w.glyph:
            _put(img, w.glyph, round(h * 0.5), on(w.fill), x0, x1, cy, True)
    elif k == "bubble":
        d.rounded_rectangle((x0, y0, x1 - 1, y1 - 1), radius=max(4, h // 3), fill=w.fill)
        _text(img, w, w.text, w.fg, x0 + w.pad, x1 - w.pad, cy)
    elif k not in ("panel", "list"):
        raise ValueError(f"unknown widget kind {k!r}")


def text_width(text: str, px: int) -> float:
    return font(px).getlength(text)


def render(widgets: list[Widget], size: tuple[int, int], background: Color) -> np.ndarray:
    """RGB uint8 [H, W, 3] of the widgets drawn in order on ``background``; ``size`` is (W, H)."""
    img = Image.new("RGB", size, background)
    d = ImageDraw.Draw(img)
    for w in widgets:
        _draw(img, d, w)
    return np.asarray(img)
