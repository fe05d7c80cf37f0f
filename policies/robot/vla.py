"""The VLA policy: a vision-language backbone reads images + embodiment prompt + instruction; a DiT
flow-matching head decodes a normalized action chunk, which is mapped back to the body's units.

A checkpoint is a directory:

```
config.json            embodia's VLA config: horizon, padded dims, sampler steps, the embodiment registry
normalization.json     per-embodiment q01/q99 of state and action (travel with the weights)
model.safetensors      the head and the context projection
backbone/              the transformers model, tokenizer and image processor (loads with from_pretrained)
```

>>> policy = VLAPolicy.from_pretrained("policies/checkpoints/embodia-tiny")     # doctest: +SKIP
>>> policy.reset(seed=0); chunk = policy.act(obs, "push the puck onto the goal")  # doctest: +SKIP
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from embodia.action_heads import ActionDiT, QuantileNormalizer, sample
from embodia.action_heads.dit import PrefixPin
from embodia.action_heads.graphs import GraphedSampler, pad_context
from embodia.policies.prefix_graph import GraphedPrefix
from embodia.devices import Embodiment, Observation
from embodia.policies.backbone import Backbone
from embodia.policies.base import Policy
from embodia.policies.placement import Placement
from embodia.shared.files import commit_dir
from embodia.shared.noise import draw_noise

CONFIG = "config.json"
NORMS = "normalization.json"
WEIGHTS = "model.safetensors"
BACKBONE_DIR = "backbone"
MEMORY = "memory.json"      # optional: the success-memory settings this checkpoint was tuned with
FORMAT = "embodia-vla/1"


class CheckpointError(ValueError):
    """A checkpoint directory that is missing, incomplete or corrupt; the message names the file."""


def check_exec_horizon(h, horizon: int) -> None:
    """CheckpointError unless ``h`` actions of a ``horizon``-action chunk can run per decision."""
    if not (isinstance(h, int) and not isinstance(h, bool) and 1 <= h <= horizon):
        raise CheckpointError(f"exec_horizon must be a whole number of actions from 1 to the chunk's {horizon}, "
                              f"not {h!r}")


@dataclass
class VLAConfig:
    horizon: int = 16
    action_dim: int = 8       # D_max: actions of every embodiment are padded to this
    state_dim: int = 48       # S_max
    steps: int = 10           # Euler steps at inference
    exec_horizon: int | None = None   # actions of each chunk run before the next decision (None: the body's)
    head: dict = field(default_factory=dict)          # ActionDiT config overrides (dim, depth, heads, ...)
    embodiments: dict = field(default_factory=dict)   # name -> {"id": int, "embodiment": dict}


class VLAModel(torch.nn.Module):
    """Backbone -> LayerNorm(Linear) projection -> DiT head."""

    def __init__(self, backbone: Backbone, cfg: VLAConfig):
        super().__init__()
        self.backbone, self.cfg = backbone, cfg
        head_cfg = dict(dim=64, depth=3, heads=4, num_registers=4, num_embodiments=8)
        head_cfg.update(cfg.head)
        dim = head_cfg["dim"]
        self.proj = torch.nn.Sequential(torch.nn.Linear(backbone.hidden_size, dim), torch.nn.LayerNorm(dim))
        self.head = ActionDiT(action_dim=cfg.action_dim, state_dim=cfg.state_dim, horizon=cfg.horizon,
                              ctx_dim=dim, **head_cfg)

    def context(self, input_ids, attention_mask, pixel_values, image_grid_thw):
        ctx, mask = self.backbone(input_ids, attention_mask, pixel_values, image_grid_thw)
        return self.proj(ctx), mask

    def head_state_dict(self) -> dict:
        return {f"proj.{k}": v for k, v in self.proj.state_dict().items()} | \
               {f"head.{k}": v for k, v in self.head.state_dict().items()}


def _check_files(path: Path):
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path}: not a directory")
    for name in (CONFIG, NORMS, WEIGHTS, BACKBONE_DIR):
        if not (path / name).exists():
            raise CheckpointError(f"checkpoint {path}: missing {name}")


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: corrupt ({e})") from None


class VLAPolicy(Policy):
    """Policy protocol over a VLAModel: validates observations, normalizes, samples, unnormalizes."""

    accepts_prefix = True      # predict_chunk(prefix=...) continues an unexecuted plan (--smooth inpaint)
    steerable = True           # steer_chunk: the success memory sets where the flow starts
    steer_local = True         # and its sampler is here, for the select and noise-recall ablations
    rebinds = True             # bind(): one checkpoint drives every body it was trained on
    loop_threads = True        # a bundled-size model, at the runtime's torch threads

    @property
    def horizon(self) -> int:
        return self.cfg.horizon

    def __init__(self, model: VLAModel, norms: dict[str, dict], *, embodiment: Embodiment | None = None,
                 steps: int | None = None, ensemble: float | None = None, exec_horizon: int | None = None,
                 threads: int | None = None, torch_device: str | None = None, dtype: str | None = None,
                 graphs: bool | None = None):
        """``torch_device`` / ``dtype``: where the model runs (`embodia.policies.placement`: the
        explicit choice, else ``$EMBODIA_TORCH_DEVICE`` / ``$EMBODIA_DTYPE``, else CUDA in bfloat16
        when present, the CPU in float32 otherwise). ``graphs``: replay the backbone prefix
        (`embodia.policies.prefix_graph`) and the whole sampler (`embodia.action_heads.graphs`) as
        CUDA graphs (default: on CUDA; ignored elsewhere). ``exec_horizon``: how many actions of each
        chunk the loop runs before this policy decides again (default: the checkpoint's config, else
        the body's `Embodiment.exec_horizon`; see `embodia.policies.base.exec_steps`)."""
        self.placement = Placement.resolve(torch_device, dtype)
        self.model = model.to(device=self.placement.device, dtype=self.placement.dtype).eval()
        use_graphs = self.placement.is_cuda if graphs is None else graphs and self.placement.is_cuda
        self.graphs = GraphedSampler() if use_graphs else None
        self.prefix = GraphedPrefix(self.model.backbone, self.model.proj) if use_graphs else None
        self.cfg = model.cfg
        self.norms = {name: {k: QuantileNormalizer.from_dict(v) for k, v in d.items()}
                      for name, d in norms.items()}
        self.steps = steps or self.cfg.steps
        self.exec_horizon = exec_horizon or self.cfg.exec_horizon
        if self.exec_horizon is not None:
            check_exec_horizon(self.exec_horizon, self.cfg.horizon)
        self.ensemble = ensemble          # ACT-style temporal ensembling weight decay (None: off)
        self.memory_settings: dict = {}   # MemoryConfig fields from the checkpoint's memory.json (from_pretrained)
        self.embodiment = embodiment
        self.prompt_override: str | None = None   # for experiments: read a different body's prompt
        self.last_timing: dict = {}
        if threads:
            torch.set_num_threads(threads)
        self.reset(None)

    # -- loading ------------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path, **kw) -> "VLAPolicy":
        model, norms = load_checkpoint(path)
        policy = cls(model, norms, **kw)
        policy.memory_settings = read_memory_settings(path)
        return policy

    def bind(self, embodiment: Embodiment) -> "VLAPolicy":
        """Choose the body this policy drives; it must be one the checkpoint was trained on."""
        if embodiment.name not in self.cfg.embodiments:
            raise CheckpointError(f"this checkpoint knows embodiments {sorted(self.cfg.embodiments)}, "
                                  f"not {embodiment.name!r}")
        if embodiment.action_dim > self.cfg.action_dim or embodiment.state_dim > self.cfg.state_dim:
            raise CheckpointError(f"embodiment {embodiment.name!r} exceeds the padded dims of the checkpoint")
        trained = [c["name"] for c in self.cfg.embodiments[embodiment.name]["embodiment"].get("state", [])]
        if len(trained) != embodiment.state_dim:      # its normalizer would fail on the first decision
            raise CheckpointError(
                f"this checkpoint reads the state of {embodiment.name!r} as {len(trained)} numbers "
                f"({', '.join(trained[:6])}{', ...' if len(trained) > 6 else ''}); the device gives "
                f"{embodiment.state_dim}: open the device as the checkpoint was trained (a Meta-World checkpoint "
                f"trained on LeRobot's view reads sim:metaworld/<task>?obs=lerobot)")
        self.embodiment = embodiment
        if self.graphs is not None:
            self.warm_up()
        return self

    def warm_up(self) -> None:
        """A plain and an inpainted decision on a blank observation of the bound body, so that the
        CUDA graphs of its shape (the inpainted sampler is its own graph, whatever the prefix's
        length) are captured at load rather than during the first episode; the noise stream is reset."""
        emb = self.embodiment
        blank = Observation(images={c.name: np.zeros((c.height, c.width, 3), np.uint8) for c in emb.cameras},
                            state=np.zeros(emb.state_dim, np.float32))
        self.predict_chunk(blank, "")
        self.predict_chunk(blank, "", prefix=np.zeros((1, emb.action_dim), np.float32))
        self.reset(None)

    @property
    def device(self) -> torch.device:
        return self.placement.device

    # -- Policy protocol ----------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> None:
        # on the model's device: a generator fills tensors only where it lives
        self.generator = torch.Generator(device=self.device).manual_seed(0 if seed is None else int(seed))
        self._history: list[tuple[int, np.ndarray]] = []   # (start step, chunk) for ensembling
        self._t = 0

    @torch.inference_mode()
    def predict_chunk(self, obs: Observation, instruction: str, *, x0=None, tau0: float = 0.0,
                      prefix=None, prefix_weights=None) -> np.ndarray:
        """One decision: float32[H, D] in the embodiment's units.

        ``prefix`` (float[P, D], body units, P <= H) makes the chunk continue actions already
        committed to (asynchronous execution: the previous chunk's not-yet-executed actions). It is
        inpainted during sampling, real-time chunking's hard-prefix variant: after every Euler step
        the first P positions are set to ``(1 - tau) * eps + tau * prefix`` (normalized), blended
        with the model's own update by ``prefix_weights`` (float[P] in [0, 1], default all 1), so
        with weight 1 the chunk starts with the prefix itself. Without a prefix the output is the
        plain sampler's.
        """
        t0 = time.perf_counter()
        emb, (state, smask, amask, eid), batch = self._decision_inputs(obs, instruction)
        guidance = None
        if prefix is not None:
            if x0 is not None or tau0 != 0.0:
                raise ValueError("prefix inpainting starts from noise: it cannot be combined with x0/tau0")
            x0 = draw_noise(amask.shape, self.generator, self.device, amask.dtype) * amask   # sample()'s own
            guidance = self._inpaint(x0, prefix, prefix_weights)
        t_prep = time.perf_counter()
        graphed = self.prefix(batch) if self.prefix is not None else None    # None: this layout runs eagerly
        ctx, ctx_mask = graphed if graphed is not None else self.model.context(**batch)
        if self.graphs is not None:       # a few context lengths, each captured once
            ctx, ctx_mask = pad_context(ctx, ctx_mask)
        t1 = time.perf_counter()
        x = sample(self.model.head, ctx, state, smask, eid, amask, steps=self.steps, x0=x0, tau0=tau0,
                   generator=self.generator, ctx_mask=ctx_mask, guidance=guidance, graphs=self.graphs)
        t2 = time.perf_counter()
        x = x[0, :, :emb.action_dim].float().cpu().numpy()          # numpy only here, at the edge
        chunk = self.norms[emb.name]["action"].unnormalize(x)
        self.last_timing = {"prepare_ms": (t_prep - t0) * 1e3, "backbone_ms": (t1 - t0) * 1e3,
                            "sample_ms": (t2 - t1) * 1e3}
        return np.asarray(chunk, dtype=np.float32)

    def steer_chunk(self, obs: Observation, instruction: str, prior, tau0: float) -> np.ndarray:
        """One decision whose flow starts at ``tau0`` from ``(1 - tau0) * eps + tau0 * prior`` (``prior``:
        float[H, D], normalized by ``body_norms()["action"]``; ``eps``: this episode's next noise draw,
        the one plain sampling makes). tau0 = 1 gives the prior itself (the replay ablation)."""
        emb, cfg = self.embodiment, self.cfg
        _, _, amask, _ = self.inputs(emb, obs.state)
        prior_pad = torch.zeros(1, cfg.horizon, cfg.action_dim, device=amask.device, dtype=amask.dtype)
        prior_pad[0, :, :emb.action_dim] = torch.from_numpy(np.asarray(prior, np.float32)).to(amask)
        eps = draw_noise(prior_pad.shape, self.generator, amask.device, amask.dtype) * amask
        return self.predict_chunk(obs, instruction, x0=(1 - tau0) * eps + tau0 * prior_pad, tau0=tau0)

    def body_norms(self) -> dict:
        """The bound body's normalizers: ``{"state": QuantileNormalizer, "action": QuantileNormalizer}``."""
        return self.norms[self.embodiment.name]

    def predict_candidates(self, obs: Observation, instruction: str, n: int) -> np.ndarray:
        """``n`` chunks for one decision, each from its own noise (one backbone pass, the sampler on
        a batch of ``n``): float32[n, H, D] in the embodiment's units, for a caller that chooses."""
        emb, (state, smask, amask, eid), batch = self._decision_inputs(obs, instruction)
        ctx, ctx_mask = self.model.context(**batch)

        def rows(t):
            return None if t is None else t.expand(n, *t.shape[1:])
        x = sample(self.model.head, rows(ctx), rows(state), rows(smask), rows(eid), rows(amask), steps=self.steps,
                   generator=self.generator, ctx_mask=rows(ctx_mask))
        x = x[:, :, :emb.action_dim].float().cpu().numpy()
        return np.asarray(self.norms[emb.name]["action"].unnormalize(x), dtype=np.float32)

    def _decision_inputs(self, obs: Observation, instruction: str):
        """(embodiment, `inputs` of its state, the backbone's prepared batch) for one decision; the
        host-to-device copies first: each waits for the device's queue, which the backbone fills."""
        emb = self.embodiment
        if emb is None:
            raise CheckpointError("call bind(embodiment) before act()")
        obs.validate(emb)
        tensors = self.inputs(emb, obs.state)
        batch = self.model.backbone.prepare([[obs.images[c.name] for c in emb.cameras]],
                                            [self.prompt_override or emb.prompt()], [instruction])
        return emb, tensors, batch

    def _inpaint(self, eps: torch.Tensor, prefix, weights) -> PrefixPin:
        """The sampler's guidance hook that pins the chunk's first positions to ``prefix``
        (`PrefixPin`: the Euler step lands on ``(1 - w) * (x + dt * v) + w * target``, with target
        the prefix noised to the step's end time along the path that starts at ``eps``)."""
        emb, h = self.embodiment, self.cfg.horizon
        prefix = np.asarray(prefix, dtype=np.float32)
        if prefix.ndim != 2 or prefix.shape[1] != emb.action_dim or not 0 < len(prefix) <= h:
            raise ValueError(f"prefix must be float[P, {emb.action_dim}] with 1 <= P <= {h}, "
                             f"got shape {prefix.shape}")
        if not np.all(np.isfinite(prefix)):
            raise ValueError("prefix has non-finite actions")
        p = len(prefix)
        w = np.ones(p, np.float32) if weights is None else np.asarray(weights, dtype=np.float32)
        if w.shape != (p,) or not np.all((w >= 0) & (w <= 1)):
            raise ValueError(f"prefix_weights must be {p} values in [0, 1], got {w.tolist()}")
        target = torch.zeros_like(eps)
        target[0, :p, :emb.action_dim] = torch.from_numpy(
            np.asarray(self.norms[emb.name]["action"].normalize(prefix), np.float32)).to(eps)
        weight = torch.zeros(1, h, 1, device=eps.device, dtype=eps.dtype)
        weight[0, :p, 0] = torch.from_numpy(w).to(eps)
        return PrefixPin(eps, target, weight, self.steps)

    def inputs(self, emb: Embodiment, state: np.ndarray):
        """Padded, normalized state and the masks/id for one embodiment (batch of 1)."""
        s = np.zeros((1, self.cfg.state_dim), np.float32)
        s[0, :emb.state_dim] = self.norms[emb.name]["state"].normalize(state)
        smask = np.zeros_like(s)
        smask[0, :emb.state_dim] = 1
        amask = np.zeros((1, self.cfg.horizon, self.cfg.action_dim), np.float32)
        amask[0, :, :emb.action_dim] = 1
        dev, dt = self.device, self.placement.dtype
        eid = torch.tensor([self.cfg.embodiments[emb.name]["id"]], device=dev)
        return (torch.from_numpy(s).to(dev, dt), torch.from_numpy(smask).to(dev, dt),
                torch.from_numpy(amask).to(dev, dt), eid)

    def prompt_tokens(self, instruction: str) -> int:
        """How many tokens the backbone reads for ``instruction``: what a decision costs grows with it,
        not with its characters (2,000 emoji are 8,000 byte-level tokens), so servers bound this."""
        return len(self.model.backbone.tokenizer(instruction, add_special_tokens=False)["input_ids"])

    def act(self, obs: Observation, instruction: str) -> np.ndarray:
        return self.blend(self.predict_chunk(obs, instruction))

    def blend(self, chunk: np.ndarray) -> np.ndarray:
        """What a decision that predicted ``chunk`` returns: the chunk itself, or with ``ensemble`` set
        the one action to run now (a wrapper that makes its own chunks, such as the steered memory,
        passes them through here so that ensembling holds for every decision)."""
        if self.ensemble is None:
            return chunk
        # Temporal ensembling: replan every step; average the predictions every earlier chunk made
        # for this step, older ones weighted exp(-ensemble * age).
        self._history = [(s, c) for s, c in self._history if self._t - s < len(c)] + [(self._t, chunk)]
        preds = np.stack([c[self._t - s] for s, c in self._history])
        w = np.exp(-self.ensemble * np.arange(len(preds))[::-1])
        self._t += 1
        return ((w[:, None] * preds).sum(0) / w.sum())[None].astype(np.float32)

    def info(self) -> dict:
        return {}


# -- checkpoints ------------------------------------------------------------------------------------
def save_checkpoint(model: VLAModel, norms: dict, path, *, extra: dict | None = None) -> None:
    """Write a checkpoint directory atomically (a crash leaves the previous one intact)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    model.backbone.save_pretrained(tmp / BACKBONE_DIR)
    save_file({k: v.detach().contiguous().cpu() for k, v in model.head_state_dict().items()}, tmp / WEIGHTS)
    (tmp / CONFIG).write_text(json.dumps({"format": FORMAT, **asdict(model.cfg), **(extra or {})}, indent=2))
    (tmp / NORMS).write_text(json.dumps(norms, indent=2))
    commit_dir(tmp, path)


MEMORY_KEYS = ("state", "offsets")     # what memory.json's "key" may name (encoders in steered.KEYS)
PROFILES = "profiles"                 # memory.json's named alternatives to its defaults


def read_memory_settings(path) -> dict:
    """The checkpoint's ``memory.json`` (MemoryConfig fields a fresh success memory steering it starts
    with, and optionally ``"key"``: ``"state"`` or ``"offsets"``, the key it is queried with), or {}
    when it has none; its ``"profiles"`` (named alternatives, `read_memory_profiles`) are left out.
    Unknown fields or invalid values: CheckpointError."""
    return {k: v for k, v in _memory_json(path).items() if k != PROFILES}


def read_memory_profiles(path) -> dict[str, dict]:
    """The named memory settings a checkpoint's ``memory.json`` offers beside its defaults
    (``"profiles": {"fixed-setup": {"sigma": 0.1, "replay": true}, ...}``); {} without any."""
    return dict(_memory_json(path).get(PROFILES, {}))


def _memory_json(path) -> dict:
    """The checkpoint's ``memory.json``, checked (`check_memory_settings`); {} when it has none."""
    f = Path(path) / MEMORY
    return check_memory_settings(_read_json(f), str(f)) if f.is_file() else {}


