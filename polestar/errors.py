"""Typed errors of the library. Every message says what went wrong and what to do about it."""

from __future__ import annotations


class PolestarError(Exception):
    """Base class of every error the library raises on purpose."""


class ConfigError(PolestarError, ValueError):
    """A configuration value is out of range or inconsistent with another one."""


class CheckpointError(PolestarError):
    """A checkpoint directory cannot be loaded as it is."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """Neither a local directory nor a reachable hub repository matches the name."""


class UnsupportedArchitectureError(CheckpointError):
    """The checkpoint's `model_type` / `architectures` is not a family we implement."""


class UnsafeCheckpointError(CheckpointError):
    """The directory holds only pickle-based weights (`*.bin`, `*.pt`); we load safetensors only."""


class TensorMismatchError(CheckpointError):
    """Tensors are missing, unexpected or of the wrong shape."""


class TokenizerMismatchError(CheckpointError):
    """The tokenizer disagrees with the model config about a special token."""
