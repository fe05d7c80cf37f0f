"""Screens for the safety gate's context corpora (issue 35), built in the element schema each real
device gives (`embodia.devices.gui`), so that a case shows the gate only what a device shows it:

- ``desktop``: AT-SPI as `embodia.devices.atspi` reads it from GTK applications and Chromium: a
  ``frame`` element whose text is the window title (mousepad puts ``*`` before the title while
  the document has unsaved changes), every element carrying ``window`` (its top-level window's
  title) and ``app``; a dialog is its own top-level window (role ``alert`` or ``dialog``, its
  title as text) holding ``label`` and ``push button`` elements, as mousepad's close dialog reads
  on this machine; editables carry ``editable`` and ``value``; a terminal is role ``terminal``.
- ``android``: uiautomator as `embodia.devices.android.parse_ui_xml` reads it: full class names as
  roles, resource ids, content descriptions, no window titles; an AlertDialog is a FrameLayout
  smaller than the screen holding ``android:id/alertTitle``, ``android:id/message`` and
  ``android:id/button1`` (positive) / ``button2`` (negative).

Each builder returns ``(action, tree, screen)``.
"""
from __future__ import annotations

from embodia.devices import GuiAction

DESK = (1280, 800)
PHONE = (1080, 2400)


def _index(els: list[dict]) -> list[dict]:
    out = [dict(e) for e in els]
    for i, e in enumerate(out):
        e["index"] = i
    return out


def _norm(xy, screen):
    return (xy[0] * 1000 / screen[0], xy[1] * 1000 / screen[1])


def _centre(b):
    return ((b[0] + b[2]) / 2, (b[1] + b[3]) / 2)


def tap(tree: list[dict], screen, text: str):
    """(click, tree, screen): a click on the centre of the element showing ``text`` (clickable or not)."""
    e = next(e for e in tree if e.get("text") == text)
    return GuiAction("click", point=_norm(_centre(e["bounds"]), screen)), tree, screen


# -- desktop (AT-SPI) ---------------------------------------------------------------------------------
def _win(title: str, app: str, els: list[dict], bounds=(0, 0, 1280, 800)) -> list[dict]:
    """A top-level window: its frame, then ``els`` tagged with the window's title and app."""
    frame = {"role": "frame", "text": title, "bounds": list(bounds), "window": title, "app": app}
    return [frame] + [{"window": title, "app": app, "clickable": False, **e} for e in els]


def _menus(y=0):
    return [{"role": "menu", "text": t, "bounds": [x, y, x + 50, y + 25], "clickable": True}
            for t, x in (("File", 0), ("Edit", 50), ("View", 100), ("Help", 150))]


def desktop_dialog(main: str, app: str, title: str, labels: list[str], buttons: list[str], press: str,
                   *, role: str = "alert", by: str = "element", dialog_named: bool = True):
    """A dialog window over an application window; ``press`` is the button clicked (by element
    reference or by point). ``dialog_named=False``: the dialog element has no title (GTK message
    dialogs often have none), only its labels say what it does."""
    body = _menus() + [{"role": "text", "text": "", "bounds": [0, 30, 1280, 800], "editable": True,
                        "clickable": True, "value": ""}]
    dlg = [400, 280, 880, 480]
    inner = [{"role": role, "text": title if dialog_named else "", "bounds": dlg}]
    for k, lab in enumerate(labels):
        inner.append({"role": "label", "text": lab, "value": lab, "bounds": [420, 300 + 28 * k, 860, 322 + 28 * k]})
    w = (dlg[2] - dlg[0]) // max(1, len(buttons))
    for k, b in enumerate(buttons):
        inner.append({"role": "push button", "text": b, "bounds": [dlg[0] + k * w, 440, dlg[0] + (k + 1) * w, 475],
                      "clickable": True, "focused": k == len(buttons) - 1})
    tree = _index(_win(main, app, body) + _win(title if dialog_named else "", app, inner, bounds=dlg)[1:])
    target = next(e for e in tree if e["role"] == "push button" and e["text"] == press)
    if by == "element":
        return GuiAction("click", element=target["index"]), tree, DESK
    return GuiAction("click", point=_norm(_centre(target["bounds"]), DESK)), tree, DESK


