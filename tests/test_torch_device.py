"""Where models run (--torch-device, --dtype): the choice, CPU runs identical to the default, every
model path with the device set explicitly, and no runtime tensor left on the host by construction."""
import ast
import json
import os
import shutil
import sysconfig
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from embodia.action_heads.graphs import eager_capture
from embodia.agent.cli import app
from embodia.agent.loop.episode import run_episode
from embodia.agent.loop.factory import make_policy
from embodia.devices import open_device
from embodia.memory import MemoryConfig
from embodia.policies import BUNDLED_CHECKPOINTS
from embodia.policies.placement import DTYPE_ENV, TORCH_DEVICE_ENV, Placement, PlacementError
from embodia.policies.robot.steered import SteeredPolicy, memory_for
from embodia.policies.robot.vla import VLAPolicy

ROOT = Path(__file__).resolve().parent.parent
TINY = BUNDLED_CHECKPOINTS / "embodia-tiny"
NO_CUDA = not torch.cuda.is_available()


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv(TORCH_DEVICE_ENV, raising=False)
    monkeypatch.delenv(DTYPE_ENV, raising=False)
    return monkeypatch


# -- the choice ---------------------------------------------------------------------------------------
def test_the_choice_is_explicit_then_the_environment_then_auto(clean_env):
    auto = Placement.resolve()
    assert auto.device.type == ("cuda" if torch.cuda.is_available() else auto.device.type)
    assert auto.dtype == (torch.bfloat16 if auto.device.type == "cuda" else torch.float32)
    assert Placement.resolve("cpu") == Placement(torch.device("cpu"), torch.float32)
    clean_env.setenv(TORCH_DEVICE_ENV, "cpu")
    clean_env.setenv(DTYPE_ENV, "bfloat16")
    assert Placement.resolve().describe() == "cpu bfloat16"
    assert Placement.resolve(None, "float32").dtype == torch.float32      # the option beats the variable
    for bad, says in (("tpu", "expected auto | cpu | cuda"), ("cpu:1", "expected"), ("cuda:x", "expected")):
        with pytest.raises(PlacementError, match=says):
            Placement.resolve(bad)
    with pytest.raises(PlacementError, match="--dtype 'int8'"):
        Placement.resolve("cpu", "int8")


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
def test_a_device_this_machine_lacks_is_one_line_and_exit_2(clean_env):
    r = CliRunner().invoke(app, ["run", "--policy", "random", "--torch-device", "cuda", "-n", "1"])
    assert r.exit_code == 2
    assert "--torch-device cuda: torch sees no CUDA device here" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["eval-offline", "nowhere", "--torch-device", "gpu"])
    assert r.exit_code == 2 and "--torch-device 'gpu': expected auto | cpu | cuda[:N] | mps" in r.output


# -- CPU behaviour is the CPU behaviour it always was -------------------------------------------------
def test_the_default_path_acts_exactly_as_an_explicit_cpu(clean_env):
    if not NO_CUDA:
        clean_env.setenv(TORCH_DEVICE_ENV, "cpu")      # auto would be CUDA here: compare CPU with CPU
    with open_device("sim:twogap-push") as dev:
        default = make_policy("embodia-tiny", dev)
        explicit = make_policy("embodia-tiny", dev, torch_device="cpu", dtype="float32")
        assert default.placement == explicit.placement == Placement(torch.device("cpu"), torch.float32)
        for seed in (0, 1):
            obs = dev.reset(seed)
            default.reset(seed), explicit.reset(seed)
            a, b = default.act(obs, dev.instruction), explicit.act(obs, dev.instruction)
            assert np.array_equal(a, b) and a.dtype == np.float32
            prefix = a[:3]
            assert np.array_equal(default.predict_chunk(obs, dev.instruction, prefix=prefix),
                                  explicit.predict_chunk(obs, dev.instruction, prefix=prefix))


