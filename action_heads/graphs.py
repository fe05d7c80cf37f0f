"""The DiT sampler as replayed CUDA graphs: one launch per decision (`GraphedSampler`), or one per
Euler step (`GraphedVelocity`, its fallback), instead of thousands of small kernels.

A decision of the sampler is K network evaluations of a few hundred small kernels each; on a GPU it
is bound by their launches, not by arithmetic (issue 38's measurements: 43 ms eager, 10 ms as a CUDA
graph for a 512-wide, 12-deep DiT). `GraphedVelocity` captures ``ActionDiT.forward_prepared`` once
per input shape (batch, horizon, context length, mask layout, dtype) on static buffers and replays
it: per decision the prepared context (keys, values, state token, masks) is copied into the
buffers once, per step ``x`` and that step's modulations. What happens between steps (the Euler
update, the pads reset, a guidance hook such as prefix inpainting) stays eager, so the steered
path (a later start ``k0``) and inpainting use the same graph as plain sampling.

`GraphedSampler` captures the whole integration instead (`embodia.action_heads.dit.euler`: the
context keys/values of every block, the modulations of all steps, every network evaluation, the
guidance hook and the Euler updates), once per shape and grid start/end (a steered decision's later
start k0 is its own graph, captured on first use); only the noise draw and the context masks (which
read the mask on the host) stay outside. Between per-step replays the host waits for nothing, but
it still launches K graphs and the eager updates; one graph removes those launches and gaps. A
guidance hook is captured when it exposes its tensors (``buffers`` / ``rebind``, as `PrefixPin`
does), else that decision takes the per-step graphs.

Fewer kernels per step: inside the whole graph each block's layer norms take their modulation as
their affine (`fused_block`: one kernel for two, rounding once; ``fuse=False`` keeps the eager
block). Opt-in ( ``$EMBODIA_COMPILE_SAMPLER=1`` or ``GraphedSampler(compile=True)``):
each block inside the whole graph runs ``torch.compile(run_block)`` in its default mode (inductor
fuses the block's layer norms, modulations, gates, residuals and GELU into a few Triton kernels; no
cudagraphs of its own: the graph is ours); one compiled block serves every block of the head, its
weights being the compiled graph's inputs. ``=max-autotune-no-cudagraphs`` also tunes Triton GEMMs
with those fused into their epilogues (longer to load). It compiles once per shape when that shape is
first captured (at load, `VLAPolicy.warm_up`; a new context length recompiles, a few seconds to
tens of seconds), which is why it is off by default. A compilation that fails is said once and the whole graph is captured uncompiled.

CUDA only: on any other device `sample` evaluates the network eagerly, as it always did. A capture
that fails (an operation that cannot be captured) is said once in one line and that shape falls
back: `GraphedSampler` to the per-step graphs, `GraphedVelocity` to eager evaluation.
"""
from __future__ import annotations

import os
import warnings
from typing import Callable, Dict, Optional

import torch

from embodia.action_heads.dit import context_masks, euler, fused_block, run_block

__all__ = ["GraphedSampler", "GraphedVelocity", "cuda_capture", "eager_capture", "pad_context", "compile_setting",
           "one_line", "COMPILE_ENV", "COMPILE_MODES"]

COMPILE_ENV = "EMBODIA_COMPILE_SAMPLER"     # "1": torch.compile the network inside the sampler's graph
# torch.compile modes that leave the CUDA graph to us ("reduce-overhead" would capture its own)
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")


