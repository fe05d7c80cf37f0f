"""Success without a simulator: who says an episode succeeded, with what confidence, and whether
that label may teach the memory.

A *success source* (``--success SOURCE`` on ``embodia run``, ``eval`` and ``record``) labels an
episode at its end. Every label carries its source and confidence and is recorded in the
episode's info (``info["success_label"]``: the result, the recording's end line, the GUI step log):

- ``oracle``: the simulated task's own check (the default where the device has the ``success``
  capability: ``sim:``, ``gui-sim:``);
- ``ask``: a person answers ``yes`` / ``no`` / ``skip`` on the terminal, the final screen or frame
  saved to a PNG whose path is printed. With no terminal (stdin is not a tty, as in CI) every
  answer is "unknown", never "yes";
- ``check:<predicate>``: a declarative check on the final observation (grammar below);
- ``judge:openai:<model>`` (with ``--base-url``), or ``judge:hf:<path>`` (a local transformers model,
  `embodia.agent.loop.hf_judge`): a vision-language model shown the instruction, the
  first and final screens or frames and up to 3 evenly spaced ones in between, replying ``{"success": true|false, "confidence": 0..1,
  "reason": "..."}``, parsed strictly (a reason of at most ``MAX_REASON`` characters); anything else is
  "unknown", and so is a reply that is not complete within the judge's deadline (60 s for the whole
  exchange, not per read) or is larger than 1 MB;
- ``learned`` (or ``learned:<checkpoint>``): the learned success detector shipped with
  ``embodia-tiny`` (`embodia.policies.success_head`): a small head on the checkpoint's frozen
  backbone reads the first and final observation and the instruction and gives a calibrated
  probability p of success. Works offline, on the bodies the checkpoint knows (planar pusher,
  Sawyer, any screen). Verified success at p >= ``LEARNED_THRESHOLD``, verified failure at
  p <= 1 - ``LEARNED_THRESHOLD``, unverified in between.

What the memory does with a label: a *verified* label (oracle, check, a person's yes or no, or a
judge at confidence >= ``JUDGE_THRESHOLD``, the learned detector as above) reaches the policy's ``end_episode`` (a success memory
stores a success, credits a failure) and counts in the success rate. Any other label (unknown,
skip, an unsure judge) keeps the episode as unverified: it never steers, its ``result.success`` is
None, and ``summarize`` counts it under ``unverified_episodes``. The model's own "I am done" (a GUI
``terminate`` / ``answer``) is recorded as ``claimed_done`` and never counts as verified.

The ``check:`` predicate language and its evaluation are in `embodia.agent.loop.predicate`.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from embodia.agent.loop.predicate import (
    PredicateError,
    Unavailable,
    atoms,
    body_positions,
    check_predicate,
    evaluate,
    named_state,
    parse_predicate,
    scene_bodies,
)
from embodia.policies.gui.remote import chat_completions_url, chat_headers
from embodia.shared.images import png_bytes, png_url

JUDGE_THRESHOLD = 0.9     # a judge's label stores only at this confidence or above (no measurement
                          # chose it yet: conservative, a false success poisons the memory)
LEARNED_THRESHOLD = 0.9   # the learned detector's label verifies at p >= this (or p <= 1 - this); chosen
                          # from held-out measurements: benchmarks/success_labels.py, docs/benchmarks/success-labels.md
MAX_REASON = 2000         # characters of a judge's reason: a longer one is out of the reply schema


class SuccessSourceError(ValueError):
    """A ``--success`` value the command cannot use; one line."""


# -- labels ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Label:
    """One episode's success label: ``success`` None means unknown; ``verified`` says whether it may
    teach the memory and count in the success rate."""

    success: bool | None
    source: str
    confidence: float | None = None
    verified: bool = False
    reason: str = ""
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"success": self.success, "source": self.source, "confidence": self.confidence,
                "verified": self.verified, "reason": self.reason, **self.extra}


# -- sources -----------------------------------------------------------------------------------------

def claimed_done(device) -> dict:
    """The model's own "I am done" (a GUI terminate/answer), recorded beside the label, never verified."""
    return {"claimed_done": bool(device.done())}