def check_memory_settings(d, where: str, *, profiles: bool = True) -> dict:
    """``d`` if it is memory settings a checkpoint may carry (see read_memory_settings), else
    CheckpointError, its message starting with ``where`` (the file, or what the settings came from).
    ``profiles``: whether ``d`` may name profiles (a profile itself may not)."""
    from embodia.memory import MemoryConfig
    if not isinstance(d, dict):
        raise CheckpointError(f"{where}: expected a JSON object of memory settings")
    unknown = sorted(set(d) - set(MemoryConfig.__dataclass_fields__) - {"key", *([PROFILES] if profiles else [])})
    if unknown:
        raise CheckpointError(f"{where}: unknown memory settings {unknown}")
    if d.get("key", "state") not in MEMORY_KEYS:
        raise CheckpointError(f"{where}: key must be one of {list(MEMORY_KEYS)}, not {d['key']!r}")
    try:
        MemoryConfig(**{k: v for k, v in d.items() if k not in ("key", PROFILES)})
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{where}: {e}") from None
    named = d.get(PROFILES, {})
    if not isinstance(named, dict):
        raise CheckpointError(f"{where}: {PROFILES} must map names to memory settings")
    for name, settings in named.items():
        check_memory_settings(settings, f"{where}: profile {name!r}", profiles=False)
    return d