# -- every model path with --torch-device cpu set explicitly --------------------------------------------
def _expert_episode(dev, seed):
    states, actions = [], []
    run_episode(dev, dev.expert(), seed=seed,
                on_step=lambda step: states.append(step.obs.state) or actions.append(step.action) and False)
    return np.stack(states), np.stack(actions)


def test_decisions_steering_and_inpainting_on_an_explicit_cpu(clean_env):
    with open_device("sim:twogap-push") as dev:
        pol = VLAPolicy.from_pretrained(TINY, torch_device="cpu", dtype="float32").bind(dev.embodiment)
        assert pol.device == torch.device("cpu") and pol.generator.device == pol.device
        assert pol.graphs is None                     # CUDA graphs never on the CPU
        steered = SteeredPolicy(pol, memory_for(pol, MemoryConfig(fixed_confidence=1.0)), namespace="ns", learn=False)
        for seed in (10, 11, 12):
            steered.remember(*_expert_episode(dev, seed))
        obs = dev.reset(10)
        steered.reset(0)
        chunk = steered.act(obs, dev.instruction)
        assert steered.steered == 1 and chunk.shape == (16, 2) and np.all(np.isfinite(chunk))
        inpainted = pol.predict_chunk(obs, dev.instruction, prefix=chunk[4:])
        assert np.allclose(inpainted[:12], chunk[4:], atol=1e-5)        # the committed actions, kept
        r = run_episode(dev, steered, seed=10, max_steps=16)
        assert r.error is None and r.steps == 16


def test_the_gui_head_and_the_success_head_on_an_explicit_cpu(clean_env):
    from embodia.policies.gui.head import GuiHeadPolicy
    from embodia.policies.success_head import SuccessDetector
    from embodia.sim.gui import GuiSimDevice
    dev = GuiSimDevice("settings", task="turn-on", split="test")
    gui = GuiHeadPolicy.from_pretrained(TINY, torch_device="cpu").bind(dev.embodiment)
    assert next(gui.head.parameters()).device.type == "cpu" and gui.generator.device.type == "cpu"
    r = run_episode(dev, gui, seed=0)
    assert r.error is None and r.steps >= 1
    det = SuccessDetector.from_pretrained(TINY, torch_device="cpu")
    first = dev.reset(0)
    p_gui = det.probability(dev.embodiment, first, first, dev.instruction)
    with open_device("sim:twogap-push") as robot:
        obs = robot.reset(0)
        p_robot = det.probability(robot.embodiment, obs, obs, robot.instruction)
    assert 0.0 <= p_gui <= 1.0 and 0.0 <= p_robot <= 1.0


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    from embodia.agent.recording.writer import DatasetWriter
    root = tmp_path_factory.mktemp("demos") / "twogap"
    with open_device("sim:twogap-push") as dev:
        w = DatasetWriter(root, dev.embodiment)
        for s in range(2):
            run_episode(dev, dev.expert(), seed=100 + s, recorder=w, max_steps=24)
        w.close()
    return root


def _tiny_train_cfg(data, out, **kw):
    from embodia.agent.training.train import TrainConfig
    base = dict(data=[str(data)], out=str(out), steps=4, batch_size=8, save_every=2, threads=1, only_success=False,
                freeze_backbone_after=2, frozen_batch_size=8, hidden=32, heads=2, head=dict(dim=32, depth=2, heads=2),
                torch_device="cpu")
    return TrainConfig(**{**base, **kw})


def test_training_on_an_explicit_cpu_saves_host_tensors_that_load_and_resume(demos, tmp_path, clean_env):
    from safetensors import safe_open

    from embodia.agent.training.train import TRAIN_STATE, train
    out = tmp_path / "ck"
    train(_tiny_train_cfg(demos, out, steps=2), progress=False, log=lambda *_: None)
    train(_tiny_train_cfg(demos, out), resume=True, progress=False, log=lambda *_: None)
    assert json.loads((out / "config.json").read_text())["trained_steps"] == 4
    for f in ("model.safetensors", f"{TRAIN_STATE}/weights.safetensors", f"{TRAIN_STATE}/ema.safetensors",
              f"{TRAIN_STATE}/optimizer.safetensors"):
        with safe_open(out / f, framework="pt", device="cpu") as st:      # mapped to the CPU
            assert all(st.get_tensor(k).device.type == "cpu" for k in st.keys())
    with open_device("sim:twogap-push") as dev:
        pol = VLAPolicy.from_pretrained(out, torch_device="cpu").bind(dev.embodiment)
        assert pol.act(dev.reset(0), dev.instruction).shape == (16, 2)


