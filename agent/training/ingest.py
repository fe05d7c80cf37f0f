"""Build (or extend) a success memory from the successful episodes of a recorded dataset: test-time
memory from data, no weight changes. ``embodia memory ingest`` is this."""
from __future__ import annotations

from pathlib import Path

from embodia.agent.loop.factory import EmbodimentOnly, device_namespace, make_policy, with_memory
from embodia.agent.recording.dataset import LocalDataset


def episodes_to_store(episodes: list[dict], as_successes: bool = False) -> list[int]:
    """Indices of the episodes a memory may store: those flagged successful, plus, with
    ``as_successes``, those that carry no flag (demonstrations, e.g. written by LeRobot, which the
    user vouches for). Episodes flagged as failures are never stored.

    >>> eps = [{"success": True}, {"success": False}, {"success": None}]
    >>> episodes_to_store(eps), episodes_to_store(eps, as_successes=True)
    ([0], [0, 2])
    """
    return [i for i, e in enumerate(episodes)
            if e.get("success") or (as_successes and e.get("success") is None)]


def nothing_to_store(data, episodes: list[dict]) -> str:
    """Why a dataset gives a memory nothing to store, in one line."""
    unflagged = sum(e.get("success") is None for e in episodes)
    if unflagged:
        return (f"{data}: stored nothing: {unflagged} of its {len(episodes)} episodes carry no success flag "
                f"(demonstrations, e.g. written by LeRobot) and a memory keeps verified successes only; "
                f"pass --as-successes if you know they succeeded")
    return f"{data} has no successful episodes to ingest"


def ingest_dataset(memory_path: str | Path, data: str | Path, policy_spec: str = "embodia-tiny",
                   device_uri: str | None = None, as_successes: bool = False,
                   modality: str | Path | None = None) -> tuple[int, int]:
    """Store every successful episode of ``data`` in the memory at ``memory_path`` (created when
    absent), keyed and normalised by ``policy_spec``'s VLA; the namespace comes from ``device_uri`` or
    from the device each episode names. Episodes without a success flag (LeRobot's datasets carry none)
    are stored only with ``as_successes`` (see `episodes_to_store`). Returns (episodes stored, entries
    added or merged). Raises DatasetError, PolicyError, or ValueError (the message says why) when
    nothing is left to store. ``modality``: a mapping file naming the dataset's entries (see
    `embodia.agent.recording.modality`)."""
    ds = LocalDataset(data, modality=modality)
    chosen = episodes_to_store(ds.episodes, as_successes)
    if not chosen:
        raise ValueError(nothing_to_store(data, ds.episodes))
    recorded = [ds.episode(i) for i in chosen]    # a lying episode is refused before the policy loads
    policy = make_policy(policy_spec, EmbodimentOnly(ds.embodiment))
    steered, added, episodes = None, 0, 0
    for i, e in zip(chosen, recorded):
        uri = device_uri or (e.get("meta") or {}).get("device") or "unknown:task"
        steered = steered or with_memory(policy, str(memory_path), uri)
        steered.namespace = device_namespace(uri, ds.embodiment)
        added += steered.remember(e["state"], e["action"], episode_id=i)
        episodes += 1
    steered.memory.save(memory_path)
    return episodes, added
