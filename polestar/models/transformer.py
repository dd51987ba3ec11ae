"""One bidirectional pre-norm transformer serving LLaDA and Dream (per-family differences live in `ModelSpec`).

Math per layer (docs/checkpoints.md §1.3, §2.2): x = h + W_o·Attn(RoPE(W_q·n(h)), RoPE(W_k·n(h)), W_v·n(h));
out = x + W_down·(SiLU(W_gate·n'(x)) ⊙ W_up·n'(x)), with RMSNorm n computed in fp32, cast back to the
activation dtype, then scaled by its weight. Attention is fully bidirectional (no mask), scale 1/√head_dim,
and grouped-query heads share K/V consecutively (query head h reads K/V head h // (n_heads / n_kv_heads)).

The decoding policies drive the model layer by layer through four operations:
    embed(ids)                                   -> layer-0 input hidden states [batch, n, d_model]
    layer(l, h, positions, cache, need_attn)     -> output of layer l for the query rows `positions`
    head(h)                                      -> final norm + LM head, logits [batch, n, vocab]
    predicting_rows(positions)                   -> which output rows predict those positions (logit shift)
`forward` (the full-canvas pass) is a loop over exactly these operations, not a second implementation.

Batch > 1 with prompts of different lengths: rows are left-padded to a common length and `pad` [batch] gives
each row's number of padding columns. A row's rotary positions then start at 0 after its padding, and its
queries attend over its own columns only (one attention call per row over a slice of the keys): each row
computes what it computes alone, bit for bit (the projections and the MLP are row-independent matmuls).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from polestar.models.cache import KVCache
from polestar.models.rope import RotaryTable, version
from polestar.models.spec import ModelSpec


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.to(torch.promote_types(x.dtype, torch.float32))
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.to(x.dtype) * self.weight


class Block(nn.Module):
    """Parameters of one layer; the layer's computation is `Transformer.layer`."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        d, kv = spec.d_model, spec.kv_dim
        self.attn_norm = RMSNorm(d, spec.rms_eps)
        self.wq = nn.Linear(d, d, bias=spec.qkv_bias)
        self.wk = nn.Linear(d, kv, bias=spec.qkv_bias)
        self.wv = nn.Linear(d, kv, bias=spec.qkv_bias)
        self.wo = nn.Linear(d, d, bias=False)
        self.mlp_norm = RMSNorm(d, spec.rms_eps)
        self.w_gate = nn.Linear(d, spec.mlp_hidden, bias=False)
        self.w_up = nn.Linear(d, spec.mlp_hidden, bias=False)
        self.w_down = nn.Linear(spec.mlp_hidden, d, bias=False)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        m = self.mlp_norm(x)
        return x + self.w_down(F.silu(self.w_gate(m)) * self.w_up(m))


@dataclass
class LayerOutput:
    hidden: torch.Tensor  # [batch, n, d_model]: the layer's output for the query rows (= input of layer l+1)
    attn: torch.Tensor | None  # [batch, n_heads, n, length] attention probabilities (≥ fp32), when requested


@dataclass
class ForwardOutput:
    logits: torch.Tensor  # [batch, length, vocab], aligned: row j predicts position j
    hidden_states: list[torch.Tensor] | None  # input of each layer, then the last layer's output (pre-norm)
    attentions: list[torch.Tensor] | None  # per layer [batch, n_heads, length, length] fp32


