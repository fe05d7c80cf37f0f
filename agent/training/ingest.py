"""Build (or extend) a success memory from the successful episodes of a recorded dataset: test-time
memory from data, no weight changes. ``embodia memory ingest`` is this."""
from __future__ import annotations

from pathlib import Path

from embodia.agent.loop.factory import EmbodimentOnly, device_namespace, make_policy, with_memory
from embodia.agent.recording.dataset import LocalDataset


def ingest_dataset(memory_path: str | Path, data: str | Path, policy_spec: str = "embodia-tiny",
                   device_uri: str | None = None) -> tuple[int, int]:
    """Store every successful episode of ``data`` in the memory at ``memory_path`` (created when
    absent), keyed and normalised by ``policy_spec``'s VLA; the namespace comes from ``device_uri`` or
    from the device each episode names. Returns (episodes stored, entries added or merged). Raises
    DatasetError, PolicyError, or ValueError when the dataset holds no successful episode."""
    ds = LocalDataset(data)
    policy = make_policy(policy_spec, EmbodimentOnly(ds.embodiment))
    steered, added, episodes = None, 0, 0
    for i, ep in enumerate(ds.episodes):
        if not ep.get("success"):
            continue
        e = ds.episode(i)
        uri = device_uri or (e.get("meta") or {}).get("device") or "unknown:task"
        steered = steered or with_memory(policy, str(memory_path), uri)
        steered.namespace = device_namespace(uri, ds.embodiment)
        added += steered.remember(e["state"], e["action"], episode_id=i)
        episodes += 1
    if steered is None:
        raise ValueError(f"{data} has no successful episodes to ingest")
    steered.memory.save(memory_path)
    return episodes, added