def pad_context(ctx: torch.Tensor, ctx_mask: Optional[torch.Tensor], multiple: int = 32):
    """``ctx`` [B, T, d] and its mask padded (mask False) to the next multiple of ``multiple`` above
    T, so that instructions of different lengths share a few captured shapes; the padding is masked
    out of cross-attention, so the velocity is the same."""
    b, t = ctx.shape[:2]
    mask = torch.ones(b, t, dtype=torch.bool, device=ctx.device) if ctx_mask is None else ctx_mask.bool()
    width = (t // multiple + 1) * multiple          # at least one pad: the mask layout never changes
    ctx = torch.nn.functional.pad(ctx, (0, 0, 0, width - t))
    mask = torch.nn.functional.pad(mask, (0, width - t), value=False)
    return ctx, mask


def _shape_key(x: torch.Tensor, prep: Dict[str, object]) -> tuple:
    def shape(t):
        return None if t is None else (tuple(t.shape), t.dtype)
    return (shape(x), tuple(shape(k) for k, _ in prep["kv"]), shape(prep["attn_mask"]),
            shape(prep["has_ctx"]), shape(prep["state_tok"]))


def cuda_capture(fn: Callable[[], torch.Tensor]):
    """(replay, output): ``fn`` warmed up on a side stream, then captured as one CUDA graph whose
    replay rewrites ``output`` in place (PyTorch's documented capture recipe)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):        # warm the kernels' workspaces before capturing
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph.replay, out


def eager_capture(fn: Callable[[], torch.Tensor]):
    """(replay, output) like `cuda_capture`, but the replay recomputes ``fn`` eagerly into ``output``:
    a stand-in for the capture on any device (tests on a CPU). Like a CUDA graph, it holds only a
    weak reference to ``fn``, so whatever the captured forward reads must be kept alive by its owner;
    a replay after that owner let it go fails loudly instead of passing where a GPU would read freed
    memory."""
    import weakref
    out = fn()
    ref = weakref.ref(fn)

    def replay():
        alive = ref()
        if alive is None:
            raise RuntimeError("replay of a captured function that was freed (and the tensors it reads with it)")
        out.copy_(alive())
    return replay, out


class _Captured:
    """One captured shape: the static buffers its graph reads, the replay, the output it writes."""

    def __init__(self, model, x, am, prep, mods, capture):
        self.x, self.am = x.clone(), am.clone()
        self.prep = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in prep.items()
                     if k != "kv"}
        self.prep["kv"] = [(k.clone(), v.clone()) for k, v in prep["kv"]]
        self.mods = tuple(m.clone() for m in mods)
        # kept here: a CUDA graph holds device pointers, not Python references
        self.fn = lambda: model.forward_prepared(self.x, None, self.am, self.prep, mods=self.mods)
        self.replay, self.out = capture(self.fn)

    def load(self, am, prep) -> None:
        """A new decision's prepared context into the static buffers (once per decision)."""
        self.am.copy_(am)
        for (sk, sv), (k, v) in zip(self.prep["kv"], prep["kv"]):
            sk.copy_(k)
            sv.copy_(v)
        for name in ("attn_mask", "has_ctx", "state_tok", "emb"):
            if isinstance(self.prep[name], torch.Tensor):
                self.prep[name].copy_(prep[name])

    def __call__(self, x, mods) -> torch.Tensor:
        with torch.inference_mode():       # the static buffers are inference tensors
            self.x.copy_(x)
            for s, m in zip(self.mods, mods):
                s.copy_(m)
            self.replay()
            return self.out.clone()        # the next replay overwrites the static output


class GraphedVelocity:
    """``bind(model, x, am, prep, mods)`` -> a function ``(x, mods) -> v`` replaying a captured
    graph of ``model.forward_prepared`` for this decision's shape (captured on first use, kept for
    the next decisions of that shape), or None off CUDA or where the capture failed."""

    def __init__(self, capture=cuda_capture, devices: tuple[str, ...] = ("cuda",)):
        self.capture, self.devices = capture, devices     # (tests replay an eager "capture" on the CPU)
        self.captured: dict = {}
        self.failed: set = set()

    def bind(self, model, x, am, prep, mods) -> Optional[Callable]:
        if x.device.type not in self.devices:
            return None
        key = _shape_key(x, prep)
        if key in self.failed:
            return None
        with torch.inference_mode():
            graph = self.captured.get(key)
            if graph is None:
                try:
                    graph = self.captured[key] = _Captured(model, x, am, prep, mods, self.capture)
                except RuntimeError as e:      # an op that cannot be captured: this shape stays eager
                    self.failed.add(key)
                    warnings.warn(f"DiT CUDA graph capture failed, sampling eagerly: {one_line(e)}", stacklevel=2)
                    return None
            graph.load(am, prep)
        return graph


def one_line(e: BaseException) -> str:
    """An exception in one line (compiler and CUDA errors run to pages)."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def _spec(t) -> Optional[tuple]:
    return None if t is None else (tuple(t.shape), t.dtype, t.device)


def _static(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if t is None else t.clone()


def _load(static: Dict[str, Optional[torch.Tensor]], new: Dict[str, Optional[torch.Tensor]]) -> None:
    for name, buf in static.items():
        if buf is not None:
            buf.copy_(new[name])


class _WholeSampler:
    """One captured integration: static copies of everything it reads, the function it captured
    (kept alive here: a graph holds device pointers, not Python references), its replay and output."""

    def __init__(self, model, inputs: Dict[str, Optional[torch.Tensor]], k0: int, k1: int, steps: int,
                 guidance, capture, block=None):
        self.inputs = {name: _static(t) for name, t in inputs.items()}
        self.guide_buffers = {} if guidance is None else {n: t.clone() for n, t in guidance.buffers.items()}
        guide = None if guidance is None else guidance.rebind(self.guide_buffers)
        i = self.inputs

        def integrate() -> torch.Tensor:
            prep = model.prepare_masked(i["ctx"], i["state"], i["state_mask"], i["emb_id"], i["attn_mask"],
                                        i["any_real"])
            return euler(model, i["x"], i["am"], prep, k0, k1, steps, guide, block=block)
        self.fn = integrate
        self.replay, self.out = capture(integrate)

    def __call__(self, inputs, guidance) -> torch.Tensor:
        _load(self.inputs, inputs)
        if guidance is not None:
            _load(self.guide_buffers, guidance.buffers)
        self.replay()
        return self.out.clone()            # the next replay overwrites the static output


def compile_setting(env: str = COMPILE_ENV) -> tuple[bool, str]:
    """(compile?, mode) from ``$env`` (``$EMBODIA_COMPILE_SAMPLER`` by default): unset or "0" off, "1"
    the default mode, or one of `COMPILE_MODES`; anything else is said in one line and leaves it off."""
    value = os.environ.get(env, "0").strip()
    if value in ("", "0"):
        return False, "default"
    if value == "1" or value in COMPILE_MODES:
        return True, "default" if value == "1" else value
    warnings.warn(f"${env}={value!r}: expected 0, 1 or one of {', '.join(COMPILE_MODES)}; "
                  "not compiling", stacklevel=3)
    return False, "default"


class GraphedSampler:
    """`sample`'s whole integration as one replayed CUDA graph per shape, start and end step.

    ``run(model, x, am, raw, k0, k1, steps, guidance)`` (``raw`` = sample's ctx, state, state_mask,
    emb_id, ctx_mask) -> the final x, or None where this decision cannot take the whole graph (off
    CUDA, a guidance hook without ``buffers``, a shape whose capture failed): `sample` then runs
    `bind`, the per-step graphs of `GraphedVelocity`, for it. ``compile`` / ``mode`` (default:
    `compile_setting`): each block inside the graph runs ``compiler(run_block)`` (else
    `fused_block`, or the eager block with ``fuse=False``), by default
    ``torch.compile`` in that mode with static shapes (one compilation per context length)."""

    def __init__(self, capture=cuda_capture, devices: tuple[str, ...] = ("cuda",), compile: Optional[bool] = None,
                 mode: Optional[str] = None, compiler: Optional[Callable[[Callable], Callable]] = None,
                 fuse: bool = True):
        self.capture, self.devices = capture, devices     # (tests replay an eager "capture" on the CPU)
        self.fuse = fuse
        env_compile, env_mode = compile_setting() if compile is None or mode is None else (compile, mode)
        self.compile = env_compile if compile is None else compile
        self.mode = mode or env_mode
        if self.mode not in COMPILE_MODES:
            raise ValueError(f"compile mode {self.mode!r}: expected one of {', '.join(COMPILE_MODES)}")
        self.compiler = compiler or (lambda fn: torch.compile(fn, dynamic=False, mode=self.mode))
        self.compiled = None
        self.per_step = GraphedVelocity(capture, devices)
        self.captured: dict = {}
        self.failed: set = set()

    def bind(self, model, x, am, prep, mods) -> Optional[Callable]:
        return self.per_step.bind(model, x, am, prep, mods)

    def run(self, model, x, am, raw, k0: int, k1: int, steps: int, guidance=None) -> Optional[torch.Tensor]:
        if x.device.type not in self.devices or (guidance is not None and not hasattr(guidance, "rebind")):
            return None
        ctx, state, state_mask, emb_id, ctx_mask = raw
        attn_mask, any_real = context_masks(ctx, ctx_mask)
        inputs = {"x": x, "am": am, "ctx": ctx, "state": state, "state_mask": state_mask, "emb_id": emb_id,
                  "attn_mask": attn_mask, "any_real": any_real}
        gkey = None if guidance is None else (guidance.key, tuple((n, _spec(t)) for n, t in guidance.buffers.items()))
        key = (tuple((n, _spec(t)) for n, t in inputs.items()), k0, k1, steps, gkey)
        if key in self.failed:
            return None
        with torch.inference_mode():       # the static buffers are inference tensors
            whole = self.captured.get(key) or self._capture(key, model, inputs, k0, k1, steps, guidance)
            return None if whole is None else whole(inputs, guidance)

    def _capture(self, key, model, inputs, k0, k1, steps, guidance) -> Optional[_WholeSampler]:
        """Capture one shape: compiled if asked (uncompiled if that fails), else None and a warning."""
        if self.compile and self.compiled is None:
            self.compiled = self.compiler(run_block)
        try:
            try:
                whole = _WholeSampler(model, inputs, k0, k1, steps, guidance, self.capture,
                                      self.compiled if self.compile else self._fused())
            except Exception as e:  # noqa: BLE001 - a compiler failure: the same graph, uncompiled
                if not self.compile:
                    raise
                self.compile = False
                warnings.warn(f"DiT sampler compilation failed, capturing it uncompiled: {one_line(e)}", stacklevel=4)
                whole = _WholeSampler(model, inputs, k0, k1, steps, guidance, self.capture, self._fused())
        except Exception as e:  # noqa: BLE001 - any capture failure: this shape takes the per-step graphs
            self.failed.add(key)
            warnings.warn(f"DiT sampler graph capture failed, replaying per step: {one_line(e)}", stacklevel=4)
            return None
        self.captured[key] = whole
        return whole

    def _fused(self) -> Optional[Callable]:
        return fused_block if self.fuse else None
