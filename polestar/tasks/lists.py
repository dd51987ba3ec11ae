"""`lists`: copy, reverse or sort numbers or words (ParallelBench's "waiting line" tasks).

List lengths are log-uniform from MIN_ITEMS to a per-operation maximum, so answers span a few tokens to most
of a 256-token canvas for copy and reverse (MAX_ITEMS; a number 0–99 is one or two digit tokens, a word one
token) and up to SORT_MAX_ITEMS items for sort, the one operation that needs more than copying. Items are
distinct (drawn without replacement): an item's neighbour then names its place in the prompt, which is how a
small model copies long lists (with repeats it must count positions; a run with repeated items learnt no
copying in 750 CPU steps, model card). The answer is the resulting items separated by single spaces; scoring
is exact match on the item sequence.
"""

from __future__ import annotations

import random
import re

from polestar.tasks.base import Example


WORDS = (
    "ant bear cat deer eagle fox goat hare ibis jay kiwi lion mole newt owl pig quail rat seal toad urchin "
    "vole wolf yak zebra apple bread cheese donut fig grape honey jam kale lime mango nut olive pear rice "
    "salt tea"
).split()
MIN_ITEMS = 4
MAX_ITEMS = {"numbers": 100, "words": len(WORDS)}  # ≤ 190 and ≤ 40 tokens: a 256 canvas holds answer and EOS
SORT_MAX_ITEMS = 32
REVERSE_LONG_MIN_ITEMS = 16  # the long-reversal drill's shortest list (candidate_reverse_long)
SORT_LONG_MIN_ITEMS = 10  # the long-sort drill's shortest list (candidate_sort_long)
OPS = {
    "copy": ("Copy the list: {items}", "Repeat these items exactly: {items}", "Write the list again: {items}"),
    "reverse": ("Reverse the list: {items}", "Write these items in reverse order: {items}",
                "List them backwards: {items}"),
    "sort": ("Sort the list in ascending order: {items}", "Put these items in sorted order: {items}",
             "Sort from smallest to largest: {items}"),
}


