"""`Example` and the train/test split shared by every task generator.

Disjointness by construction: an example belongs to the test split iff a hash of its prompt falls in the
test bucket, whatever seed produced it. Generators draw candidates from a seeded `random.Random` and keep
those of the requested split, so no seed can put a test prompt into training data.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Callable

TEST_BUCKETS = 10  # 1 in 10 prompts is reserved for evaluation
SPLITS = ("train", "test")


@dataclass(frozen=True)
class Example:
    task: str
    prompt: str  # the user message
    answer: str  # the reference completion
    target: str  # what is scored: the final integer (arith) or the normalised item list (lists)


def split_of(prompt: str) -> str:
    digest = hashlib.blake2b(prompt.encode(), digest_size=8).digest()
    return "test" if int.from_bytes(digest, "little") % TEST_BUCKETS == 0 else "train"


def draw(candidate: Callable[[random.Random], Example], n: int, seed: int, split: str) -> list[Example]:
    """`n` distinct examples of `split` from the stream of candidates of a `random.Random(seed)`."""
    rng = random.Random(seed)
    out: list[Example] = []
    seen: set[str] = set()
    while len(out) < n:
        ex = candidate(rng)
        if ex.prompt not in seen and split_of(ex.prompt) == split:
            seen.add(ex.prompt)
            out.append(ex)
    return out
