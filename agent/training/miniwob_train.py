"""A MiniWoB++ variant of `embodia-tiny`'s GUI head: fine-tuned on the scripted experts' demos of
every task in `embodia.sim.miniwob.EXPERTS`, into a folder of its own.

    embodia train miniwob --out data/embodia-tiny-miniwob
    embodia train miniwob --out /tmp/m --episodes 2 --steps 50 --tasks click-button,enter-text

It records ``--episodes`` expert episodes per task on TRAIN seeds (``--seed``.., 100000 by default;
`benchmarks/miniwob_head.py` evaluates on seeds 1000.., which no demo used) as GUI step logs
under ``--out``/demos/<task> (the format of ``embodia record``; ``embodia replay`` and ``embodia
eval --offline`` read them). Recording is resumable: a rerun keeps every finished episode and
records only the seeds still missing, with one progress line per task. It then copies the bundled
checkpoint into ``--out``, extends a copy of its GUI head to the larger action vocabulary
(`embodia.policies.gui.head.extend_vocabulary`: key chords, typing into the focused field, text
copied from an element's words) and fine-tunes it on the demos of the successful episodes
(`embodia.agent.training.gui_train.fit`). The bundled checkpoint is never written.

The head reads pages with element feature set 3 (``--features``, `GuiHeadConfig.features`). Set 2: an
element's value (a field's content, a text area's text, copyable like its text), the label beside
or above an unnamed field, up to 24 words of a long text (its first 20 and its last 4), enabled /
editable / holds-a-value flags, whether the text beside an element matches the instruction, the
elements beside and around each one, and the n-th element or word an ordinal in the instruction
names ("the 2nd text area", "the 3rd word"). Set 3 (`embodia.policies.gui.head_context`) adds what the
layout says: the page's copy of the instruction (its words are not what an ordinal counts), the
n-th word counted over a block of text in reading order, the cell beside the key that a field's
label or the instruction names (where a typed value is read), and the unnamed point at an (x, y)
the instruction names, read on the page's numeric axes.
The head may type copied words in upper or lower case (`GuiHeadConfig.case`: enter-text-2 asks
for the instruction's word in capitals or small letters). The browser tree flags a text area whose
content overflows as scrollable, so sign-agreement's and scroll-text-2's wheel turns are demos the
head learns (a turn is labelled on the element under it).

The head may also type a computed answer (`GuiHeadConfig.compute`, `embodia.policies.gui.text_ops`):
the copied words' arithmetic calculated (simple-arithmetic's ``3 + 4 =`` -> ``7``, simple-algebra's
``x - 4 = 9`` -> ``13``), compacted as a masked field takes them (enter-time's ``2:30 PM`` ->
``0230PM``), or joined with no space over consecutive elements (text-transform's word drawn one
letter per element); it may wait as long as the page asks (button-delay's ``wait 2 seconds``: the
wait action's length is copied words naming a time, `text_ops.duration_ms`); and it may type a
literal snippet, alone or before copied words, from a vocabulary learnt from the demos' typed texts
that no page holds (`head_labels.learn_snippets`: terminal's ``ls`` and ``rm `` + a listed file;
guess-number's guesses, a table the head may learn from the page's feedback). Which operation,
snippet and words is learnt from the demos: a typed text that is no span of the page is labelled
with what gives it (`computed_span_label`, `snippet_label`); no task is named in the head.

enter-date's expert types the date's digits (``11052016``); its demos here come from a variant
(`DEMO_PLANS`) that types the date as the instruction writes it (``11/05/2016``), which the page
takes too, so that the head can copy it. Like every demo, only episodes the page rewarded are kept.

Defaults (20 episodes per task, 2,000 steps at batch 64): for the 59 tasks about 45 minutes from
scratch on a shared 2-core machine (recording about 30, training 11-14); the command prints its
wall time.
"""
from __future__ import annotations

import re
import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path

from embodia.agent.training.desktop_train import BUNDLE, extended_bundled_head

TRAIN_SEED = 100_000


