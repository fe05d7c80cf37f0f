"""Helpers both offline scorers use (robot datasets, GUI step logs): episode indices checked,
an oracle policy told which recorded step comes next, a policy's info as a plain dict."""
from __future__ import annotations

from embodia.devices import as_policy


def _check_episodes(episodes, n: int, root) -> list[int]:
    bad = [i for i in episodes if not 0 <= int(i) < n]
    if bad:
        raise IndexError(f"episodes {bad} out of range: {root} has {n} (0..{n - 1})")
    return [int(i) for i in episodes]


def _cue(policy, episode: dict, t: int) -> None:
    """Oracle policies (recorded actions) are told which recorded step comes next; a steered
    policy passes the cue to its base policy."""
    for p in (policy, getattr(policy, "policy", None)):
        cue = getattr(p, "cue", None)
        if callable(cue):
            cue(episode, t)
            return


def _info(policy) -> dict:
    return dict(as_policy(policy).info())
