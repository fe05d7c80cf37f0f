"""``--success judge:hf:<path>``: a vision-language model run in this process judges the episode.

The model is loaded from a local folder written by ``save_pretrained`` (or a hub id resolved from
the local cache under ``HF_HUB_OFFLINE=1``) exactly as ``--policy hf:<path>`` loads it
(`embodia.policies.gui.local_vlm`: ``from_pretrained``, the processor or its Qwen-VL fallback, the chat
template). `embodia.agent.loop.success.JudgeLabeler` shows it what an ``openai:`` judge is shown (the
instruction, the first and final frames and up to 3 evenly spaced ones in between, one user turn)
and parses its reply in the same fixed schema, as strictly: anything else, or a generation that
fails, is "unknown" and never a success. Decoding is greedy.

>>> judge = make_labeler("judge:hf:models/Qwen2.5-VL-3B-Instruct", device)          # doctest: +SKIP
>>> run_episode(device, policy, labeler=judge, on_step=judge.on_step)              # doctest: +SKIP
"""
from __future__ import annotations


class LocalJudgeModel:
    """``reply(text, images) -> str | None`` from a local transformers VLM (see the module doc).
    ``vlm``: an already loaded `LocalVLMPolicy`; ``generation_kwargs`` go to ``generate`` unchanged.
    A folder that cannot be loaded raises ModelLoadError (a ValueError) naming it."""

    def __init__(self, path: str, *, max_new_tokens: int = 128, device: str | None = None,
                 generation_kwargs: dict | None = None, vlm=None, timeout_s: float = 60.0):
        """The reply is bounded like an endpoint's: ``max_new_tokens`` in size and ``timeout_s`` in
        time (transformers' ``max_time``: generation stops after the step in flight, and the cut
        reply does not parse, so the label is unknown)."""
        from embodia.policies.gui.local_vlm import LocalVLMPolicy
        kwargs = {"max_time": float(timeout_s), **(generation_kwargs or {})}
        self.vlm = vlm if vlm is not None else LocalVLMPolicy(path, max_new_tokens=max_new_tokens, device=device,
                                                              generation_kwargs=kwargs)
        self.error: str | None = None

    def __call__(self, text: str, images) -> str | None:
        """The model's reply, or None when generation failed (the label is then unknown)."""
        try:
            return self.vlm.reply(text, list(images))
        except (RuntimeError, ValueError) as e:     # e.g. out of memory, an image the processor refuses
            self.error = f"{type(e).__name__}: {e}"
            return None