def enter_date_as_written(instruction, tree, memo):
    """enter-date typing the date as the instruction writes it (a span the head can copy)."""
    from embodia.devices import GuiAction
    from embodia.sim.miniwob_experts import button_named, click_on, click_start, find_element, next_step
    m = re.search(r"Enter (\d\d/\d\d/\d{4})", instruction)
    field = find_element(tree, "date")
    typed = next_step(memo, "date", [click_start(field), GuiAction("type", text=m.group(1))]) if m and field else None
    return typed or click_on(button_named(tree, "Submit"))


DEMO_PLANS = {"enter-date": enter_date_as_written}     # demo experts that differ from `EXPERTS`


def demo_expert(dev, task: str):
    """The expert whose demos the head learns from: `DEMO_PLANS`' variant, else the task's own."""
    from embodia.sim.miniwob_experts import TreeExpert
    return TreeExpert(DEMO_PLANS[task]) if task in DEMO_PLANS else dev.expert()


def finished_seeds(root: Path) -> dict[int, bool]:
    """Seed -> success of the episodes under a task's recording that ended (a killed one is
    recorded again); read from the step logs' header and end lines, no screenshot loaded."""
    from embodia.agent.recording.gui_log import list_gui_episodes, read_gui_episode
    if not (root / "episodes").is_dir():
        return {}
    done = {}
    for p in list_gui_episodes(root):
        ep = read_gui_episode(p)
        if ep["end"] is not None and ep["header"].get("seed") is not None:
            done[int(ep["header"]["seed"])] = bool(ep["end"].get("success"))
    return done


def record_demos(tasks, episodes: int, root: Path, *, seed: int = TRAIN_SEED, log=print) -> dict:
    """Expert episodes of each task on seeds seed..seed+episodes-1 under ``root/<task>``, the
    finished ones kept; returns per task the number of successful episodes of those seeds."""
    from embodia.agent.loop.episode import run_episode
    from embodia.agent.recording.gui_log import GuiRecorder
    from embodia.devices import open_device
    out = {}
    for task in tasks:
        t0 = time.perf_counter()
        where = root / task
        before = finished_seeds(where)
        todo = [s for s in range(seed, seed + episodes) if s not in before]
        if todo:
            with open_device(f"sim:miniwob/{task}") as dev:
                rec = GuiRecorder(where, dev.embodiment)
                for s in todo:
                    run_episode(dev, demo_expert(dev, task), seed=s, recorder=rec,
                                episode_meta={"device": f"sim:miniwob/{task}",
                                              "policy": "expert-as-written" if task in DEMO_PLANS else "expert"})
        ok = sum(1 for s, won in finished_seeds(where).items() if won and seed <= s < seed + episodes)
        out[task] = ok
        log(f"{task}: {ok}/{episodes} expert demos ({episodes - len(todo)} kept from before, "
            f"{time.perf_counter() - t0:.0f} s)")
    return out


# how the head reads long texts: 32 words, the last 16 of a longer one (a terminal's listing sits
# at the end of its text, after the welcome lines)
READING = {"max_text_words": 32, "long_tail": 16}
IDLE_MS = 1000      # a shorter wait is the expert idling while the page changes, not a step of its plan


def demo_steps(root: Path, tasks, seeds: range):
    """`GuiStep`s of the successful recorded episodes. Waits shorter than `IDLE_MS` are left out (the
    expert idling until the page shows what it reads next; a policy never sees those in its
    history); a longer one is the plan's own (button-delay's "wait 2 seconds"), a step like any."""
    from embodia.agent.evaluation.offline_gui import gui_obs, read_gui_episodes
    from embodia.agent.training.gui_data import HISTORY, GuiStep
    from embodia.devices.embodiment import Embodiment
    from embodia.policies.gui.head_encoding import describe
    for task in tasks:
        for ep in read_gui_episodes(root / task):
            if not ep["success"] or ep["seed"] not in seeds:
                continue
            prompt = Embodiment.from_dict(ep["embodiment"]).prompt() if ep["embodiment"] else ""
            history: list[str] = []
            for step, action in zip(ep["steps"], ep["actions"]):
                if action.type == "wait" and (action.duration_ms or 0) < IDLE_MS:
                    continue
                obs = gui_obs(step)
                yield GuiStep(ep["task"], history[-HISTORY:], obs.ui_tree or [], obs.images["screen"], obs.screen,
                              action, task, prompt, {"seed": ep["seed"], "task": task})
                history.append(describe(action, obs.ui_tree))


