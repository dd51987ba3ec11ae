"""Rotary position embeddings, rotate-half (NeoX / HF-Llama) layout.

The angle table is computed once in fp32 on the CPU (as LLaDA's reference does, for bit-parity) and moved to
the compute device on first use; it covers the model's `max_sequence_length` and grows when a longer canvas is
reserved (`RotaryTable.reserve`, called with the cache's or the forward's length). Rotating never reads the
positions on the host, so on a GPU it never waits for the device.
"""

from __future__ import annotations

import torch


class RotaryTable:
    """cos/sin of `position * inv_freq`, inv_freq_j = theta^(-2j/head_dim); shapes [positions, head_dim].

    Rotate-half is written as a swap of the two halves times a sign-folded sine: rotate_half(x)·sin =
    swap(x)·[−sin₁, sin₂], bit-identical ((−a)·b = a·(−b) exactly) in one copy instead of four ops. The angles of
    the last few positions tensors are kept: a forward rotates q and k of every layer at the same positions (and
    Polestar's proxy attention rotates the whole cache back at `KVCache.positions`).
    """

    _KEEP = 4  # positions tensors whose angles are kept

    def __init__(self, head_dim: int, theta: float, max_positions: int, in_fp32: bool) -> None:
        self.head_dim = head_dim
        self.theta = theta
        self.in_fp32 = in_fp32
        self._tables_cpu = self._build(max_positions)
        self._on_device: dict[torch.device, tuple[torch.Tensor, ...]] = {}
        # recent (positions, its version, device, dtype, (cos, sin, inverse sin) rows); holding `positions`
        # keeps it alive, so an identity match can never be a new tensor at a reused address
        self._recent: list[tuple] = []

    def _build(self, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """cos, the sign-folded sine of a forward rotation, and that of the inverse rotation, [n, head_dim]."""
        even = torch.arange(0, self.head_dim, 2, dtype=torch.float32, device="cpu")
        inv_freq = 1.0 / (self.theta ** (even / self.head_dim))
        angles = torch.outer(torch.arange(n, dtype=torch.float32, device="cpu"), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        cos, sin = angles.cos(), angles.sin()
        sign = torch.ones(self.head_dim, device="cpu")
        sign[: self.head_dim // 2] = -1.0
        return cos, sin * sign, -sin * sign

    def reserve(self, n: int) -> None:
        """Make room for positions below `n` (a size the host knows: a cache's or a canvas's length)."""
        if n > self._tables_cpu[0].shape[0]:
            self._tables_cpu = self._build(max(n, 2 * self._tables_cpu[0].shape[0]))
            self._on_device.clear()

    def _tables(self, device: torch.device) -> tuple[torch.Tensor, ...]:
        if device not in self._on_device:
            self._on_device[device] = tuple(t.to(device) for t in self._tables_cpu)
        return self._on_device[device]

    def _rows(self, positions: torch.Tensor, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        for entry in self._recent:
            if entry[0] is positions and entry[1:4] == (version(positions), device, dtype):
                return entry[4]
        rows = tuple(t[positions].to(dtype) for t in self._tables(device))  # positions beyond `reserve`: IndexError
        self._recent = [(positions, version(positions), device, dtype, rows)] + self._recent[: self._KEEP - 1]
        return rows

    def apply(self, x: torch.Tensor, positions: torch.Tensor, inverse: bool = False) -> torch.Tensor:
        """Rotate `x` [batch, heads, n, head_dim] by the angles of `positions` [n] (absolute indices), or of
        `positions` [batch, n] (a row each: left-padded batches); `inverse` rotates back (recovers content-only
        vectors from rotated ones, up to rounding)."""
        dtype = torch.promote_types(x.dtype, torch.float32) if self.in_fp32 else x.dtype
        cos, sin, sin_inverse = self._rows(positions, x.device, dtype)
        if positions.dim() == 2:  # [batch, n, head_dim] -> broadcast over the heads
            cos, sin, sin_inverse = cos.unsqueeze(1), sin.unsqueeze(1), sin_inverse.unsqueeze(1)
        xc = x.to(dtype)
        return (xc * cos + _swap_halves(xc) * (sin_inverse if inverse else sin)).to(x.dtype)


def version(t: torch.Tensor) -> object:
    """What a memo keyed on `t` compares to notice in-place writes: its version counter, or, for an inference
    tensor (made under `torch.inference_mode`, which keeps no counter), a fresh object that matches nothing."""
    return object() if t.is_inference() else t._version


def _swap_halves(x: torch.Tensor) -> torch.Tensor:
    """[x₁, x₂] -> [x₂, x₁] along the last dimension: a roll by half (a third of a flip's time on the CPU)."""
    return x.roll(x.shape[-1] // 2, dims=-1)
