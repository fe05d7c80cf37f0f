"""How the safety gate (`embodia.agent.loop.safety`) reads keys: a chord whatever its spelling
(``shift+delete``, ``("Shift", "Del")``, ``KEYCODE_FORWARD_DEL``), and the chords that act by
themselves or quit an application.

>>> sorted(chord(["control+alt+backspace"]))
['alt', 'backspace', 'ctrl']
"""
from __future__ import annotations

import re
import unicodedata
from typing import Iterable

from embodia.agent.loop.safety_words import strip_format

KEY_ALIASES = {"control": "ctrl", "ctl": "ctrl", "strg": "ctrl", "del": "delete", "forward_del": "delete",
               "forward_delete": "delete", "forwarddel": "delete", "supr": "delete", "entf": "delete",
               "return": "enter", "numpad_enter": "enter", "kp_enter": "enter", "numpadenter": "enter",
               "cmd": "meta", "command": "meta", "win": "meta", "super": "meta", "windows": "meta",
               "option": "alt", "opt": "alt", "altgr": "alt", "back_space": "backspace", "bksp": "backspace"}


def chord(keys: Iterable[str]) -> frozenset[str]:
    """The set of keys pressed together, whatever the spelling.

    >>> sorted(chord(["shift+delete"])) == sorted(chord(["KEYCODE_SHIFT_LEFT", "Del"])) == ["delete", "shift"]
    True
    """
    out = set()
    for k in keys:
        k = unicodedata.normalize("NFKC", strip_format(str(k))).strip().lower()
        parts = [k] if len(k) == 1 else [p for p in re.split(r"\s*[+\s]\s*|(?<=\w)-(?=\w)", k) if p]
        for p in parts:
            p = re.sub(r"^keycode_", "", p)
            p = re.sub(r"^(ctrl|control|shift|alt|meta|cmd|command|super|win)_?(left|right|l|r)$", r"\1", p)
            out.add(KEY_ALIASES.get(p, p))
    return frozenset(out)


# chords that act by themselves, pressed exactly (ctrl+shift+delete opens Chromium's "Clear browsing
# data" page, it deletes nothing); "text" chords act only outside a text field (there shift+delete
# cuts the selection), "submit" chords only where Enter would send (not in a document or a search box)
CHORDS = [({"ctrl", "alt", "delete"}, "system", "ctrl+alt+delete", "any"),
          ({"ctrl", "alt", "backspace"}, "system", "ctrl+alt+backspace (kills the X server)", "any"),
          ({"shift", "delete"}, "delete", "shift+delete (permanent delete)", "text"),
          ({"meta", "backspace"}, "delete", "cmd+backspace (move to trash)", "text"),
          ({"meta", "delete"}, "delete", "cmd+delete (move to trash)", "text"),
          ({"delete"}, "delete", "Delete on the selected items", "items"),
          ({"ctrl", "enter"}, "send", "ctrl+enter (submit)", "submit"),
          ({"meta", "enter"}, "send", "cmd+enter (submit)", "submit")]
# chords that quit an application or close its window: the work it has not saved goes with it.
# (ctrl+w closes one document, and every editor here asks about that document first: the
# "Don't Save" of its dialog is what the gate stops.)
QUIT = [({"ctrl", "q"}, "ctrl+q (quit)"), ({"alt", "f4"}, "alt+F4 (close the window)"),
        ({"meta", "q"}, "cmd+q (quit)"), ({"ctrl", "shift", "q"}, "ctrl+shift+q (quit)"),
        ({"ctrl", "shift", "w"}, "ctrl+shift+w (close the window)")]
