"""A tiny random-init Qwen2-VL-style backbone for tests and the shipped tiny checkpoint: its
special tokens, a byte-level BPE tokenizer trained offline on a corpus, and the model config. The
backbone itself is `embodia.policies.backbone.Backbone`."""
from __future__ import annotations

from typing import Sequence

VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"
EOS = "<|endoftext|>"
PAD = "<pad>"
SPECIAL_TOKENS = (EOS, "<|im_start|>", "<|im_end|>", VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD, PAD)


# ------------------------------------------------------------------------------------------------
# tokenizer and config for tiny random-init models
# ------------------------------------------------------------------------------------------------

def train_tokenizer(corpus: Sequence[str], vocab_size: int = 1024,
                    special_tokens: Sequence[str] = SPECIAL_TOKENS):
    """Train a byte-level BPE tokenizer on `corpus` (offline, deterministic, ~20 ms).

    Byte-level: any string encodes (no unknown tokens) and decodes back exactly. The special
    tokens get ids 0..len-1 in the given order and are matched literally in input text; the pad
    token is `<pad>`, eos `<|endoftext|>`, padding on the right. The vocabulary is smaller than
    `vocab_size` when the corpus is small; size the model with `len(tokenizer)`.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    special_tokens = list(special_tokens)
    for needed in (EOS, PAD, VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD):
        if needed not in special_tokens:
            raise ValueError(f"train_tokenizer: special_tokens must include {needed!r}")
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + len(special_tokens):
        raise ValueError(f"train_tokenizer: vocab_size={vocab_size} is below the byte alphabet plus "
                         f"special tokens ({len(alphabet) + len(special_tokens)})")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special_tokens,
                                  initial_alphabet=sorted(alphabet), show_progress=False)
    tok.train_from_iterator([str(t) for t in corpus], trainer=trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD,
                                 padding_side="right", clean_up_tokenization_spaces=False,
                                 model_max_length=1 << 20)
    return hf


def _mrope_section(head_dim: int) -> list[int]:
    """Split head_dim/2 rotary frequencies over (t, h, w) like Qwen2.5-VL (128 -> [16, 24, 24])."""
    half = head_dim // 2
    t = max(1, half // 4)
    h = (half - t) // 2
    w = half - t - h
    if min(t, h, w) < 1:
        raise ValueError(f"head_dim={head_dim} is too small for 3-D M-RoPE (need head_dim >= 6)")
    return [t, h, w]


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def tiny_config(tokenizer, hidden: int = 64, layers: int = 2, vision_layers: int = 2, heads: int = 4,
                kv_heads: int = 2, patch_size: int = 14, *, vision_hidden: int | None = None,
                vision_heads: int | None = None, mlp_ratio: float = 2.0, merge_size: int = 2,
                temporal_patch_size: int = 2, window_size: int = 112, max_positions: int = 4096,
                rope_theta: float = 10000.0, vocab_size: int | None = None, multiple_of: int = 1):
    """A random-init-ready `Qwen2_5_VLConfig` sized from the arguments (any consistent size).

    head_dim = hidden / heads must be even; `mrope_section` is computed from it (sums to
    head_dim/2). The vision tower has `vision_hidden` (default `hidden`) width and `vision_heads`
    (default `heads`) heads, a head_dim divisible by 4, full attention every 4th block and in the
    last, windowed attention elsewhere (`window_size` pixels; 112 keeps images up to 112 px in one
    window). `out_hidden_size` = `hidden`. The vocabulary is `len(tokenizer)` rounded up to 64.
    The MLPs' widths are ``mlp_ratio`` times the widths, rounded up to ``multiple_of``: released
    checkpoints keep them multiples of 64 or more, and a GPU's fast matrix kernels need that (an
    odd width such as 5.8 x 2048 = 11,878 sends cuBLAS to slower kernels).
    """
    from transformers import Qwen2_5_VLConfig

    vision_hidden = hidden if vision_hidden is None else vision_hidden
    vision_heads = heads if vision_heads is None else vision_heads
    if hidden % heads or (hidden // heads) % 2:
        raise ValueError(f"tiny_config: hidden={hidden} must split into {heads} heads of even size")
    if heads % kv_heads:
        raise ValueError(f"tiny_config: heads={heads} must be a multiple of kv_heads={kv_heads}")
    if vision_hidden % vision_heads or (vision_hidden // vision_heads) % 4:
        raise ValueError(f"tiny_config: vision_hidden={vision_hidden} must split into {vision_heads} heads "
                         f"of a size divisible by 4")
    if multiple_of < 1:
        raise ValueError(f"tiny_config: multiple_of={multiple_of} must be at least 1")
    if layers < 1 or vision_layers < 1:
        raise ValueError("tiny_config: need at least one text and one vision layer")
    ids = {}
    for name, tok in (("image", IMAGE_PAD), ("video", VIDEO_PAD), ("start", VISION_START), ("end", VISION_END)):
        i = tokenizer.convert_tokens_to_ids(tok)
        if i is None or i == tokenizer.unk_token_id or tokenizer.convert_ids_to_tokens(i) != tok:
            raise ValueError(f"tiny_config: the tokenizer has no {tok!r} token (use train_tokenizer)")
        ids[name] = i
    n_vocab = len(tokenizer) if vocab_size is None else vocab_size
    n_vocab = -(-n_vocab // 64) * 64
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    full = sorted({i for i in range(vision_layers) if (i + 1) % 4 == 0} | {vision_layers - 1})
    return Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=n_vocab, hidden_size=hidden, intermediate_size=_round_up(int(mlp_ratio * hidden), multiple_of),
            num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
            max_position_embeddings=max_positions, pad_token_id=pad, bos_token_id=eos, eos_token_id=eos,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": rope_theta,
                             "mrope_section": _mrope_section(hidden // heads)}),
        vision_config=dict(
            depth=vision_layers, hidden_size=vision_hidden,
            intermediate_size=_round_up(int(mlp_ratio * vision_hidden), multiple_of),
            num_heads=vision_heads, patch_size=patch_size, spatial_merge_size=merge_size,
            temporal_patch_size=temporal_patch_size, window_size=window_size, out_hidden_size=hidden,
            fullatt_block_indexes=full),
        image_token_id=ids["image"], video_token_id=ids["video"],
        vision_start_token_id=ids["start"], vision_end_token_id=ids["end"],
        tie_word_embeddings=True,
    )
