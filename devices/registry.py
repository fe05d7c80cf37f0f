"""Device URIs: `sim:twogap-push`, `sim:metaworld/pick-place-v3`, `mujoco:path/to/scene.xml`, ...

A scheme maps to "module:function"; the module is imported only when that scheme is opened, so a
missing optional dependency (metaworld, pyautogui, adbutils) only matters to the user who asks
for it.

>>> parse_uri("mujoco:scenes/arm.xml?hz=20&size=64x64")
('mujoco', 'scenes/arm.xml', {'hz': '20', 'size': '64x64'})
"""
from __future__ import annotations

import importlib
from urllib.parse import parse_qsl

from embodia.devices.base import as_device

SCHEMES: dict[str, tuple[str, str]] = {
    # scheme: (factory "module:function", one line for `embodia devices`)
    "sim": ("embodia.sim:open_sim", "simulated tasks with success checks and scripted experts"),
    "mujoco": ("embodia.devices.mujoco:open_mujoco", "any MJCF scene: mujoco:path/to/scene.xml[?hz=..&size=WxH]"),
    "desktop": ("embodia.devices.desktop:open_desktop", "this desktop (X11): desktop: ($DISPLAY) or desktop:<display>, e.g. desktop:99"),
    "browser": ("embodia.devices.browser:open_browser", "a web page in Chromium (DevTools protocol): "
                "browser:https://..., browser:file:///..., browser:page.html[?size=WxH&settle=s&headless=0]"),
    "android": ("embodia.devices.android:open_android", "a phone over adb: android:<serial> (android: = the only one)"),
    "desktop-bench": ("embodia.sim.desktop_bench:open_desktop_bench", "tasks on real Debian apps (galculator, "
                      "mousepad, gnumeric) on this X display: desktop-bench:<app>/<task>[?split=train|test]"),
    "gui-sim": ("embodia.sim.gui:open_gui_sim", "synthetic phone/desktop apps with verifiable tasks: "
                "gui-sim:<app>[?task=..&split=train|test&shift=layout,theme,font,size&form=phone|desktop]"),
}


class UnknownDevice(ValueError):
    pass


def register(scheme: str, factory: str, description: str = "") -> None:
    """Add a scheme: `register("myrobot", "mypkg.robot:open_robot", "my arm over serial")`."""
    SCHEMES[scheme] = (factory, description)


def parse_uri(uri: str) -> tuple[str, str, dict[str, str]]:
    scheme, sep, rest = uri.partition(":")
    if not sep or not scheme:
        raise UnknownDevice(f"device URI {uri!r} has no scheme; expected one of "
                            f"{', '.join(s + ':' for s in SCHEMES)}")
    target, _, query = rest.partition("?")
    return scheme, target, dict(parse_qsl(query, keep_blank_values=True))


def open_device(uri: str, **options):
    """Open a device by URI; keyword options (e.g. shift=, size=) override the URI's query."""
    scheme, target, query = parse_uri(uri)
    if scheme not in SCHEMES:
        raise UnknownDevice(f"unknown device scheme {scheme!r} in {uri!r}; known: "
                            f"{', '.join(s + ':' for s in SCHEMES)}")
    module, _, fn = SCHEMES[scheme][0].partition(":")
    factory = getattr(importlib.import_module(module), fn)
    query.update({k: v for k, v in options.items() if v is not None})
    try:
        device = factory(target, **query)
    except TypeError as e:      # a query key the factory does not take: the user's typo, not a bug
        if "unexpected keyword argument" not in str(e):
            raise
        bad = str(e).rsplit("argument", 1)[-1].strip(" '\"")
        raise UnknownDevice(f"{scheme}: unknown parameter {bad!r} in {uri!r}") from None
    return as_device(device)       # a registered scheme's factory may return any object that acts


def check_uri(uri: str) -> None:
    """Check a device URI up front (scheme known; for ``mujoco:`` every parameter's value), without
    opening anything; raises ValueError (UnknownDevice) in one line.

    >>> check_uri("mujoco:scene.xml?size=0x0")
    Traceback (most recent call last):
    ValueError: size '0x0': width and height must be whole numbers 1..4096 (WxH, e.g. 96x96)
    """
    scheme, target, query = parse_uri(uri)
    if scheme not in SCHEMES:
        raise UnknownDevice(f"unknown device scheme {scheme!r} in {uri!r}; known: "
                            f"{', '.join(s + ':' for s in SCHEMES)}")
    if scheme == "mujoco":
        import inspect

        from embodia.devices.mujoco import check_query
        known = set(inspect.signature(check_query).parameters)
        unknown = sorted(set(query) - known)
        if unknown:
            raise UnknownDevice(f"mujoco: unknown parameter(s) {unknown} in {uri!r}; known: {', '.join(sorted(known))}")
        if not target:
            raise UnknownDevice(f"mujoco: no scene in {uri!r}; expected mujoco:path/to/scene.xml")
        check_query(**query)


def available() -> list[dict]:
    """Every scheme with its description and, where the scheme can list them, its targets."""
    rows = []
    for scheme, (factory, desc) in SCHEMES.items():
        module, _, _ = factory.partition(":")
        row = {"scheme": scheme, "description": desc, "targets": [], "error": None}
        try:
            mod = importlib.import_module(module)
            lister = getattr(mod, "list_targets", None)
            if lister:
                row["targets"] = lister()
        except Exception as e:   # a broken optional dependency is reported, not fatal
            row["error"] = f"{type(e).__name__}: {e}"
        rows.append(row)
    return rows
