"""`embodia train`: fit the VLA (backbone + DiT head) on one or more recorded datasets.

Datasets of different bodies train one set of weights: actions and states are normalized per
embodiment (q01/q99 -> [-1, 1]), padded to the checkpoint's D_max/S_max with masks, and every
sample carries its body's embodiment prompt and id. Checkpoints hold the EMA weights; the raw
weights, optimizer and RNG states sit beside them in `train_state/` so `--resume` continues
exactly where a run stopped.

    embodia train --data data/twogap data/reach --out ckpt/mine --steps 6000
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from embodia.action_heads import QuantileNormalizer, flow_loss
from embodia.agent.recording.dataset import LocalDataset
from embodia.agent.recording.dataset_checks import DatasetError, json_safe
from embodia.agent.training.frames import load_frames
from embodia.policies.backbone import Backbone
from embodia.policies.backbone_tiny import tiny_config, train_tokenizer
from embodia.policies.placement import to_device
from embodia.policies.robot.vla import VLAConfig, VLAModel, load_checkpoint, save_checkpoint
from embodia.shared.files import commit_dir

TRAIN_STATE = "train_state"
# Default batches: the CPU's are what embodia-tiny and embodia-mt50 were trained with; on CUDA a step
# of the tiny model is launch-bound (10.6 ms at batch 64 on an H100, issue 38), so four times the
# samples cost little more time per step.
CPU_BATCH, CPU_FROZEN_BATCH = 64, 128
GPU_BATCH, GPU_FROZEN_BATCH = 256, 512


@dataclass
class TrainConfig:
    data: list[str]
    out: str
    steps: int = 10000
    batch_size: int | None = None     # None: 64 on the CPU, GPU_BATCH on CUDA (see `resolve_batches`)
    lr: float = 1e-3
    weight_decay: float = 1e-4
    warmup: int = 200
    grad_clip: float = 1.0
    ema: float = 0.999
    repeats: int = 2                  # flow-time samples per backbone forward
    seed: int = 0
    save_every: int = 1000
    threads: int = 2
    only_success: bool = True
    freeze_backbone_after: int | None = 1000   # then cache its context and train the head alone
    shift: int = 0                    # image augmentation: random shift by up to this many pixels (0: none)
    frozen_batch_size: int | None = None   # head-only steps are cheap: more states per step (128; CUDA 512)
    frozen_repeats: int = 2
    heldout: str | None = None        # a dataset scored offline at each checkpoint save (heldout.jsonl)
    heldout_episodes: int = 8         # its first N episodes
    heldout_stride: int = 4           # every Nth step of each
    balance: str = "frames"           # sample bodies by their share of frames, or "bodies": equally
    modality: str | None = None       # a mapping file naming every dataset's entries (meta/modality.json form)
    torch_device: str | None = None   # where it trains (`embodia.policies.placement`; None: the process's choice)
    dtype: str | None = None          # autocast precision; auto: bfloat16 on CUDA, none (float32) elsewhere
    # architecture of a fresh model (ignored when --init/--resume give one)
    hidden: int = 64
    layers: int = 2
    vision_layers: int = 2
    patch_size: int = 14              # the vision tower's patch (pixels); 2x2 patches make one image token
    heads: int = 4
    vocab_size: int = 1024
    horizon: int = 16
    action_dim: int = 8
    state_dim: int = 48
    head: dict = field(default_factory=lambda: dict(dim=64, depth=3, heads=4))


# -- data -------------------------------------------------------------------------------------------
def expand_data(paths) -> list[str]:
    """Dataset directories from ``--data`` paths: a dataset stays itself; a folder of datasets (what
    `embodia record` writes for a suite: one dataset per task) becomes its datasets, in name order.

    >>> expand_data(["data/twogap"])     # not on disk: left as given, the reader says what is wrong
    ['data/twogap']
    """
    out = []
    for p in map(Path, paths):
        subs = sorted(d for d in p.iterdir() if (d / "meta" / "info.json").is_file()) \
            if p.is_dir() and not (p / "meta").exists() else []
        out.extend(str(d) for d in subs) if subs else out.append(str(p))
    return out


def fit_norms(datasets: list[LocalDataset], chosen: list[list[int]], skip=()) -> dict:
    """Per embodiment name, q01/q99 normalizers of state and action fitted on the chosen episodes of
    EVERY dataset of that body (one dataset per task, as a recorded suite writes them, share one
    body: fitting on the first alone would clip the others' ranges). Names in ``skip`` are left out."""
    per: dict[str, tuple[list, list]] = {}
    for ds, eps in zip(datasets, chosen):
        if ds.embodiment.name in skip:
            continue
        states, actions = per.setdefault(ds.embodiment.name, ([], []))
        for i in eps:
            ep = ds.episode(i)
            states.append(ep["state"])
            actions.append(ep["action"])
    return {name: {"state": QuantileNormalizer.fit(np.concatenate(st)).to_dict(),
                   "action": QuantileNormalizer.fit(np.concatenate(ac)).to_dict()}
            for name, (st, ac) in per.items()}


def training_episodes(ds: LocalDataset, only_success: bool = True, log=print) -> list[int]:
    """The episodes of ``ds`` to train on: the successful ones; every one when ``only_success`` is off,
    or when no episode carries a success flag (a dataset written by LeRobot or another recorder holds
    demonstrations, not verified outcomes: each counts as a demonstration, and the log says so).
    Raises ValueError when nothing is left."""
    flags = [e.get("success") for e in ds.episodes]
    if only_success and flags and all(f is None for f in flags):
        log(f"{ds.root}: no success flags (demonstrations, e.g. written by LeRobot): training on all "
            f"{len(flags)} episodes")
        only_success = False
    eps = [i for i, f in enumerate(flags) if f or not only_success]
    if not eps:
        raise ValueError(f"{ds.root}: no {'successful ' if only_success else ''}episodes to train on")
    return eps


class Samples:
    """Every frame of every (successful) episode, ready to batch: resized images, normalized
    state, action chunks with horizon masks, and the token ids of its prompt text."""

    def __init__(self, datasets: list[LocalDataset], backbone: Backbone, cfg: VLAConfig, *,
                 norms: dict | None = None, only_success: bool = True, balance: str = "frames", log=print):
        if balance not in ("frames", "bodies"):
            raise ValueError(f"balance must be 'frames' or 'bodies', got {balance!r}")
        self.balance = balance
        H = cfg.horizon
        self.cfg, self.groups = cfg, []
        texts: list[str] = []
        self.norms = dict(norms or {})
        chosen = [training_episodes(ds, only_success, log=log) for ds in datasets]
        self.norms.update(fit_norms(datasets, chosen, skip=self.norms))
        for ds in datasets:     # before the frames load (minutes for a large set)
            if ds.embodiment.name not in cfg.embodiments:
                raise ValueError(f"{ds.root}: embodiment {ds.embodiment.name!r} is not in the model's registry")
        frames = load_frames(datasets, chosen, backbone, log=log)
        for k, (ds, eps) in enumerate(zip(datasets, chosen)):
            emb, ds_frames, frames[k] = ds.embodiment, frames[k], None    # each dataset's frames freed once copied
            states, actions, starts, ends, text_ids, images = [], [], [], [], [], []
            n = 0
            for i, cams in zip(eps, ds_frames):
                ep = ds.episode(i)
                T = len(ep["action"])
                states.append(ep["state"])
                actions.append(ep["action"])
                starts.append(np.full(T, n))
                ends.append(np.full(T, n + T))
                text = backbone.prompt_text(emb.prompt(), ep["task"], n_images=len(emb.cameras),
                                            tokens_per_image=[backbone.image_tokens(c.height, c.width)
                                                              for c in emb.cameras])
                if text not in texts:
                    texts.append(text)
                text_ids.append(np.full(T, texts.index(text)))
                images.append(torch.from_numpy(np.stack(cams, 1)) if cams else torch.zeros(T, 0, 1, 1, 3, dtype=torch.uint8))
                n += T
            state, action = np.concatenate(states), np.concatenate(actions)
            sn = QuantileNormalizer.from_dict(self.norms[emb.name]["state"])
            an = QuantileNormalizer.from_dict(self.norms[emb.name]["action"])
            g = {"emb": emb, "id": cfg.embodiments[emb.name]["id"], "n": n,
                 "state": torch.from_numpy(np.asarray(sn.normalize(state), np.float32)),
                 "action": torch.from_numpy(np.asarray(an.normalize(action), np.float32)),
                 "start": np.concatenate(starts), "end": np.concatenate(ends),
                 "text": np.concatenate(text_ids), "images": torch.cat(images)}
            self.groups.append(g)
            log(f"{ds.root}: {emb.name}, {len(eps)} episodes, {n} frames")
        self.input_ids, self.attention_mask = backbone.tokenize(texts)
        self.backbone = backbone
        self.H = H

    def cache_context(self, log=print, batch: int = 256) -> None:
        """Run the (frozen) backbone once over every frame and keep its context (float16)."""
        bb = self.backbone
        with torch.inference_mode():
            for g in self.groups:
                chunks, masks = [], []
                for a in range(0, g["n"], batch):
                    idx = np.arange(a, min(a + batch, g["n"]))
                    ids, am = self.input_ids[g["text"][idx]], self.attention_mask[g["text"][idx]]
                    width = int(am.sum(1).max())
                    imgs = g["images"][idx].flatten(0, 1) if g["images"].shape[1] else None
                    pv, grid = bb.patchify(imgs) if imgs is not None else (None, None)
                    ctx, cm = bb(ids[:, :width], am[:, :width], pv, grid)
                    chunks.append(ctx.half().cpu())      # the cache lives on the host; batches travel
                    masks.append(cm.cpu())
                width = max(c.shape[1] for c in chunks)
                g["ctx"] = torch.cat([torch.nn.functional.pad(c, (0, 0, 0, width - c.shape[1])) for c in chunks])
                g["ctx_mask"] = torch.cat([torch.nn.functional.pad(m, (0, width - m.shape[1])) for m in masks])
                log(f"cached backbone context for {g['emb'].name}: {tuple(g['ctx'].shape)}")

    def batch(self, rng: np.random.Generator, size: int, cached: bool = False, shift: int = 0) -> dict:
        """One training batch; ``shift`` > 0 moves each live (uncached) image by a random offset of up
        to that many pixels (`random_shift`)."""
        cfg, H = self.cfg, self.H
        if self.balance == "bodies":
            which = rng.integers(len(self.groups), size=size)
        else:
            n = np.array([g["n"] for g in self.groups], float)
            which = rng.choice(len(self.groups), size=size, p=n / n.sum())
        state = torch.zeros(size, cfg.state_dim)
        smask = torch.zeros(size, cfg.state_dim)
        act = torch.zeros(size, H, cfg.action_dim)
        amask = torch.zeros(size, H, cfg.action_dim)
        eid = torch.zeros(size, dtype=torch.long)
        text = np.zeros(size, dtype=np.int64)
        imgs, rows = [], []
        for b, gi in enumerate(which):
            g = self.groups[gi]
            j = int(rng.integers(g["n"]))
            S, D = g["emb"].state_dim, g["emb"].action_dim
            state[b, :S], smask[b, :S] = g["state"][j], 1
            k = min(H, int(g["end"][j]) - j)
            act[b, :k, :D] = g["action"][j:j + k]
            amask[b, :k, :D] = 1
            eid[b] = g["id"]
            text[b] = g["text"][j]
            rows.append((gi, j))
            if not cached:
                imgs.extend(g["images"][j])
        out = {"state": state, "state_mask": smask, "action": act, "action_mask": amask, "emb_id": eid}
        if cached:
            width = max(int(self.groups[gi]["ctx_mask"][j].sum()) for gi, j in rows)

            def fit(x):      # bodies have different prompt lengths: cut or pad every row to `width`
                x = x[:width]
                return torch.nn.functional.pad(x, (0, 0, 0, width - len(x)) if x.ndim == 2 else (0, width - len(x)))
            out["ctx"] = torch.stack([fit(self.groups[gi]["ctx"][j]) for gi, j in rows]).float()
            out["ctx_mask"] = torch.stack([fit(self.groups[gi]["ctx_mask"][j]) for gi, j in rows])
            return out
        if imgs and shift:
            imgs = [random_shift(im, shift, rng) for im in imgs]
        pixel_values, grid = self.backbone.patchify(torch.stack(imgs)) if imgs else (None, None)
        ids = self.input_ids[text]
        mask = self.attention_mask[text]
        width = int(mask.sum(1).max())                        # drop all-pad columns
        return out | {"input_ids": ids[:, :width], "attention_mask": mask[:, :width],
                      "pixel_values": pixel_values, "image_grid_thw": grid}


def random_shift(image: torch.Tensor, pad: int, rng: np.random.Generator) -> torch.Tensor:
    """uint8 [h, w, 3] moved by a random offset of up to ``pad`` pixels each way, the edge rows and
    columns repeated into the gap (DrQ's augmentation for pixel control): a policy that reads a
    fixed camera otherwise learns where objects sit to the pixel, and 50 demos a task show few
    places.

    >>> im = torch.arange(16, dtype=torch.uint8).view(4, 4, 1).expand(4, 4, 3)
    >>> random_shift(im, 0, np.random.default_rng(0)).equal(im)
    True
    >>> random_shift(im, 2, np.random.default_rng(0)).shape
    torch.Size([4, 4, 3])
    """
    if pad <= 0:
        return image
    h, w = image.shape[:2]
    dy, dx = (int(v) for v in rng.integers(0, 2 * pad + 1, size=2))
    padded = torch.nn.functional.pad(image.permute(2, 0, 1)[None].float(), (pad, pad, pad, pad), mode="replicate")
    return padded[0, :, dy:dy + h, dx:dx + w].permute(1, 2, 0).to(torch.uint8)


# -- training state (no pickles: safetensors + JSON) ------------------------------------------------
def _save_train_state(dirpath: Path, model, ema: dict, opt, step: int, rng: np.random.Generator,
                      gen: torch.Generator, cfg: TrainConfig, norms: dict):
    tmp = dirpath.with_name(dirpath.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    params = dict(model.named_parameters())
    # every tensor on the host: a run trained on a GPU resumes, and its checkpoint loads, anywhere
    save_file({k: v.detach().contiguous().cpu() for k, v in params.items()}, tmp / "weights.safetensors")
    save_file({k: v.contiguous().cpu() for k, v in ema.items()}, tmp / "ema.safetensors")
    opt_tensors, names = {}, {id(p): n for n, p in params.items()}
    for group in opt.param_groups:
        for p in group["params"]:
            for key, val in opt.state.get(p, {}).items():
                opt_tensors[f"{names[id(p)]}::{key}"] = val.detach().clone().reshape(val.shape).contiguous().cpu()
    opt_tensors["__torch_generator__"] = gen.get_state()
    save_file(opt_tensors, tmp / "optimizer.safetensors")
    (tmp / "state.json").write_text(json.dumps({"step": step, "rng": rng.bit_generator.state,
                                                "config": asdict(cfg), "norms": norms}, default=int))
    commit_dir(tmp, dirpath)


def _load_train_state(dirpath: Path, model, ema: dict, opt, gen: torch.Generator, log=print):
    """Restore a run saved by `_save_train_state` onto ``model``'s device, whichever device saved it."""
    meta = json.loads((dirpath / "state.json").read_text())
    weights = load_file(dirpath / "weights.safetensors")
    params = dict(model.named_parameters())
    with torch.no_grad():
        for k, v in weights.items():
            params[k].copy_(v)
    ema.update({k: v.to(ema[k].device) for k, v in load_file(dirpath / "ema.safetensors").items()})
    saved = load_file(dirpath / "optimizer.safetensors")
    state = saved.pop("__torch_generator__")
    try:
        gen.set_state(state)
    except RuntimeError:        # saved by a generator of another device kind: its state does not fit
        gen.manual_seed(int(meta["config"]["seed"]) + int(meta["step"]))
        log(f"{dirpath}: the noise generator was saved on another device; it restarts from seed + step")
    for key, val in saved.items():
        name, _, field_ = key.partition("::")
        p = params[name]
        # AdamW keeps its step count on the host unless fused/capturable, its moments beside the weight
        opt.state[p][field_] = val if field_ == "step" and val.ndim == 0 else val.to(p.device)
    rng = np.random.default_rng()
    rng.bit_generator.state = meta["rng"]
    return meta["step"], rng, meta["norms"]


# -- the run ----------------------------------------------------------------------------------------
def warmup_cosine(step: int, lr: float, warmup: int, total: int) -> float:
    """The learning rate at ``step``: linear warm-up over ``warmup`` steps, then cosine decay to 0
    at ``total``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    return lr * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))


def ema_update(ema: dict, current, step: int, cap: float) -> None:
    """Move the EMA weights ``ema`` (name -> tensor) toward ``current`` ((name, tensor) pairs) after
    optimizer step ``step``, with warm-up: decay = min(cap, (1 + step) / (10 + step)), since a plain
    0.999 would keep 37% of the random init after 1k steps. Non-float tensors are copied."""
    decay = min(cap, (1 + step) / (10 + step))
    with torch.no_grad():
        moving, toward = [], []
        for k, v in current:
            if v.dtype.is_floating_point:
                moving.append(ema[k])
                toward.append(v.detach())
            else:
                ema[k].copy_(v)
        if moving:       # one fused update (a handful of kernels on a GPU, not one per tensor)
            torch._foreach_lerp_(moving, toward, 1 - decay)


def build_model(cfg: TrainConfig, datasets: list[LocalDataset]) -> VLAModel:
    """A fresh model whose tokenizer is trained on the datasets' prompts and instructions."""
    corpus = []
    for ds in datasets:
        corpus.append(ds.embodiment.prompt())
        corpus.extend(ds.tasks)
    tok = train_tokenizer(corpus, vocab_size=cfg.vocab_size)
    torch.manual_seed(cfg.seed)
    backbone = Backbone.build(tok, tiny_config(tok, hidden=cfg.hidden, layers=cfg.layers,
                                               vision_layers=cfg.vision_layers, heads=cfg.heads,
                                               patch_size=cfg.patch_size))
    registry = {}
    for ds in datasets:
        registry.setdefault(ds.embodiment.name, {"id": len(registry), "embodiment": ds.embodiment.to_dict()})
    vcfg = VLAConfig(horizon=cfg.horizon, action_dim=cfg.action_dim, state_dim=cfg.state_dim,
                     head=dict(cfg.head), embodiments=registry)
    return VLAModel(backbone, vcfg)


def heldout_log(out) -> Path:
    """``<out>.heldout.jsonl``, beside the checkpoint directory (each save replaces the directory)."""
    out = Path(out)
    return out.with_name(out.name + ".heldout.jsonl")


def check_heldout(cfg: TrainConfig) -> None:
    """The held-out episodes `score_heldout` will read, read once before training: a set that lies
    is refused now, not after the first save."""
    ds = LocalDataset(cfg.heldout)
    if not ds.num_episodes:
        raise DatasetError(f"{cfg.heldout}: no episodes to score as the held-out set")
    for i in range(min(cfg.heldout_episodes, ds.num_episodes)):
        ds.episode(i)


def score_heldout(cfg: TrainConfig, out: Path, step: int, log=print) -> dict:
    """Score the checkpoint just saved in ``out`` on ``cfg.heldout`` (offline: recorded observations,
    predicted vs recorded actions) and append one line to `heldout_log` (``<out>.heldout.jsonl``)."""
    from embodia.agent.evaluation.offline import score_robot
    from embodia.policies.robot.vla import VLAPolicy
    ds = LocalDataset(cfg.heldout)
    policy = VLAPolicy.from_pretrained(out).bind(ds.embodiment)
    t0 = time.perf_counter()
    rep = score_robot(ds, policy, episodes=list(range(min(cfg.heldout_episodes, ds.num_episodes))),
                      stride=cfg.heldout_stride, seed=cfg.seed)
    row = {"step": step, "dataset": str(cfg.heldout), "episodes": rep["episodes"],
           "decisions": rep["overall"]["first"]["n"], "first_nmae": rep["overall"]["first"]["nmae_mean"],
           "chunk_nmae": rep["overall"]["chunk"]["nmae_mean"], "first_mae": rep["overall"]["first"]["mae_mean"],
           "chunk_mae": rep["overall"]["chunk"]["mae_mean"],
           "baseline_first_nmae": rep["baseline_mean_action"]["first"]["nmae_mean"],
           "seconds": round(time.perf_counter() - t0, 2)}
    with open(heldout_log(out), "a") as f:     # a diverged model's NaN is null: the log stays JSON
        f.write(json.dumps(json_safe(row), allow_nan=False) + "\n")
    log(f"held-out at step {step}: first-action error {row['first_nmae']:.4f}, chunk {row['chunk_nmae']:.4f} "
        f"(normalized; mean-action baseline {row['baseline_first_nmae']:.4f})")
    return row


def resolve_batches(cfg: TrainConfig, placement) -> TrainConfig:
    """``cfg`` with its batch sizes filled in for where it trains (CPU_BATCH / GPU_BATCH when unset)."""
    cuda = placement.device.type == "cuda"
    return replace(cfg, batch_size=cfg.batch_size or (GPU_BATCH if cuda else CPU_BATCH),
                   frozen_batch_size=cfg.frozen_batch_size or (GPU_FROZEN_BATCH if cuda else CPU_FROZEN_BATCH))


def train_placement(cfg: TrainConfig):
    """(placement, autocast context factory): the weights stay float32 (the optimizer's master copy);
    forward and loss run under autocast in the chosen dtype, bfloat16 by default on CUDA, none on
    the CPU unless asked."""
    from contextlib import nullcontext

    from embodia.policies.placement import Placement
    placement = Placement.resolve(cfg.torch_device, cfg.dtype)
    if placement.dtype == torch.float16:    # would need loss scaling; bfloat16 has float32's range
        raise ValueError("--dtype float16: training takes float32 or bfloat16")
    if placement.dtype == torch.float32:
        return placement, nullcontext
    return placement, lambda: torch.autocast(placement.device.type, dtype=placement.dtype)


def flow_step_loss(model: VLAModel, b: dict, frozen: bool, gen: torch.Generator, cfg: TrainConfig) -> torch.Tensor:
    """The flow-matching loss of one batch: through the live backbone, or (frozen) from its cached context."""
    if frozen:
        ctx, ctx_mask = model.proj(b["ctx"]), b["ctx_mask"]
    else:
        ctx, ctx_mask = model.context(b["input_ids"], b["attention_mask"], b["pixel_values"], b["image_grid_thw"])
    return flow_loss(model.head, b["action"], b["action_mask"], ctx, b["state"], b["state_mask"], b["emb_id"],
                     ctx_mask=ctx_mask, generator=gen, repeats=cfg.frozen_repeats if frozen else cfg.repeats)


def freeze_backbone(model: VLAModel, ema: dict, samples: Samples, log=print) -> None:
    """Stop training the backbone and cache its context: the head then trains alone."""
    model.backbone.requires_grad_(False)
    model.backbone.eval()
    with torch.no_grad():   # the head learns against the live backbone: EMA must match it
        for n, p in model.backbone.named_parameters():
            ema["backbone." + n].copy_(p)
    samples.cache_context(log=log)


def train(cfg: TrainConfig, *, resume: bool = False, progress: bool = True, log=print, on_save=None) -> Path:
    """Train; ``on_save(step, out)`` runs after each checkpoint save (after the held-out score)."""
    torch.set_num_threads(cfg.threads)
    placement, autocast = train_placement(cfg)
    cfg, dev = resolve_batches(cfg, placement), placement.device
    out = Path(cfg.out)
    datasets = [LocalDataset(d, modality=cfg.modality) for d in cfg.data]
    if cfg.heldout:
        check_heldout(cfg)
    state_dir = out / TRAIN_STATE
    resume = resume and (state_dir / "state.json").exists()
    if resume:      # the checkpoint's backbone (tokenizer included); raw weights come below
        model, norms = load_checkpoint(out)
    else:
        model, norms = build_model(cfg, datasets), None
    model.to(dev)
    samples = Samples(datasets, model.backbone, model.cfg, norms=norms, only_success=cfg.only_success,
                      balance=cfg.balance, log=log)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    ema = {n: p.detach().clone() for n, p in model.named_parameters()}
    gen = torch.Generator(device=dev).manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    step = 0
    if resume:
        step, rng, _ = _load_train_state(state_dir, model, ema, opt, gen, log=log)
        log(f"resumed from {state_dir} at step {step}")

    def checkpoint(s):
        live = {n: p.detach().clone() for n, p in model.named_parameters()}
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(ema[n])
            save_checkpoint(model, samples.norms, out, extra={"trained_steps": s, "train_config": asdict(cfg)})
            for n, p in model.named_parameters():
                p.copy_(live[n])
        _save_train_state(state_dir, model, ema, opt, s, rng, gen, cfg, samples.norms)

    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
    bar = Progress(TextColumn("[bold]train"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TextColumn("{task.fields[status]}"), TimeRemainingColumn(), disable=not progress)
    model.train()
    losses, pending, t0, first = [], [], time.perf_counter(), step
    with bar:
        task = bar.add_task("train", total=cfg.steps, completed=step, status="")
        frozen = False
        while step < cfg.steps:
            if not frozen and cfg.freeze_backbone_after is not None and step >= cfg.freeze_backbone_after:
                frozen = True
                freeze_backbone(model, ema, samples, log=log)
            b = samples.batch(rng, cfg.frozen_batch_size if frozen else cfg.batch_size, cached=frozen, shift=cfg.shift)
            b = to_device(b, dev, pin=True)       # host batches, copied while the device works
            for group in opt.param_groups:
                group["lr"] = warmup_cosine(step, cfg.lr, cfg.warmup, cfg.steps)
            with autocast():
                loss = flow_step_loss(model, b, frozen, gen, cfg)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            ema_update(ema, model.named_parameters(), step, cfg.ema)
            step += 1
            pending.append(loss.detach())     # read back only where it is shown: no device sync per step
            report, save = step % 20 == 0 or step == cfg.steps, step % cfg.save_every == 0 or step == cfg.steps
            if report or save:
                losses.extend(torch.stack(pending).float().cpu().tolist())
                pending.clear()
            if report:
                bar.update(task, completed=step,
                           status=f"loss {np.mean(losses[-50:]):.4f}, {(step - first) / (time.perf_counter() - t0):.1f} it/s")
            if save:
                checkpoint(step)
                log(f"step {step}: loss {np.mean(losses[-cfg.save_every:]):.4f} (mean since the last "
                    f"checkpoint), saved {out}")
                if cfg.heldout:
                    score_heldout(cfg, out, step, log=log)
                    torch.set_num_threads(cfg.threads)
                if on_save is not None:
                    on_save(step, out)
    return out
