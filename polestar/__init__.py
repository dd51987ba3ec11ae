"""Polestar: decoding and analysis of masked diffusion LLMs (LLaDA, Dream).

Public names are imported lazily so `import polestar` loads neither torch nor a model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

DEFAULT_MODEL = str(Path(__file__).resolve().parent.parent / "assets" / "models" / "polestar-tiny")

_LAZY = {
    "load_model": ("polestar.models.loader", "load_model"),
    "Transformer": ("polestar.models.transformer", "Transformer"),
    "KVCache": ("polestar.models.cache", "KVCache"),
    "generate": ("polestar.api", "generate"),
    "generate_batch": ("polestar.api", "generate_batch"),
    "decode": ("polestar.decode", "decode"),
    "decode_batch": ("polestar.decode", "decode_batch"),
    "DecodeConfig": ("polestar.config", "DecodeConfig"),
    "PRESETS": ("polestar.config", "PRESETS"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'polestar' has no attribute {name!r}")


__all__ = ["DEFAULT_MODEL", *_LAZY]
