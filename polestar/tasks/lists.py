"""`lists`: copy, reverse or sort 4–12 numbers or words (ParallelBench's "waiting line" tasks).

The answer is the resulting items separated by single spaces; scoring is exact match on the item sequence.
"""

from __future__ import annotations

import random

from polestar.tasks.base import Example

WORDS = (
    "ant bear cat deer eagle fox goat hare ibis jay kiwi lion mole newt owl pig quail rat seal toad urchin "
    "vole wolf yak zebra apple bread cheese donut fig grape honey jam kale lime mango nut olive pear rice "
    "salt tea"
).split()
OPS = {
    "copy": ("Copy the list: {items}", "Repeat these items exactly: {items}", "Write the list again: {items}"),
    "reverse": ("Reverse the list: {items}", "Write these items in reverse order: {items}",
                "List them backwards: {items}"),
    "sort": ("Sort the list in ascending order: {items}", "Put these items in sorted order: {items}",
             "Sort from smallest to largest: {items}"),
}


def candidate(rng: random.Random, ops: tuple[str, ...] = tuple(OPS), words_only: bool = False) -> Example:
    op = rng.choice(ops)
    k = rng.randint(4, 12)
    if not words_only and rng.random() < 0.5:
        items = [str(rng.randint(0, 99)) for _ in range(k)]
        key = int
    else:
        items = [rng.choice(WORDS) for _ in range(k)]
        key = str
    result = {"copy": items, "reverse": items[::-1], "sort": sorted(items, key=key)}[op]
    prompt = rng.choice(OPS[op]).format(items=" ".join(items))
    answer = " ".join(result)
    return Example(task="lists", prompt=prompt, answer=answer, target=answer)


def candidate_copy(rng: random.Random) -> Example:
    """The copy operation only: a training curriculum step (copying from the prompt is the circuit reverse and
    sort build on, and mixed data dilutes it)."""
    return candidate(rng, ("copy",))


def candidate_copy_words(rng: random.Random) -> Example:
    """Copy of word lists only (one token per item): the easiest curriculum step."""
    return candidate(rng, ("copy",), words_only=True)


def score(example: Example, completion: str) -> bool:
    return completion.split() == example.target.split()
