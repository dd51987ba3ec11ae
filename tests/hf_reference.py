"""Stock transformers models (LlamaForCausalLM for LLaDA, Qwen2ForCausalLM for Dream) made bidirectional, with
weights mapped from the tiny checkpoints: the independent reference for our forward (docs/checkpoints.md §3)."""

from __future__ import annotations

import torch

LLADA_TO_LLAMA = {
    "attn_norm": "input_layernorm", "q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj",
    "v_proj": "self_attn.v_proj", "attn_out": "self_attn.o_proj", "ff_norm": "post_attention_layernorm",
    "ff_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj", "ff_out": "mlp.down_proj",
}


def llama_reference(cfg: dict, tensors: dict[str, torch.Tensor], dtype: torch.dtype, attn: str = "sdpa"):
    from transformers import LlamaConfig, LlamaForCausalLM

    hf_cfg = LlamaConfig(
        hidden_size=cfg["d_model"], intermediate_size=cfg["mlp_hidden_size"], num_hidden_layers=cfg["n_layers"],
        num_attention_heads=cfg["n_heads"], num_key_value_heads=cfg["n_kv_heads"],
        head_dim=cfg["d_model"] // cfg["n_heads"], vocab_size=cfg["embedding_size"], rms_norm_eps=cfg["rms_norm_eps"],
        rope_parameters={"rope_type": "default", "rope_theta": cfg["rope_theta"]},
        max_position_embeddings=cfg["max_sequence_length"], hidden_act="silu", attention_bias=False,
        mlp_bias=False, tie_word_embeddings=False, attn_implementation=attn,
    )
    state = {"model.embed_tokens.weight": tensors["model.transformer.wte.weight"],
             "model.norm.weight": tensors["model.transformer.ln_f.weight"],
             "lm_head.weight": tensors["model.transformer.ff_out.weight"]}
    for name, t in tensors.items():
        if ".blocks." in name:
            i, part = name.split(".blocks.")[1].split(".", 1)
            module = part.rsplit(".", 1)[0]
            state[f"model.layers.{i}.{LLADA_TO_LLAMA[module]}.weight"] = t
    return _build(LlamaForCausalLM(hf_cfg), state, dtype)


def qwen2_reference(cfg: dict, tensors: dict[str, torch.Tensor], dtype: torch.dtype, attn: str = "sdpa"):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hf_cfg = Qwen2Config(
        hidden_size=cfg["hidden_size"], intermediate_size=cfg["intermediate_size"],
        num_hidden_layers=cfg["num_hidden_layers"], num_attention_heads=cfg["num_attention_heads"],
        num_key_value_heads=cfg["num_key_value_heads"], vocab_size=cfg["vocab_size"],
        rms_norm_eps=cfg["rms_norm_eps"], rope_parameters={"rope_type": "default", "rope_theta": cfg["rope_theta"]},
        max_position_embeddings=cfg["max_position_embeddings"], hidden_act="silu", tie_word_embeddings=False,
        use_sliding_window=False, attn_implementation=attn,
    )
    return _build(Qwen2ForCausalLM(hf_cfg), dict(tensors), dtype)


def _build(model, state: dict[str, torch.Tensor], dtype: torch.dtype):
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    for module in model.modules():
        if hasattr(module, "is_causal"):
            module.is_causal = False
        if dtype == torch.float64 and type(module).__name__.endswith("RMSNorm"):
            # The stock norms compute in fp32 whatever the model dtype; an fp64 oracle needs the same formula
            # in fp64 (mean of squares, rsqrt(var + eps), times weight).
            module.forward = _fp64_rms_norm(module)
    return model.to(dtype).eval()


def _fp64_rms_norm(module):
    def forward(x: torch.Tensor) -> torch.Tensor:
        return module.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + module.variance_epsilon))

    return forward


def run_reference(model, ids: torch.Tensor):
    """Bidirectional forward: an explicit 4-D zero float mask plus is_causal off (docs/checkpoints.md §3).

    Attention probabilities come only from the "eager" implementation, whose softmax runs in fp32 even for an
    fp64 model; the "sdpa" one keeps fp64 throughout and is the reference for logits and hidden states."""
    dtype = next(model.parameters()).dtype
    mask = torch.zeros(ids.shape[0], 1, ids.shape[1], ids.shape[1], dtype=dtype)
    with torch.no_grad():
        eager = model.config._attn_implementation == "eager"
        return model(input_ids=ids, attention_mask=mask, output_hidden_states=True, output_attentions=eager)
