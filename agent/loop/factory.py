"""Turn --device and --policy strings into objects; the one place that knows every spec."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

from embodia.devices import Device, DeviceLost, Embodiment, as_device, open_device
from embodia.policies import BUNDLED_CHECKPOINTS, RandomPolicy, ReplayPolicy
from embodia.policies.base import as_policy

BUNDLED = {"embodia-tiny": BUNDLED_CHECKPOINTS / "embodia-tiny",
           "embodia-mt50": BUNDLED_CHECKPOINTS / "embodia-mt50",
           "embodia-mt50-pixels": BUNDLED_CHECKPOINTS / "embodia-mt50-pixels",
           "embodia-miniwob": BUNDLED_CHECKPOINTS / "embodia-miniwob",
           "embodia-desktop": BUNDLED_CHECKPOINTS / "embodia-desktop"}
# the committed command that rebuilds each bundled checkpoint
REBUILD = {"embodia-tiny": "embodia train tiny",
           "embodia-mt50": "embodia train mt50 --steps 5000 --bundle policies/checkpoints/embodia-mt50",
           "embodia-mt50-pixels": "embodia train mt50 --obs lerobot --size 96x96 "
                                  "--data data/mt50-lerobot --out ckpt/mt50-lerobot --shift 0 --freeze-after 6000 "
                                  "--steps 12000 --bundle policies/checkpoints/embodia-mt50-pixels --exec-horizon 2",
           "embodia-miniwob": "embodia train miniwob --bundle policies/checkpoints/embodia-miniwob",
           "embodia-desktop": "embodia train desktop --bundle policies/checkpoints/embodia-desktop"}

POLICY_SPECS = {
    "embodia-tiny": "the bundled VLA (tiny Qwen2.5-VL backbone + DiT head), trained on sim demos; on GUI "
                    "devices its GUI head (pointer over UI-tree elements), trained on gui-sim demos",
    "embodia-mt50": "the same architecture trained on Meta-World MT50 (50 scripted demos per task, state "
                    "with the goal); serves sim:metaworld/* (docs/metaworld.md: which checkpoint serves which)",
    "embodia-mt50-pixels": "the same architecture trained on MT50 from LeRobot's view only (the corner2 image and "
                           "agent_pos, no object or goal position); evaluated under sim:metaworld/*?obs=lerobot",
    "embodia-miniwob": "embodia-tiny with a GUI head trained on the scripted experts of MiniWoB++ (computed answers, "
                       "waits, snippets); serves sim:miniwob/* and other web pages (docs/browser.md)",
    "embodia-desktop": "embodia-tiny with a GUI head trained on the desktop bench's experts (galculator, mousepad, "
                       "gnumeric through AT-SPI) and gui-sim; serves desktop: (docs/benchmarks/screens.md)",
    "<path/to/checkpoint>": "a VLA checkpoint directory written by `embodia train`",
    "expert": "the device's scripted expert (simulated tasks)",
    "random": "uniform random actions within the embodiment's limits",
    "replay:<dataset>[#episode]": "recorded actions of one episode, open loop (robot dataset or GUI recording)",
    "actions:<file.json>": "GUI actions from a JSON list, in order",
    "openai:<model>": "a VLM behind an OpenAI-compatible chat endpoint (--base-url or $OPENAI_BASE_URL; GUI devices)",
    "hf:<path>": "a transformers VLM folder (save_pretrained) run in this process (GUI devices; --coords)",
    "remote:ws://<host>:<port>": "a robot policy behind `embodia serve` (key: --api-key-env, default $EMBODIA_API_KEY)",
    "lerobot:<dir>": "a policy LeRobot saved (SmolVLA), run in LeRobot's own environment and steerable by "
                     "--memory (docs/lerobot.md); lerobot:ws://<host>:<port> connects to one already running",
}


# Torch threads for the bundled-size models (VLA, GUI head) this process runs inside its control loop.
# Measured in the loop (benchmarks/decision_latency.py, docs/benchmarks/speed.md "Decision latency",
# in-loop rows): on 2 cores one thread was the faster choice both on a quiet machine and beside a busy
# neighbour process, where two threads spin-wait on each other for the busy core.
DEFAULT_THREADS = 1
THREADS_ENV = "EMBODIA_THREADS"


def policy_threads(threads: int | None = None) -> tuple[int, str]:
    """(torch threads, where the number comes from): an explicit count, else $EMBODIA_THREADS, else
    DEFAULT_THREADS.

    >>> policy_threads(3), policy_threads()[0]
    ((3, 'asked for'), 1)
    """
    if threads:
        return int(threads), "asked for"
    env = os.environ.get(THREADS_ENV, "").strip()
    if env:
        try:
            return max(1, int(env)), f"${THREADS_ENV}"
        except ValueError:
            raise ValueError(f"${THREADS_ENV}={env!r}: expected a whole number of threads") from None
    return DEFAULT_THREADS, "the runtime's default, the faster in the loop on 2 cores quiet or busy"


class PolicyError(ValueError):
    """A --policy (or its --memory) cannot be loaded; the message says why, in one line."""


class SessionError(ValueError):
    """A device or a policy of a session cannot be opened; the message names which and why."""


class EmbodimentOnly(Device):
    """A body known only by its embodiment (a dataset's): enough to bind a checkpoint to it."""

    def __init__(self, embodiment: Embodiment):
        self.embodiment = embodiment


def make_policy(spec: str, device, *, threads: int | None = None, base_url: str | None = None,
                api_key_env: str = "OPENAI_API_KEY", coords: str | None = None, samples: int = 1,
                select: str = "vote", torch_device: str | None = None, dtype: str | None = None):
    """``base_url`` applies to ``openai:<model>`` only, ``api_key_env`` to it and ``remote:``; ``coords``
    (the reply's coordinate convention), ``samples`` and ``select`` (test-time scaling: candidates per
    decision and how one is picked, see `embodia.policies.gui.prompt`) to ``openai:<model>`` and ``hf:<path>``.
    ``torch_device`` / ``dtype`` (`embodia.policies.placement`; default the process's choice:
    --torch-device, $EMBODIA_TORCH_DEVICE, auto) to every model loaded here: a checkpoint's VLA or
    GUI head and ``hf:<path>``."""
    device = as_device(device)       # any object that acts, seen through the declared members
    tts = {"samples": samples, "select": select}
    where = {"torch_device": torch_device, "dtype": dtype}
    if samples != 1 and not spec.startswith(("openai:", "hf:")):
        raise PolicyError(f"--samples applies to openai:<model> and hf:<path> policies, not {spec!r}")
    if spec.startswith("openai:"):
        from embodia.policies.gui.remote import OpenAIPolicy
        url = base_url or os.environ.get("OPENAI_BASE_URL")
        if not url:
            raise PolicyError(f"{spec} needs the endpoint's base URL: --base-url http://host:8000/v1 "
                              f"or $OPENAI_BASE_URL")
        return OpenAIPolicy(spec[len("openai:"):], url, api_key_env=api_key_env or None,
                            coords=coords or "norm1000", supported=device.supported,
                            **tts).bind(device.embodiment)
    if spec.startswith("hf:"):
        from embodia.policies.gui.local_vlm import LocalVLMPolicy
        return LocalVLMPolicy(spec[len("hf:"):], embodiment=device.embodiment, coords=coords or "norm1000",
                              threads=threads, supported=device.supported, device=torch_device,
                              dtype=dtype, **tts)
    if spec.startswith(("remote:", "lerobot:")):
        if device.embodiment.is_gui:
            raise PolicyError(f"{spec}: remote policies drive robots for now, not GUI bodies like "
                              f"{device.embodiment.name!r}")
        from embodia.policies.ws_policy import DEFAULT_KEY_ENV, WebsocketPolicy
        # The CLI's default names the OpenAI key: never send that one to a policy server.
        key_env = DEFAULT_KEY_ENV if api_key_env in (None, "OPENAI_API_KEY") else api_key_env
        if spec.startswith("lerobot:"):
            from embodia.policies.robot.lerobot import open_lerobot
            return open_lerobot(spec[len("lerobot:"):], device.embodiment, api_key_env=key_env,
                                threads=policy_threads(threads)[0])
        return WebsocketPolicy(spec[len("remote:"):], api_key_env=key_env).bind(device.embodiment)
    if spec == "expert":
        if "expert" not in device.capabilities:
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
                          f"`{REBUILD[spec]}` (records demos, then trains; docs/training.md)")
    path = BUNDLED.get(spec) or Path(spec).expanduser()
    if path.is_dir() and device.embodiment.is_gui:
        from embodia.policies.gui import head, head_encoding
        if "ui_tree" not in device.capabilities:
            raise PolicyError(f"{spec}: its GUI head reads a UI tree, which {device.embodiment.name!r} does not give")
        try:
            return head.GuiHeadPolicy.from_pretrained(path, threads=policy_threads(threads)[0], **where).bind(
                device.embodiment)
        except head_encoding.GuiHeadError as e:
            raise PolicyError(str(e)) from None
    if path.is_dir():
        from embodia.policies.robot.vla import VLAPolicy
        return VLAPolicy.from_pretrained(path, threads=policy_threads(threads)[0], **where).bind(device.embodiment)
    raise PolicyError(f"unknown policy {spec!r}; known: {', '.join(POLICY_SPECS)}")


