"""Thin per-family adapters: config keys -> `ModelSpec`, and our parameter names -> checkpoint tensor names.

LLaDA (`model_type` "llada", `LLaDAModelLM`): OLMo-style keys (`d_model`, `n_heads`...), tensors under
`model.transformer.`, untied LM head `model.transformer.ff_out`, no logit shift, RoPE rotated in fp32.
Dream (`model_type` "Dream", `DreamModel`): Qwen2 keys and names, q/k/v bias, grouped K/V heads, logits
shifted right by one, RoPE in the activation dtype. See `docs/checkpoints.md` §1–2.
Adapters own no decoding logic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from polestar.errors import CheckpointError, UnsupportedArchitectureError
from polestar.models.spec import ModelSpec


@dataclass(frozen=True)
class Family:
    name: str
    model_types: tuple[str, ...]
    architectures: tuple[str, ...]
    parse: Callable[[dict[str, Any]], ModelSpec]
    top_names: dict[str, str]  # our name -> checkpoint name, outside the layers
    layer_names: dict[str, str]  # our suffix -> checkpoint suffix, inside layer {i}
    layer_prefix: str  # checkpoint prefix of layer i, with "{i}"
    mask_tokens: tuple[str, ...]  # token strings the family uses for the mask

    def tensor_names(self, spec: ModelSpec) -> dict[str, str]:
        """Every tensor the checkpoint must hold, as {our parameter name: checkpoint name}."""
        names = dict(self.top_names)
        if spec.tie_embeddings:
            names.pop("lm_head.weight")
        for i in range(spec.n_layers):
            for ours, theirs in self.layer_names.items():
                if ours.endswith(".bias") and not spec.qkv_bias:
                    continue
                names[f"layers.{i}.{ours}"] = self.layer_prefix.format(i=i) + theirs
        return names


def _require(cfg: dict[str, Any], key: str, family: str) -> Any:
    if cfg.get(key) is None:
        raise CheckpointError(
            f"config.json of this {family} checkpoint has no '{key}': add it (see the published config)")
    return cfg[key]


def _expect(cfg: dict[str, Any], key: str, allowed: tuple, family: str) -> None:
    value = cfg.get(key, allowed[0])
    if value not in allowed:
        raise UnsupportedArchitectureError(
            f"{family} config has {key}={value!r}; this implementation supports {key} in {allowed} only"
        )


def _dtype(cfg: dict[str, Any]) -> str:
    return str(cfg.get("torch_dtype") or cfg.get("dtype") or "float32")


def _parse_llada(cfg: dict[str, Any]) -> ModelSpec:
    f = "LLaDA"
    for key, allowed in {
        "block_type": ("llama",),
        "layer_norm_type": ("rms",),
        "activation_type": ("silu",),
        "rope": (True,),
        "alibi": (False,),
        "attention_layer_norm": (False,),
        "input_emb_norm": (False,),
        "scale_logits": (False,),
        "include_bias": (False,),
        "block_group_size": (1,),
    }.items():
        _expect(cfg, key, allowed, f)
    d = _require(cfg, "d_model", f)
    n_heads = _require(cfg, "n_heads", f)
    n_kv = cfg.get("n_kv_heads") or (1 if cfg.get("multi_query_attention") else n_heads)
    mlp = cfg.get("mlp_hidden_size") or cfg.get("mlp_ratio", 4) * d
    vocab = max(_require(cfg, "vocab_size", f), cfg.get("embedding_size") or 0)
    eos = _require(cfg, "eos_token_id", f)
    return ModelSpec(
        family="llada",
        d_model=d,
        n_layers=_require(cfg, "n_layers", f),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        mlp_hidden=mlp,
        vocab_size=vocab,
        max_seq_len=cfg.get("max_sequence_length", 4096),
        rms_eps=cfg.get("rms_norm_eps", 1e-5),
        rope_theta=cfg.get("rope_theta", 10000.0),
        qkv_bias=bool(cfg.get("include_qkv_bias", False)),
        tie_embeddings=bool(cfg.get("weight_tying", False)),
        logit_shift=0,
        rope_in_fp32=bool(cfg.get("rope_full_precision", True)),
        mask_id=_require(cfg, "mask_token_id", f),
        eos_id=eos,
        pad_id=cfg.get("pad_token_id", eos) if cfg.get("pad_token_id") is not None else eos,
        bos_id=cfg.get("bos_token_id"),
        torch_dtype=_dtype(cfg),
    )


def _parse_dream(cfg: dict[str, Any]) -> ModelSpec:
    f = "Dream"
    _expect(cfg, "hidden_act", ("silu",), f)
    _expect(cfg, "use_sliding_window", (False,), f)
    _expect(cfg, "rope_scaling", (None,), f)
    d = _require(cfg, "hidden_size", f)
    n_heads = _require(cfg, "num_attention_heads", f)
    eos = _require(cfg, "eos_token_id", f)
    rope = cfg.get("rope_parameters") or {}
    return ModelSpec(
        family="dream",
        d_model=d,
        n_layers=_require(cfg, "num_hidden_layers", f),
        n_heads=n_heads,
        n_kv_heads=cfg.get("num_key_value_heads") or n_heads,
        mlp_hidden=_require(cfg, "intermediate_size", f),
        vocab_size=_require(cfg, "vocab_size", f),
        max_seq_len=cfg.get("max_position_embeddings", 32768),
        rms_eps=cfg.get("rms_norm_eps", 1e-6),
        rope_theta=cfg.get("rope_theta") or rope.get("rope_theta", 10000.0),
        qkv_bias=True,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        logit_shift=1,
        rope_in_fp32=False,
        mask_id=_require(cfg, "mask_token_id", f),
        eos_id=eos,
        pad_id=cfg.get("pad_token_id") if cfg.get("pad_token_id") is not None else eos,
        bos_id=cfg.get("bos_token_id"),
        torch_dtype=_dtype(cfg),
    )


LLADA = Family(
    name="llada",
    model_types=("llada",),
    architectures=("LLaDAModelLM",),
    parse=_parse_llada,
    top_names={
        "embed_tokens.weight": "model.transformer.wte.weight",
        "final_norm.weight": "model.transformer.ln_f.weight",
        "lm_head.weight": "model.transformer.ff_out.weight",
    },
    layer_prefix="model.transformer.blocks.{i}.",
    layer_names={
        "attn_norm.weight": "attn_norm.weight",
        "wq.weight": "q_proj.weight",
        "wq.bias": "q_proj.bias",
        "wk.weight": "k_proj.weight",
        "wk.bias": "k_proj.bias",
        "wv.weight": "v_proj.weight",
        "wv.bias": "v_proj.bias",
        "wo.weight": "attn_out.weight",
        "mlp_norm.weight": "ff_norm.weight",
        "w_gate.weight": "ff_proj.weight",
        "w_up.weight": "up_proj.weight",
        "w_down.weight": "ff_out.weight",
    },
    mask_tokens=("<|mdm_mask|>",),
)

DREAM = Family(
    name="dream",
    model_types=("Dream", "dream"),
    architectures=("DreamModel",),
    parse=_parse_dream,
    top_names={
        "embed_tokens.weight": "model.embed_tokens.weight",
        "final_norm.weight": "model.norm.weight",
        "lm_head.weight": "lm_head.weight",
    },
    layer_prefix="model.layers.{i}.",
    layer_names={
        "attn_norm.weight": "input_layernorm.weight",
        "wq.weight": "self_attn.q_proj.weight",
        "wq.bias": "self_attn.q_proj.bias",
        "wk.weight": "self_attn.k_proj.weight",
        "wk.bias": "self_attn.k_proj.bias",
        "wv.weight": "self_attn.v_proj.weight",
        "wv.bias": "self_attn.v_proj.bias",
        "wo.weight": "self_attn.o_proj.weight",
        "mlp_norm.weight": "post_attention_layernorm.weight",
        "w_gate.weight": "mlp.gate_proj.weight",
        "w_up.weight": "mlp.up_proj.weight",
        "w_down.weight": "mlp.down_proj.weight",
    },
    mask_tokens=("<|mask|>",),
)

FAMILIES = (LLADA, DREAM)


def family_of(cfg: dict[str, Any]) -> Family:
    """Dispatch on `architectures` first (LLaDA-MoE shares model_type "llada"), then on `model_type`."""
    archs = cfg.get("architectures") or []
    model_type = cfg.get("model_type")
    for family in FAMILIES:
        if archs and any(a in family.architectures for a in archs):
            return family
        if not archs and model_type in family.model_types:
            return family
    known = ", ".join(f"{f.name} ({'/'.join(f.architectures)})" for f in FAMILIES)
    raise UnsupportedArchitectureError(
        f"unsupported architecture: model_type={model_type!r}, architectures={archs!r}. "
        f"Supported families: {known}"
    )