def prepare_checkpoint(out: Path) -> None:
    """The bundled checkpoint's files in ``out`` (its GUI head is replaced by the fine-tuned one)."""
    if out.resolve() == BUNDLE.resolve():
        raise ValueError(f"{out} is the bundled checkpoint: train the MiniWoB variant into a folder of its own")
    out.mkdir(parents=True, exist_ok=True)
    for p in BUNDLE.iterdir():
        if not (out / p.name).exists():
            (shutil.copytree if p.is_dir() else shutil.copy2)(p, out / p.name)


def train_miniwob_head(out: Path, *, tasks=None, episodes: int = 20, steps: int = 2000, seed: int = TRAIN_SEED,
                       batch_size: int = 64, features: int = 3, log=print, progress: bool = False,
                       bundle_to: Path | None = None, command: str = "embodia train miniwob") -> dict:
    """Record (or keep) the demos, fine-tune an extended copy of the bundled GUI head on them, save
    it into ``out``; returns what was done (counts and seconds), also written into gui_head.json.
    ``bundle_to``: then copy the checkpoint there (`bundle_head`, ``command`` as its rebuild line)."""
    from embodia.agent.training.gui_train import GuiTrainConfig, build_samples, fit, unexplained_texts
    from embodia.policies.gui.head import extend_vocabulary, save_gui_head
    from embodia.policies.gui.head_labels import learn_snippets
    from embodia.policies.gui.head_encoding import SequenceBuilder
    from embodia.sim.miniwob import EXPERTS
    out = Path(out)
    tasks = sorted(EXPERTS) if tasks is None else list(tasks)
    unknown = [t for t in tasks if t not in EXPERTS]
    if unknown:
        raise ValueError(f"no scripted expert for {unknown}; experts: {', '.join(sorted(EXPERTS))}")
    prepare_checkpoint(out)
    t0 = time.perf_counter()
    demos = record_demos(tasks, episodes, out / "demos", seed=seed, log=log)
    t1 = time.perf_counter()
    head, backbone = extended_bundled_head(features, seed, compute=True, wait=True)
    recorded = list(demo_steps(out / "demos", tasks, range(seed, seed + episodes)))
    reads = replace(head.cfg, **READING)
    snippets = learn_snippets(unexplained_texts(recorded, SequenceBuilder(backbone, reads)), least=3, most=24)
    head = extend_vocabulary(head, actions=head.cfg.actions, chords=head.cfg.chords, features=head.cfg.features,
                             compute=True, snippets=snippets, **READING)
    log(f"snippets learnt from typed texts no page holds: {list(snippets)}")
    samples = build_samples(recorded, SequenceBuilder(backbone, head.cfg), backbone, log=log)
    if not samples:
        raise ValueError("no usable demo steps: every expert episode failed or none was recorded")
    t2 = time.perf_counter()
    cfg = GuiTrainConfig(out=str(out), episodes=episodes, seed=seed, steps=steps, batch_size=batch_size,
                         warmup=min(200, max(1, steps // 10)), lr=1e-3)
    fit(head, samples, cfg, log=log, progress=progress)
    t3 = time.perf_counter()
    done = {"tasks": tasks, "episodes_per_task": episodes, "train_seeds": [seed, seed + episodes],
            "expert_successes": demos, "samples": len(samples),
            "fine_tuned_from": f"bundled embodia-tiny GUI head, vocabulary extended, element features {features}",
            "train_config": asdict(cfg),
            "seconds": {"demos": round(t1 - t0), "features": round(t2 - t1), "train": round(t3 - t2)}}
    save_gui_head(head, out, extra={"trained_steps": steps, "miniwob": done})
    log(f"demos {t1 - t0:.0f} s, features {t2 - t1:.0f} s, training {t3 - t2:.0f} s; "
        f"wall time {t3 - t0:.0f} s; head in {out}")
    if bundle_to is not None:
        from embodia.agent.training.gui_train import bundle_head
        facts = bundle_head(out, Path(bundle_to), command)
        log(f"bundled to {bundle_to}: GUI head sha256 {facts['sha256']}, {facts['bytes']} bytes")
    return done

