"""Named timing sections for per-step cost breakdowns (the paper's Fig 12), off unless collected.

    with profiling.collect() as times:       # analysis/step_breakdown.py
        decode(...)
    times  # {"polestar/drift": seconds, ...}

Library code marks regions with `with profiling.section("polestar/drift"):`. When no collection is active a
section costs one attribute lookup; when active it synchronises the device at both ends (so GPU time lands in the
section that queued it) and adds the wall time to its name. Sections may nest; each records its inclusive time.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

import torch

_active: dict[str, float] | None = None


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


@contextmanager
def section(name: str):
    if _active is None:
        yield
        return
    _sync()
    start = time.perf_counter()
    try:
        yield
    finally:
        _sync()
        _active[name] += time.perf_counter() - start


def collecting() -> bool:
    """Whether a `collect` is active (work that would run beside other work then runs in line: `polestar.side`)."""
    return _active is not None


@contextmanager
def collect():
    """Collect the sections run inside the block into a dict of seconds by name."""
    global _active
    previous, _active = _active, defaultdict(float)
    times = _active
    try:
        yield times
    finally:
        _active = previous
