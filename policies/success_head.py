"""A learned success detector beside a checkpoint's heads: the frozen backbone reads the episode's
end (and its start), a small head says how likely the task succeeded, calibrated on held-out
episodes so that the number is a probability.

    >>> det = SuccessDetector.from_pretrained("policies/checkpoints/embodia-tiny")      # doctest: +SKIP
    >>> det.probability(device.embodiment, first_obs, final_obs, "Turn on Hotspot")     # doctest: +SKIP
    0.97

What it reads (all fixed functions of the frozen checkpoint, so features cache):

* a robot body (one the checkpoint knows), in two parts read by two branches of its MLP:
  - its final state, as geometry: the state channels named ``<thing>_x``, ``<thing>_y`` (,
    ``_z``) form a point or a vector; the log distance between every two of them of the same size
    and the log norm of each (how far the puck is from the goal, the hand from the target, how fast
    something still moves), the other channels (a gripper's opening) normalized by the checkpoint's
    own normalizer, and the body's one-hot id. Where things are, rather than how far apart, is left
    out on purpose: a detector that learned "the puck at that spot" failed when the goal moved (a
    head trained without twogap's `heavy` shift ranked its episodes at AUC 0.93 with the absolute
    state in, 0.98-0.99 without). No LayerNorm here, so that a distance keeps its scale;
  - its camera: the backbone's context for the final camera frame with the body's prompt and the
    instruction (mean over the sequence and the last token's state), LayerNorm'd;
* a screen: the checkpoint's GUI head (itself on the backbone) encodes the final screen, UI tree and
  instruction; its CLS state and the mean and max of its element states, and the CLS state of the
  first screen.

The head is one small MLP per kind ("robot", "gui"; the robot's with a state branch beside the
LayerNorm'd one, their logits summed) with a Platt calibration per kind and robot body
(``p = sigmoid(a * logit + b)``, fitted on held-out episodes). It lives in the checkpoint directory
as ``success_head.safetensors`` + ``success_head.json`` (the backbone's SHA-256 recorded there: a
head trained on another backbone is refused). Train it with ``embodia train --success-head`` or
rebuild the bundled one with ``embodia train success-head``.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import torch
from torch import nn

from embodia.policies.backbone import Backbone, backbone_sha256, read_head_files
from embodia.policies.placement import Placement, to_device
from embodia.shared.files import write_atomic, write_atomic_path

HEAD_WEIGHTS = "success_head.safetensors"
HEAD_CONFIG = "success_head.json"
FORMAT = "embodia-success-head/2"      # 2: the robot state branch and its geometry features
KINDS = ("robot", "gui")
MAX_BODIES = 8           # one-hot width of the robot body id
MAX_POINTS = 8           # points/vectors read from a body's state channel names (the first 8)
GEOMETRY_DIM = MAX_POINTS * (MAX_POINTS - 1) // 2 + MAX_POINTS
DIST_EPS = 1e-3          # log(distance + this): 1 mm resolves; a distance's scale is what success turns on


class SuccessHeadError(ValueError):
    """A success head that cannot be loaded or cannot read this body; one line."""


class TwoBranch(nn.Module):
    """An MLP that reads its first ``state_dim`` columns as they are (small distances keep their
    scale) and the rest through a LayerNorm (backbone features), summing the two logits."""

    def __init__(self, dim: int, state_dim: int, hidden: int, dropout: float):
        super().__init__()
        self.state_dim = state_dim
        self.state = nn.Sequential(nn.Linear(state_dim, hidden // 2), nn.GELU(), nn.Linear(hidden // 2, 1))
        # the camera branch's input dropout: on a few hundred episodes it otherwise memorizes images
        self.context = nn.Sequential(nn.Dropout(0.5), nn.LayerNorm(dim - state_dim), nn.Linear(dim - state_dim, hidden),
                                     nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.state_dim
        return self.state(x[..., :k]) + self.context(x[..., k:])


class SuccessHead(nn.Module):
    """One small MLP per kind of body: features -> a success logit. ``state_dims[kind]``: the
    leading columns read by a separate state branch (`TwoBranch`); a kind without one is a plain
    LayerNorm'd MLP."""

    def __init__(self, dims: dict[str, int], hidden: int = 64, dropout: float = 0.3,
                 state_dims: dict[str, int] | None = None):
        super().__init__()
        self.dims, self.hidden = dict(dims), hidden
        self.state_dims = {k: int(v) for k, v in (state_dims or {}).items() if k in dims}
        self.nets = nn.ModuleDict({k: TwoBranch(d, self.state_dims[k], hidden, dropout) if k in self.state_dims
                                   else nn.Sequential(nn.LayerNorm(d), nn.Linear(d, hidden), nn.GELU(),
                                                      nn.Dropout(dropout), nn.Linear(hidden, 1))
                                   for k, d in dims.items()})
        # Platt (a, b) per kind, and per body where one was fitted ("robot/planar_pusher"): bodies
        # share the MLP but not the scale of its logits
        self.calibration = {k: (1.0, 0.0) for k in dims}

    def logits(self, kind: str, x: torch.Tensor) -> torch.Tensor:
        return self.nets[kind](x).squeeze(-1)

    def probability(self, kind: str, x: np.ndarray, body: str | None = None) -> np.ndarray:
        """Calibrated P(success) for feature rows ``x`` [N, dims[kind]] of ``body``."""
        dev = next(self.parameters()).device
        with torch.inference_mode():
            z = self.logits(kind, torch.from_numpy(np.asarray(x, np.float32)).to(dev))
            z = z.float().cpu().numpy().astype(np.float64)
        return platt(z, self.calibration.get(f"{kind}/{body}", self.calibration[kind]))


