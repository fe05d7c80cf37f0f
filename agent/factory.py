"""Turn --device and --policy strings into objects; the one place that knows every spec."""
from __future__ import annotations

from devices import open_device
from policies import RandomPolicy, ReplayPolicy

POLICY_SPECS = {
    "expert": "the device's scripted expert (simulated tasks)",
    "random": "uniform random actions within the embodiment's limits",
    "replay:<dataset>[#episode]": "recorded actions of one episode, open loop",
}


class PolicyError(ValueError):
    pass


def make_policy(spec: str, device):
    if spec == "expert":
        if "expert" not in getattr(device, "capabilities", ()):
            raise PolicyError(f"device {device.embodiment.name!r} has no scripted expert; "
                              f"policies: {', '.join(POLICY_SPECS)}")
        return device.expert()
    if spec == "random":
        return RandomPolicy(device.embodiment)
    if spec.startswith("replay:"):
        from .dataset import LocalDataset
        path, _, ep = spec[len("replay:"):].partition("#")
        episode = LocalDataset(path).episode(int(ep or 0))
        return ReplayPolicy(episode["action"], chunk=device.embodiment.exec_horizon)
    raise PolicyError(f"unknown policy {spec!r}; known: {', '.join(POLICY_SPECS)}")


def make_device(uri: str, shift: str | None = None, size: str | None = None):
    return open_device(uri, shift=shift, size=size)
