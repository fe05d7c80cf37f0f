"""Test-time selection among sampled GUI actions: a canonical key two agreeing actions share
(points by grid cell), and the vote that groups samples by it, most votes first (`ChatGuiPolicy`
in `prompt.py` samples and chooses)."""
from __future__ import annotations

import dataclasses
import math

from embodia.devices import GuiAction

VOTE_GRID = 25.0            # 0..1000 units: points in one 25x25 cell (2.5% of each side) agree


def vote_key(action: GuiAction, grid: float = VOTE_GRID) -> tuple:
    """The canonical form candidates vote by: two actions with the same key are the same decision.
    Points count by the ``grid`` x ``grid`` cell (0..1000 units) they fall in; a UI element by its
    index; keys and app names ignore case.

    >>> vote_key(GuiAction("click", point=(501, 262))) == vote_key(GuiAction("click", point=(520, 274)))
    True
    >>> vote_key(GuiAction("click", point=(501, 262))) == vote_key(GuiAction("click", point=(526, 262)))
    False
    """
    def cell(p):
        return None if p is None else (math.floor(p[0] / grid), math.floor(p[1] / grid))
    where = ("element", action.element) if action.element is not None else ("point", cell(action.point))
    return (action.type, where, cell(action.end), (action.text or "").strip() or None,
            tuple(k.lower() for k in action.keys), action.button, action.direction,
            (action.app or "").strip().casefold() or None, action.status)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One group of agreeing samples: its action and which samples (indices among the parsed
    candidates) voted for it."""

    action: GuiAction
    members: tuple[int, ...]


def vote(actions: list[GuiAction], grid: float = VOTE_GRID) -> list[Candidate]:
    """Group ``actions`` by `vote_key`, most votes first (ties: the group that appeared first). A
    group's action is its first member's with ``point`` and ``end`` replaced by the members' mean,
    which stays on the screen.

    >>> groups = vote([GuiAction("click", point=(500, 250)), GuiAction("type", text="hi"),
    ...                GuiAction("click", point=(510, 260))])
    >>> [(g.action.type, g.action.point, g.members) for g in groups]
    [('click', (505.0, 255.0), (0, 2)), ('type', None, (1,))]
    """
    groups: dict[tuple, list[int]] = {}
    for i, a in enumerate(actions):
        groups.setdefault(vote_key(a, grid), []).append(i)
    out = []
    for members in groups.values():
        first = actions[members[0]]
        means = {f: tuple(_mean([getattr(actions[i], f)[d] for i in members]) for d in (0, 1))
                 for f in ("point", "end") if len(members) > 1 and getattr(first, f) is not None
                 and all(getattr(actions[i], f) is not None for i in members)}
        out.append(Candidate(dataclasses.replace(first, **means) if means else first, tuple(members)))
    return sorted(out, key=lambda g: (-len(g.members), g.members[0]))


def _mean(values: list[float]) -> float:
    """Clamped to the values' range, so float error never takes a mean point off the screen."""
    return min(max(sum(values) / len(values), min(values)), max(values))
