"""`ModelSpec`: the family-independent description of a checkpoint's architecture.

Adapters (`llada.py`, `dream.py`) translate a checkpoint's `config.json` into this one frozen record; the
transformer (`transformer.py`) is built from it alone and never reads a family's config keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from polestar.errors import CheckpointError


@dataclass(frozen=True)
class ModelSpec:
    family: str  # "llada" | "dream"
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    mlp_hidden: int
    vocab_size: int
    max_seq_len: int
    rms_eps: float
    rope_theta: float
    qkv_bias: bool
    tie_embeddings: bool
    # Dream predicts position j from output row j-1 (Qwen's next-token head); LLaDA from row j.
    logit_shift: int
    # LLaDA rotates q/k in fp32 and rounds once; Dream casts cos/sin to the activation dtype first.
    rope_in_fp32: bool
    mask_id: int
    eos_id: int
    pad_id: int
    bos_id: int | None
    torch_dtype: str  # dtype the checkpoint is stored in, e.g. "bfloat16"

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise CheckpointError(
                f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}: the config is inconsistent"
            )
        if self.n_heads % self.n_kv_heads:
            raise CheckpointError(
                f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}: "
                "grouped-query attention needs whole groups"
            )
        if self.head_dim % 2:
            raise CheckpointError(f"head_dim {self.head_dim} is odd: rotary embeddings need an even head_dim")
        if self.logit_shift not in (0, 1):
            raise CheckpointError(f"logit_shift must be 0 or 1, got {self.logit_shift}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim
