"""`KVCache`: the explicit per-layer key/value store every decoding policy reads and writes.

Rows are canvas positions. Keys are stored *after* rotary embedding at their row's position, so a step
reads them as they are (rotating every cached key at every layer call cost ~10% of a dual-cache step on
the embedded model). Polestar's content-only proxy attention rotates them back (`RotaryTable.apply(...,
inverse=True)`); the rounding of that round trip is far below the drift signal.

Layout: `k`, `v` are [n_layers, batch, n_kv_heads, length, head_dim]. Batch > 1 with left padding: the
transformer's `pad` argument (each row attends over its own columns); `key_padding` ([batch, length], True =
ignore) masks keys for every row alike.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(
        self,
        n_layers: int,
        batch: int,
        n_kv_heads: int,
        length: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        shape = (n_layers, batch, n_kv_heads, length, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.key_padding: torch.Tensor | None = None
        self.positions = torch.arange(length, device=device)  # every row's position (one tensor: rotary reuse)

    @property
    def length(self) -> int:
        return self.k.shape[3]

    @property
    def n_layers(self) -> int:
        return self.k.shape[0]

    def write(self, layer: int, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              keep: torch.Tensor | None = None) -> None:
        """Overwrite rows `positions` [n] of `layer` with `k`, `v` [batch, n_kv_heads, n, head_dim]; where `keep`
        [batch, n] is True the old entry stays (a batch row that would not have recomputed that position alone)."""
        if keep is not None:
            held = keep[:, None, :, None]
            k = torch.where(held, self.k[layer][:, :, positions], k)
            v = torch.where(held, self.v[layer][:, :, positions], v)
        self.k[layer][:, :, positions] = k
        self.v[layer][:, :, positions] = v

    def layer(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys (rotated) and values of every row: two [batch, n_kv_heads, length, head_dim] views."""
        return self.k[layer], self.v[layer]
