"""For openpi users: an openpi policy served with the initial noise passed through to its sampler.

openpi's ``Policy.infer(obs, *, noise=None)`` takes the flow's initial noise, but openpi's own
websocket server calls ``infer(obs)`` without it. This wrapper serves such a policy over the same
protocol (openpi-client speaks to it unchanged) and adds two fields:

* a request's ``seed`` starts an episode whose noise comes from a generator seeded with it (so a
  success memory's seed recall draws the noise that worked before), and ``noise`` (float32
  ``[action_horizon, action_dim]``) gives the noise outright;
* the reply carries the ``noise`` it used, so the memory can store it.

openpi samples from noise only: it takes no prior and no start time, so it announces steering with
the ``noise`` field alone, and embodia's memory does not steer it (``--memory`` needs a prior); the
LeRobot side does both (docs/lerobot.md). In openpi's environment, with embodia's ``policies/``
folder on the path (nothing of embodia is imported but this folder's `flow_server` and `wire`)::

    from openpi.policies import policy_config
    from openpi.training import config as openpi_config
    import openpi_server
    policy = policy_config.create_trained_policy(openpi_config.get_config("pi0_libero"), checkpoint_dir)
    openpi_server.serve(policy, action_horizon=10, action_dim=7, port=8000)

openpi itself is not on the package registries this project reaches (PyPI's ``openpi`` is a reserved
placeholder), so the wrapper is tested against a stand-in with openpi's ``infer`` signature
(tests/test_lerobot.py), not against openpi's code.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np


# the serving core beside this file, loaded by its path: embodia is not installed in this environment
_spec = importlib.util.spec_from_file_location("_embodia_flow_server", Path(__file__).with_name("flow_server.py"))
core = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(core)
RESERVED = ("noise", "prior", "t0", "seed", "reset")     # ours: never handed to the policy's transforms


class OpenpiServed:
    """An object with openpi's ``infer(obs, *, noise=None) -> {"actions": ...}`` and ``metadata`` (a
    dict, as openpi's `Policy` has), served with its noise drawn per connection or given by the request."""

    def __init__(self, policy, *, action_horizon: int, action_dim: int):
        self.policy, self.shape = policy, (int(action_horizon), int(action_dim))
        meta = dict(policy.metadata or {})
        self.metadata = {**meta, "server": "embodia-openpi", "policy": meta.get("policy", type(policy).__name__),
                         "action_horizon": self.shape[0], "action_dim": self.shape[1],
                         "steering": {"version": 1, "fields": ["noise"], "noise_shape": list(self.shape)}}

    def read(self, msg: dict) -> dict:
        if msg.get("prior") is not None or msg.get("t0") is not None:
            raise ValueError("this server passes the noise to openpi's Policy.infer, which takes no prior or "
                             "start time: send 'noise' or 'seed' only")
        obs = {k: v for k, v in msg.items() if k not in RESERVED}
        return {"obs": obs, "noise": core.check_noise(msg.get("noise"), self.shape)}

    def generator(self):
        return np.random.default_rng(0)

    def seed(self, generator, seed: int) -> None:
        generator.bit_generator.state = np.random.default_rng(seed).bit_generator.state

    def decide(self, req: dict, generator) -> dict:
        noise = req["noise"] if req["noise"] is not None else generator.standard_normal(self.shape, np.float32)
        out = dict(self.policy.infer(req["obs"], noise=noise))
        return {**out, "noise": noise}


def serve(policy, *, action_horizon: int, action_dim: int, host: str = "127.0.0.1", port: int = 8000,
          max_message_bytes: int = 1 << 24, idle_s: float = 300.0) -> int:
    """Serve ``policy`` (openpi's `Policy`) until interrupted, under embodia serve's rules."""
    a = argparse.Namespace(host=host, port=port, max_message_bytes=max_message_bytes, idle_s=idle_s)
    key = core.check_key(host)
    return core.run(OpenpiServed(policy, action_horizon=action_horizon, action_dim=action_dim), a, key)


if __name__ == "__main__":
    sys.exit("import this module from a script that builds an openpi policy, then call serve(policy, ...)")
