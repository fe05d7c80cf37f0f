"""The LeRobot side: a policy directory saved by LeRobot, served over embodia's websocket protocol.

Runs in LeRobot's own environment (docs/lerobot.md makes it), where LeRobot's pins hold (torch<2.11,
transformers 4.x); it imports nothing of embodia but the wire format (`wire.py` beside it, numpy and
msgpack only). ``embodia run --policy lerobot:<dir>`` starts it; by hand:

    .venv-lerobot/bin/python policies/lerobot_server.py --policy out/smolvla-small --port 8000

It loads the directory as LeRobot saved it: ``config.json`` (its ``type``), the weights, and the
pre- and post-processors (``policy_preprocessor.json``, ``policy_postprocessor.json``), then answers
each observation with a chunk. A request may steer the flow (docs/lerobot.md, "The protocol"):

* ``noise``: float32 [chunk_size, max_action_dim], the flow's initial noise (default: drawn from the
  connection's generator, seeded by ``seed``);
* ``prior`` (float32 [chunk_size, action_dim], the body's units) with ``t0`` in [0, 1]: the flow
  starts at ``x_t0 = t0 * noise + (1 - t0) * prior`` (LeRobot's time: 1 is noise, 0 is data; the
  prior normalized by the policy's own preprocessor) and LeRobot's own denoising steps run from the
  grid point nearest ``t0``. ``t0 = 1`` is the policy alone; ``t0 = 0`` returns the prior.

The reply carries ``actions``, the ``noise`` it started from and the ``t0`` it ran. Without steering
fields the chunk is LeRobot's own ``predict_action_chunk(batch, noise=noise)``.

The rules of `embodia serve`: loopback unless ``$EMBODIA_API_KEY`` is set (then every handshake must
send ``Authorization: Api-Key <key>``), bounded messages, prompts and images, one model call at a
time, an idle connection closed, a refused request answered ``{"error": "..."}`` in one line while
other clients go on. With ``--exit-with-stdin`` it exits when its standard input closes (the embodia
process that started it died).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np


# the serving core beside this file, loaded by its path: embodia is not installed in this environment
_spec = importlib.util.spec_from_file_location("_embodia_flow_server", Path(__file__).with_name("flow_server.py"))
core = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(core)
SUPPORTED = ("smolvla",)
# why each LeRobot type that is not served cannot be tested on a machine with only the registries
UNSUPPORTED_WHY = {
    "pi0": "LeRobot 0.4.4's pi0 refuses to build with the registry's transformers (it needs LeRobot's "
           "patched transformers, which no package registry serves)",
    "pi05": "LeRobot 0.4.4's pi0.5 refuses to build with the registry's transformers (it needs LeRobot's "
            "patched transformers, which no package registry serves)",
    "groot": "LeRobot's GR00T needs flash-attn, a GPU build",
}
MAX_PROMPT_CHARS = 2000
MAX_PIXELS = 4096 * 4096


class NotAPolicy(ValueError):
    """The directory is not a LeRobot policy this side serves (the message says what was found)."""


# -- loading ----------------------------------------------------------------------------------------
def read_type(path: Path) -> str:
    """The policy type ``config.json`` names, or NotAPolicy saying what the directory holds."""
    if not path.is_dir():
        raise NotAPolicy(f"{path}: not a directory")
    cfg = path / "config.json"
    if not cfg.is_file():
        found = sorted(p.name for p in path.iterdir())[:8]
        raise NotAPolicy(f"{path}: not a LeRobot policy (no config.json; found {found or 'nothing'})")
    try:
        kind = json.loads(cfg.read_text()).get("type")
    except (ValueError, AttributeError, OSError) as e:
        raise NotAPolicy(f"{cfg}: not a LeRobot policy config ({type(e).__name__}: {e})") from None
    if not isinstance(kind, str):
        raise NotAPolicy(f"{cfg}: not a LeRobot policy config (no 'type'; embodia checkpoints are opened "
                         f"with --policy <dir>, not lerobot:<dir>)")
    if kind not in SUPPORTED:
        why = UNSUPPORTED_WHY.get(kind, "not a flow-matching policy this side steers")
        raise NotAPolicy(f"{path}: a LeRobot {kind!r} policy; served here: {', '.join(SUPPORTED)} ({why})")
    for f in ("model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json"):
        if not (path / f).is_file():
            raise NotAPolicy(f"{path}: a LeRobot {kind} policy without {f} (save it with save_pretrained "
                             f"and make_pre_post_processors(...).save_pretrained)")
    return kind


def load(path: Path):
    """(policy, preprocessor, postprocessor) as LeRobot loads them, on the CPU. A SmolVLA that carries
    its VLM folder (``<dir>/vlm``: `lerobot_build` writes one, a bundled copy keeps it) reads that one,
    wherever its config.json says the folder was when it was saved."""
    read_type(path)
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    cfg = PreTrainedConfig.from_pretrained(path)
    cfg.device = "cpu"
    over = {"device_processor": {"device": "cpu"}}
    vlm = getattr(cfg, "vlm_model_name", None)
    if vlm and (path / "vlm").is_dir():
        cfg.vlm_model_name = str((path / "vlm").resolve())
        over["tokenizer_processor"] = {"tokenizer_name": cfg.vlm_model_name}
    policy = get_policy_class(cfg.type).from_pretrained(path, config=cfg)
    policy.eval()
    pre, post = make_pre_post_processors(cfg, pretrained_path=str(path), preprocessor_overrides=over,
                                         postprocessor_overrides={"device_processor": {"device": "cpu"}})
    return policy, pre, post


def _normalizer(pre):
    for step in pre.steps:
        if type(step).__name__ == "NormalizerProcessorStep":
            return step
    return None


def ranges(pre, key: str, dim: int) -> dict:
    """Per-channel ``q01``/``q99`` a client can normalize ``key`` by (its memory keys and chunks): the
    policy's own quantiles, else min/max, else mean -/+ 3 std, else [-1, 1]."""
    step = _normalizer(pre)
    stats = {k: np.asarray(v.detach().cpu().numpy() if hasattr(v, "detach") else v, np.float64).reshape(-1)
             for k, v in ((step._tensor_stats.get(key) if step is not None else None) or {}).items()}
    for lo, hi in (("q01", "q99"), ("min", "max")):
        if lo in stats and hi in stats and stats[lo].size == dim:
            return {"q01": stats[lo].tolist(), "q99": stats[hi].tolist()}
    if "mean" in stats and "std" in stats and stats["mean"].size == dim:
        return {"q01": (stats["mean"] - 3 * stats["std"]).tolist(), "q99": (stats["mean"] + 3 * stats["std"]).tolist()}
    return {"q01": [-1.0] * dim, "q99": [1.0] * dim}