def oracle(device, first, final, instruction, seed) -> Label:
    """The simulated task's own check."""
    ok = bool(device.success())
    return Label(ok, "oracle", 1.0, True, extra=claimed_done(device))


class CheckLabeler:
    """``check:<predicate>``: the predicate on the final observation; verified when it can be read."""

    def __init__(self, src: str, device):
        self.src = src
        self.node = parse_predicate(src)
        self.uses_bodies = any(a[0] == "body" for a in atoms(self.node))
        check_predicate(self.node, device.embodiment, device.capabilities,
                        scene_bodies(device) if self.uses_bodies else None,
                        device.element_fields, device.roles)

    def __call__(self, device, first, final, instruction, seed) -> Label:
        try:        # called at the episode's end: the scene's bodies are where the final observation saw them
            ok = evaluate(self.node, ui_tree=final.ui_tree, state=named_state(final, device.embodiment),
                          bodies=body_positions(device) if self.uses_bodies else None)
        except Unavailable as e:
            return Label(None, "check", None, False, str(e), {"predicate": self.src, **claimed_done(device)})
        return Label(ok, "check", 1.0, True, extra={"predicate": self.src, **claimed_done(device)})


def frame(obs) -> np.ndarray | None:
    """The picture of an observation a person or a judge looks at: the screen, else the first camera."""
    if obs is None or not obs.images:
        return None
    img = obs.images.get("screen")
    return np.asarray(img if img is not None else next(iter(obs.images.values())))


NO_TERMINAL = ("--success ask: no terminal (stdin is not a tty): every episode is labelled unknown, "
               "so nothing is stored in the memory and no success is counted")


class AskLabeler:
    """``ask``: a person answers yes / no / skip at the episode's end, the final frame saved for them
    under ``folder``. Without a terminal every label is unknown (``interactive`` False); the caller
    says so once (``NO_TERMINAL``)."""

    def __init__(self, *, interactive: bool | None = None, prompt: Callable[[str], str] = input,
                 say: Callable[[str], None] = print, folder: str | Path | None = None):
        self.interactive = sys.stdin.isatty() if interactive is None else interactive
        self.prompt, self.say = prompt, say
        self.folder = Path(folder) if folder else Path(tempfile.gettempdir()) / f"embodia-ask-{os.getpid()}"

    def __call__(self, device, first, final, instruction, seed) -> Label:
        if not self.interactive:
            return Label(None, "ask", None, False, "no terminal", claimed_done(device))
        img = frame(final)
        shown = ""
        if img is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.folder / f"final-seed{seed}-{time.strftime('%H%M%S')}.png"
            path.write_bytes(png_bytes(img))
            shown = str(path)
            self.say(f"final frame of the episode (seed {seed}): {path}")
        elif final is not None and len(final.state):
            self.say(f"final state: {named_state(final, device.embodiment)}")
        while True:
            try:
                answer = self.prompt(f"Did it succeed at {instruction!r}? [yes/no/skip] ").strip().lower()
            except EOFError:
                return Label(None, "ask", None, False, "no answer (end of input)", claimed_done(device))
            if answer in ("y", "yes", "n", "no"):
                ok = answer.startswith("y")
                return Label(ok, "ask", 1.0, True, "a person answered", {"frame": shown, **claimed_done(device)})
            if answer in ("s", "skip", ""):
                return Label(None, "ask", None, False, "skipped", {"frame": shown, **claimed_done(device)})


JUDGE_PROMPT = (
    "You judge whether an agent completed a task. The task: {instruction!r}. The {n} images are screens "
    "or camera frames of the episode in time order: the first at its start, the last at its end. Reply "
    'with only a JSON object: {{"success": true or false, "confidence": a number from 0 to 1, '
    '"reason": "one sentence"}}.')


