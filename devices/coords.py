"""Screen coordinates: the one place that converts between conventions.

`GuiAction` points are normalized to 0..1000 of the screen (x right, y down). Models and devices
speak other conventions; every conversion goes through here:

- ``"norm1000"``: 0..1000 of the screen (ours, GUI-Owl-1.5, UI-TARS v1, droidrun);
- ``"unit"``: 0..1 fractions (UFO2's ``click_on_coordinates``);
- ``"screen_px"``: physical pixels of the screen (what a screenshot has, what adb ``input tap`` takes);
- ``"logical_px"``: physical pixels / device pixel ratio (what pyautogui moves on a HiDPI desktop);
- ``"image_px"``: pixels of the resized image the model was shown (Qwen2.5-VL absolute coordinates).

Pixels are cells: pixel ``i`` covers ``[i, i+1)`` of the axis, so a pixel maps to its centre in the
continuous conventions and a continuous value maps to the cell containing it, clamped to the screen.
That makes pixel -> norm1000 -> pixel exact on every screen size.

>>> s = Screen(1280, 800)
>>> to_pixels((500, 500), s)
(640, 400)
>>> to_pixels((1000, 1000), s)        # the far edge is the last pixel, never off-screen
(1279, 799)
>>> to_pixels(from_pixels((17, 799), s), s)
(17, 799)
>>> convert((640, 360), "image_px", "norm1000", screen=s, image=(1280, 720))
(500.0, 500.0)
"""
from __future__ import annotations

import math

from embodia.devices.embodiment import Screen

SPACES = ("norm1000", "unit", "screen_px", "logical_px", "image_px")


def _size(screen) -> tuple[int, int]:
    if isinstance(screen, Screen):
        return int(screen.width), int(screen.height)
    w, h = screen
    return int(w), int(h)


def _check(v: float, what: str) -> float:
    v = float(v)
    if not math.isfinite(v):
        raise ValueError(f"{what} is not a finite number: {v!r}")
    return v


def to_pixels(point, screen) -> tuple[int, int]:
    """0..1000 -> physical pixel (column, row), clamped to the screen."""
    w, h = _size(screen)
    x, y = (_check(point[0], "x"), _check(point[1], "y"))
    return (min(w - 1, max(0, int(math.floor(x * w / 1000.0)))),
            min(h - 1, max(0, int(math.floor(y * h / 1000.0)))))


def from_pixels(px, screen) -> tuple[float, float]:
    """Physical pixel (column, row) -> 0..1000 at the pixel's centre."""
    w, h = _size(screen)
    x, y = (_check(px[0], "x"), _check(px[1], "y"))
    return (min(1000.0, max(0.0, (x + 0.5) * 1000.0 / w)),
            min(1000.0, max(0.0, (y + 0.5) * 1000.0 / h)))


def to_logical(point, screen: Screen) -> tuple[int, int]:
    """0..1000 -> logical pixels (physical / pixel ratio), the space pyautogui moves in."""
    x, y = to_pixels(point, screen)
    r = float(screen.pixel_ratio or 1.0)
    return int(x / r), int(y / r)


def convert(point, src: str, dst: str, *, screen=None, image=None) -> tuple[float, float]:
    """Convert ``point`` from convention ``src`` to ``dst`` (see module doc for the names).

    ``screen`` (a `Screen` or (width, height) in physical pixels) is needed for the pixel spaces;
    ``image`` ((width, height) of the resized model input) for ``"image_px"``. Pixel outputs are
    integers (the cell), continuous outputs floats; nothing is clamped except pixel cells, so an
    off-screen value stays visible to the validator that refuses it.
    """
    for s in (src, dst):
        if s not in SPACES:
            raise ValueError(f"unknown coordinate space {s!r}; known: {SPACES}")
    x, y = _check(point[0], "x"), _check(point[1], "y")

    def need(what, v):
        if v is None:
            raise ValueError(f"converting {src} -> {dst} needs {what}=")
        return v

    # to unit fractions (continuous)
    if src == "norm1000":
        u, v = x / 1000.0, y / 1000.0
    elif src == "unit":
        u, v = x, y
    elif src == "image_px":
        iw, ih = _size(need("image", image))
        u, v = x / iw, y / ih
    else:
        w, h = _size(need("screen", screen))
        if src == "logical_px":
            r = float(getattr(screen, "pixel_ratio", 1.0) or 1.0)
            x, y = x * r, y * r
        u, v = (x + 0.5) / w, (y + 0.5) / h
    # from unit fractions
    if dst == "norm1000":
        return (u * 1000.0, v * 1000.0)
    if dst == "unit":
        return (u, v)
    if dst == "image_px":
        iw, ih = _size(need("image", image))
        return (u * iw, v * ih)
    w, h = _size(need("screen", screen))
    px = (min(w - 1, max(0, int(math.floor(u * w)))), min(h - 1, max(0, int(math.floor(v * h)))))
    if dst == "logical_px":
        r = float(getattr(screen, "pixel_ratio", 1.0) or 1.0)
        return (int(px[0] / r), int(px[1] / r))
    return px


def bounds_center(bounds) -> tuple[float, float]:
    """Centre of a UI element's pixel bounds ``[x0, y0, x1, y1]`` (exclusive right/bottom edge)."""
    x0, y0, x1, y1 = (float(b) for b in bounds)
    return ((x0 + x1) / 2.0, (y0 + y1) / 2.0)


def element_point(bounds, screen) -> tuple[float, float]:
    """0..1000 point at the centre of an element's pixel bounds."""
    w, h = _size(screen)
    cx, cy = bounds_center(bounds)
    return (min(1000.0, max(0.0, cx * 1000.0 / w)), min(1000.0, max(0.0, cy * 1000.0 / h)))
