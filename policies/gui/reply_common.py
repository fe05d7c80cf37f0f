"""What every part of the reply parser shares: the one error it raises, the limits on a reply, and
short renderings of values for error messages."""
from __future__ import annotations

import re

from embodia.devices.actions import GuiAction
from embodia.devices.embodiment import Screen

MAX_REPLY_CHARS = 64 * 1024


CENTRE = (500.0, 500.0)        # where a scroll without a point happens


MAX_ACTIONS = 8                # candidate actions in one reply before we stop reading


MAX_ARGS = 8


MAX_KEYS = 8


MAX_INDEX = 1_000_000


MAX_SECONDS = 60.0            # GuiAction.duration_ms allows up to 60 s


class ReplyParseError(ValueError):
    """A model reply that yields no executable `GuiAction`.

    ``problem`` says what was wrong, ``excerpt`` quotes the part of the reply it was found in.
    """

    def __init__(self, problem: str, excerpt: str = ""):
        self.problem, self.excerpt = problem, excerpt
        super().__init__(f"{problem}; reply: {excerpt!r}" if excerpt else problem)


def short_excerpt(s: str, limit: int = 80) -> str:
    s = " ".join(s[: limit * 4].split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def show(v) -> str:
    if isinstance(v, (list, dict)):
        return f"a {type(v).__name__} of {len(v)}"
    r = repr(v)
    return r if len(r) <= 40 else r[:39] + "…"


def brief(a: GuiAction) -> str:
    return a.type + "".join(f" {point_text(p)}" for p in (a.point, a.end) if p is not None)


def point_text(p) -> str:
    return "(" + ", ".join(f"{c:g}" for c in p) + ")"


def size_ok(v) -> bool:
    try:
        w, h = Screen.of(v).size
        return float(w) >= 1 and float(h) >= 1
    except (TypeError, ValueError):
        return False


OUR_FIELDS = tuple(f for f in GuiAction.__dataclass_fields__ if f != "type")


WS = re.compile(r"\s*")


VERB = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)[ \t]*(?=[(<])")


TAGGED = re.compile(r"(?:<point>|<bbox>|<\|box_start\|>)([^<]{0,200})(?:</point>|</bbox>|<\|box_end\|>)")


OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}


NOT_EXPRESSIBLE = {   # names in the schemas above that no GuiAction means; refused, never approximated
    "mouse_move": "it only moves the pointer", "hover": "it only moves the pointer",
    "middle_click": "GuiAction has no middle button", "triple_click": "GuiAction has no triple click",
    "interact": "it asks the user, which is not a device action",
    "call_user": "it asks the user, which is not a device action",
    "keydown": "GuiAction presses whole key combinations", "keyup": "GuiAction presses whole key combinations",
}