def parse_judgement(text) -> tuple[bool, float, str] | None:
    """A judge's reply as (success, confidence, reason), or None for anything but exactly that JSON
    object (one optional ```json fence around it is allowed).

    >>> parse_judgement('{"success": true, "confidence": 0.95, "reason": "the switch is on"}')
    (True, 0.95, 'the switch is on')
    >>> parse_judgement('Yes, it worked!') is None, parse_judgement('{"success": "yes", "confidence": 1, "reason": ""}') is None
    (True, True)
    """
    if not isinstance(text, str):
        return None
    s = text.strip()
    if s.startswith("```"):
        s = s[3:]
        s = s.removeprefix("json")
        if not s.rstrip().endswith("```"):
            return None
        s = s.rstrip()[:-3]
    try:
        obj = json.loads(s)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or set(obj) != {"success", "confidence", "reason"}:
        return None
    ok, conf, reason = obj["success"], obj["confidence"], obj["reason"]
    if not isinstance(ok, bool) or isinstance(conf, bool) or not isinstance(conf, (int, float)) \
            or not isinstance(reason, str) or not (0.0 <= conf <= 1.0) or len(reason) > MAX_REASON:
        return None
    return ok, float(conf), reason


class JudgeLabeler:
    """``judge:openai:<model>``: a VLM behind an OpenAI-compatible endpoint, shown the instruction, the
    first and final frames and up to ``middle`` evenly spaced frames in between (kept by ``on_step``,
    which the loop calls after every step; without it the judge sees the first and final frames);
    verified at confidence >= ``threshold``."""

    def __init__(self, model: str, base_url: str, *, api_key_env: str | None = "OPENAI_API_KEY",
                 threshold: float = JUDGE_THRESHOLD, timeout_s: float = 60.0, middle: int = 3,
                 reply: Callable | None = None):
        """``reply(text, images) -> str | None``: a model in this process instead of the endpoint
        (``judge:hf:<path>``, `embodia.agent.loop.hf_judge`)."""
        self.model, self.threshold, self.timeout_s, self.middle = model, threshold, timeout_s, middle
        self._kept: list = []       # frames after steps stride-1, 2*stride-1, ... (at most 2 * middle + 1)
        self._stride = 1
        self.url = chat_completions_url(base_url)
        self.key = os.environ.get(api_key_env) if api_key_env else None
        self.reply = reply
        self.error: str | None = None       # why the last ask got no reply
        self.source = f"judge:{'hf' if reply is not None else 'openai'}:{model}"

    def on_step(self, step) -> bool:
        """Keep a bounded, evenly thinned set of the episode's frames (halved, stride doubled, when it
        outgrows 2 * middle + 1); never stops the episode."""
        if step.t == 0:
            self._kept, self._stride = [], 1
        if self.middle and (step.t + 1) % self._stride == 0:
            img = frame(step.next_obs)
            if img is not None:
                self._kept.append(np.array(img))        # a copy: a device may reuse its buffer
            if len(self._kept) > 2 * self.middle + 1:
                self._kept, self._stride = self._kept[1::2], self._stride * 2
        return False

    def between(self) -> list:
        """Up to ``middle`` kept frames, evenly spaced, the last one (the final frame) left out."""
        kept = self._kept[:-1]
        if len(kept) <= self.middle:
            return kept
        return [kept[round(i * (len(kept) - 1) / (self.middle - 1))] for i in range(self.middle)] \
            if self.middle > 1 else [kept[len(kept) // 2]]

    def request(self, instruction: str, first, final, between=()) -> dict:
        images = [img for img in (frame(first), *between, frame(final)) if img is not None]
        parts = [{"type": "text", "text": JUDGE_PROMPT.format(instruction=instruction, n=len(images))}]
        for img in images:
            parts.append({"type": "image_url", "image_url": {"url": png_url(img)}})
        return {"model": self.model, "temperature": 0, "messages": [{"role": "user", "content": parts}]}

    def ask(self, body: dict) -> str | None:
        """The reply's text, or None (why in ``self.error``) when the endpoint failed, ran past the
        deadline (``timeout_s`` for the whole exchange, `embodia.shared.bounded_http`), sent
        more than ``MAX_REPLY_BYTES`` or anything but a chat completion."""
        from embodia.shared.bounded_http import ReplyError, post
        self.error = None
        try:
            raw = post(self.url, json.dumps(body).encode(), chat_headers(self.key), deadline_s=self.timeout_s)
        except ReplyError as e:
            self.error = str(e)
            return None
        try:
            content = json.loads(raw)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError, RecursionError) as e:
            self.error = f"not a chat completion ({type(e).__name__})"
            return None
        if not isinstance(content, str):
            self.error = "not a chat completion (no text content)"
            return None
        return content

    def __call__(self, device, first, final, instruction, seed) -> Label:
        between, self._kept = self.between(), []
        if self.reply is not None:
            images = [img for img in (frame(first), *between, frame(final)) if img is not None]
            text = self.reply(JUDGE_PROMPT.format(instruction=instruction, n=len(images)), images)
        else:
            text = self.ask(self.request(instruction, first, final, between))
        got = parse_judgement(text)
        if got is None:
            why = (f"no reply from the judge ({self.error})" if text is None and self.error else
                   "no reply from the judge" if text is None else f"unparsable reply: {text[:200]!r}")
            return Label(None, self.source, None, False, why, claimed_done(device))
        ok, conf, reason = got
        return Label(ok, self.source, conf, conf >= self.threshold, reason,
                     {"threshold": self.threshold, **claimed_done(device)})


def probability_label(p: float, source: str, threshold: float = LEARNED_THRESHOLD, extra: dict | None = None) -> Label:
    """A calibrated P(success) as a label: a verified success at ``p >= threshold``, a verified failure
    at ``p <= 1 - threshold``, else unverified (it never steers); confidence is that of its verdict.

    >>> probability_label(0.95, "learned").verified, probability_label(0.7, "learned").verified
    (True, False)
    >>> lab = probability_label(0.02, "learned"); lab.success, lab.verified, round(lab.confidence, 2)
    (False, True, 0.98)
    """
    ok = p >= 0.5
    conf = p if ok else 1.0 - p
    sure = p >= threshold or p <= 1.0 - threshold
    return Label(ok, source, float(conf), bool(sure), f"P(success) = {p:.3f}",
                 {"probability": float(p), "threshold": threshold, **(extra or {})})


class LearnedLabeler:
    """``learned[:<checkpoint>]``: the checkpoint's learned success detector (default: the bundled
    ``embodia-tiny``) on the first and final observation; see `probability_label` for the threshold rule."""

    def __init__(self, device, checkpoint: str | Path | None = None, *, threshold: float = LEARNED_THRESHOLD):
        from embodia.policies import BUNDLED_CHECKPOINTS
        from embodia.policies.success_head import SuccessDetector, SuccessHeadError
        path = Path(checkpoint) if checkpoint else BUNDLED_CHECKPOINTS / "embodia-tiny"
        self.source = "learned" if checkpoint is None else f"learned:{checkpoint}"
        self.threshold = threshold
        try:
            self.detector = SuccessDetector.from_pretrained(path)
            self.detector.check(device.embodiment)
        except (SuccessHeadError, OSError) as e:
            raise SuccessSourceError(f"--success {self.source}: {e}") from None

    def __call__(self, device, first, final, instruction, seed) -> Label:
        p = self.detector.probability(device.embodiment, first, final, instruction)
        return probability_label(p, self.source, self.threshold, claimed_done(device))

    def stopper(self, device, instruction: str | None = None, every: int | None = None) -> Callable:
        """An ``on_step`` for the loop that ends the episode once the detector is sure it succeeded
        (p >= threshold): where no simulator ends episodes, the detector says when the task is done.
        It looks after every ``every``-th step (default: every GUI step, every chunk of a robot's,
        its ``exec_horizon``). The instruction defaults to the device's current one (read at each
        step, after the reset)."""
        first: list = []
        emb = device.embodiment
        every = every or (1 if emb.is_gui else max(1, int(emb.exec_horizon)))

        def on_step(step) -> bool:
            if step.t == 0:
                first[:] = [step.obs]
            if (step.t + 1) % every:
                return False
            text = instruction if instruction is not None else device.instruction or ""
            return self.detector.probability(device.embodiment, first[0], step.next_obs, text) >= self.threshold
        return on_step


def check_source(spec: str | None) -> None:
    """SuccessSourceError for a ``--success`` value that cannot be one (before any device opens).

    >>> check_source("check:state.x > 1"); check_source("judge:openai:qwen")
    >>> check_source("guess")
    Traceback (most recent call last):
    embodia.agent.loop.success.SuccessSourceError: --success 'guess': expected oracle, ask, check:<predicate>, judge:openai:<model>, judge:hf:<path> or learned[:<checkpoint>]
    """
    if spec is None or spec in ("oracle", "ask", "learned"):
        return
    if spec.startswith("learned:"):
        if not spec[len("learned:"):].strip():
            raise SuccessSourceError(f"--success {spec!r}: learned:<checkpoint directory>, or learned for embodia-tiny's")
        return
    if spec.startswith("check:"):
        try:
            parse_predicate(spec[len("check:"):])
        except PredicateError as e:
            raise SuccessSourceError(f"--success: {e}") from None
        return
    if spec.startswith("judge:"):
        model = spec[len("judge:"):]
        kind, _, name = model.partition(":")
        if kind not in ("openai", "hf") or not name.strip():
            raise SuccessSourceError(f"--success {spec!r}: judges are judge:openai:<model> (with --base-url) "
                                     f"or judge:hf:<path> (a local model folder)")
        return
    raise SuccessSourceError(f"--success {spec!r}: expected oracle, ask, check:<predicate>, "
                             f"judge:openai:<model>, judge:hf:<path> or learned[:<checkpoint>]")


def make_labeler(spec: str | None, device, *, base_url: str | None = None,
                 api_key_env: str | None = "OPENAI_API_KEY", say: Callable[[str], None] = print,
                 ask_folder: str | Path | None = None, interactive: bool | None = None):
    """The labeler for ``--success spec`` on ``device`` (None for no spec: the loop's own path, the
    device's check where it has one, recorded as the episode's ``success`` without a label). SuccessSourceError, one line, before any episode runs.
    A labeler is called ``labeler(device, first_obs, final_obs, instruction, seed) -> Label``."""
    check_source(spec)
    if spec is None:        # the loop's own path: the device's check where it has one (no label recorded)
        return None
    if spec == "oracle":
        if "success" not in device.capabilities:
            raise SuccessSourceError(f"--success oracle: {device.embodiment.name!r} has no simulator check; "
                                     f"use ask, check:<predicate> or judge:openai:<model>")
        return oracle
    if spec == "ask":
        lab = AskLabeler(interactive=interactive, say=say, folder=ask_folder)
        if not lab.interactive:
            say(NO_TERMINAL)
        return lab
    if spec == "learned" or spec.startswith("learned:"):
        return LearnedLabeler(device, spec[len("learned:"):] or None)
    if spec.startswith("check:"):
        try:
            return CheckLabeler(spec[len("check:"):], device)
        except PredicateError as e:
            raise SuccessSourceError(f"--success: {e}") from None
    if spec.startswith("judge:hf:"):       # a local VLM (agent/loop/hf_judge.py)
        from embodia.agent.loop.hf_judge import LocalJudgeModel
        path = spec[len("judge:hf:"):]
        try:
            return JudgeLabeler(path, "", api_key_env=None, reply=LocalJudgeModel(path))
        except ValueError as e:         # ModelLoadError: the folder or a file in it, named
            raise SuccessSourceError(f"--success {spec}: {e}") from None
    url = base_url or os.environ.get("OPENAI_BASE_URL")
    if not url:
        raise SuccessSourceError(f"--success {spec}: needs the judge's base URL (--base-url or $OPENAI_BASE_URL)")
    return JudgeLabeler(spec[len("judge:openai:"):], url, api_key_env=api_key_env)