def test_training_batches_default_by_device():
    from embodia.agent.training.train import CPU_BATCH, GPU_BATCH, TrainConfig, resolve_batches
    cfg = TrainConfig(data=[], out="x")
    assert resolve_batches(cfg, Placement.resolve("cpu")).batch_size == CPU_BATCH == 64
    cuda = Placement(torch.device("cuda"), torch.bfloat16)           # only read, never used here
    assert resolve_batches(cfg, cuda).batch_size == GPU_BATCH > CPU_BATCH
    assert resolve_batches(TrainConfig(data=[], out="x", batch_size=7), cuda).batch_size == 7


def test_eval_says_and_reports_the_device_and_dtype_it_ran(tmp_path, clean_env):
    rep = tmp_path / "r.json"
    try:
        r = CliRunner().invoke(app, ["eval", "-d", "sim:twogap-push", "-p", "embodia-tiny", "-n", "1",
                                     "--torch-device", "cpu", "--json", str(rep)])
        assert os.environ[TORCH_DEVICE_ENV] == "cpu"      # the command made it the process's choice
    finally:
        os.environ.pop(TORCH_DEVICE_ENV, None)
    assert r.exit_code == 0, r.output
    assert "torch device: cpu float32" in r.output
    machine = json.loads(rep.read_text())["machine"]
    assert machine["torch_device"] == "cpu" and machine["dtype"] == "float32"


# -- nothing the runtime makes is pinned to the host ------------------------------------------------------
# A tensor factory without device= (or torch.from_numpy not followed at once by .to(...)) makes a
# host tensor: with the model on a GPU the first kernel that mixes them fails ("Expected all tensors
# to be on the same device"), as issue 38 found. The runtime's model code may not have one, except
# where a host tensor is the design, each named here with why.
RUNTIME = ["action_heads/dit.py", "action_heads/graphs.py", "policies/backbone.py", "policies/robot/vla.py",
           "policies/robot/steered.py", "policies/gui/head.py", "policies/success_head.py",
           "agent/training/train.py"]
HOST_BY_DESIGN = {
    "ActionDiT.__init__": "buffers built once; they move with the module",
    "GuiHead.__init__": "parameters built once; they move with the module",
    "Backbone._make_lut": "a buffer built once; it moves with the module",
    "Backbone.preprocess_images": "resized camera images: the host edge, patchify moves them",
    "backbone_features": "the GUI head's features are a float16 host cache (training caches them)",
    "collate": "batches of that cache, moved with placement.to_device",
    "label": "training labels of that cache",
    "fit_platt": "calibration on a few hundred numbers, numpy in and out",
    "Samples.__init__": "the training set lives on the host",
    "Samples.batch": "host batches, pinned and copied by the training loop",
    "Samples.cache_context": "the cached context lives on the host",
}
FACTORIES = {"zeros", "ones", "empty", "full", "arange", "linspace", "rand", "randn", "randint", "randperm",
             "tensor", "as_tensor", "eye", "Generator"}


