"""A desktop variant of `embodia-tiny`'s GUI head: trained on the desktop bench's expert demos (real
Debian applications read through AT-SPI) plus gui-sim demos, into a folder of its own.

    embodia train desktop --out data/embodia-tiny-desktop
    embodia train desktop --out /tmp/d --bench-episodes 4 --sim-episodes 100 --steps 200

It copies the bundled checkpoint (backbone, robot head, GUI head) into ``--out``, records
``--bench-episodes`` expert episodes per task of `HEAD_TASKS` on the bench's *train* split (seeds
``--seed``..; values 2..299 and the train word and file pools, never the held-out ones) under its
own Xvfb and accessibility bus, writes them as GUI step logs under ``--out``/demos (the format of
``embodia record``; ``embodia replay`` and ``embodia eval --offline`` read them), mixes in
``--sim-episodes`` gui-sim teacher episodes, extends a copy of the bundled GUI head to the larger
action vocabulary (`embodia.policies.gui.head.extend_vocabulary`: key chords, typing into the
focused field, text copied from an element) with element feature set ``--features`` (2 by default,
as `embodia.agent.training.miniwob_train`) and the spelling columns (``--spell``, on by default:
which keypad button enters the next character of "Compute 661 + 74", `embodia.policies.gui.head_spell`),
and fine-tunes it on both
(`embodia.agent.training.gui_train.fit`; the bench steps drawn ``--bench-repeat`` times as often).
The bundled checkpoint itself is never written.

`HEAD_TASKS` are the bench tasks whose expert actions the extended head can express (`head_can_do`):
clicks on tree elements, typing a span of the instruction into an element or the focused field,
and the chords of `CHORDS` (ctrl+s, ctrl+w, ctrl+end, ctrl+a, enter). The experts type a line or a
cell reference with a trailing newline (``C5\n``); the demos press it as the ``enter`` chord after
typing the span (`EnterAsKey`), which the applications take the same way. Left out:

- gnumeric/sum, gnumeric/product: the typed formula (``=SUM(A1:A3)``, ``=A1*B1``) is not a span of
  the instruction or of the page;
- mousepad/save-as: the file chooser's name field gets the work folder's absolute path, which is
  on neither.

Defaults (10 demos per task, 300 gui-sim episodes, 1,000 steps at batch 64) took 21 minutes on a
shared 2-core machine (load average about 5: demos and their features 4.5, training 16.5), and with
``--spell`` 29.5 minutes at load average 4 to 6 (demos 6.5, training 22.5); the command prints its
wall time.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from embodia.policies import BUNDLED_CHECKPOINTS
from embodia.policies.base import Policy

HEAD_TASKS = ("galculator/add", "galculator/subtract", "galculator/multiply", "galculator/divide", "mousepad/type",
              "mousepad/append-save", "mousepad/close-discard", "gnumeric/set-cell", "gnumeric/word",
              "gnumeric/close-discard")
BUNDLE = BUNDLED_CHECKPOINTS / "embodia-tiny"
# elements the head reads: gnumeric's tree has 75-81 (the name box about 60th), past the bundled head's 48
MAX_ELEMENTS = 96


def head_can_do(action, instruction: str = "") -> bool:
    """An action the extended head produces: a click on an element, typing a span of the
    instruction (into an element or the focused field), backspace, or a chord of `CHORDS`."""
    from embodia.policies.gui.head_encoding import CHORDS, chord_name
    if action.type == "click":
        return action.element is not None
    if action.type == "type":
        return bool(action.text) and action.text in instruction
    if action.type == "key":
        return tuple(action.keys) == ("backspace",) or chord_name(action.keys) in CHORDS
    return False


def extended_bundled_head(features: int, seed: int, spell: bool = False, compute: bool = False,
                          wait: bool = False):
    """(head, backbone): a copy of the bundled GUI head (never one fine-tuned before in the output
    folder) extended to the larger vocabulary with element feature set ``features``, typed-copy
    case, (``spell``) the spelling columns, (``compute``) computed answers (`text_ops`) and (``wait``)
    the wait whose length it reads off the page, ready to fine-tune; torch on one thread, seeded.
    Shared by the desktop and MiniWoB variants."""
    import torch

    from embodia.policies.gui.head import extend_vocabulary, load_gui_head
    from embodia.policies.gui.head_encoding import ACTIONS_V2, ACTIONS_V3
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    old, backbone, _ = load_gui_head(BUNDLE)
    return extend_vocabulary(old, actions=ACTIONS_V3 if wait else ACTIONS_V2, features=features, case=True, spell=spell,
                             compute=compute), backbone


class EnterAsKey(Policy):
    """An expert whose typed text ending in a newline (``C5\n``) is played as the text, then the
    ``enter`` chord: the head copies spans of the instruction, which hold no newline, and the
    applications take Enter pressed after the text as they take the typed newline."""

    def __init__(self, expert):
        self.expert, self.pending = expert, None

    def reset(self, seed: int | None = None) -> None:
        self.pending = None
        self.expert.reset(seed)

    def act(self, obs, instruction: str = ""):
        from embodia.devices import GuiAction
        if self.pending is not None:
            a, self.pending = self.pending, None
            return a
        a = self.expert.act(obs, instruction)
        if a is not None and a.type == "type" and len(a.text or "") > 1 and a.text.endswith("\n"):
            self.pending = GuiAction("key", keys=("enter",))
            return GuiAction("type", text=a.text[:-1], element=a.element)
        return a


@contextmanager
def bench_display(workdir: Path):
    """An Xvfb (1280x800) with an accessibility bus, as $DISPLAY for the block."""
    from embodia.devices.atspi import start_bus
    from embodia.devices.base import environ
    from embodia.devices.xvfb import start_xvfb
    server = start_xvfb(1280, 800, workdir=workdir)
    with environ(DISPLAY=server.display, XAUTHORITY=server.env["XAUTHORITY"]):
        bus = start_bus(server.display)
        try:
            yield server
        finally:
            bus.stop()
            server.stop()


def iter_bench_demos(tasks, episodes: int, *, seed: int = 10_000, out: Path | None = None, log=print):
    """Expert episodes (`EnterAsKey`) on the bench's train split, one `GuiStep` per action the
    head can express (waits for a window are left out); only episodes the bench verified as successes. With ``out``,
    every episode is also recorded as a GUI step log under ``out/<app>-<task>``."""
    from embodia.agent.loop.episode import run_episode
    from embodia.agent.loop.safety import SafetyGate
    from embodia.agent.recording.gui_log import GuiRecorder
    from embodia.agent.training.gui_data import HISTORY, GuiStep
    from embodia.policies.gui.head_encoding import describe
    from embodia.sim.desktop_bench import GATE_ALLOW, open_desktop_bench
    for task in tasks:
        t0, kept, ok = time.perf_counter(), 0, 0
        with open_desktop_bench(task, split="train", settle=0.4) as dev:
            rec = GuiRecorder(out / task.replace("/", "-"), dev.embodiment) if out is not None else None
            for i in range(episodes):
                pairs: list = []
                r = run_episode(dev, EnterAsKey(dev.expert()), seed=seed + i, recorder=rec, gate=SafetyGate(allow=GATE_ALLOW),
                                on_step=lambda step, pairs=pairs: pairs.append((step.obs, step.action)) and None,
                                episode_meta={"device": f"desktop-bench:{task}", "policy": "expert"})
                if not r.success:
                    continue
                ok += 1
                history: list[str] = []
                for obs, a in pairs:
                    if not head_can_do(a, r.instruction):
                        continue
                    kept += 1
                    yield GuiStep(r.instruction, history[-HISTORY:], obs.ui_tree, obs.images["screen"], obs.screen,
                                  a, task, dev.embodiment.prompt(), {"seed": seed + i, "task": task})
                    history.append(describe(a, obs.ui_tree))
        log(f"{task}: {ok}/{episodes} expert demos, {kept} steps ({time.perf_counter() - t0:.0f} s)")


def train_desktop_head(out: Path, *, tasks=HEAD_TASKS, bench_episodes: int = 10, sim_episodes: int = 300,
                       steps: int = 1000, seed: int = 10_000, bench_repeat: int = 2, features: int = 2,
                       spell: bool = True, max_elements: int = MAX_ELEMENTS, log=print,
                       progress: bool = False, bundle_to: Path | None = None,
                       command: str = "embodia train desktop") -> dict:
    """Copy the bundled checkpoint to ``out``, record and encode the demos, fine-tune an extended
    copy of its GUI head (`extend_vocabulary`); returns what was done (counts and seconds), also
    written into ``out``/gui_head.json. ``bundle_to``: then copy the checkpoint there without its
    demos (`gui_train.bundle_head`, ``command`` as its rebuild line)."""
    from embodia.agent.training.gui_data import iter_gui_demos
    from embodia.agent.training.gui_train import GuiTrainConfig, build_samples, fit
    from embodia.policies.gui.head import save_gui_head
    from embodia.policies.gui.head_encoding import SequenceBuilder
    out = Path(out)
    if out.resolve() == BUNDLE.resolve():
        raise ValueError(f"{out} is the bundled checkpoint: train the desktop variant into a folder of its own")
    if not out.exists():
        shutil.copytree(BUNDLE, out)
    head, backbone = extended_bundled_head(features, seed, spell=spell)
    # no weight depends on how many elements are read: only the tree's first ones are encoded
    head.cfg.max_elements = max_elements
    builder = SequenceBuilder(backbone, head.cfg)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d, bench_display(Path(d)):
        bench = build_samples(iter_bench_demos(tasks, bench_episodes, seed=seed, out=out / "demos", log=log),
                              builder, backbone, log=log)
    t1 = time.perf_counter()
    sim = build_samples(iter_gui_demos(sim_episodes, seed=seed), builder, backbone, log=log)
    t2 = time.perf_counter()
    cfg = GuiTrainConfig(out=str(out), episodes=sim_episodes, seed=seed, steps=steps, warmup=min(200, steps // 10),
                         lr=1e-3)
    fit(head, sim + bench * bench_repeat, cfg, log=log, progress=progress)
    t3 = time.perf_counter()
    done = {"bench_tasks": list(tasks), "bench_episodes_per_task": bench_episodes, "bench_samples": len(bench),
            "bench_repeat": bench_repeat, "sim_episodes": sim_episodes, "sim_samples": len(sim),
            "fine_tuned_from": f"bundled embodia-tiny GUI head, vocabulary extended, element features {features}"
                               + (", spelling columns" if spell else ""),
            "train_config": asdict(cfg),
            "seconds": {"bench_demos": round(t1 - t0), "sim_demos": round(t2 - t1), "train": round(t3 - t2)}}
    save_gui_head(head, out, extra={"trained_steps": steps, "desktop": done})
    log(f"bench demos {t1 - t0:.0f} s, gui-sim demos {t2 - t1:.0f} s, training {t3 - t2:.0f} s; "
        f"wall time {t3 - t0:.0f} s; head in {out}")
    if bundle_to is not None:
        from embodia.agent.training.gui_train import bundle_head
        facts = bundle_head(out, Path(bundle_to), command)
        log(f"bundled to {bundle_to}: GUI head sha256 {facts['sha256']}, {facts['bytes']} bytes")
    return done

