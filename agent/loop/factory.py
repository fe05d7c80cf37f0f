"""Turn --device and --policy strings into objects; the one place that knows every spec."""
from __future__ import annotations

import os
from pathlib import Path

from embodia.devices import open_device
from embodia.policies import BUNDLED_CHECKPOINTS, RandomPolicy, ReplayPolicy

BUNDLED = {"embodia-tiny": BUNDLED_CHECKPOINTS / "embodia-tiny"}

POLICY_SPECS = {
    "embodia-tiny": "the bundled VLA (tiny Qwen2.5-VL backbone + DiT head), trained on sim demos; on GUI "
                    "devices its GUI head (pointer over UI-tree elements), trained on gui-sim demos",
    "<path/to/checkpoint>": "a VLA checkpoint directory written by `embodia train`",
    "expert": "the device's scripted expert (simulated tasks)",
    "random": "uniform random actions within the embodiment's limits",
    "replay:<dataset>[#episode]": "recorded actions of one episode, open loop (robot dataset or GUI recording)",
    "actions:<file.json>": "GUI actions from a JSON list, in order",
    "openai:<model>": "a VLM behind an OpenAI-compatible chat endpoint (--base-url or $OPENAI_BASE_URL; GUI devices)",
    "hf:<path>": "a transformers VLM folder (save_pretrained) run in this process (GUI devices; --coords)",
    "remote:ws://<host>:<port>": "a robot policy behind `embodia serve` (key: --api-key-env, default $EMBODIA_API_KEY)",
}


class PolicyError(ValueError):
    pass


def make_policy(spec: str, device, *, threads: int | None = None, base_url: str | None = None,
                api_key_env: str = "OPENAI_API_KEY", coords: str | None = None, samples: int = 1,
                select: str = "vote"):
    """``base_url`` applies to ``openai:<model>`` only, ``api_key_env`` to it and ``remote:``; ``coords``
    (the reply's coordinate convention), ``samples`` and ``select`` (test-time scaling: candidates per
    decision and how one is picked, see `embodia.policies.gui.prompt`) to ``openai:<model>`` and ``hf:<path>``."""
    tts = {"samples": samples, "select": select}
    if samples != 1 and not spec.startswith(("openai:", "hf:")):
        raise PolicyError(f"--samples applies to openai:<model> and hf:<path> policies, not {spec!r}")
    if spec.startswith("openai:"):
        from embodia.policies.gui.remote import OpenAIPolicy
        url = base_url or os.environ.get("OPENAI_BASE_URL")
        if not url:
            raise PolicyError(f"{spec} needs the endpoint's base URL: --base-url http://host:8000/v1 "
                              f"or $OPENAI_BASE_URL")
        return OpenAIPolicy(spec[len("openai:"):], url, api_key_env=api_key_env or None,
                            coords=coords or "norm1000", supported=getattr(device, "supported", None),
                            **tts).bind(device.embodiment)
    if spec.startswith("hf:"):
        from embodia.policies.gui.local_vlm import LocalVLMPolicy
        return LocalVLMPolicy(spec[len("hf:"):], embodiment=device.embodiment, coords=coords or "norm1000",
                              threads=threads, supported=getattr(device, "supported", None), **tts)
    if spec.startswith("remote:"):
        from embodia.policies.ws_policy import DEFAULT_KEY_ENV, WebsocketPolicy
        if device.embodiment.is_gui:
            raise PolicyError(f"{spec}: remote policies drive robots for now, not GUI bodies like "
                              f"{device.embodiment.name!r}")
        # The CLI's default names the OpenAI key: never send that one to a policy server.
        key_env = DEFAULT_KEY_ENV if api_key_env in (None, "OPENAI_API_KEY") else api_key_env
        return WebsocketPolicy(spec[len("remote:"):], api_key_env=key_env).bind(device.embodiment)
    if spec == "expert":
        if "expert" not in getattr(device, "capabilities", ()):
            raise PolicyError(f"device {device.embodiment.name!r} has no scripted expert; "
                              f"policies: {', '.join(POLICY_SPECS)}")
        return device.expert()
    if spec == "random":
        return RandomPolicy(device.embodiment)
    if spec.startswith("actions:"):
        from embodia.agent.recording.gui_log import load_actions
        from embodia.policies import GuiReplayPolicy
        return GuiReplayPolicy(load_actions(spec[len("actions:"):]))
    if spec.startswith("replay:"):
        from embodia.agent.recording.dataset import LocalDataset
        from embodia.agent.recording.gui_log import is_gui_recording
        path, _, ep = spec[len("replay:"):].partition("#")
        if is_gui_recording(path):
            from embodia.agent.recording.gui_log import executed_steps, list_gui_episodes, read_gui_episode
            from embodia.policies import GuiReplayPolicy
            return GuiReplayPolicy(executed_steps(read_gui_episode(list_gui_episodes(path)[int(ep or 0)]))[1])
        episode = LocalDataset(path).episode(int(ep or 0))
        return ReplayPolicy(episode["action"], chunk=device.embodiment.exec_horizon)
    if spec in BUNDLED and not BUNDLED[spec].is_dir():
        raise PolicyError(f"{spec} is not in this checkout ({BUNDLED[spec]}); build it with "
                          f"`python -m embodia.agent.training.tiny` (records demos, then trains; see README)")
    path = BUNDLED.get(spec) or Path(spec).expanduser()
    if path.is_dir() and device.embodiment.is_gui:
        from embodia.policies.gui.head import GuiHeadError, GuiHeadPolicy
        if "ui_tree" not in getattr(device, "capabilities", ()):
            raise PolicyError(f"{spec}: its GUI head reads a UI tree, which {device.embodiment.name!r} does not give")
        try:
            return GuiHeadPolicy.from_pretrained(path, threads=threads).bind(device.embodiment)
        except GuiHeadError as e:
            raise PolicyError(str(e)) from None
    if path.is_dir():
        from embodia.policies.robot.vla import VLAPolicy
        return VLAPolicy.from_pretrained(path, threads=threads).bind(device.embodiment)
    raise PolicyError(f"unknown policy {spec!r}; known: {', '.join(POLICY_SPECS)}")


def make_device(uri: str, shift: str | None = None, size: str | None = None):
    return open_device(uri, shift=shift, size=size)
