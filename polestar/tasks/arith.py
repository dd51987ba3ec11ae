"""`arith`: GSM8K-style word problems of 3–5 operations with a long, teachable worked solution ending `#### N`.

A story starts with someone owning some objects; 3–5 events then add, remove or multiply them. The worked
solution has one line per event: it restates the event in words, writes the equation and does the arithmetic
as a column scratchpad from the units digit up, then writes the result:

    Buys 57 more. 068 + 057: 8+7+0=15 6+5+1=12 0+0+1=01 so 125

Each chunk `a+b+c=ds` is one column: the two digits, the carry in, then the carry out and the written digit
(`a-b-c=ds` for a difference: the borrow out and the digit). A product by one digit writes the column's product
first and adds the carry to it, `a*m=pp+c=ds`, so each step is one of 100 one-digit products or a small sum
instead of one of 900 `a·m + c` facts (the shipped weights' failure analysis, in the model card). Every number
of the solution is written with WIDTH digits (zero-filled) and every line has WIDTH columns, so a line's layout
never changes: each digit to copy sits at the same offset from the tokens that need it. With one token per digit
every written digit is a function of a few nearby tokens, so the model learns the 100 one-digit facts and a carry
rule instead of a table of whole sums (the model card in the model folder states this).
Every intermediate result is in [1, MAX_VALUE]; answers longer than MAX_ANSWER_PIECES pieces (digits, words and
punctuation marks, each at most one token of the shipped tokenizer) are redrawn, so none overflows a 256-token
canvas.
"""

from __future__ import annotations

import random
import re

from polestar.tasks.base import Example

MAX_VALUE = 999
WIDTH = len(str(MAX_VALUE))  # digits of every number in a solution line, zero-filled
MIN_OPS, MAX_OPS = 3, 5
MAX_ANSWER_PIECES = 248  # ≤ 248 tokens + EOS: fits a 256-token canvas with room to spare
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
# (story sentence, the solution's restatement): the restatement names the same event in a few words
ADD = (
    ("Then {n} buys {b} more.", "Buys {b} more."),
    ("A friend gives {n} {b} more {o}.", "Gets {b} from a friend."),
    ("{n} finds {b} more {o}.", "Finds {b} more."),
    ("Later {n} gets {b} more.", "Gets {b} more."),
    ("{n} wins {b} more {o} at a fair.", "Wins {b} more."),
)
SUB = (
    ("Then {n} gives away {b}.", "Gives away {b}."),
    ("{n} loses {b} of the {o}.", "Loses {b}."),
    ("{n} gives {b} {o} to a friend.", "Gives {b} to a friend."),
    ("Later {n} uses {b} of them.", "Uses {b}."),
    ("{n} sells {b} {o}.", "Sells {b}."),
)
MUL = (
    ("Then the number of {o} becomes {b} times as large.", "Becomes {b} times as many."),
    ("{n} ends up with {b} times as many {o}.", "Gets {b} times as many."),
    ("A machine makes copies of the pile until {n} has {b} times as many.", "Copies to {b} times as many."),
    ("{n} multiplies the collection by {b}.", "Multiplies by {b}."),
)
QUESTIONS = (
    "How many {o} does {n} have now?",
    "How many {o} are left in the end?",
    "How many {o} does {n} end up with?",
)
_OP_WEIGHTS = {"+": 3, "-": 3, "*": 2}