# -- the model --------------------------------------------------------------------------------------
class Served:
    """One loaded policy: its facts, the request check and the chunk (with or without steering)."""

    def __init__(self, path: Path, embodiment: str | None = None):
        import torch
        self.torch = torch
        self.path, self.kind = path, read_type(path)
        self.policy, self.pre, self.post = load(path)
        c = self.policy.config
        self.state_dim = int(c.input_features["observation.state"].shape[0])
        self.action_dim = int(c.output_features["action"].shape[0])
        self.chunk, self.steps, self.max_action_dim = int(c.chunk_size), int(c.num_steps), int(c.max_action_dim)
        self.images = [k for k, f in c.input_features.items() if k.startswith("observation.image")]
        self.embodiment = embodiment
        self.metadata = {
            "server": "embodia-lerobot", "policy": self.kind, "policy_path": str(path), "embodiment": embodiment,
            "state_dim": self.state_dim, "action_dim": self.action_dim, "action_horizon": self.chunk,
            "exec_horizon": int(c.n_action_steps),
            "observation": {"observation.state": {"dtype": "float32", "shape": [self.state_dim]},
                            **{k: {"dtype": "uint8", "shape": [None, None, 3]} for k in self.images},
                            "prompt": {"dtype": "str", "shape": []}},
            "steering": {"version": 1, "fields": ["noise", "prior", "t0"], "time": "t = 1 is noise, t = 0 is data",
                         "steps": self.steps,
                         "noise_shape": [self.chunk, self.max_action_dim],
                         "normalization": {"state": ranges(self.pre, "observation.state", self.state_dim),
                                           "action": ranges(self.pre, "action", self.action_dim)}},
            "max_prompt_chars": MAX_PROMPT_CHARS}

    # -- the request ------------------------------------------------------------------------------
    def read(self, msg: dict) -> dict:
        """The checked request: state, images by the policy's keys, prompt, and the steering fields.
        ValueError (one line) for anything malformed."""
        state = msg.get("observation.state")
        if not isinstance(state, np.ndarray) or state.shape != (self.state_dim,) or state.dtype.kind != "f":
            raise ValueError(f"'observation.state' must be float [{self.state_dim}], got {core.shape_of(state)}")
        if not np.all(np.isfinite(state)):
            raise ValueError("'observation.state' has NaN or inf")
        prompt = msg.get("prompt", msg.get("task", ""))
        if not isinstance(prompt, str) or len(prompt) > MAX_PROMPT_CHARS:
            raise ValueError(f"'prompt' must be text of at most {MAX_PROMPT_CHARS} characters")
        sent = {k: v for k, v in msg.items() if isinstance(k, str) and k.startswith("observation.image")}
        images = {}
        for key in self.images:
            img = sent.get(key)
            if img is None and len(self.images) == 1 and len(sent) == 1:
                img = next(iter(sent.values()))      # one camera each side: the names may differ
            if img is None:
                raise ValueError(f"the policy reads {self.images}; the request sent {sorted(sent) or 'no image'}")
            if not isinstance(img, np.ndarray) or img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
                raise ValueError(f"{key!r} must be uint8 [H, W, 3], got {core.shape_of(img)}")
            if img.shape[0] * img.shape[1] > MAX_PIXELS or 0 in img.shape:
                raise ValueError(f"{key!r}: {img.shape[0]}x{img.shape[1]} pixels, at most {MAX_PIXELS} and not empty")
            images[key] = img
        return {"state": state.astype(np.float32), "images": images, "prompt": prompt, **self.read_steering(msg)}

    def read_steering(self, msg: dict) -> dict:
        prior, t0 = msg.get("prior"), msg.get("t0")
        noise = core.check_noise(msg.get("noise"), (self.chunk, self.max_action_dim))
        if prior is not None and (not isinstance(prior, np.ndarray) or prior.shape != (self.chunk, self.action_dim)
                                  or prior.dtype.kind != "f"):
            raise ValueError(f"'prior' must be float32 [{self.chunk}, {self.action_dim}] in the body's units, "
                             f"got {core.shape_of(prior)}")
        if prior is not None and not np.all(np.isfinite(prior)):
            raise ValueError("'prior' has NaN or inf")
        if t0 is not None:
            if isinstance(t0, bool) or not isinstance(t0, (int, float, np.floating, np.integer)) \
                    or not math.isfinite(float(t0)) or not 0.0 <= float(t0) <= 1.0:
                raise ValueError(f"'t0' must be a number in [0, 1] (1: noise, 0: data), got {t0!r}")
            t0 = float(t0)
        if (prior is None) != (t0 is None):
            raise ValueError("'prior' and 't0' go together: the flow starts at t0 * noise + (1 - t0) * prior")
        return {"noise": noise, "prior": prior, "t0": t0}

    # -- the chunk --------------------------------------------------------------------------------
    def generator(self):
        return self.torch.Generator().manual_seed(0)

    def seed(self, generator, seed: int) -> None:
        generator.manual_seed(seed)

    def decide(self, req: dict, generator) -> dict:
        torch = self.torch
        noise = (torch.from_numpy(req["noise"])[None] if req["noise"] is not None else
                 torch.randn((1, self.chunk, self.max_action_dim), generator=generator, dtype=torch.float32))
        with torch.inference_mode():
            batch = self.pre(self.batch(req))
            if req["prior"] is None:       # LeRobot's own method, for this observation and noise
                actions, t0 = self.policy.predict_action_chunk(batch, noise=noise.clone()), 1.0
            else:
                actions, t0 = self.steered(batch, noise, req["prior"], req["t0"])
            actions = self.post(actions)
        return {"actions": np.asarray(actions[0].float().numpy(), np.float32), "noise": noise[0].numpy(), "t0": t0}

    def batch(self, req: dict) -> dict:
        """The request as LeRobot's evaluation hands an observation to the preprocessor: its own
        ``preprocess_observation`` of an environment's ``pixels`` and ``agent_pos``, and the task."""
        from lerobot.envs.utils import preprocess_observation
        pixels = {k.removeprefix("observation.images."): v for k, v in req["images"].items()}
        env_obs = {"pixels": pixels["observation.image"] if "observation.image" in pixels else pixels,
                   "agent_pos": req["state"]}
        return {**preprocess_observation(env_obs), "task": [req["prompt"]]}

    def steered(self, batch, noise, prior, t0: float):
        """LeRobot's sampler (``VLAFlowMatching.sample_actions``: the prefix cached once, then
        ``denoise_step`` on the grid t = 1, 1 - 1/K, ...) entered at the grid point nearest ``t0``, from
        ``t0 * noise + (1 - t0) * prior``."""
        torch, pol = self.torch, self.policy
        model = pol.model
        from lerobot.policies.smolvla.modeling_smolvla import make_att_2d_masks
        from lerobot.utils.constants import OBS_LANGUAGE_ATTENTION_MASK, OBS_LANGUAGE_TOKENS

        k = self.steps
        skip = k - int(math.floor(t0 * k + 0.5))       # grid steps already behind t0
        p = torch.zeros((1, self.chunk, self.max_action_dim), dtype=torch.float32)
        p[0, :, :self.action_dim] = _normalizer(self.pre)._normalize_action(
            torch.from_numpy(np.asarray(prior, np.float32)), inverse=False)
        x = t0 * noise + (1.0 - t0) * p if t0 < 1.0 else noise.clone()
        images, img_masks = pol.prepare_images(batch)
        state = pol.prepare_state(batch)
        embs, pad, att = model.embed_prefix(images, img_masks, batch[OBS_LANGUAGE_TOKENS],
                                            batch[OBS_LANGUAGE_ATTENTION_MASK], state=state)
        _, cache = model.vlm_with_expert.forward(
            attention_mask=make_att_2d_masks(pad, att), position_ids=torch.cumsum(pad, dim=1) - 1,
            past_key_values=None, inputs_embeds=[embs, None], use_cache=model.config.use_cache, fill_kv_cache=True)
        dt = -1.0 / k
        for step in range(skip, k):
            time_ = torch.tensor(1.0 + step * dt, dtype=torch.float32).expand(1)
            x = x + dt * model.denoise_step(x_t=x, prefix_pad_masks=pad, past_key_values=cache, timestep=time_)
        return x[:, :, :self.action_dim], (k - skip) / k


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Serve a LeRobot policy directory over embodia's websocket protocol.")
    ap.add_argument("--policy", type=Path, required=True, help="a directory LeRobot saved (save_pretrained)")
    ap.add_argument("--embodiment", default=None, help="the embodia body name it serves (the client checks it)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for the model")
    core.add_server_options(ap)
    a = ap.parse_args(argv)
    key = core.check_key(a.host)
    if a.exit_with_stdin:
        core.exit_with_stdin()
    import torch
    torch.set_num_threads(max(1, a.threads))
    out, sys.stdout = sys.stdout, sys.stderr     # LeRobot prints as it loads; stdout carries the ready line only
    try:
        served = Served(a.policy, a.embodiment)
    except NotAPolicy as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return core.run(served, a, key, ready_out=out)


if __name__ == "__main__":
    sys.exit(main())
