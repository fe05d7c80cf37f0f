"""`embodia replay`: re-execute a recorded episode open loop and compare it with the record."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from embodia.agent.loop.episode import run_episode
from embodia.agent.loop.factory import make_device
from embodia.policies import ReplayPolicy


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

    def check(step):
        if step.t < len(rec_state):
            diffs.append(float(np.max(np.abs(step.obs.state - rec_state[step.t]))) if rec_state.shape[1] else 0.0)
        last["state"] = step.next_obs.state
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


def replay_gui(source, *, episode: int = 0, device=None, device_uri: str | None = None,
               stop_on_divergence: float | None = None, gate=None, recorder=None,
               record_to=None, instruction: str | None = None) -> dict:
    """Re-execute GUI actions on a device: the actions of GUI episode ``episode`` of a recording
    directory, or a JSON file of actions (a list of `GuiAction.to_dict()` objects).

    With a recording and ``stop_on_divergence`` (0..1, see `screen_divergence`), each action runs
    only while the live screen still looks like the recorded one before it. Risky actions pass the
    safety ``gate`` as in any run (a SafetyGate, or ``gate(device) -> SafetyGate``; default: the
    device's default gate). ``recorder`` (a GuiRecorder), or a directory ``record_to``,
    records the replay as a new episode.
    """
    from embodia.agent.loop.safety import SafetyGate, default_gate
    from embodia.agent.recording.gui_log import (
        executed_steps,
        is_gui_recording,
        list_gui_episodes,
        load_actions,
        load_screen,
        read_gui_episode,
    )
    from embodia.policies import GuiReplayPolicy
    source = Path(source)
    screens, task, seed, uri = None, instruction, None, device_uri
    if source.is_dir():
        if not is_gui_recording(source):
            raise ValueError(f"{source} is not a GUI recording (no GUI info.json)")
        eps = list_gui_episodes(source)
        if not 0 <= episode < len(eps):
            raise ValueError(f"episode {episode} not in {source} ({len(eps)} episodes)")
        rec = read_gui_episode(eps[episode])
        steps, actions = executed_steps(rec)
        screens = [load_screen(rec["path"], s.get("image")) for s in steps]
        task = task or rec["header"].get("task")
        seed = rec["header"].get("seed")
        uri = uri or (rec["header"].get("meta") or {}).get("device")
        recorded = {"recorded_steps": len(actions), "recorded_success": (rec["end"] or {}).get("success")}
    else:
        actions = load_actions(source)
        recorded = {"recorded_steps": len(actions), "recorded_success": None}
    own = device is None
    if own:
        if not uri:
            raise ValueError(f"{source} does not name its device; pass --device")
        device = make_device(uri)
    try:
        if gate is None:
            gate = default_gate(device)
        elif not isinstance(gate, SafetyGate):
            gate = gate(device)             # a factory that knows the device (sandbox or not)
        if recorder is None and record_to is not None:
            from embodia.agent.recording.gui_log import GuiRecorder
            recorder = GuiRecorder(record_to, device.embodiment)
        policy = GuiReplayPolicy(actions, screens, stop_on_divergence)
        result = run_episode(device, policy, seed=seed, instruction=task or "",
                             max_steps=len(actions) + 1, gate=gate, recorder=recorder,
                             episode_meta={"device": uri, "replay_of": str(source), "episode": episode})
    finally:
        if own:
            device.close()
    return {"source": str(source), "episode": episode, **recorded, "steps": result.steps,
            "completed": result.steps == len(actions) and result.error is None,
            "diverged_at": policy.diverged_at,
            "max_divergence": max(policy.divergence) if policy.divergence else None,
            "error": result.error, "episode_index": result.episode_index,
            "safety": list(gate.decisions)}