def desktop_window(title: str, app: str, *els: dict):
    """(tree, screen) of one application window whose first editable is focused."""
    body = _menus() + [dict(e) for e in els]
    for e in body:
        if e.get("editable"):
            e["focused"] = True
            break
    return _index(_win(title, app, body)), DESK


def editor(title: str, app: str, value: str = "some text"):
    """(tree, screen) of a text editor window whose document has the focus."""
    return desktop_window(title, app, {"role": "text", "text": value, "value": value, "editable": True,
                                       "clickable": True, "bounds": [0, 30, 1280, 780]})


def chord_in(keys: tuple, title: str, app: str, *extra: dict):
    """A key chord pressed while an editor window titled ``title`` has the focus."""
    tree, screen = editor(title, app)
    tree = _index(tree + [{"window": title, "app": app, "clickable": False, **e} for e in extra])
    return GuiAction("key", keys=keys), tree, screen


def terminal(text: str, *, value: str = "ana@laptop:~/project$ ", title: str = "ana@laptop: ~/project",
             app: str = "xfce4-terminal", enter: bool = False):
    """Typing ``text`` into a desktop terminal (VTE) with the focus; ``enter``: press Enter instead
    of typing, with ``value`` on screen."""
    tree, screen = desktop_window(title, app, {"role": "terminal", "text": "", "value": value, "editable": True,
                                               "clickable": True, "bounds": [0, 30, 1280, 800]})
    if enter:
        return GuiAction("key", keys=("enter",)), tree, screen
    return GuiAction("type", text=text), tree, screen


def web_page(page: str, site: str, *els: dict, press: str | None = None, type_text: str | None = None):
    """A Chromium page: frame "<page> - <site> - Chromium", a ``document web`` element, then
    ``els`` (roles as Chromium's AT-SPI gives them: push button, entry, password text, heading,
    link, combo box, label). ``press``: click the element with that text; ``type_text``: type
    into the focused element."""
    title = f"{page} - {site} - Chromium"
    doc = {"role": "document web", "text": page, "bounds": [0, 80, 1280, 800]}
    tree = _index(_win(title, "Chromium", [doc] + [dict(e) for e in els]))
    if press is not None:
        t = next(e for e in tree if e.get("text") == press and e.get("clickable"))
        return GuiAction("click", element=t["index"]), tree, DESK
    return GuiAction("type", text=type_text or ""), tree, DESK


def wbutton(text: str, x=560, y=600, **kw) -> dict:
    return {"role": "push button", "text": text, "bounds": [x, y, x + 160, y + 40], "clickable": True, **kw}


def wentry(name: str, y=300, focused=False, value="", role="entry", **kw) -> dict:
    return {"role": role, "text": name, "bounds": [400, y, 880, y + 36], "clickable": True, "editable": True,
            "focused": focused, "value": value, "password": role == "password text", **kw}


def wtext(text: str, y=200, role="heading", **kw) -> dict:
    return {"role": role, "text": text, "bounds": [400, y, 880, y + 30], **kw}


def web_dialog(page: str, site: str, title: str, labels: list[str], buttons: list[str], press: str):
    """A modal dialog inside a web page (role ``dialog``, named by its heading)."""
    els = [{"role": "dialog", "text": title, "bounds": [380, 250, 900, 560]}]
    els += [wtext(lab, y=300 + 40 * k, role="paragraph") for k, lab in enumerate(labels)]
    els += [wbutton(b, x=420 + 230 * k, y=500) for k, b in enumerate(buttons)]
    return web_page(page, site, *els, press=press)


# -- Android (uiautomator) ----------------------------------------------------------------------------
def _app(app_title: str, pkg: str) -> list[dict]:
    return [{"role": "android.widget.FrameLayout", "bounds": [0, 0, 1080, 2400]},
            {"role": "android.widget.TextView", "text": app_title, "id": f"{pkg}:id/toolbar_title",
             "bounds": [40, 100, 700, 200]},
            {"role": "android.widget.ImageButton", "desc": "Navigate up", "bounds": [0, 100, 40, 200],
             "clickable": True}]


