"""`arith`: GSM8K-style word problems with a worked solution, one line per operation, ending `#### N`.

A story starts with someone owning some objects; 2–4 events then add, remove, multiply or split them
evenly (exact division). Numbers stay small (every intermediate result is in [1, MAX_VALUE]) so a model of a
few million parameters can learn the arithmetic.
"""

from __future__ import annotations

import random
import re

from polestar.tasks.base import Example

MAX_VALUE = 200
NAMES = (
    "Ava Ben Carla Dev Elena Farid Gita Hugo Iris Jonas Kemal Lena Mateo Nadia Omar Priya Quinn Rosa Sami Tara "
    "Umar Vera Wen Xavi Yara Zane Amir Bea Chen Dora Eli Fiona"
).split()
OBJECTS = (
    "apples marbles stickers pencils cookies books shells coins cards stamps beads buttons candles kites "
    "lemons oranges balloons crayons feathers pebbles rings ribbons tickets toys cupcakes plums eggs nails"
).split()
START = (
    "{n} has {x} {o}.",
    "{n} starts with {x} {o}.",
    "{n} collected {x} {o}.",
    "There are {x} {o} in {n}'s box.",
    "{n} owns {x} {o}.",
)
ADD = (
    "Then {n} buys {b} more.",
    "A friend gives {n} {b} more {o}.",
    "{n} finds {b} more {o}.",
    "Later {n} gets {b} more.",
    "{n} wins {b} more {o} at a fair.",
)
SUB = (
    "Then {n} gives away {b}.",
    "{n} loses {b} of the {o}.",
    "{n} gives {b} {o} to a friend.",
    "Later {n} uses {b} of them.",
    "{n} sells {b} {o}.",
)
MUL = (
    "Then the number of {o} becomes {b} times as large.",
    "{n} ends up with {b} times as many {o}.",
    "A machine makes {b} copies of the whole pile, so {n} has {b} times as many.",
    "{n} multiplies the collection by {b}.",
)
DIV = (
    "{n} splits the {o} into {b} equal groups and keeps one group.",
    "{n} shares the {o} equally with friends so there are {b} equal parts, and keeps one part.",
    "Then {n} keeps only one of {b} equal piles.",
)
QUESTIONS = (
    "How many {o} does {n} have now?",
    "How many {o} are left in the end?",
    "How many {o} does {n} end up with?",
)


def _step(rng: random.Random, x: int) -> tuple[str, int, tuple[str, ...]] | None:
    op = rng.choice("+-*/")
    if op == "+" and x < MAX_VALUE - 1:
        return op, rng.randint(1, min(30, MAX_VALUE - x)), ADD
    if op == "-" and x > 2:
        return op, rng.randint(1, min(30, x - 1)), SUB
    if op == "*" and 2 * x <= MAX_VALUE:
        return op, rng.randint(2, min(5, MAX_VALUE // x)), MUL
    if op == "/":
        divisors = [b for b in range(2, 7) if x % b == 0 and x // b >= 1]
        if divisors:
            return op, rng.choice(divisors), DIV
    return None


def candidate(rng: random.Random) -> Example:
    name, obj = rng.choice(NAMES), rng.choice(OBJECTS)
    x = rng.randint(2, 40)
    story = [rng.choice(START).format(n=name, x=x, o=obj)]
    lines = []
    n_ops = rng.randint(2, 4)
    while len(lines) < n_ops:
        step = _step(rng, x)
        if step is None:
            continue
        op, b, phrases = step
        y = {"+": x + b, "-": x - b, "*": x * b, "/": x // b}[op]
        story.append(rng.choice(phrases).format(n=name, b=b, o=obj))
        lines.append(f"{x} {op} {b} = {y}")
        x = y
    story.append(rng.choice(QUESTIONS).format(n=name, o=obj))
    answer = "\n".join(lines) + f"\n#### {x}"
    return Example(task="arith", prompt=" ".join(story), answer=answer, target=str(x))


def candidate_drill(rng: random.Random) -> Example:
    """A training drill of bare equations, many facts per token: the prompt lists 4–9 left-hand sides
    (`37 + 20, 115 - 13, …`), the answer writes each as a solution line (`37 + 20 = 57`). Operands are
    uniform over every fact the word problems can ask (each result in [1, MAX_VALUE], `+`/`−` by at most 30,
    `×` by 2–5, exact `÷` by 2–6), weighted toward `+` and `−`."""
    lines = []
    for _ in range(rng.randint(4, 9)):
        op = rng.choices("+-*/", weights=(4, 4, 1, 1))[0]
        if op == "+":
            y = rng.randint(2, MAX_VALUE)
            b = rng.randint(1, min(30, y - 1))
            x = y - b
        elif op == "-":
            x = rng.randint(2, MAX_VALUE)
            b = rng.randint(1, min(30, x - 1))
            y = x - b
        elif op == "*":
            b = rng.randint(2, 5)
            x = rng.randint(1, MAX_VALUE // b)
            y = x * b
        else:
            b = rng.randint(2, 6)
            y = rng.randint(1, MAX_VALUE // b)
            x = y * b
        lines.append((f"{x} {op} {b}", y))
    prompt = ", ".join(left for left, _ in lines)
    answer = "\n".join(f"{left} = {y}" for left, y in lines)
    return Example(task="arith-drill", prompt=prompt, answer=answer, target=answer)


_FINAL = re.compile(r"####\s*(-?\d+)")


def extract(completion: str) -> str | None:
    match = _FINAL.search(completion)
    return match.group(1) if match else None


def score(example: Example, completion: str) -> bool:
    return extract(completion) == example.target
