"""`embodia replay`: re-execute a recorded episode open loop and compare it with the record."""
from __future__ import annotations

import numpy as np

from policies import ReplayPolicy

from .factory import make_device
from .loop import run_episode


def replay_episode(dataset, index: int, *, device=None, device_uri: str | None = None,
                   stop_on_divergence: float | None = None) -> dict:
    """Replay episode `index` of a LocalDataset on `device` (or the one named in its record).

    Per step the device's state is compared with the recorded one; with `stop_on_divergence`
    the replay stops at the first step whose max abs difference exceeds it.
    """
    ep = dataset.episode(index)
    meta = ep.get("meta") or {}
    own = device is None
    if own:
        uri = device_uri or meta.get("device")
        if not uri:
            raise ValueError(f"episode {index} does not name its device; pass --device")
        device = make_device(uri, shift=meta.get("shift"), size=meta.get("size"))
    rec_state = np.asarray(ep["state"], dtype=np.float32)
    diffs, last = [], {}

    def check(t, obs, action, next_obs):
        if t < len(rec_state):
            diffs.append(float(np.max(np.abs(obs.state - rec_state[t]))) if rec_state.shape[1] else 0.0)
        last["state"] = next_obs.state
        return stop_on_divergence is not None and diffs and diffs[-1] > stop_on_divergence

    try:
        policy = ReplayPolicy(ep["action"], chunk=device.embodiment.exec_horizon)
        result = run_episode(device, policy, seed=ep["seed"], instruction=ep.get("task"),
                             max_steps=len(ep["action"]), on_step=check)
    finally:
        if own:
            device.close()
    final = ep.get("final_state")
    final_diff = (float(np.max(np.abs(np.asarray(last["state"]) - np.asarray(final))))
                  if final is not None and "state" in last and len(final) else None)
    diverged = next((t for t, d in enumerate(diffs)
                     if stop_on_divergence is not None and d > stop_on_divergence), None)
    return {"episode": index, "seed": ep["seed"], "recorded_steps": int(len(ep["action"])),
            "steps": result.steps, "recorded_success": ep.get("success"), "success": result.success,
            "same_outcome": ep.get("success") == result.success,
            "max_state_diff": max(diffs) if diffs else None, "final_state_max_abs_diff": final_diff,
            "diverged_at": diverged, "error": result.error}