def platt(logits: np.ndarray, ab: tuple[float, float]) -> np.ndarray:
    """Calibrated probabilities sigmoid(a * logit + b) for Platt's ``ab = (a, b)``."""
    a, b = ab
    return 1.0 / (1.0 + np.exp(-(a * np.asarray(logits, np.float64) + b)))


def fit_platt(logits: np.ndarray, labels: np.ndarray, iters: int = 500) -> tuple[float, float]:
    """Platt scaling: (a, b) minimizing the log loss of sigmoid(a * logit + b) on held-out labels
    (targets smoothed as Platt did, so a perfectly separated set keeps a finite slope).

    >>> a, b = fit_platt(np.array([-4.0, -3, 3, 4, 2, -2]), np.array([0, 0, 1, 1, 1, 0]))
    >>> a > 0
    True
    """
    z = torch.as_tensor(np.asarray(logits, np.float64))
    y = np.asarray(labels, np.float64)
    n1, n0 = y.sum(), len(y) - y.sum()
    t = torch.as_tensor(np.where(y > 0.5, (n1 + 1) / (n1 + 2), 1 / (n0 + 2)))
    ab = torch.tensor([1.0, 0.0], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([ab], lr=0.5, max_iter=iters, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(ab[0] * z + ab[1], t)
        loss.backward()
        return loss
    opt.step(closure)
    a, b = (float(v) for v in ab.detach())
    return a, b


# -- features ---------------------------------------------------------------------------------------
def state_points(names) -> list[list[int]]:
    """The points and vectors in a body's state, by channel name: ``<thing>_x``, ``<thing>_y``
    (and ``_z``) are one (the first MAX_POINTS, in channel order; a lone axis is none).

    >>> state_points(["pusher_x", "pusher_y", "pusher_vx", "pusher_vy", "gripper", "goal_x", "goal_y"])
    [[0, 1], [2, 3], [5, 6]]
    """
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        m = re.fullmatch(r"(.*?)_?([xyz])", str(name))
        if m and m.group(1):
            groups.setdefault(m.group(1), []).append(i)
    return [v for v in groups.values() if len(v) >= 2][:MAX_POINTS]


def geometry(state, points: list[list[int]]) -> np.ndarray:
    """log(distance + DIST_EPS) between every two points of the same size, then log(norm + DIST_EPS)
    of each (float32 [GEOMETRY_DIM]; zeros where a pair or point is absent).

    >>> g = geometry(np.array([0.0, 0.0, 3.0, 4.0]), [[0, 1], [2, 3]])
    >>> round(float(np.exp(g[0]) - DIST_EPS), 3), round(float(np.exp(g[-MAX_POINTS + 1]) - DIST_EPS), 3)
    (5.0, 5.0)
    """
    s = np.asarray(state, np.float64).reshape(-1)
    pts = [s[p] for p in points]
    out = np.zeros(GEOMETRY_DIM, np.float64)
    k = 0
    for a in range(MAX_POINTS):
        for b in range(a + 1, MAX_POINTS):
            if b < len(pts) and len(pts[a]) == len(pts[b]):
                out[k] = np.log(np.linalg.norm(pts[a] - pts[b]) + DIST_EPS)
            k += 1
    for a, p in enumerate(pts):
        out[k + a] = np.log(np.linalg.norm(p) + DIST_EPS)
    return out.astype(np.float32)


class Reader:
    """What the success head reads, from a checkpoint directory's frozen parts: the backbone, the
    robot normalizer and body ids (config.json, normalization.json) and the GUI head."""

    def __init__(self, checkpoint, backbone: Backbone | None = None, placement: Placement | None = None):
        """``placement``: where the backbone (and the GUI head) run; default the process's choice
        (`embodia.policies.placement`: --torch-device, $EMBODIA_TORCH_DEVICE, auto)."""
        self.path = Path(checkpoint)
        self.placement = placement or Placement.resolve()
        self.backbone = (backbone or Backbone.from_pretrained(self.path / "backbone")).to(
            device=self.placement.device, dtype=self.placement.dtype).eval()
        self._gui = None
        cfg = json.loads((self.path / "config.json").read_text()) if (self.path / "config.json").is_file() else {}
        self.state_dim = int(cfg.get("state_dim", 0))
        self.bodies = {name: int(v["id"]) for name, v in cfg.get("embodiments", {}).items()}
        norms = json.loads((self.path / "normalization.json").read_text()) \
            if (self.path / "normalization.json").is_file() else {}
        from embodia.action_heads import QuantileNormalizer
        self.norms = {name: QuantileNormalizer.from_dict(d["state"]) for name, d in norms.items() if "state" in d}

    @property
    def robot_state_dim(self) -> int:
        """The leading columns of a robot row that the state branch reads."""
        return GEOMETRY_DIM + MAX_BODIES + self.state_dim

    @property
    def robot_dim(self) -> int:
        return self.robot_state_dim + 2 * self.backbone.hidden_size

    @property
    def gui_dim(self) -> int:
        return 4 * self.backbone.hidden_size

    def dims(self) -> dict[str, int]:
        return {"robot": self.robot_dim, "gui": self.gui_dim}

    def state_dims(self) -> dict[str, int]:
        return {"robot": self.robot_state_dim}

    def gui_parts(self):
        if self._gui is None:
            from embodia.policies.gui.head import load_gui_head
            from embodia.policies.gui.head_encoding import SequenceBuilder
            head, _, _ = load_gui_head(self.path, self.backbone)
            self._gui = (head.to(self.placement.device).eval(), SequenceBuilder(self.backbone, head.cfg))
        return self._gui

    def kind(self, embodiment) -> str:
        return "gui" if embodiment.is_gui else "robot"

    @torch.inference_mode()
    def robot(self, embodiment, instruction: str, first_state, final_state, final_image) -> np.ndarray:
        """One robot episode's feature row (float32 [robot_dim]): the state part (robot_state_dim
        columns), then the camera's backbone context. ``first_state`` is not read: the final
        geometry says what succeeded, and where things started taught the head places."""
        name = embodiment.name
        if name not in self.bodies or name not in self.norms:
            raise SuccessHeadError(f"the success head knows bodies {sorted(self.bodies)}, not {name!r}")
        n = embodiment.state_dim
        final = np.asarray(final_state, np.float32).reshape(-1)
        points = state_points([c.name for c in embodiment.state])
        scalars = np.zeros(self.state_dim, np.float32)
        rest = sorted(set(range(n)) - {i for p in points for i in p})
        scalars[rest] = self.norms[name].normalize(final)[rest]
        body = np.zeros(MAX_BODIES, np.float32)
        body[self.bodies[name] % MAX_BODIES] = 1
        images = [[np.asarray(final_image)]] if final_image is not None else [[]]
        ctx, mask = self.backbone.encode(images, [embodiment.prompt()], [instruction])
        m = mask[0].float()[:, None]
        mean = (ctx[0].float() * m).sum(0) / m.sum().clamp(min=1)
        last = ctx[0, int(mask[0].sum()) - 1].float()
        return np.concatenate([geometry(final, points), body, scalars, mean.cpu().numpy(),
                               last.cpu().numpy()]).astype(np.float32)

    @torch.inference_mode()
    def gui(self, embodiment, instruction: str, first, final) -> np.ndarray:
        """One screen episode's feature row (float32 [gui_dim]); ``first``/``final`` are
        (screen uint8 HxWx3, ui_tree) pairs."""
        from embodia.policies.gui.head_encoding import backbone_features, collate
        head, builder = self.gui_parts()
        size = (embodiment.screen.width, embodiment.screen.height) if embodiment.screen is not None else None
        encs = []
        for screen, tree in (final, first):
            if screen is None or tree is None:
                raise SuccessHeadError("the success head reads a screen and its UI tree; this episode lacks one")
            sz = size or (screen.shape[1], screen.shape[0])
            encs.append(builder.encode(embodiment.prompt(), instruction, [], tree, sz, screen))
        z = head.encode(to_device(collate(backbone_features(self.backbone, encs)), self.placement.device))
        em = z["elem_mask"][0].bool()
        e = z["elems"][0][em] if em.any() else torch.zeros(1, z["g"].shape[-1], device=z["g"].device)
        return torch.cat([z["g"][0], e.mean(0), e.max(0).values, z["g"][1]]).float().cpu().numpy().astype(np.float32)

    def features(self, embodiment, instruction: str, first_obs, final_obs) -> tuple[str, np.ndarray]:
        """(kind, feature row) for an episode given its first and final observations."""
        kind = self.kind(embodiment)
        if kind == "gui":
            def pair(o):
                return ((o.images or {}).get("screen"), o.ui_tree)
            return kind, self.gui(embodiment, instruction, pair(first_obs), pair(final_obs))
        cam = embodiment.cameras[0].name if embodiment.cameras else None
        img = (final_obs.images or {}).get(cam) if cam else None
        return kind, self.robot(embodiment, instruction, first_obs.state, final_obs.state, img)


# -- files ------------------------------------------------------------------------------------------
def save_success_head(head: SuccessHead, checkpoint, *, extra: dict | None = None) -> None:
    from safetensors.torch import save_file
    p = Path(checkpoint)
    tensors = {k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()}

    def weights(tmp: Path) -> None:
        save_file(tensors, tmp)
        tmp.chmod(0o644)                              # package data: readable by every user
    write_atomic_path(p / HEAD_WEIGHTS, weights)
    meta = {"format": FORMAT, "dims": head.dims, "hidden": head.hidden, "state_dims": head.state_dims,
            "calibration": {k: list(v) for k, v in head.calibration.items()},
            "backbone_sha256": backbone_sha256(p), **(extra or {})}
    text = (json.dumps(meta, indent=2) + "\n").encode()
    write_atomic(p / HEAD_CONFIG, lambda f: f.write(text))


def load_success_head(checkpoint) -> tuple[SuccessHead, dict]:
    p = Path(checkpoint)
    meta, weights = read_head_files(p, HEAD_WEIGHTS, HEAD_CONFIG, FORMAT, SuccessHeadError, what="success head",
                                    retrain=f"`embodia train --success-head --data DIR --out {p}`")
    head = SuccessHead({k: int(v) for k, v in meta["dims"].items()}, int(meta.get("hidden", 64)),
                       state_dims=meta.get("state_dims"))
    missing, unexpected = head.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise SuccessHeadError(f"{p / HEAD_WEIGHTS}: keys do not match {p / HEAD_CONFIG}")
    head.calibration = {k: (float(v[0]), float(v[1])) for k, v in meta.get("calibration", {}).items()}
    return head.eval(), meta


class SuccessDetector:
    """A checkpoint's success head with its reader: ``probability(embodiment, first_obs, final_obs,
    instruction)`` is the calibrated P(success) of an episode."""

    def __init__(self, head: SuccessHead, reader: Reader, meta: dict | None = None):
        self.head, self.reader, self.meta = head.eval(), reader, meta or {}

    @classmethod
    def from_pretrained(cls, checkpoint, *, torch_device: str | None = None,
                        dtype: str | None = None) -> "SuccessDetector":
        """Head and reader on ``torch_device`` (`embodia.policies.placement`; the small MLP stays float32)."""
        placement = Placement.resolve(torch_device, dtype)
        head, meta = load_success_head(checkpoint)
        return cls(head.to(placement.device), Reader(checkpoint, placement=placement), meta)

    def check(self, embodiment) -> None:
        """SuccessHeadError, one line, for a body this detector cannot read (before any episode)."""
        kind = self.reader.kind(embodiment)
        if kind not in self.head.dims:
            raise SuccessHeadError(f"the success head has no {kind} part")
        if self.head.dims[kind] != self.reader.dims()[kind]:
            raise SuccessHeadError(f"the success head's {kind} part reads {self.head.dims[kind]} features, this "
                                   f"checkpoint gives {self.reader.dims()[kind]}: retrain it (`embodia train --success-head`)")
        if kind == "robot" and embodiment.name not in self.reader.bodies:
            raise SuccessHeadError(f"the success head knows bodies {sorted(self.reader.bodies)}, "
                                   f"not {embodiment.name!r}")

    def probability(self, embodiment, first_obs, final_obs, instruction: str) -> float:
        kind, x = self.reader.features(embodiment, instruction, first_obs, final_obs)
        return float(self.head.probability(kind, x[None], embodiment.name)[0])
