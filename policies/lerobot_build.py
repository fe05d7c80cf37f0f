"""Make a small LeRobot policy directory with LeRobot's own code, offline: runs in LeRobot's environment.

    .venv-lerobot/bin/python policies/lerobot_build.py smolvla out/smolvla-small \\
        --state-dim 4 --action-dim 4 --camera corner2 --size 96

A pretrained SmolVLA reads its vision-language model's config, tokenizer and processor from the hub
(``vlm_model_name``), even when it loads no VLM weights. Without a hub this writes a small one into
``<out>/vlm`` (a SmolVLM config with a llama text model and a SigLIP vision tower, a BPE tokenizer
trained here with SmolVLM's special tokens, its processor), then builds ``SmolVLAPolicy`` from a
``SmolVLAConfig`` naming that folder, saves it with LeRobot's ``save_pretrained`` (config.json,
model.safetensors) and writes LeRobot's pre- and post-processors beside it
(``make_pre_post_processors``, with normalization statistics from ``--stats`` or a neutral set).
The weights are random unless a trainer (LeRobot's own ``lerobot-train``) continues from it.

Imports nothing of embodia: it runs where lerobot 0.4.4 is installed (docs/lerobot.md).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SPECIAL = ["<|endoftext|>", "<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>"]
WORDS = ("push pick place the a an to on of in into open close puck goal object block drawer door "
         "button window lever handle peg hole reach move robot arm gripper left right up down slide turn")


def build_vlm(out: Path, *, image_size: int, hidden: int, layers: int) -> Path:
    """A small SmolVLM (config, tokenizer, processor) saved in ``out``; no weights (SmolVLA makes them)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, SmolVLMConfig
    from transformers.models.smolvlm import SmolVLMImageProcessor, SmolVLMProcessor, SmolVLMVideoProcessor

    out.mkdir(parents=True, exist_ok=True)
    # the row/column tokens SmolVLM's processor names when it splits an image (it does not here)
    special = SPECIAL + [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator([WORDS] * 8 + [w for w in WORDS.split()], trainer=trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                  additional_special_tokens=special[1:],
                                  extra_special_tokens={"fake_image_token": "<fake_token_around_image>",
                                                        "image_token": "<image>",
                                                        "global_image_token": "<global-img>",
                                                        "end_of_utterance_token": "<end_of_utterance>"})
    heads = max(1, hidden // 32)
    cfg = SmolVLMConfig(
        text_config={"model_type": "llama", "vocab_size": len(tok), "hidden_size": hidden,
                     "intermediate_size": 2 * hidden, "num_hidden_layers": layers,
                     "num_attention_heads": heads, "num_key_value_heads": heads, "head_dim": hidden // heads,
                     "max_position_embeddings": 512, "pad_token_id": tok.pad_token_id},
        vision_config={"hidden_size": hidden, "intermediate_size": 2 * hidden, "num_hidden_layers": 2,
                       "num_attention_heads": heads, "image_size": image_size, "patch_size": 16},
        scale_factor=2, image_token_id=tok.convert_tokens_to_ids("<image>"), vocab_size=len(tok))
    cfg.save_pretrained(out)
    side = {"longest_edge": image_size}
    images = SmolVLMImageProcessor(do_image_splitting=False, size=side, max_image_size=side)
    video = SmolVLMVideoProcessor(size=side, max_image_size=side)
    seq = (image_size // 16) ** 2 // 4
    SmolVLMProcessor(image_processor=images, tokenizer=tok, video_processor=video,
                     image_seq_len=seq).save_pretrained(out)
    return out


def neutral_stats(state_dim: int, action_dim: int, camera: str) -> dict:
    """Statistics that leave values as they are (mean 0, std 1; min -1, max 1)."""
    def block(d):
        return {"mean": [0.0] * d, "std": [1.0] * d, "min": [-1.0] * d, "max": [1.0] * d}
    return {"observation.state": block(state_dim), "action": block(action_dim),
            f"observation.images.{camera}": {k: [[[v]]] * 3 for k, v in
                                             (("mean", 0.0), ("std", 1.0), ("min", 0.0), ("max", 1.0))}}


def build_smolvla(out: Path, *, state_dim: int, action_dim: int, camera: str, size: int, chunk: int,
                  n_action_steps: int, steps: int, hidden: int, layers: int, seed: int, stats: dict | None):
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy

    vlm = build_vlm(out / "vlm", image_size=size, hidden=hidden, layers=layers)
    cfg = SmolVLAConfig(
        vlm_model_name=str(vlm.resolve()), load_vlm_weights=False, device="cpu",
        input_features={"observation.state": PolicyFeature(type=FeatureType.STATE, shape=(state_dim,)),
                        f"observation.images.{camera}": PolicyFeature(type=FeatureType.VISUAL,
                                                                      shape=(3, size, size))},
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(action_dim,))},
        chunk_size=chunk, n_action_steps=n_action_steps, num_steps=steps, resize_imgs_with_padding=(size, size),
        num_vlm_layers=layers, max_state_dim=max(8, state_dim), max_action_dim=max(8, action_dim),
        tokenizer_max_length=32)
    torch.manual_seed(seed)
    policy = SmolVLAPolicy(cfg)
    policy.save_pretrained(out)
    stats = stats or neutral_stats(state_dim, action_dim, camera)
    tensors = {k: {s: torch.tensor(v, dtype=torch.float32) for s, v in d.items()} for k, d in stats.items()}
    pre, post = make_pre_post_processors(cfg, dataset_stats=tensors)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("type", choices=["smolvla"], help="the LeRobot policy type to build")
    ap.add_argument("out", type=Path, help="the directory to write (a LeRobot pretrained policy folder)")
    ap.add_argument("--state-dim", type=int, default=4)
    ap.add_argument("--action-dim", type=int, default=4)
    ap.add_argument("--camera", default="corner2", help="the one camera: observation.images.<camera>")
    ap.add_argument("--size", type=int, default=64, help="the camera's square image side, in pixels")
    ap.add_argument("--chunk", type=int, default=16, help="actions per chunk (chunk_size)")
    ap.add_argument("--n-action-steps", type=int, default=None, help="actions run per chunk (default: all)")
    ap.add_argument("--steps", type=int, default=10, help="flow-matching Euler steps (num_steps)")
    ap.add_argument("--hidden", type=int, default=64, help="the VLM's hidden size")
    ap.add_argument("--layers", type=int, default=2, help="the VLM's text layers")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stats", type=Path, default=None,
                    help="normalization statistics as JSON ({feature: {mean, std, min, max}}); default neutral")
    a = ap.parse_args(argv)
    if a.size % 32:
        ap.error(f"--size {a.size}: a multiple of 32 (16-pixel patches, pixel shuffle by 2)")
    stats = json.loads(a.stats.read_text()) if a.stats else None
    out = build_smolvla(a.out, state_dim=a.state_dim, action_dim=a.action_dim, camera=a.camera, size=a.size,
                        chunk=a.chunk, n_action_steps=a.n_action_steps or a.chunk, steps=a.steps, hidden=a.hidden,
                        layers=a.layers, seed=a.seed, stats=stats)
    print(f"wrote a {a.type} policy to {out} (LeRobot's save_pretrained; random weights)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