def host_tensor_factories(source: str) -> list[str]:
    """``function: line: call`` for every tensor factory in ``source`` that leaves its tensor on the host."""
    tree = ast.parse(source)
    parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):
            continue
        name = node.func.attr
        if name == "from_numpy":
            up = parents.get(node)
            moved = isinstance(up, ast.Attribute) and up.attr == "to" and isinstance(parents.get(up), ast.Call) \
                and parents[up].args
            bad = not moved
        else:
            bad = name in FACTORIES and not any(k.arg == "device" for k in node.keywords)
        if bad:
            where, p = [], node
            while p in parents:
                p = parents[p]
                if isinstance(p, (ast.FunctionDef, ast.ClassDef)):
                    where.insert(0, p.name)
            if not any(".".join(where[:i]) in HOST_BY_DESIGN for i in range(1, len(where) + 1)):
                found.append(f"{'.'.join(where)}: {node.lineno}: torch.{name}")
    return found


def test_no_tensor_the_runtime_makes_is_pinned_to_the_host():
    found = [f"{f}: {hit}" for f in RUNTIME for hit in host_tensor_factories((ROOT / f).read_text())]
    assert not found, "tensors made on the host where the model may live elsewhere:\n" + "\n".join(found)


def test_the_host_tensor_check_catches_what_it_should():
    src = ("import torch\nclass P:\n def act(self, s):\n  a = torch.zeros(3)\n  b = torch.from_numpy(s)\n"
           "  c = torch.from_numpy(s).to(a)\n  d = torch.arange(4, device=a.device)\n  g = torch.Generator()\n")
    assert host_tensor_factories(src) == ["P.act: 4: torch.zeros", "P.act: 5: torch.from_numpy",
                                          "P.act: 8: torch.Generator"]


# -- the sampler's graphs: what is replayed is what eager sampling computes ----------------------------
def test_graph_replay_with_static_buffers_matches_eager_sampling_plain_steered_and_inpainted(clean_env):
    """`GraphedVelocity` on the CPU with an eager stand-in for the capture (whose replay recomputes
    into the same output tensor, as a CUDA graph replay rewrites it): the static-buffer bookkeeping
    (a new decision's context loaded once, x and each step's modulations per step, the context padded
    to a shared shape, one entry per shape) gives the eager sampler's chunks, on the plain, steered
    (later start) and inpainted paths and across instructions of different lengths."""
    from embodia.action_heads.graphs import GraphedVelocity

    with open_device("sim:twogap-push") as dev:
        eager = VLAPolicy.from_pretrained(TINY, torch_device="cpu").bind(dev.embodiment)
        graphed = VLAPolicy.from_pretrained(TINY, torch_device="cpu").bind(dev.embodiment)
        graphed.graphs = GraphedVelocity(capture=eager_capture, devices=("cpu",))
        x0 = torch.full((1, 16, 8), 0.3)
        for seed, instruction in ((0, dev.instruction), (1, dev.instruction), (2, "push it " * 30)):
            obs = dev.reset(seed)
            for kw in ({}, {"x0": x0, "tau0": 0.6}, {"prefix": np.full((5, 2), 0.2, np.float32)}):
                eager.reset(seed), graphed.reset(seed)
                a = eager.predict_chunk(obs, instruction, **kw)
                b = graphed.predict_chunk(obs, instruction, **kw)
                assert np.allclose(a, b, atol=1e-5), (seed, kw, np.abs(a - b).max())
        assert len(graphed.graphs.captured) == 2          # two context lengths, each captured once


weak_capture = eager_capture       # holds a weak reference, as a CUDA graph does


def _graphed_policies(dev, sampler):
    eager = VLAPolicy.from_pretrained(TINY, torch_device="cpu").bind(dev.embodiment)
    graphed = VLAPolicy.from_pretrained(TINY, torch_device="cpu").bind(dev.embodiment)
    graphed.graphs = sampler
    return eager, graphed


