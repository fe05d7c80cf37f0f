"""Train the GUI head of a checkpoint on gui-sim demonstrations; the backbone and the robot head stay
frozen and untouched, so one checkpoint serves robots and screens.

    embodia train gui-head --out policies/checkpoints/embodia-tiny          # the bundled head
    embodia train gui-head --out ckpt/mine --episodes 300 --steps 500       # a quick one

Records teacher episodes on the *train* split of gui-sim (`embodia.agent.training.gui_data`), runs the frozen
backbone once over every decision and caches what the head reads, then trains the head alone
(AdamW, cosine schedule, EMA weights) and writes ``gui_head.safetensors`` + ``gui_head.json`` into
the checkpoint directory. Nothing else there changes.

The bundled head (defaults: 2,400 episodes, 9,524 decisions, 4,000 steps at batch 64) takes 10-18
minutes on a shared 2-core machine: 2-6 min for demos and backbone features, 8-12 min of training,
at one torch thread (faster than two when other jobs share the cores), 3 GB of memory at most.
The run is deterministic: the same command writes the same weights.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from embodia.policies import BUNDLED_CHECKPOINTS

BUNDLE = BUNDLED_CHECKPOINTS / "embodia-tiny"


@dataclass
class GuiTrainConfig:
    out: str
    episodes: int = 2400
    seed: int = 10_000                # demo seeds seed..seed+episodes-1 (benchmarks use 0..)
    target: str = "all"
    template: str = "any"
    noise: float = 0.15
    steps: int = 4000
    batch_size: int = 64
    lr: float = 2e-3
    weight_decay: float = 1e-4
    warmup: int = 200
    grad_clip: float = 1.0
    ema: float = 0.999
    threads: int = 1
    point_weight: float = 3.0         # how much more often a click on an absent icon is drawn
    save_every: int | None = None     # also save (and score on `heldout`) the EMA head every N steps
    heldout: str | None = None        # a GUI recording scored offline at each save (<out>.heldout.jsonl)
    head: dict = field(default_factory=dict)       # GuiHeadConfig overrides


def build_samples(steps, builder, backbone, *, batch: int = 32, log=print) -> list[dict]:
    """Encode and label recorded steps (any iterable: a generator keeps only ``batch`` screens in
    memory), run the frozen backbone over them in batches; one dict of cached features + labels per
    usable step."""
    from embodia.policies.gui.head_encoding import backbone_features
    from embodia.policies.gui.head_labels import label

    out, pending, seen = [], [], 0
    t0 = time.perf_counter()

    def flush():
        with torch.inference_mode():
            for feats, (_, lab) in zip(backbone_features(backbone, [e for e, _ in pending]), pending):
                out.append({**feats, **lab})
        pending.clear()

    for st in steps:
        seen += 1
        enc = builder.encode(st.prompt, st.instruction, st.history, st.tree,
                             (st.size.width, st.size.height), st.screen)
        lab = label(st, enc, builder.cfg)
        if lab is not None:
            pending.append((enc, lab))
        if len(pending) == batch:
            flush()
    if pending:
        flush()
    log(f"{len(out)} of {seen} steps usable, backbone features cached in {time.perf_counter() - t0:.0f} s "
        f"({sum(s['units'].numel() + s['img'].numel() for s in out) * 2 / 2**20:.0f} MiB)")
    return out


def unexplained_texts(steps, builder) -> list[str]:
    """The typed texts of ``steps`` that no span of their page gives, as ``builder``'s head would
    label them (`cased_span_label`: copied, in a case, computed): what a snippet vocabulary is
    learnt from (`head_labels.learn_snippets`)."""
    from embodia.policies.gui.head_labels import cased_span_label
    out = []
    for st in steps:
        if st.action.type != "type" or not st.action.text:
            continue
        enc = builder.encode(st.prompt, st.instruction, st.history, st.tree, (st.size.width, st.size.height), st.screen)
        if cased_span_label(st.action.text, st.instruction, enc, builder.cfg)[0] is None:
            out.append(st.action.text)
    return out


def fit(head, samples: list[dict], cfg: GuiTrainConfig, *, log=print, progress: bool = True,
        on_save=None, save_every: int | None = None):
    """Train `head` on cached samples; returns it holding the EMA weights. ``on_save(step, head)``
    runs every ``save_every`` steps with the EMA weights swapped in (e.g. to save or score them)."""
    from embodia.agent.training.train import ema_update, warmup_cosine
    from embodia.policies.gui.head_encoding import ACTIONS, collate

    rng = np.random.default_rng(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    # clicks on icons missing from the tree are few (about 1 step in 10) and need the image: drawn more
    weights = np.array([cfg.point_weight if s["label_type"] == ACTIONS.index("click_point") else 1.0
                        for s in samples])
    weights /= weights.sum()
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    ema = {k: v.detach().clone() for k, v in head.state_dict().items()}

    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
    bar = Progress(TextColumn("[bold]gui head"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TextColumn("{task.fields[status]}"), TimeRemainingColumn(), disable=not progress)
    head.train()
    hist: list[dict] = []
    t0 = time.perf_counter()
    with bar:
        task = bar.add_task("train", total=cfg.steps, status="")
        for step in range(cfg.steps):
            idx = rng.choice(len(samples), size=min(cfg.batch_size, len(samples)), p=weights)
            batch = collate([samples[i] for i in idx])
            for g in opt.param_groups:
                g["lr"] = warmup_cosine(step, cfg.lr, cfg.warmup, cfg.steps)
            loss, parts = head.loss(batch, generator=gen, mask_words=head.cfg.mask_words)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            ema_update(ema, head.state_dict().items(), step, cfg.ema)
            hist.append(parts)
            if (step + 1) % 20 == 0 or step + 1 == cfg.steps:
                recent = {k: np.mean([h[k] for h in hist[-100:] if k in h]) for k in hist[-1]}
                bar.update(task, completed=step + 1, status=" ".join(f"{k} {v:.3f}" for k, v in recent.items())
                           + f", {(step + 1) / (time.perf_counter() - t0):.1f} it/s")
            if (step + 1) % 500 == 0 or step + 1 == cfg.steps:
                recent = {k: round(float(np.mean(v)), 4) for k in ("type", "pointer", "span", "cell", "point", "chord", "case", "snippet")
                          if (v := [h[k] for h in hist[-500:] if k in h])}
                log(f"step {step + 1}: {recent}")
            if on_save is not None and save_every and (step + 1) % save_every == 0:
                live = {k: v.detach().clone() for k, v in head.state_dict().items()}
                head.load_state_dict(ema)
                on_save(step + 1, head.eval())
                head.load_state_dict(live)
                head.train()
    head.load_state_dict(ema)
    return head.eval()


def train_gui_head(cfg: GuiTrainConfig, *, log=print, progress: bool = True, on_save=None,
                   save_every: int | None = None):
    """Record demos, cache backbone features, train, save into ``cfg.out``; returns the head.
    ``on_save(step, head)`` / ``save_every``: see `fit`."""
    from embodia.agent.training.gui_data import iter_gui_demos
    from embodia.policies.backbone import Backbone
    from embodia.policies.gui.head import GuiHead, save_gui_head
    from embodia.policies.gui.head_encoding import GuiHeadConfig, SequenceBuilder

    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    out = Path(cfg.out)
    backbone = Backbone.from_pretrained(out / "backbone").eval()
    backbone.requires_grad_(False)
    t0 = time.perf_counter()
    steps = iter_gui_demos(cfg.episodes, seed=cfg.seed, target=cfg.target, template=cfg.template, noise=cfg.noise)
    hcfg = GuiHeadConfig(**cfg.head)
    samples = build_samples(steps, SequenceBuilder(backbone, hcfg), backbone, log=log)
    t2 = time.perf_counter()
    log(f"{cfg.episodes} teacher episodes recorded and encoded in {t2 - t0:.0f} s")
    head = GuiHead(hcfg, backbone.hidden_size)
    log(f"GUI head: {sum(p.numel() for p in head.parameters()) / 1e3:.0f}k parameters")
    def saved(step, h):
        if cfg.save_every and step % cfg.save_every == 0:
            save_gui_head(h, out, extra={"trained_steps": step, "train_config": asdict(cfg)})
            if cfg.heldout:
                score_gui_heldout(h, backbone, cfg, out, step, log=log)
        if on_save is not None and save_every and step % save_every == 0:
            on_save(step, h)
    every = [n for n in (cfg.save_every, save_every) if n]
    fit(head, samples, cfg, log=log, progress=progress, on_save=saved if every else None,
        save_every=math.gcd(*every) if every else None)
    t3 = time.perf_counter()
    save_gui_head(head, out, extra={"trained_steps": cfg.steps, "samples": len(samples),
                                    "train_config": asdict(cfg),
                                    "seconds": {"demos_and_features": round(t2 - t0), "train": round(t3 - t2)}})
    log(f"demos and features {t2 - t0:.0f} s, training {t3 - t2:.0f} s; GUI head written to {out}")
    return head


def score_gui_heldout(head, backbone, cfg: GuiTrainConfig, out: Path, step: int, log=print) -> dict:
    """Score the head (EMA weights) offline on the GUI recording ``cfg.heldout`` and append one
    line to ``<out>.heldout.jsonl`` (`embodia.agent.training.train.heldout_log`)."""
    from embodia.agent.evaluation.offline import embodiment_of
    from embodia.agent.evaluation.offline_gui import score_gui
    from embodia.agent.training.train import heldout_log
    from embodia.policies.gui.head import GuiHeadPolicy
    t0 = time.perf_counter()
    policy = GuiHeadPolicy(head, backbone).bind(embodiment_of(cfg.heldout))
    rep = score_gui(cfg.heldout, policy, seed=cfg.seed)
    head.eval()
    row = {"step": step, "head": "gui", "dataset": str(cfg.heldout), "episodes": rep["episodes"],
           "steps": rep["steps"], **{m: rep["overall"][m]["rate"] for m in ("type", "grounding", "text", "step_success")},
           "seconds": round(time.perf_counter() - t0, 2)}
    with open(heldout_log(out), "a") as f:
        f.write(json.dumps(row) + "\n")
    log(f"held-out at step {step}: step success {row['step_success']:.3f} ({rep['steps']} steps)")
    return row


def bundle_head(checkpoint: Path, dest: Path, rebuild: str) -> dict:
    """Copy what `GuiHeadPolicy.from_pretrained` reads of ``checkpoint`` (not its demos) into ``dest``,
    replacing it whole, with a ``bundle.json`` of the GUI head's sha256, the folder's bytes and the
    command that rebuilds it; returns that record."""
    import hashlib
    import shutil

    from embodia.policies.gui.head_encoding import HEAD_WEIGHTS
    from embodia.shared.files import commit_dir
    checkpoint, dest = Path(checkpoint), Path(dest)
    if not (checkpoint / HEAD_WEIGHTS).is_file():
        raise ValueError(f"{checkpoint} holds no trained GUI head ({HEAD_WEIGHTS})")
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(checkpoint, tmp, ignore=shutil.ignore_patterns("demos", "*.tmp", "bundle.json"))
    facts = {"sha256": hashlib.sha256((tmp / HEAD_WEIGHTS).read_bytes()).hexdigest(),
             "bytes": sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file()), "rebuild": rebuild}
    (tmp / "bundle.json").write_text(json.dumps(facts, indent=1) + "\n")
    commit_dir(tmp, dest)
    return facts
