"""Rotary position embeddings, rotate-half (NeoX / HF-Llama) layout.

The angle table is computed once in fp32 on the CPU (as LLaDA's reference does, for bit-parity) and moved to
the compute device on first use; it grows when a longer position is requested.
"""

from __future__ import annotations

import torch


class RotaryTable:
    """cos/sin of `position * inv_freq`, inv_freq_j = theta^(-2j/head_dim); shapes [positions, head_dim]."""

    def __init__(self, head_dim: int, theta: float, max_positions: int, in_fp32: bool) -> None:
        self.head_dim = head_dim
        self.theta = theta
        self.in_fp32 = in_fp32
        self._cos, self._sin = self._build(max_positions)
        self._on_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def _build(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32, device="cpu") / self.head_dim))
        angles = torch.outer(torch.arange(n, dtype=torch.float32, device="cpu"), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos(), angles.sin()

    def _tables(self, device: torch.device, needed: int) -> tuple[torch.Tensor, torch.Tensor]:
        if needed > self._cos.shape[0]:
            self._cos, self._sin = self._build(max(needed, 2 * self._cos.shape[0]))
            self._on_device.clear()
        if device not in self._on_device:
            self._on_device[device] = (self._cos.to(device), self._sin.to(device))
        return self._on_device[device]

    def apply(self, x: torch.Tensor, positions: torch.Tensor, inverse: bool = False) -> torch.Tensor:
        """Rotate `x` [batch, heads, n, head_dim] by the angles of `positions` [n] (absolute indices);
        `inverse` rotates back (recovers content-only vectors from rotated ones, up to rounding)."""
        n_needed = int(positions.max()) + 1 if positions.numel() else 0
        cos, sin = self._tables(x.device, n_needed)
        cos, sin = cos[positions], sin[positions]
        if inverse:
            sin = -sin
        if self.in_fp32:
            xf = x.to(torch.promote_types(x.dtype, torch.float32))
            return (xf * cos + _rotate_half(xf) * sin).to(x.dtype)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        return x * cos + _rotate_half(x) * sin


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)