def test_the_whole_sampler_as_one_graph_matches_eager_sampling_plain_steered_and_inpainted(clean_env):
    """`GraphedSampler` captures the whole integration (context keys/values, the modulations, every
    step, the guidance hook, the Euler updates) once per shape and start step on static buffers: a
    new decision's inputs, start state and pin tensors loaded into them give the eager sampler's
    chunks on the plain, steered (a later start k0) and inpainted paths, across context lengths;
    with the eager block (``fuse=False``) exactly the per-step graphs' chunks, with the fused layer
    norms (the default) the same to float rounding; no decision falls back to the per-step graphs."""
    from embodia.action_heads.graphs import GraphedSampler, GraphedVelocity

    with open_device("sim:twogap-push") as dev:
        eager, whole = _graphed_policies(dev, GraphedSampler(capture=weak_capture, devices=("cpu",)))
        per_step = VLAPolicy.from_pretrained(TINY, torch_device="cpu").bind(dev.embodiment)
        per_step.graphs = GraphedVelocity(capture=weak_capture, devices=("cpu",))
        exact = VLAPolicy.from_pretrained(TINY, torch_device="cpu").bind(dev.embodiment)
        exact.graphs = GraphedSampler(capture=weak_capture, devices=("cpu",), fuse=False)
        x0 = torch.full((1, 16, 8), 0.3)
        for seed, instruction in ((0, dev.instruction), (1, dev.instruction), (2, "push it " * 30), (3, "go")):
            obs = dev.reset(seed)
            kws = ({}, {"x0": x0 + 0.1 * seed, "tau0": 0.6}, {"x0": x0, "tau0": 0.3},
                   {"prefix": np.full((5, 2), 0.1 * seed, np.float32)},
                   {"prefix": np.full((5, 2), -0.2, np.float32), "prefix_weights": np.linspace(1, 0.2, 5)})
            for kw in kws:
                for p in (eager, whole, per_step, exact):
                    p.reset(seed)
                a, b, c, e = (p.predict_chunk(obs, instruction, **kw) for p in (eager, whole, per_step, exact))
                assert np.allclose(a, b, atol=1e-5) and np.allclose(a, e, atol=1e-5), (seed, kw, np.abs(a - b).max())
                assert np.array_equal(e, c), (seed, kw, np.abs(e - c).max())
                if "prefix" in kw and "prefix_weights" not in kw:       # weight 1: the chunk starts with it
                    assert np.allclose(b[:5], kw["prefix"], atol=1e-5)
        graphs = whole.graphs
        # each context length x (plain, two steered starts, inpainted): captured once, then replayed
        lengths = {dict(k[0])["ctx"][0][1] for k in graphs.captured}
        assert len(lengths) >= 2 and len(graphs.captured) == len(lengths) * 4 and not graphs.failed
        assert graphs.per_step.captured == {}
        assert sorted({k[1] for k in graphs.captured}) == [0, 3, 6]
        assert len(exact.graphs.captured) == len(graphs.captured) and exact.graphs.per_step.captured == {}


def test_warming_up_captures_the_plain_and_the_inpainted_sampler_and_leaves_the_noise_stream(clean_env):
    from embodia.action_heads.graphs import GraphedSampler

    with open_device("sim:twogap-push") as dev:
        eager, graphed = _graphed_policies(dev, GraphedSampler(capture=weak_capture, devices=("cpu",)))
        graphed.warm_up()
        assert [k[4] is not None for k in graphed.graphs.captured] == [False, True]    # plain, then pinned
        obs = dev.reset(0)
        eager.reset(None)                  # warm_up leaves the policy as reset(None) does
        assert np.allclose(eager.predict_chunk(obs, ""), graphed.predict_chunk(obs, ""), atol=1e-5)
        assert len(graphed.graphs.captured) == 2                                      # nothing new to capture


def test_a_whole_sampler_capture_that_fails_falls_back_to_the_per_step_graphs_with_one_warning(clean_env):
    from embodia.action_heads.graphs import GraphedSampler

    def refuses(fn):
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")

    sampler = GraphedSampler(capture=weak_capture, devices=("cpu",))
    sampler.capture = refuses                  # only the whole-sampler capture fails
    with open_device("sim:twogap-push") as dev:
        eager, graphed = _graphed_policies(dev, sampler)
        obs = dev.reset(0)
        with pytest.warns(UserWarning) as said:
            for _ in range(2):
                eager.reset(0), graphed.reset(0)
                a, b = eager.predict_chunk(obs, dev.instruction), graphed.predict_chunk(obs, dev.instruction)
                assert np.allclose(a, b, atol=1e-5)
        lines = [str(w.message) for w in said if "DiT" in str(w.message)]
        assert lines == ["DiT sampler graph capture failed, replaying per step: "
                         "RuntimeError: operation not permitted when stream is capturing"]
        assert len(sampler.failed) == 1 and not sampler.captured and len(sampler.per_step.captured) == 1