def android_dialog(title: str, message: str, buttons: list[str], press: str, *, app_title: str = "Gallery",
                   pkg: str = "com.example.app", ids: bool = True):
    """An AlertDialog over an app; ``buttons`` negative first, positive last (button2, button1)."""
    box = [60, 900, 1020, 1500]
    els = _app(app_title, pkg) + [{"role": "android.widget.FrameLayout", "bounds": box},
                                  {"role": "android.widget.LinearLayout", "id": "android:id/parentPanel" if ids else "",
                                   "bounds": box}]
    if title:
        els.append({"role": "android.widget.TextView", "text": title, "id": "android:id/alertTitle" if ids else "",
                    "bounds": [120, 960, 960, 1040]})
    if message:
        els.append({"role": "android.widget.TextView", "text": message, "id": "android:id/message" if ids else "",
                    "bounds": [120, 1060, 960, 1300]})
    w = 840 // max(1, len(buttons))
    for k, b in enumerate(buttons):
        bid = f"android:id/button{len(buttons) - k}" if ids else ""
        els.append({"role": "android.widget.Button", "text": b, "id": bid, "bounds": [120 + k * w, 1360, 120 + (k + 1) * w, 1460],
                    "clickable": True})
    tree = _index(els)
    t = next(e for e in tree if e.get("text") == press and e.get("clickable"))
    return GuiAction("click", point=_norm(_centre(t["bounds"]), PHONE)), tree, PHONE


def android_screen(app_title: str, pkg: str, *els: dict, press: str | None = None, type_text: str | None = None):
    """An app screen; ``press``: tap the clickable element with that text or description;
    ``type_text``: type into the focused field."""
    tree = _index(_app(app_title, pkg) + [dict(e) for e in els])
    if press is not None:
        t = next(e for e in tree if press in (e.get("text"), e.get("desc")) and e.get("clickable"))
        return GuiAction("click", point=_norm(_centre(t["bounds"]), PHONE)), tree, PHONE
    return GuiAction("type", text=type_text or ""), tree, PHONE


def abutton(text="", desc="", id="", y=2100, x=40, w=1000, role="android.widget.Button") -> dict:
    return {"role": role, "text": text, "desc": desc, "id": id, "bounds": [x, y, x + w, y + 120], "clickable": True}


def atext(text: str, y=400, id="", **kw) -> dict:
    return {"role": "android.widget.TextView", "text": text, "id": id, "bounds": [40, y, 1040, y + 80], **kw}


def afield(hint: str, id="", text="", focused=True, y=600, password=False) -> dict:
    """An EditText: uiautomator shows the hint as its text while it is empty."""
    return {"role": "android.widget.EditText", "text": text or hint, "id": id,
            "bounds": [40, y, 1040, y + 120], "clickable": True, "focused": focused, "password": password}


def arow(title: str, subtitle: str, y=500, pkg="com.example.app") -> list[dict]:
    """A list row: a clickable container holding a title and a subtitle."""
    return [{"role": "android.widget.LinearLayout", "bounds": [0, y, 1080, y + 200], "clickable": True,
             "id": f"{pkg}:id/row"},
            {"role": "android.widget.TextView", "text": title, "id": f"{pkg}:id/title", "bounds": [40, y + 20, 1040, y + 100]},
            {"role": "android.widget.TextView", "text": subtitle, "id": f"{pkg}:id/subtitle",
             "bounds": [40, y + 110, 1040, y + 180]}]


def named_button(visible: str, name: str, x=560, y=600, role="push button") -> list[dict]:
    """A button whose accessible name (``aria-label``, or a GTK accessible name) differs from the text
    it shows, as Chromium's tree gives it (`embodia.devices.browser_tree`): the button carries the
    accessible name as ``text``, and the visible text is a ``label`` inside its bounds (a text that
    does not repeat the button's name is kept). Splat the list into `web_page` or `desktop_window`;
    press it by its accessible name."""
    return [{"role": role, "text": name, "bounds": [x, y, x + 160, y + 40], "clickable": True},
            {"role": "label", "text": visible, "bounds": [x + 10, y + 8, x + 150, y + 32]}]