def make_device(uri: str, shift: str | None = None, size: str | None = None):
    return open_device(uri, shift=shift, size=size)


@contextmanager
def open_session(device_uri: str, policy_spec: str, shift: str | None = None, size: str | None = None,
                 **policy_kw):
    """(device, policy) from their strings, closed together afterwards (the policy too, which may
    hold a connection), also when the block fails. Raises SessionError naming what did not open."""
    try:
        device = make_device(device_uri, shift=shift, size=size)
    except (ValueError, FileNotFoundError, ImportError, DeviceLost) as e:
        raise SessionError(f"cannot open device {device_uri!r}: {e}") from e
    policy = None
    try:
        try:
            policy = make_policy(policy_spec, device, **policy_kw)
        except (ValueError, FileNotFoundError) as e:      # PolicyError is a ValueError
            raise SessionError(f"cannot load policy {policy_spec!r}: {e}") from e
        yield device, policy
    finally:
        try:
            if policy is not None:
                as_policy(policy).close()
        finally:
            device.close()


def device_namespace(device_uri: str, embodiment) -> str:
    """The memory namespace of a device URI: (embodiment, task), the task being the URI's target
    without its query (`sim:twogap-push?shift=heavy` -> `<embodiment>/twogap-push`)."""
    from embodia.memory import make_namespace
    return make_namespace(embodiment.name, device_uri.split(":", 1)[-1].split("?")[0])