class Transformer(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        self.embed_tokens = nn.Embedding(spec.vocab_size, spec.d_model)
        self.layers = nn.ModuleList(Block(spec) for _ in range(spec.n_layers))
        self.final_norm = RMSNorm(spec.d_model, spec.rms_eps)
        self.lm_head = None if spec.tie_embeddings else nn.Linear(spec.d_model, spec.vocab_size, bias=False)
        self.rope = RotaryTable(spec.head_dim, spec.rope_theta, spec.max_seq_len, spec.rope_in_fp32)
        self.tokenizer = None  # set by `load_model`
        self.config: dict = {}  # the checkpoint's config.json, set by `load_model`
        self.path: str | None = None
        self._rotary_memo: tuple | None = None  # see `_row_positions`

    # --- identity -------------------------------------------------------------------------------------
    @property
    def mask_id(self) -> int:
        return self.spec.mask_id

    @property
    def eos_id(self) -> int:
        return self.spec.eos_id

    @property
    def logit_shift(self) -> int:
        return self.spec.logit_shift

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    def init_weights(self, generator: torch.Generator, std: float = 0.02) -> None:
        """Random initialisation for training from scratch: N(0, std) linears/embeddings, unit norms."""
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                elif name.endswith(".bias"):
                    p.zero_()
                else:
                    p.copy_(torch.randn(p.shape, generator=generator) * std)

    # --- the per-layer operations ------------------------------------------------------------------
    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [batch, n] -> layer-0 input [batch, n, d_model]."""
        return self.embed_tokens(ids)

    def new_cache(self, batch: int, length: int) -> KVCache:
        s = self.spec
        self.rope.reserve(length)
        return KVCache(s.n_layers, batch, s.n_kv_heads, length, s.head_dim, self.dtype, self.device)

    def layer(
        self,
        index: int,
        h: torch.Tensor,
        positions: torch.Tensor,
        cache: KVCache | None = None,
        need_attn: bool = False,
        write: bool = True,
        pad: torch.Tensor | None = None,
        keep: torch.Tensor | None = None,
        after_write: Callable[[], None] | None = None,
    ) -> LayerOutput:
        """Run layer `index` for query rows at absolute `positions` [n] with inputs `h` [batch, n, d_model].

        With a cache, the rows' K/V are written into it first and the queries attend over every row of the
        cache (keys rotated by their row index). Without one, the queries attend over their own rows only
        (the training path, and a full forward with nothing to keep). `write=False` attends over the cache as it
        is, without storing the rows' K/V (Polestar's sparse recompute of rows whose inputs did not change).
        `pad` [batch]: left padding per row (module docstring); `keep` [batch, n] bool: cache entries left as
        they are for those (row, position) pairs, as if that row had not pushed the position through.
        `after_write` is called once the rows' K/V are in the cache, before they attend (Polestar starts the
        layer's work that reads the cache beside the rows' attention and MLP: `polestar.side`).
        """
        block = self.layers[index]
        own_kv = cache is None or write  # read-only rows attend over the cache's K/V and never need their own
        q, k, v = self.project_qkv(index, h, kv=own_kv)
        rotary = positions if pad is None else self._row_positions(positions, pad)
        q = self.rope.apply(q, rotary)
        k = self.rope.apply(k, rotary) if own_kv else None
        if cache is not None:
            if write:
                cache.write(index, positions, k, v, keep)
            if after_write is not None:
                after_write()
            k_all, v_all = cache.layer(index)
            padding, key_positions = cache.key_padding, cache.positions
        else:  # contiguous like the cache's rows, so both paths run the same attention kernel bit for bit
            k_all, v_all, padding, key_positions = k.contiguous(), v.contiguous(), None, positions
        if pad is not None:
            att, probs = self._attend_rows(q, k_all, v_all, torch.searchsorted(positions, pad),
                                           torch.searchsorted(key_positions, pad), need_attn)
        else:
            att, probs = self.attend(q, k_all, v_all, padding, need_attn)
        b, n = h.shape[:2]
        x = h + block.wo(att.transpose(1, 2).reshape(b, n, self.spec.d_model))
        return LayerOutput(hidden=block.mlp(x), attn=probs)

    def _row_positions(self, positions: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        """Rotary positions [batch, n] of canvas rows `positions` [n] under left padding `pad` [batch] (padding
        columns get 0). One tensor per (positions, pad) pair, kept while they are the latest: every layer of a
        forward rotates at the same positions, and the rotary table keeps the angles of a tensor it has seen."""
        last = self._rotary_memo
        if last is not None and last[0] is positions and last[1] is pad and last[2] == (version(positions),
                                                                                          version(pad)):
            return last[3]
        rotary = (positions.unsqueeze(0) - pad.unsqueeze(1)).clamp_min(0)
        self._rotary_memo = (positions, pad, (version(positions), version(pad)), rotary)
        return rotary

    def _attend_rows(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, query_first: torch.Tensor,
                     key_first: torch.Tensor, need_attn: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention of each row's own queries (`query_first[row]:`) over its own key columns (`key_first[row]:`),
        one call per row on exactly the shapes the row has alone: the attention kernel blocks its queries and keys
        by their count, so a longer padded row would round differently. Padding query rows get zeros;
        probabilities, on request, are 0 on the padding columns."""
        q_starts, k_starts = query_first.tolist(), key_first.tolist()
        if not any(k_starts):
            return self.attend(q, k, v, None, need_attn)
        outs, probs = [], []
        for row, (qs, ks) in enumerate(zip(q_starts, k_starts)):
            o, p = self.attend(q[row:row + 1, :, qs:], k[row:row + 1, :, ks:], v[row:row + 1, :, ks:], None,
                               need_attn)
            outs.append(F.pad(o, (0, 0, qs, 0)))
            if need_attn:
                probs.append(F.pad(p, (ks, 0, qs, 0)))
        return torch.cat(outs), (torch.cat(probs) if need_attn else None)

    def kv_rows(self, index: int, h: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K (rotated at `positions`) and V of layer `index` for inputs `h` [batch, n, d], as the cache stores them
        (no query projection: Polestar's packet consumption needs only the rows' K/V)."""
        _, k, v = self.project_qkv(index, h, query=False)
        return self.rope.apply(k, positions), v

    def attention_probs(
        self, index: int, h: torch.Tensor, positions: torch.Tensor | None, cache: KVCache, rotary: bool = True
    ) -> torch.Tensor:
        """Attention probabilities [batch, n_heads, n, length] (≥ fp32) of queries from layer inputs `h`
        [batch, n, d] over every cached row of layer `index`, without writing anything. With `rotary` off,
        queries and keys are content only (no position): Polestar's proxy attention."""
        q = self.project_q(index, h)
        k, v = cache.layer(index)
        if rotary:
            q = self.rope.apply(q, positions)
        else:
            k = self.rope.apply(k, cache.positions, inverse=True)
        return self.attend(q, k, v, cache.key_padding, need_attn=True)[1]

    def project_q(self, index: int, h: torch.Tensor) -> torch.Tensor:
        """Normed query projection of `h` [batch, n, d] alone: [b, heads, n, hd] (Polestar's proxy queries)."""
        return self.project_qkv(index, h, kv=False)[0]

    def project_qkv(self, index: int, h: torch.Tensor, query: bool = True, kv: bool = True):
        """Normed projections of `h` [batch, n, d]: q [b, heads, n, hd] (None without `query`), k and v
        [b, kv_heads, n, hd] (None without `kv`)."""
        block, s = self.layers[index], self.spec
        b, n = h.shape[:2]
        x = block.attn_norm(h)
        q = block.wq(x).view(b, n, s.n_heads, s.head_dim).transpose(1, 2) if query else None
        if not kv:
            return q, None, None
        k = block.wk(x).view(b, n, s.n_kv_heads, s.head_dim).transpose(1, 2)
        v = block.wv(x).view(b, n, s.n_kv_heads, s.head_dim).transpose(1, 2)
        return q, k, v

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        key_padding: torch.Tensor | None = None,
        need_attn: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Bidirectional attention of q [b, H, n, hd] over k, v [b, H_kv, L, hd]; probs in fp32 on request."""
        mask = None if key_padding is None else ~key_padding[:, None, None, :]
        if not need_attn:
            gqa = self.spec.n_heads != self.spec.n_kv_heads
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa), None
        group = self.spec.n_heads // self.spec.n_kv_heads
        acc = torch.promote_types(q.dtype, torch.float32)
        kf = k.to(acc).repeat_interleave(group, dim=1)
        vf = v.to(acc).repeat_interleave(group, dim=1)
        scores = (q.to(acc) @ kf.transpose(-1, -2)) / math.sqrt(self.spec.head_dim)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        probs = scores.softmax(dim=-1)
        return (probs @ vf).to(q.dtype), probs

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Final RMSNorm + LM head: h [batch, n, d_model] -> logits [batch, n, vocab] (unshifted rows)."""
        x = self.final_norm(h)
        return F.linear(x, self.embed_tokens.weight) if self.lm_head is None else self.lm_head(x)

    def predicting_rows(self, positions: torch.Tensor) -> torch.Tensor:
        """Output rows whose logits predict `positions`: the same rows (LLaDA) or one to the left (Dream).

        Position 0 keeps its own row under a shift (it is never a mask in practice; Dream's sampler does so).
        """
        return (positions - self.logit_shift).clamp_min(0)

    def align(self, logits: torch.Tensor) -> torch.Tensor:
        """Full-canvas logits [batch, length, vocab] -> row j predicts position j."""
        if self.logit_shift == 0:
            return logits
        return torch.cat([logits[:, :1], logits[:, :-1]], dim=1)

    # --- the full-canvas forward ---------------------------------------------------------------------
    def run(
        self,
        ids: torch.Tensor,
        cache: KVCache | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        pad: torch.Tensor | None = None,
    ) -> ForwardOutput:
        """Full forward over ids [batch, length]; with a cache, every layer's K/V rows are written to it.
        `pad` [batch]: left padding per row (module docstring)."""
        positions = torch.arange(ids.shape[1], device=ids.device)
        self.rope.reserve(ids.shape[1])
        h = self.embed(ids)
        hidden, attentions = ([], []) if output_hidden_states or output_attentions else (None, None)
        for index in range(self.spec.n_layers):
            if output_hidden_states:
                hidden.append(h)
            out = self.layer(index, h, positions, cache, need_attn=output_attentions, pad=pad)
            h = out.hidden
            if output_attentions:
                attentions.append(out.attn)
        if output_hidden_states:
            hidden.append(h)
        return ForwardOutput(
            logits=self.align(self.head(h)),
            hidden_states=hidden if output_hidden_states else None,
            attentions=attentions if output_attentions else None,
        )

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """ids [batch, length] -> aligned logits [batch, length, vocab] (row j predicts position j)."""
        return self.run(input_ids).logits