def _digits(x: int, width: int) -> list[int]:
    """The `width` lowest decimal digits of x, units first (zero-filled)."""
    return [(x // 10**i) % 10 for i in range(width)]


def scratchpad(x: int, op: str, b: int) -> tuple[str, int]:
    """The WIDTH column chunks of `x op b` from the units digit up, and the result.

    `+`: `a+b+c=ds` (c the carry in, d the carry out, s the digit written); `-` (x > b): `a-b-c=ds` (c the
    borrow in, d the borrow out, so a − b − c = s − 10·d); `*` (b one digit): `a*b=pp+c=ds` (pp = a·b in two
    digits, pp + c = 10·d + s, d ≤ 8 the carry into the next column)."""
    if op == "*":
        chunks, carry = [], 0
        for a in _digits(x, WIDTH):
            product = a * b
            value = product + carry
            chunks.append(f"{a}*{b}={product // 10}{product % 10}+{carry}={value // 10}{value % 10}")
            carry = value // 10
        return " ".join(chunks), x * b
    chunks, carry = [], 0
    for a, d in zip(_digits(x, WIDTH), _digits(b, WIDTH)):
        if op == "+":
            value = a + d + carry
            out, digit = value // 10, value % 10
        else:
            value = a - d - carry
            out, digit = int(value < 0), value % 10
        chunks.append(f"{a}{op}{d}{op}{carry}={out}{digit}")
        carry = out
    return " ".join(chunks), x + b if op == "+" else x - b


def pieces(text: str) -> int:
    """An upper bound on the tokens of `text` under the shipped tokenizer: one per digit, per word and per
    punctuation mark (its BPE merges only letters, and a space into the piece after it)."""
    return len(re.findall(r"\d|[A-Za-z']+|[^\w\s]|\n", text))


def _operand(rng: random.Random, x: int, weights: dict[str, int] = _OP_WEIGHTS) -> tuple[str, int] | None:
    """An operation on x drawn with `weights`, or None where the drawn one would leave [1, MAX_VALUE]."""
    op = rng.choices(tuple(weights), weights=tuple(weights.values()))[0]
    if op == "+" and x <= MAX_VALUE - 2:
        return op, rng.randint(2, min(300, MAX_VALUE - x))
    if op == "-" and x >= 3:
        return op, rng.randint(2, min(300, x - 1))
    if op == "*" and 2 * x <= MAX_VALUE:
        return op, rng.randint(2, min(9, MAX_VALUE // x))
    return None


def padded(x: int) -> str:
    return str(x).zfill(WIDTH)


def solution_line(restatement: str, x: int, op: str, b: int) -> tuple[str, int]:
    """`Restatement. xxx op bbb: <WIDTH chunks> so yyy` (a product's multiplier stays one digit)."""
    chunks, y = scratchpad(x, op, b)
    right = str(b) if op == "*" else padded(b)
    return f"{restatement} {padded(x)} {op} {right}: {chunks} so {padded(y)}", y


def candidate(rng: random.Random) -> Example:
    while True:
        name, obj = rng.choice(NAMES), rng.choice(OBJECTS)
        x = rng.randint(10, 400)
        story = [rng.choice(START).format(n=name, x=x, o=obj)]
        lines: list[str] = []
        n_ops = rng.randint(MIN_OPS, MAX_OPS)
        while len(lines) < n_ops:
            step = _operand(rng, x)
            if step is None:
                continue
            op, b = step
            sentence, restatement = rng.choice({"+": ADD, "-": SUB, "*": MUL}[op])
            story.append(sentence.format(n=name, b=b, o=obj))
            line, x = solution_line(restatement.format(b=b), x, op, b)
            lines.append(line)
        story.append(rng.choice(QUESTIONS).format(n=name, o=obj))
        answer = "\n".join(lines) + f"\n#### {x}"
        if pieces(answer) <= MAX_ANSWER_PIECES:
            return Example(task="arith", prompt=" ".join(story), answer=answer, target=str(x))


DRILL_LINES = (4, 6)  # ≤ 6 product lines of ≤ 40 pieces: a drill fits a 256-token canvas
# The drill leans to the facts word problems teach least: products and differences with a borrow (the column probe
# of the shipped weights knew 87 % of one-digit products and 96–100 % of the sums; model card). A word problem's
# product must stay ≤ MAX_VALUE, so its multipliers 7–9 come only with left operands below 143; a drill product
# takes any left operand and any multiplier, and its last column's carry-out may be non-zero (a four-digit result).
_DRILL_WEIGHTS = {"+": 1, "-": 2, "*": 3}


def _drill_operation(rng: random.Random) -> tuple[int, str, int]:
    while True:
        x = rng.randint(3, MAX_VALUE)
        op = rng.choices(tuple(_DRILL_WEIGHTS), weights=tuple(_DRILL_WEIGHTS.values()))[0]
        if op == "*":
            return x, op, rng.randint(2, 9)
        if (step := _operand(rng, x, {op: 1})) is not None:
            return x, *step


def candidate_drill(rng: random.Random) -> Example:
    """A training drill of bare equations, the scratchpads of `arith` many per token: the prompt lists 4–6
    left-hand sides (`37 + 208, 115 - 13, 42 * 7`), the answer works each out in columns, without the restatement
    and without the closing `so yyy` (`037 + 208: 7+8+0=15 3+0+1=04 0+2+0=02`). In a word problem the result is
    written again (`so 245`, then `245 + …` on the next line), so a masked column digit can be copied from a
    visible copy of the result instead of computed from its column; here nothing repeats a written digit but the
    next column's carry-in, so the one-digit facts must be computed. Operations: `_drill_operation`."""
    lines, lefts = [], []
    for _ in range(rng.randint(*DRILL_LINES)):
        x, op, b = _drill_operation(rng)
        lefts.append(f"{x} {op} {b}")
        lines.append(solution_line("", x, op, b)[0].lstrip().rsplit(" so ", 1)[0])
    answer = "\n".join(lines)
    return Example(task="arith-drill", prompt=", ".join(lefts), answer=answer, target=answer)


# one column chunk, `a+b+c=ds`, `a-b-c=ds` or `a*m=pp+c=ds`; groups: the product's two digits (products only),
# carry-in, carry-out, written digit
COLUMN = re.compile(r"\d[-+*]\d(?:=(\d)(\d))?[-+](\d)=(\d)(\d)")
CARRY_IN, CARRY_OUT, DIGIT = 3, 4, 5  # COLUMN's groups


def column_digits(answer: str) -> list[int]:
    """Character offsets of the digits a worked answer computes rather than copies: every column's product (in a
    product), carry-in, carry-out and written digit. The trainer's focus rows mask exactly these (and nothing
    else), so the model must work each column out from its visible operand digits
    (polestar/train/objective.py:sft_loss)."""
    return [m.start(g) for m in COLUMN.finditer(answer) for g in range(1, 6) if m.start(g) != -1]


_RESULT_COPIES = re.compile(r"(?:so |#### |\n(?:[A-Z][^.\n]*\. )?)(\d+)")


def worked_digits(answer: str) -> list[int]:
    """Character offsets of what a word problem's worked answer computes or carries forward: every column's
    digits (`column_digits`), the result after `so`, its copies in the next line (the equation's left operand
    and each column's first digit), and the final `#### N`. Focus rows mask each of these with the row's ratio,
    so a visible copy of a result stands in for computing it only as often as a copy survives (the first line's
    operands copy the story and stay visible)."""
    copies = [m.start(1) + i for m in _RESULT_COPIES.finditer(answer) for i in range(len(m.group(1)))]
    later = answer.find("\n")
    operands = [m.start() for m in COLUMN.finditer(answer) if later != -1 and m.start() > later]
    return sorted(set(column_digits(answer)) | set(copies) | set(operands))


_FINAL = re.compile(r"####\s*(-?\d+)")


def extract(completion: str) -> str | None:
    match = _FINAL.search(completion)
    return match.group(1) if match else None


def score(example: Example, completion: str) -> bool:
    """The integer after the first `####` equals the target (`#### 019` counts as 19)."""
    found = extract(completion)
    return found is not None and int(found) == int(example.target)