def candidate(rng: random.Random, ops: tuple[str, ...] = tuple(OPS), words_only: bool = False,
              long_only: bool = False) -> Example:
    op = rng.choice(ops)
    numbers = not words_only and rng.random() < 0.5
    top = SORT_MAX_ITEMS if op == "sort" else MAX_ITEMS["numbers" if numbers else "words"]
    if long_only:  # the top two thirds of the range, uniformly
        k = rng.randint(max(MIN_ITEMS, top // 3), top)
    else:
        k = _log_uniform_count(rng, top)
    items = [str(x) for x in rng.sample(range(100), k)] if numbers else rng.sample(WORDS, k)
    return _example(rng, op, items)


def _log_uniform_count(rng: random.Random, top: int) -> int:
    """An item count log-uniform from MIN_ITEMS to `top`: answers from a few tokens to most of the canvas."""
    return round(MIN_ITEMS * (top / MIN_ITEMS) ** rng.random())


def _example(rng: random.Random, op: str, items: list[str]) -> Example:
    """The `lists` example applying `op` to `items` (numbers sort by value, words alphabetically), in one of the
    operation's phrasings."""
    key = int if items[0].isdigit() else str
    result = {"copy": items, "reverse": items[::-1], "sort": sorted(items, key=key)}[op]
    prompt = rng.choice(OPS[op]).format(items=" ".join(items))
    answer = " ".join(result)
    return Example(task="lists", prompt=prompt, answer=answer, target=answer)


def _distinct_numbers(rng: random.Random, op: str, lo: int, hi: int) -> Example:
    """`op` over lo–hi distinct numbers of 0–99 (the count uniform): the long-list drills' draw."""
    return _example(rng, op, [str(x) for x in rng.sample(range(100), rng.randint(lo, hi))])


def candidate_copy(rng: random.Random) -> Example:
    """The copy operation only: a training curriculum step (copying from the prompt is the circuit reverse and
    sort build on, and mixed data dilutes it)."""
    return candidate(rng, ("copy",))


def candidate_sort(rng: random.Random) -> Example:
    """The sort operation only: a training drill for the one operation that needs more than copying (the v3
    weights' `lists` failures were mostly sorts: an item dropped or written twice)."""
    return candidate(rng, ("sort",))


def candidate_sort_dense(rng: random.Random) -> Example:
    """A sort of numbers drawn from a narrow range only: a training drill for the choice a sort of numbers gets
    wrong. Of the model card v10 weights' wrong sorts among 100 held-out `lists` (18 decodes, at one token per step
    and at τ = 0.9), 12 first went wrong at a units digit: a number written twice (`32 32` for `32 33`) or a larger
    one of the same tens (`45` for `43`). Drawn from 0–99, a sort of k numbers shares each tens digit among ~k/10 of
    them, and half of a sorted answer's two-digit numbers share it with the number before; drawn from a window of k
    to 3k consecutive values, about four in five do, so most units digits are that choice (the window is wider than
    k so that the next number is not always the next integer). A quarter of the windows start at 0: the other way
    those sorts went wrong is at their start, where one-token numbers meet two-token ones (`1 2 4 7 9 11` written
    with `11` two slots early). k is log-uniform over the sort's lengths, as in `lists`; the prompt and the answer
    are a `lists` sort's."""
    k = _log_uniform_count(rng, SORT_MAX_ITEMS)
    width = min(100, rng.randint(k, 3 * k))
    low = 0 if rng.random() < 0.25 else rng.randint(0, 100 - width)
    return _example(rng, "sort", [str(x) for x in rng.sample(range(low, low + width), k)])


def candidate_sort_long(rng: random.Random) -> Example:
    """A sort of 10–32 distinct numbers only, lengths uniform: a training drill for the sorts no weights so far get
    right. Of 300 held-out `lists`, the v21–v23 weights sort 26–29 of the 29 lists of 4–9 numbers and 4–7 of the 18
    of 10–31; `lists-sort` draws its lengths log-uniform, so nearly two thirds of its number sorts have fewer than
    ten items, and `lists-sort-dense` (v20) likewise. The choice these sorts get wrong is the units digit: which of
    the prompt's numbers with the tens digit just written comes next (`--sort-successor`: right 96 % of the time in
    sorts of 4–9 numbers, 71–73 % in sorts of 19–32)."""
    return _distinct_numbers(rng, "sort", SORT_LONG_MIN_ITEMS, SORT_MAX_ITEMS)


def candidate_long(rng: random.Random) -> Example:
    """Copy or reverse of a long list only (a third of the operation's maximum item count or more): a training
    drill for the copies and reversals the v13 weights got wrong, lists of 33–55 items that end early or run on
    (the model loses its place in the prompt; with numbers it must find it from digits that repeat). The log-uniform
    lengths of `lists` make such lists a small share of its rows."""
    return candidate(rng, ("copy", "reverse"), long_only=True)


def candidate_reverse_long(rng: random.Random) -> Example:
    """A reversal of 16–100 distinct numbers only, lengths uniform: a training drill for the reversals the model
    card v11 weights get wrong. Of 300 held-out `lists`, they reverse every list of 4–18 numbers (19 of 19) and 3 of
    the 22 of 19–88: answer item i is the prompt's item n − 1 − i, so the answer walks the prompt backwards, each
    item one or two digit tokens, and the wrong answers write one item mid-list with a digit off by one or two or
    stop early. `lists-long` draws such lists a quarter of the time (reversal or copy, numbers or words)."""
    return _distinct_numbers(rng, "reverse", REVERSE_LONG_MIN_ITEMS, MAX_ITEMS["numbers"])


def candidate_copy_words(rng: random.Random) -> Example:
    """Copy of word lists only (one token per item): the easiest curriculum step."""
    return candidate(rng, ("copy",), words_only=True)


def operation(prompt: str) -> str:
    """The operation (`copy`, `reverse` or `sort`) a `lists` prompt asks for, from its phrasing."""
    return next(op for op, phrasings in OPS.items() if prompt.startswith(tuple(p.split("{")[0] for p in phrasings)))


def units_digits(answer: str) -> list[int]:
    """Character offsets of the units digit of every number of two or more digits in `answer` (none in a list of
    words): the training focus of the sort drill. A sorted list of numbers goes wrong in its units digits (`36`
    written `37`, or a number twice, the model card's traced failure): the tens digits rise through the list, and
    the units digit is the choice among the prompt's numbers that share one. Focus rows mask exactly these, with
    the tens digits and the neighbours visible (polestar/train/objective.py:sft_loss)."""
    return [m.end() - 1 for m in re.finditer(r"\d{2,}", answer)]


def score(example: Example, completion: str) -> bool:
    return completion.split() == example.target.split()