def load_checkpoint(path) -> tuple[VLAModel, dict]:
    path = Path(path)
    _check_files(path)
    raw = _read_json(path / CONFIG)
    if raw.get("format") != FORMAT:
        raise CheckpointError(f"{path / CONFIG}: not an embodia VLA checkpoint (format {raw.get('format')!r})")
    cfg = VLAConfig(**{k: raw[k] for k in VLAConfig.__dataclass_fields__ if k in raw})
    norms = _read_json(path / NORMS)
    backbone = Backbone.from_pretrained(path / BACKBONE_DIR)
    model = VLAModel(backbone, cfg)
    try:
        weights = load_file(path / WEIGHTS)
    except Exception as e:
        raise CheckpointError(f"{path / WEIGHTS}: corrupt ({e})") from None
    own = model.head_state_dict()
    bad = sorted(set(own) ^ set(weights))
    if bad:
        raise CheckpointError(f"{path / WEIGHTS}: keys do not match the config ({bad[:5]}...)")
    for k, v in weights.items():
        if own[k].shape != v.shape:
            raise CheckpointError(f"{path / WEIGHTS}: {k} has shape {tuple(v.shape)}, config says {tuple(own[k].shape)}")
    with torch.no_grad():
        for k, v in weights.items():
            own[k].copy_(v)
    return model.eval(), norms
