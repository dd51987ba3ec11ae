"""Named values the loop, the policies and the trace share: the kind of a forward and why a token was committed.

Both are `StrEnum`s, so a trace stores plain strings (`"refresh"`, `"drift"`) and compares equal to them.
"""

from __future__ import annotations

from enum import StrEnum


class PassKind(StrEnum):
    """What one forward (one NFE) of a cache policy computed."""

    FULL = "full"  # the whole canvas, every layer's K/V written
    PREFIX = "prefix"  # Fast-dLLM prefix cache: the block and everything after it against the cached prefix
    BLOCK = "block"  # the block's rows against the cache (Fast-dLLM dual cache, Polestar without a refresh)
    QUERY = "query"  # a query set against the cache (d2Cache, EntropyCache)
    REUSE = "reuse"  # Elastic-Cache: every layer reused
    PARTIAL_REFRESH = "partial-refresh"  # Elastic-Cache: layers from the first drifting one recomputed
    WINDOWED_ENTRY = "windowed-entry"  # Polestar: block entry over the local window and the block
    REFRESH = "refresh"  # Polestar: the block's rows plus a sparse refresh of stale window rows


REFRESH_KINDS = frozenset({PassKind.REFRESH, PassKind.PARTIAL_REFRESH})  # passes that recompute stale entries


class CommitReason(StrEnum):
    """Why a position took its proposed token."""

    QUOTA = "quota"  # LLaDA: one of the step's planned number of most confident positions
    THRESHOLD = "threshold"  # confidence ≥ τ_s
    FACTOR = "factor"  # Fast-dLLM's parallel factor rule
    FORCED = "forced"  # the progress guarantee: the most confident position when no other commits
    DRIFT = "drift"  # Polestar-Commit: a sharp drift event on a fairly confident token
    SUFFIX = "suffix"  # an extra target beyond the block, committed from refreshed logits (Polestar)
