"""Helpers both offline scorers use (robot datasets, GUI step logs): episode indices checked,
an oracle policy told which recorded step comes next, a policy's info as a plain dict."""
from __future__ import annotations

from embodia.policies.base import as_policy


def check_episodes(episodes, n: int, root) -> list[int]:
    bad = [i for i in episodes if not 0 <= int(i) < n]
    if bad:
        raise IndexError(f"episodes {bad} out of range: {root} has {n} (0..{n - 1})")
    return [int(i) for i in episodes]


class Cued:
    """An oracle policy of the scorer's (the recorded actions): it is told which recorded step
    comes next through ``cue``."""

    def cue(self, episode: dict, t: int) -> None:
        raise NotImplementedError


def cue_step(policy, episode: dict, t: int) -> None:
    """Oracle policies (recorded actions) are told which recorded step comes next. ``policy`` is the
    scored one, never the memory arm's wrapper around it, so the cue reaches the base policy."""
    if isinstance(policy, Cued):
        policy.cue(episode, t)


def policy_info(policy) -> dict:
    return dict(as_policy(policy).info())
