"""Task generators: determinism, correct reference answers, scorers, and train/test disjointness."""

from __future__ import annotations

import re

import pytest

from polestar import tasks
from polestar.errors import ConfigError
from polestar.tasks import arith
from polestar.tasks.base import split_of

EVAL_SEEDS = (0, 1)  # the held-out sets used in the model card and benches


@pytest.mark.parametrize("name", ["arith", "lists"])
def test_same_seed_same_examples(name):
    assert tasks.make(name, 40, seed=3) == tasks.make(name, 40, seed=3)
    assert tasks.make(name, 40, seed=3) != tasks.make(name, 40, seed=4)


def _fact(line: str) -> tuple[int, str, int, int]:
    """(a, op, b, c) of a solution line `a op b = c`, checked to be true."""
    a, op, b, eq, c = line.split()
    a, b, c = int(a), int(b), int(c)
    assert eq == "="
    if op == "/":
        assert a % b == 0
    assert c == {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]
    return a, op, b, c


def _drillable(a: int, op: str, b: int, c: int) -> bool:
    """The facts `arith-drill` draws from (its docstring's ranges)."""
    top = arith.MAX_VALUE
    return {"+": 2 <= c <= top and 1 <= b <= min(30, c - 1), "-": 2 <= a <= top and 1 <= b <= min(30, a - 1),
            "*": 2 <= b <= 5 and 1 <= a <= top // b, "/": 2 <= b <= 6 and 1 <= c <= top // b}[op]


def test_arith_reference_solutions_are_correct():
    for ex in tasks.make("arith", 300, seed=0):
        lines = ex.answer.split("\n")
        assert 2 <= len(lines) - 1 <= 4
        value = None
        for line in lines[:-1]:
            a, op, b, c = _fact(line)
            assert value is None or a == value
            assert 0 < c <= arith.MAX_VALUE
            assert _drillable(a, op, b, c), f"{line}: a fact the drill never shows"
            value = c
        assert lines[-1] == f"#### {value}" and ex.target == str(value)
        assert tasks.score("arith", ex, ex.answer)


def test_arith_drill_lines_are_true_and_cover_the_facts():
    facts = set()
    for ex in tasks.make("arith-drill", 2000, seed=0, split="train"):
        lines = ex.answer.split("\n")
        assert 4 <= len(lines) <= 9 and ex.prompt == ", ".join(line.split(" =")[0] for line in lines)
        for line in lines:
            fact = _fact(line)
            assert _drillable(*fact)
            facts.add(fact)
        assert tasks.score("arith-drill", ex, ex.answer.replace("\n", " \n"))
        assert not tasks.score("arith-drill", ex, ex.answer.rsplit(" ", 1)[0] + " 0")
    assert {op for _, op, _, _ in facts} == set("+-*/") and len(facts) > 5000  # spread over the table


def test_arith_scoring():
    ex = tasks.make("arith", 1, seed=0)[0]
    wrong = str(int(ex.target) + 1)
    assert tasks.score("arith", ex, f"1 + 1 = 2\n#### {ex.target}<|endoftext|>")
    assert not tasks.score("arith", ex, f"#### {wrong}")
    assert not tasks.score("arith", ex, ex.target)  # no '####': not an answer


def test_lists_answers_and_scoring():
    for ex in tasks.make("lists", 200, seed=0):
        op = next(k for k, phrasings in tasks.lists.OPS.items() if any(
            re.fullmatch(p.replace("{items}", ".*"), ex.prompt) for p in phrasings))
        items = ex.prompt.split(": ", 1)[1].split()
        assert 4 <= len(items) <= 12
        key = int if items[0].isdigit() else str
        assert ex.target.split() == {"copy": items, "reverse": items[::-1], "sort": sorted(items, key=key)}[op]
        assert tasks.score("lists", ex, " " + ex.answer + " ")
        if len(set(items)) > 1 and op != "copy":
            assert not tasks.score("lists", ex, " ".join(items[1:] + items[:1]))


@pytest.mark.parametrize("name", ["arith", "lists"])
def test_train_and_test_are_disjoint(name):
    """Disjoint by construction (the split is a hash of the prompt); checked here for the evaluation seeds
    against the training batches' own draws (seeds of TaskBatcher are 48-bit draws of a seeded Random)."""
    test_prompts = {ex.prompt for seed in EVAL_SEEDS for ex in tasks.make(name, 300, seed)}
    train_prompts = {ex.prompt for seed in range(50) for ex in tasks.make(name, 40, seed, split="train")}
    assert all(split_of(p) == "test" for p in test_prompts)
    assert all(split_of(p) == "train" for p in train_prompts)
    assert not test_prompts & train_prompts


def test_bad_arguments():
    with pytest.raises(ConfigError, match="unknown task 'poems'"):
        tasks.make("poems", 1)
    with pytest.raises(ConfigError, match="unknown split"):
        tasks.make("arith", 1, split="dev")
