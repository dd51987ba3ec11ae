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


_LINE = re.compile(r"(?:(?P<restate>[A-Z][^.]*\.) )?(?P<x>\d+) (?P<op>[-+*]) (?P<b>\d+): (?P<chunks>[^s]+?)(?: so (?P<y>\d+))?")
_CHUNK = re.compile(r"(\d)([-+*])(\d)(?:=(\d\d))?([-+])(\d)=(\d)(\d)")


def _check_line(line: str, drill: bool = False) -> tuple[int, str, int, int]:
    """(x, op, b, y) of a worked solution line (a drill line has no restatement and no `so y`), every column
    checked."""
    m = _LINE.fullmatch(line)
    assert m and (m["restate"] is None) == drill and (m["y"] is None) == drill, line
    x, op, b = int(m["x"]), m["op"], int(m["b"])
    y = {"+": x + b, "-": x - b, "*": x * b}[op]
    # every number is WIDTH digits, zero-filled (a product's multiplier is one digit)
    assert len(m["x"]) == arith.WIDTH and len(m["b"]) == (1 if op == "*" else arith.WIDTH), line
    assert drill or (len(m["y"]) == arith.WIDTH and int(m["y"]) == y), line
    # a drill's product may run to four digits (its last carry-out), a word problem's values stay in range
    assert 1 <= y <= (9 * arith.MAX_VALUE if drill and op == "*" else arith.MAX_VALUE)
    if not drill:
        assert f" {b} " in f" {m['restate'][:-1]} "  # the restatement names the event's number
    chunks = m["chunks"].split(" ")
    assert len(chunks) == arith.WIDTH, line
    carry, written = 0, []
    for i, chunk in enumerate(chunks):
        a, op1, d, product, op2, c, out, digit = _CHUNK.fullmatch(chunk).groups()
        a, d, c, out, digit = map(int, (a, d, c, out, digit))
        assert op1 == op and c == carry and a == (x // 10**i) % 10
        if op == "*":  # the column's product in two digits, then the carry added
            assert op2 == "+" and d == b and product == f"{a * b:02d}" and a * b + c == 10 * out + digit
        else:
            assert product is None and op2 == op and d == (b // 10**i) % 10
            value = a + d + c if op == "+" else a - d - c
            assert (out, digit) == ((value // 10, value % 10) if op == "+" else (int(value < 0), value % 10))
        carry = out
        written.append(digit)
    assert int("".join(map(str, [carry, *written[::-1]]))) == y  # the result is the chunks' digits, top first
    return x, op, b, y


def test_arith_worked_solutions_are_correct_and_long():
    """Every line's scratchpad is right column by column; lines chain; 3–5 operations; `#### N` ends it; the
    answer fits the piece bound that keeps it inside a 256-token canvas."""
    counts = set()
    for ex in tasks.make("arith", 300, seed=0):
        lines = ex.answer.split("\n")
        counts.add(len(lines) - 1)
        assert arith.MIN_OPS <= len(lines) - 1 <= arith.MAX_OPS
        value = None
        for line in lines[:-1]:
            x, _, _, y = _check_line(line)
            assert value is None or x == value
            value = y
        assert lines[-1] == f"#### {value}" and ex.target == str(value)
        assert arith.pieces(ex.answer) <= arith.MAX_ANSWER_PIECES
        assert tasks.score("arith", ex, ex.answer)
    assert counts == set(range(arith.MIN_OPS, arith.MAX_OPS + 1))


def test_scratchpad_by_hand():
    assert arith.scratchpad(68, "+", 57) == ("8+7+0=15 6+5+1=12 0+0+1=01", 125)
    assert arith.scratchpad(403, "-", 58) == ("3-8-0=15 0-5-1=14 4-0-1=03", 345)
    assert arith.scratchpad(198, "*", 2) == ("8*2=16+0=16 9*2=18+1=19 1*2=02+1=03", 396)
    assert arith.scratchpad(19, "*", 9) == ("9*9=81+0=81 1*9=09+8=17 0*9=00+1=01", 171)
    assert arith.scratchpad(5, "+", 120) == ("5+0+0=05 0+2+0=02 0+1+0=01", 125)
    assert arith.solution_line("Loses 46.", 65, "-", 46) == ("Loses 46. 065 - 046: 5-6-0=19 6-4-1=01 0-0-0=00 so 019",
                                                             19)


def test_arith_drill_lines_are_worked_equations():
    for ex in tasks.make("arith-drill", 300, seed=0, split="train"):
        lines = ex.answer.split("\n")
        assert arith.DRILL_LINES[0] <= len(lines) <= arith.DRILL_LINES[1]
        facts = [_check_line(line, drill=True) for line in lines]
        assert ex.prompt == ", ".join(f"{x} {op} {b}" for x, op, b, _ in facts)
        assert tasks.score("arith-drill", ex, ex.answer)


def test_arith_tokens_are_bounded_by_pieces(tmp_path):
    """`pieces` bounds the token count under a digit tokenizer trained like the shipped one."""
    from transformers import PreTrainedTokenizerFast

    from polestar.train.tokenizer import train_tokenizer

    corpus = [ex.prompt + "\n" + ex.answer for name in ("arith", "lists") for ex in tasks.make(name, 300, 1, "train")]
    train_tokenizer(corpus, 600, tmp_path, split_digits=True)
    tok = PreTrainedTokenizerFast.from_pretrained(str(tmp_path))
    for ex in tasks.make("arith", 100, seed=0):
        assert len(tok(ex.answer, add_special_tokens=False).input_ids) <= arith.pieces(ex.answer)
    assert tok.tokenize(" 45 + 7") == ["Ġ4", "5", "Ġ+", "Ġ7"]


def test_arith_scoring():
    ex = tasks.make("arith", 1, seed=0)[0]
    wrong = str(int(ex.target) + 1)
    assert tasks.score("arith", ex, f"1 + 1 = 2\n#### {ex.target}<|endoftext|>")
    assert not tasks.score("arith", ex, f"#### {wrong}")
    assert not tasks.score("arith", ex, ex.target)  # no '####': not an answer
    assert tasks.score("arith", ex, f"#### {ex.target.zfill(arith.WIDTH)}")  # the value counts, not the padding


def test_lists_answers_and_scoring():
    for ex in tasks.make("lists", 200, seed=0):
        op = next(k for k, phrasings in tasks.lists.OPS.items() if any(
            re.fullmatch(p.replace("{items}", ".*"), ex.prompt) for p in phrasings))
        items = ex.prompt.split(": ", 1)[1].split()
        assert tasks.lists.operation(ex.prompt) == op
        top = tasks.lists.SORT_MAX_ITEMS if op == "sort" else max(tasks.lists.MAX_ITEMS.values())
        assert tasks.lists.MIN_ITEMS <= len(items) <= top and len(set(items)) == len(items)
        key = int if items[0].isdigit() else str
        assert ex.target.split() == {"copy": items, "reverse": items[::-1], "sort": sorted(items, key=key)}[op]
        assert tasks.score("lists", ex, " " + ex.answer + " ")
        if len(set(items)) > 1 and op != "copy":
            assert not tasks.score("lists", ex, " ".join(items[1:] + items[:1]))


def test_long_list_drill_copies_or_reverses_only_long_lists():
    """`lists-long`: copy or reverse, never sort, of a third of the maximum item count or more, numbers and words
    both; the answers are `lists`' own (same scorer), and the default `lists` draws are unchanged by the option."""
    seen = set()
    for ex in tasks.make("lists-long", 200, seed=0, split="train"):
        items = ex.prompt.split(": ", 1)[1].split()
        numbers = items[0].isdigit()
        top = tasks.lists.MAX_ITEMS["numbers" if numbers else "words"]
        assert top // 3 <= len(items) <= top, ex.prompt
        op = "copy" if ex.target.split() == items else "reverse"
        assert ex.target.split() == (items if op == "copy" else items[::-1])
        assert not any(re.fullmatch(p.replace("{items}", ".*"), ex.prompt) for p in tasks.lists.OPS["sort"])
        seen.add((op, numbers))
    assert len(seen) == 4
    assert tasks.make("lists", 3, seed=0)[0].prompt == "Write the list again: 89 28 5 73 81 68"


def test_dense_sort_drill_sorts_numbers_from_a_narrow_window():
    """`lists-sort-dense`: a `lists` sort (phrasing, scorer, focus) of k distinct numbers from a window of at most 3k
    consecutive values, so most sorted neighbours share a tens digit, far more than in `lists-sort`."""
    def shared_tens(examples):
        pairs = [(a, b) for ex in examples for a, b in zip(ex.target.split(), ex.target.split()[1:]) if len(b) == 2]
        return sum(len(a) == 2 and a[0] == b[0] for a, b in pairs) / len(pairs)

    dense = tasks.make("lists-sort-dense", 300, seed=0, split="train")
    for ex in dense:
        items = [int(x) for x in ex.prompt.split(": ", 1)[1].split()]
        assert tasks.lists.operation(ex.prompt) == "sort" and len(set(items)) == len(items)
        assert tasks.lists.MIN_ITEMS <= len(items) <= tasks.lists.SORT_MAX_ITEMS
        assert max(items) - min(items) < 3 * len(items)
        assert ex.target.split() == [str(x) for x in sorted(items)] and tasks.score("lists", ex, ex.answer)
        assert tasks.computed("lists-sort-dense", ex.answer) == tasks.computed("lists-sort", ex.answer)
    number_sorts = [ex for ex in tasks.make("lists-sort", 600, seed=0, split="train") if ex.target[0].isdigit()]
    assert shared_tens(dense) > 0.7 and shared_tens(number_sorts) < 0.55  # 0.80 and 0.49 for these draws


def test_long_reversal_drill_reverses_long_lists_of_numbers():
    """`lists-reverse-long`: a `lists` reversal (phrasing, scorer) of 16–100 distinct numbers, every length band of
    that range drawn; it marks nothing as computed (no focus rows)."""
    lengths = []
    for ex in tasks.make("lists-reverse-long", 300, seed=0, split="train"):
        items = ex.prompt.split(": ", 1)[1].split()
        assert tasks.lists.operation(ex.prompt) == "reverse" and all(x.isdigit() for x in items)
        assert len(set(items)) == len(items) and ex.target.split() == items[::-1]
        assert tasks.score("lists", ex, ex.answer) and not tasks.score("lists", ex, " ".join(items))
        assert tasks.computed("lists-reverse-long", ex.answer) is None
        lengths.append(len(items))
    assert min(lengths) >= tasks.lists.REVERSE_LONG_MIN_ITEMS and max(lengths) <= tasks.lists.MAX_ITEMS["numbers"]
    assert {n // 20 for n in lengths} >= {0, 1, 2, 3, 4}  # 16–19, 20–39, ..., 80–99: every band drawn


def test_long_sort_drill_sorts_ten_or_more_numbers():
    """`lists-sort-long`: a `lists` sort (phrasing, scorer) of 10–32 distinct numbers, short and long ones drawn
    alike; its focus is a sort's (the units digits)."""
    lengths = []
    for ex in tasks.make("lists-sort-long", 300, seed=0, split="train"):
        items = ex.prompt.split(": ", 1)[1].split()
        assert tasks.lists.operation(ex.prompt) == "sort" and all(x.isdigit() for x in items)
        assert len(set(items)) == len(items) and ex.target.split() == sorted(items, key=int)
        assert tasks.score("lists", ex, ex.answer) and not tasks.score("lists", ex, " ".join(items))
        assert tasks.computed("lists-sort-long", ex.answer) == tasks.computed("lists-sort", ex.answer)
        lengths.append(len(items))
    assert min(lengths) == tasks.lists.SORT_LONG_MIN_ITEMS and max(lengths) == tasks.lists.SORT_MAX_ITEMS
    assert abs(sum(n < 21 for n in lengths) / len(lengths) - 11 / 23) < 0.1  # uniform: 10–20 is 11 of 23 lengths


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


CHUNK_SHOWN = r"\S[-+*]\S(?:=\S\S)?[-+]\S=\S\S"  # a column chunk with some characters replaced by `_`


def test_worked_digits_hide_every_result_and_its_copies():
    """Masking `tasks.computed('arith', answer)` leaves no digit of any result visible (after `so`, `####`, the
    next line's left operand and its column digits) and hides every column's carries and written digit, while
    the story's numbers that the first line copies stay visible. The drill marks its columns' three digits and a
    product column's two product digits."""
    for ex in tasks.make("arith", 50, seed=2):
        hidden = set(tasks.computed("arith", ex.answer))
        shown = "".join("_" if i in hidden else c for i, c in enumerate(ex.answer))
        lines = shown.split("\n")
        assert lines[-1] == "#### " + "_" * len(ex.target)
        first = ex.answer.split("\n")[0]
        x, b = re.search(r"(\d+) [-+*] (\d+):", first).groups()
        assert f"{x} " in lines[0] and f" {b}:" in lines[0]  # the first line's operands stay visible
        for line in lines:
            assert line.endswith("so ___") or line.startswith("####")
            for chunk in re.findall(CHUNK_SHOWN, line):
                assert chunk[-4] == chunk[-2] == chunk[-1] == "_"  # carry-in, carry-out and digit
                assert len(chunk) == 8 or chunk[4:6] == "__"  # a product's own two digits
        for line in lines[1:-1]:
            assert re.search(r"\. ___ [-+*] \d+: ", line)  # the previous result's copy is hidden
            assert all(chunk[0] == "_" for chunk in re.findall(CHUNK_SHOWN, line))
    drill = tasks.make("arith-drill", 5, seed=2, split="train")[0].answer
    assert "*" in drill  # this drill has products
    assert len(tasks.computed("arith-drill", drill)) == 3 * 3 * drill.count(":") + 3 * 2 * drill.count(" * ")
    assert tasks.computed("lists", "1 2 3") is None
    assert tasks.computed("lists-sort", "10 12 5 36") == [1, 4, 9]  # units digits of the two-digit numbers
    assert tasks.computed("lists-sort", "ant bear cat") == []