def with_memory(policy, path: str, device_uri: str, device=None):
    """``policy`` steered by the persistent memory at ``path`` (created empty when absent; saved after
    every episode): a VLA gets a SuccessMemory; on a GUI device any GUI policy gets a ScreenMemory
    (replace mode).
    Raises PolicyError for a policy that cannot use one or a memory file that does not fit."""
    from embodia.memory import MemoryBusy, MemoryFileError, MemoryMismatch
    from embodia.memory.persist import META, check_not_orphaned
    try:
        check_not_orphaned(path)       # a deleted meta.json never becomes an empty memory saved over the old
    except MemoryFileError as e:
        raise PolicyError(str(e)) from None
    if device is not None and device.embodiment.is_gui:
        from embodia.memory import ScreenMemory
        from embodia.policies.gui.screen_memory import ScreenMemoryPolicy
        try:       # the writer lock first: a second process on this folder is refused, naming this one
            steered = ScreenMemoryPolicy(policy, ScreenMemory.load(path, missing_ok=True, lock=True), device=device)
        except MemoryBusy as e:
            raise PolicyError(str(e)) from None
        except (MemoryFileError, MemoryMismatch) as e:
            raise PolicyError(f"{e} (move the file away to start from an empty memory)") from None
        steered.autosave = path         # saved after every episode: a kill loses at most the one in flight
        return steered
    from embodia.memory import SuccessMemory
    from embodia.policies.robot.steered import SteeredPolicy, memory_for, normalizer_hash
    if not as_policy(policy).steerable:
        raise PolicyError("--memory needs a flow policy the memory can steer (embodia-tiny, a checkpoint, "
                          "lerobot:<dir>, or a remote: server that announces steering)")
    fresh = memory_for(policy)      # with the checkpoint's own memory settings (memory.json), if it has them
    stored = (Path(path) / META).is_file()     # a memory already on disk keeps the settings it was made with
    try:
        mem = SuccessMemory.load(path, encoder_id=fresh.encoder_id, normalizer_hash=normalizer_hash(policy),
                                 config=None if stored else fresh.config,
                                 missing_ok=True, key_dim=fresh.key_dim, horizon=fresh.horizon,
                                 action_dim=fresh.action_dim, hist_len=fresh.hist_len, lock=True)
    except MemoryBusy as e:
        raise PolicyError(str(e)) from None
    except (MemoryFileError, MemoryMismatch) as e:
        raise PolicyError(f"{e} (move the file away to start from an empty memory)") from None
    import faiss  # one search per decision on a small index: OpenMP threads only contend
    faiss.omp_set_num_threads(1)   # (measured under load: 15 ms a search with 2 threads, 0.13 ms with 1)
    steered = SteeredPolicy(policy, mem, namespace=device_namespace(device_uri, policy.embodiment))
    steered.autosave = path             # saved after every episode: a kill loses at most the one in flight
    return steered