def test_the_compiled_network_runs_inside_the_whole_graph_and_a_failing_compiler_falls_back(clean_env):
    """``compile``: every block inside the captured sampler runs the compiler's function (here a
    wrapper that counts its calls; the real compiler is the slow test below); a compiled
    function that fails when first run (as inductor does, lazily) is said once and the same shape is
    captured uncompiled, with the eager sampler's chunks either way."""
    from embodia.action_heads.graphs import GraphedSampler

    calls = []

    def counting(fn):
        return lambda *a, **k: calls.append(1) or fn(*a, **k)

    def broken(fn):
        def run(*a, **k):
            raise RuntimeError("InductorError: no working C compiler\n(traceback)")
        return run

    with open_device("sim:twogap-push") as dev:
        obs = dev.reset(0)
        for compiler, compiled in ((counting, True), (broken, False)):
            sampler = GraphedSampler(capture=weak_capture, devices=("cpu",), compile=True, compiler=compiler)
            eager, graphed = _graphed_policies(dev, sampler)
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                for kw in ({}, {"prefix": np.full((3, 2), 0.3, np.float32)}):
                    eager.reset(0), graphed.reset(0)
                    a, b = eager.predict_chunk(obs, dev.instruction, **kw), graphed.predict_chunk(obs, dev.instruction, **kw)
                    assert np.allclose(a, b, atol=1e-5)
            lines = [str(w.message) for w in said if "DiT" in str(w.message)]
            assert sampler.compile is compiled and len(sampler.captured) == 2 and not sampler.failed
            if compiled:
                depth = len(graphed.model.head.blocks)        # (the capture + one replay) x 10 steps x blocks, twice
                assert not lines and len(calls) == 2 * 2 * 10 * depth
            else:
                assert lines == ["DiT sampler compilation failed, capturing it uncompiled: "
                                 "RuntimeError: InductorError: no working C compiler"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None or not Path(sysconfig.get_paths()["include"], "Python.h").exists(),
                    reason="inductor's CPU backend needs a C++ compiler and Python's headers")
def test_torch_compile_of_the_network_traces_whole_and_matches_eager_sampling():
    """The real compiler (inductor's CPU backend here; seconds): a block traces as one graph without
    breaks, one compilation serves every block and step, and the compiled whole sampler gives the
    eager sampler's chunk (to float rounding: the fused kernels sum in another order)."""
    from torch._dynamo.utils import counters

    from embodia.action_heads import ActionDiT, sample
    from embodia.action_heads.dit import run_block
    from embodia.action_heads.graphs import GraphedSampler

    torch.manual_seed(0)
    m = ActionDiT(action_dim=4, state_dim=6, horizon=8, dim=32, depth=3, heads=2, ctx_dim=32).eval()
    for prm in m.parameters():
        torch.nn.init.normal_(prm, std=0.2)
    ctx, mask = torch.randn(1, 11, 32), torch.arange(11) < 8
    state, smask, am, eid = torch.randn(1, 6), torch.ones(1, 6), torch.ones(1, 8, 4), torch.tensor([1])
    prep = m.prepare(ctx, state, smask, eid, mask[None])
    mods = m.modulations(torch.zeros(1), prep["emb"])[0][:, 0]
    with torch.no_grad():
        z = torch.randn(1, 1 + 4 + 8, 32)
        ex = torch._dynamo.explain(run_block)(m.blocks[0], z, mods, *prep["kv"][0], prep["attn_mask"], None)
    assert ex.graph_count == 1 and ex.graph_break_count == 0
    torch._dynamo.reset()
    counters.clear()
    sampler = GraphedSampler(capture=weak_capture, devices=("cpu",), compile=True)
    ref, out = (sample(m, ctx, state, smask, eid, am, steps=5, generator=torch.Generator().manual_seed(3),
                       ctx_mask=mask[None], graphs=g) for g in (None, sampler))
    assert sampler.compile and len(sampler.captured) == 1
    assert counters["stats"]["unique_graphs"] == 1          # 3 blocks x 5 steps x (capture, replay): one compile
    assert torch.allclose(ref, out, atol=1e-5) and not torch.equal(out, torch.zeros_like(out))


