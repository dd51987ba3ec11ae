"""Tiny random checkpoints written in the real published formats (config keys and tensor names typed out
from `docs/checkpoints.md`, not derived from our adapters), with a small word-level tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

WORDS = "the a cat dog sat on mat and ran to 0 1 2 3 4 5 6 7 8 9 + - = ? .".split()
LLADA_SPECIALS = ["<|endoftext|>", "<|startoftext|>", "<|mdm_mask|>", "<|eot_id|>", "<|start_header_id|>",
                  "<|end_header_id|>"]
DREAM_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>{{ m['content'] }}<|eot_id|>"
    "{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>{% endif %}"
)


def write_tokenizer(root: Path, specials: list[str], eos: str, mask: str, vocab_size: int) -> dict[str, int]:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {tok: i for i, tok in enumerate(specials + WORDS + ["[UNK]"])}
    assert len(vocab) <= vocab_size
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(specials)
    tok.save(str(root / "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": eos,
        "pad_token": eos,
        "mask_token": mask,
        "unk_token": "[UNK]",
        "chat_template": CHAT_TEMPLATE,
    }
    (root / "tokenizer_config.json").write_text(json.dumps(cfg))
    return vocab


def _save(root: Path, tensors: dict[str, torch.Tensor], shards: int) -> None:
    names = list(tensors)
    if shards == 1:
        save_file(tensors, str(root / "model.safetensors"))
        return
    weight_map = {}
    for s in range(shards):
        part = names[s::shards]
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: tensors[n] for n in part}, str(root / fname))
        weight_map.update({n: fname for n in part})
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def llada_config(d: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 4, vocab: int = 96) -> dict:
    return {
        "model_type": "llada", "architectures": ["LLaDAModelLM"], "d_model": d, "n_heads": heads,
        "n_kv_heads": kv_heads, "n_layers": layers, "mlp_hidden_size": 3 * d, "mlp_ratio": 4,
        "activation_type": "silu", "block_type": "llama", "block_group_size": 1, "vocab_size": vocab,
        "embedding_size": vocab, "weight_tying": False, "rope": True, "rope_full_precision": True,
        "rope_theta": 500000.0, "alibi": False, "max_sequence_length": 256, "layer_norm_type": "rms",
        "rms_norm_eps": 1e-5, "layer_norm_with_affine": True, "bias_for_layer_norm": False,
        "attention_layer_norm": False, "include_bias": False, "include_qkv_bias": False, "input_emb_norm": False,
        "scale_logits": False, "eos_token_id": 0, "pad_token_id": 0, "mask_token_id": 2, "torch_dtype": "float32",
    }


def llada_tensors(cfg: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    d, v, m = cfg["d_model"], cfg["embedding_size"], cfg["mlp_hidden_size"]
    kv = cfg["n_kv_heads"] * d // cfg["n_heads"]
    r = lambda *s: torch.randn(*s, generator=g) * 0.2  # noqa: E731
    t = {"model.transformer.wte.weight": r(v, d), "model.transformer.ln_f.weight": 1 + r(d),
         "model.transformer.ff_out.weight": r(v, d)}
    for i in range(cfg["n_layers"]):
        p = f"model.transformer.blocks.{i}."
        t |= {p + "attn_norm.weight": 1 + r(d), p + "q_proj.weight": r(d, d), p + "k_proj.weight": r(kv, d),
              p + "v_proj.weight": r(kv, d), p + "attn_out.weight": r(d, d), p + "ff_norm.weight": 1 + r(d),
              p + "ff_proj.weight": r(m, d), p + "up_proj.weight": r(m, d), p + "ff_out.weight": r(d, m)}
    return t


def dream_config(d: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2, vocab: int = 96) -> dict:
    return {
        "model_type": "Dream", "architectures": ["DreamModel"], "hidden_size": d, "intermediate_size": 3 * d,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None,
        "max_position_embeddings": 256, "vocab_size": vocab, "tie_word_embeddings": False,
        "use_sliding_window": False, "sliding_window": None, "max_window_layers": layers,
        "mask_token_id": 3, "pad_token_id": 0, "eos_token_id": 0, "bos_token_id": 0,
        "attention_dropout": 0.0, "torch_dtype": "float32",
    }


def dream_tensors(cfg: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    d, v, m = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    kv = cfg["num_key_value_heads"] * d // cfg["num_attention_heads"]
    r = lambda *s: torch.randn(*s, generator=g) * 0.2  # noqa: E731
    t = {"model.embed_tokens.weight": r(v, d), "model.norm.weight": 1 + r(d), "lm_head.weight": r(v, d)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t |= {p + "input_layernorm.weight": 1 + r(d), p + "self_attn.q_proj.weight": r(d, d),
              p + "self_attn.q_proj.bias": r(d), p + "self_attn.k_proj.weight": r(kv, d),
              p + "self_attn.k_proj.bias": r(kv), p + "self_attn.v_proj.weight": r(kv, d),
              p + "self_attn.v_proj.bias": r(kv), p + "self_attn.o_proj.weight": r(d, d),
              p + "post_attention_layernorm.weight": 1 + r(d), p + "mlp.gate_proj.weight": r(m, d),
              p + "mlp.up_proj.weight": r(m, d), p + "mlp.down_proj.weight": r(d, m)}
    return t


def write_checkpoint(root: Path, family: str, shards: int = 1, seed: int = 0, **shape) -> Path:
    """Write a tiny `family` ("llada" | "dream") checkpoint into `root` and return it."""
    root.mkdir(parents=True, exist_ok=True)
    if family == "llada":
        cfg = llada_config(**shape)
        tensors = llada_tensors(cfg, seed)
        write_tokenizer(root, LLADA_SPECIALS, "<|endoftext|>", "<|mdm_mask|>", cfg["vocab_size"])
    else:
        cfg = dream_config(**shape)
        tensors = dream_tensors(cfg, seed)
        write_tokenizer(root, DREAM_SPECIALS, "<|endoftext|>", "<|mask|>", cfg["vocab_size"])
    (root / "config.json").write_text(json.dumps(cfg))
    _save(root, tensors, shards)
    return root
