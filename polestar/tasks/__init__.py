"""Seeded, deterministic task generators with scorers: `make(name, n, seed)` and `score(name, example, text)`.

Tasks: `arith` (GSM8K-style word problems, scored on the integer after `####`) and `lists` (copy / reverse /
sort, exact match); `lists-copy` (the copy third of `lists`), `lists-copy-words`, `lists-sort` (the sort
third), `lists-sort-dense` (sorts of numbers from a narrow range), `lists-long` (copies and reversals of long
lists), `lists-reverse-long` (reversals of long lists of numbers) and `lists-sort-long` (sorts of ten or more
numbers) are training curriculum steps, and
`arith-drill` (bare equations, the arithmetic facts of `arith` many per token) a training drill.
`split="test"` (the default) gives held-out examples; training draws `split="train"`.
"""

from __future__ import annotations

from types import SimpleNamespace

from polestar.errors import ConfigError
from polestar.tasks import arith, lists
from polestar.tasks.base import SPLITS, Example, draw, split_of

TASKS = {"arith": arith, "lists": lists,
         # training curriculum only: the copy third of `lists` (same scorer, same train/test split rule)
         "lists-copy": SimpleNamespace(candidate=lists.candidate_copy, score=lists.score),
         "lists-copy-words": SimpleNamespace(candidate=lists.candidate_copy_words, score=lists.score),
         "lists-sort": SimpleNamespace(candidate=lists.candidate_sort, score=lists.score),
         "lists-long": SimpleNamespace(candidate=lists.candidate_long, score=lists.score),
         "lists-sort-dense": SimpleNamespace(candidate=lists.candidate_sort_dense, score=lists.score),
         "lists-reverse-long": SimpleNamespace(candidate=lists.candidate_reverse_long, score=lists.score),
         "lists-sort-long": SimpleNamespace(candidate=lists.candidate_sort_long, score=lists.score),
         # training drill: the sums, differences, products and quotients `arith` asks for, as bare equations,
         # scored like `lists` (exact match of the whitespace-separated items)
         "arith-drill": SimpleNamespace(candidate=arith.candidate_drill, score=lists.score)}

__all__ = ["TASKS", "Example", "computed", "make", "score", "split_of"]


def _task(name: str):
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r}: choose one of {', '.join(TASKS)}")
    return TASKS[name]


def make(name: str, n: int, seed: int = 0, split: str = "test") -> list[Example]:
    """`n` distinct examples of task `name` from `seed`; the same arguments always give the same list."""
    task = _task(name)
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}: use 'train' or 'test'")
    if n < 0:
        raise ConfigError(f"n must be ≥ 0, got {n}")
    return draw(task.candidate, n, seed, split)


COMPUTED = {"arith": arith.worked_digits, "arith-drill": arith.column_digits, "lists-sort": lists.units_digits,
            "lists-sort-dense": lists.units_digits, "lists-sort-long": lists.units_digits}


def computed(name: str, answer: str) -> list[int] | None:
    """Character offsets of what `answer` computes (the training focus), for tasks that define it; else None."""
    _task(name)
    fn = COMPUTED.get(name)
    return None if fn is None else fn(answer)


def score(name: str, example: Example, completion: str) -> bool:
    """True iff `completion` (the decoded answer text) solves `example`."""
    return _task(name).score(example, completion)
