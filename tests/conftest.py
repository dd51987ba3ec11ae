"""Test-session setup: the Triton interpreter must be on before any @triton.jit decorator runs (kernels are
compiled lazily, on first use, so setting it here is early enough)."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