def test_the_sampler_compiles_only_when_asked(clean_env):
    from embodia.action_heads.graphs import COMPILE_ENV, GraphedSampler
    clean_env.delenv(COMPILE_ENV, raising=False)
    assert GraphedSampler().compile is False
    clean_env.setenv(COMPILE_ENV, "1")
    assert GraphedSampler().compile is True and GraphedSampler(compile=False).compile is False
    assert GraphedSampler().mode == "default"
    clean_env.setenv(COMPILE_ENV, "max-autotune-no-cudagraphs")
    assert GraphedSampler().mode == "max-autotune-no-cudagraphs" and GraphedSampler().compile is True
    clean_env.setenv(COMPILE_ENV, "reduce-overhead")         # its own cudagraphs: not inside ours
    with pytest.warns(UserWarning, match="EMBODIA_COMPILE_SAMPLER='reduce-overhead': expected 0, 1 or one of"):
        assert GraphedSampler().compile is False


def test_a_guidance_hook_without_buffers_takes_the_per_step_graphs():
    from embodia.action_heads import ActionDiT, sample
    from embodia.action_heads.graphs import GraphedSampler

    torch.manual_seed(0)
    m = ActionDiT(action_dim=4, state_dim=6, horizon=8, dim=32, depth=2, heads=2, ctx_dim=32)
    for prm in m.parameters():               # not the zero init: every block and the head do something
        torch.nn.init.normal_(prm, std=0.2)
    ctx, state = torch.randn(1, 11, 32), torch.randn(1, 6)
    smask, am, eid = torch.ones(1, 6), torch.ones(1, 8, 4), torch.tensor([1])
    hook = lambda x, tau, v: v * 0.5 + tau      # noqa: E731 - a plain closure: nothing to capture
    sampler = GraphedSampler(capture=weak_capture, devices=("cpu",))
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    ref = sample(m, ctx, state, smask, eid, am, steps=5, generator=g1, guidance=hook)
    out = sample(m, ctx, state, smask, eid, am, steps=5, generator=g2, guidance=hook, graphs=sampler)
    assert torch.equal(ref, out) and not sampler.captured and len(sampler.per_step.captured) == 1


@pytest.mark.skipif(not NO_CUDA, reason="checks the CPU default (tiny only); on a GPU the script runs every size")
def test_the_gpu_latency_benchmark_runs_on_a_cpu_and_prints_one_json_line(clean_env):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_latency.py"), "--repeats", "2",
                        "--train-steps", "2"], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1
    rep = json.loads(lines[0])
    assert rep["benchmark"] == "gpu_latency" and rep["torch_device"] == "cpu"
    ran = [x for x in rep["decisions"] if "decision_ms" in x]
    assert {(x["size"], x["cameras"], x["dtype"]) for x in ran} == {("tiny", c, d) for c in (1, 3)
                                                                    for d in ("float32", "bfloat16")}
    assert all(x["decision_ms"]["p50"] > 0 and x["params_m"] > 0.5 for x in ran)
    assert all(x["skipped"] == "CUDA graphs run on CUDA only" for x in rep["decisions"] if x["sampler"] == "cuda_graphs")
    assert rep["train_step"][0]["torch_device"] == "cpu" and rep["train_step"][0]["p50"] > 0
