"""Where wrong `arith` answers first go wrong: reads an evaluation dump (`python -m polestar.train.evaluate --dump`)
and walks each wrong completion line by line against the reference, ignoring the restatement words (a wrong
restatement does not change the answer: the equation copies the event's number again).

    python -m analysis.arith_failures reports/eval_v3_arith_g256_quota.jsonl

Each wrong answer gets the first of: `start number` (line 1's left operand is not the story's), `previous result`
(a later line's left operand is not the line before's result), `event` (operator or right operand is not the
event's), `columns` (the scratchpad is not the arithmetic of the line's own operands), `result` (`so y` is not
what its columns computed), `layout` (a line does not parse), `lines` (too few or too many), `final` (`#### N`
does not copy the last result). Prints one JSON line.

    python -m analysis.arith_failures reports/eval_v14_17300_bf16_arith_g256_quota.jsonl --order runs/v14-model

`--order MODEL` decodes again, with LLaDA's sampler at one token per step and a trace, each wrong answer whose first
error is in a column (the dump must come from that model and sampler: a completion that differs is skipped and
counted), and reports in what order the first wrong column digit's line was committed: how many of those digits
were committed after every token to their left in the line (a column written with all its inputs seen), and how
many after a token to their right (the line's `so` result or a later column, already written when the digit was),
and how many after their own copy (a written digit's in the result, a carry-out's in the next column's carry-in);
beside them the same counts over every written column digit of the dump's first 20 right answers (`--right N`).
"""

from __future__ import annotations

import argparse
import collections
import json
import re

from analysis.commit_reliability import digit_verdicts, token_of_char, traced_commits
from polestar import tasks
from polestar.tasks.arith import padded, scratchpad

LINE = re.compile(r"^(?P<restatement>.*?)\s*(?P<x>\d+) (?P<op>[-+*]) (?P<b>\d+): (?P<columns>.*?) so (?P<y>\d+)\s*$")


_PRODUCT_COLUMN = re.compile(r"(\d)\*(\d)=\d\d\+(\d)=(\d\d)")


def earlier_layout(columns: str) -> str:
    """A line's column chunks as weights trained before 2026-12-02 write them: a product column `a*m+c=ds` (the
    one-digit product not written), other columns unchanged. The shipped v3 weights write this layout."""
    return _PRODUCT_COLUMN.sub(r"\1*\2+\3=\4", columns)


def own_columns(line: re.Match) -> str | None:
    """The columns a parsed solution line should write for its own operands, when it writes others (either layout
    counts as right); None when its columns are right."""
    columns, _ = scratchpad(int(line["x"]), line["op"], int(line["b"]))
    return None if line["columns"] in (columns, earlier_layout(columns)) else columns


def first_error(reference: str, completion: str) -> str | None:
    """The kind of the first error of `completion` against the reference answer (None: no error found)."""
    want = [LINE.match(line) for line in reference.split("\n")[:-1]]
    got = [line for line in completion.split("\n") if line.strip() and not line.startswith("####")]
    previous = None
    for i, ref in enumerate(want):
        if i >= len(got):
            return "lines"
        line = LINE.match(got[i])
        if line is None:
            return "layout"
        if previous is None and line["x"] != ref["x"]:
            return "start number"
        if previous is not None and line["x"] != padded(previous):
            return "previous result"
        if line["op"] != ref["op"] or int(line["b"]) != int(ref["b"]):
            return "event"
        if own_columns(line) is not None:
            return "columns"
        result = scratchpad(int(line["x"]), line["op"], int(line["b"]))[1]
        if int(line["y"]) != result:
            return "result"
        previous = result
    if len(got) > len(want):
        return "lines"
    final = tasks.arith.extract(completion)
    return None if final is not None and int(final) == previous else "final"


def first_wrong_column(completion: str) -> int | None:
    """Character offset of the first column digit that is not the arithmetic of its own line's operands; None
    when every column is right."""
    offset = 0
    for line in completion.split("\n"):
        m = LINE.match(line)
        columns = own_columns(m) if m else None
        if columns is not None:
            i = next((j for j, (a, b) in enumerate(zip(m["columns"], columns)) if a != b),
                     min(len(m["columns"]), len(columns)))
            return offset + m.start("columns") + i
        offset += len(line) + 1
    return None


def commit_order(pieces: list[str], forward_of: list[int], digit: int) -> dict:
    """The commit order around the digit at character offset `digit` of a decoded completion: `pieces` are the
    generated tokens' strings in canvas order (joined: the completion), `forward_of[i]` the forward that committed
    token i. `inputs_first`: every non-blank token to its left in its line was committed by an earlier forward;
    `right_first`: the tokens to its right in the line committed by an earlier forward; `result`: one of them is
    a digit of the line's ` so ` result (any digit, not only the copy of this one: the result's leading digits are
    often right and committed first while the copy of a wrong column digit comes after it)."""
    text = "".join(pieces)
    start = text.rfind("\n", 0, digit) + 1
    end = text.find("\n", digit) % (len(text) + 1)  # -1 (the last line) -> len(text)
    result = text.rfind(" so ", start, end)
    starts, token = token_of_char(pieces)
    t = token(digit)
    left = [i for i in range(token(start), t) if pieces[i].strip()]
    right = [i for i in range(t + 1, token(end - 1) + 1) if pieces[i].strip() and forward_of[i] < forward_of[t]]
    copy = copy_of(text[start:end], digit - start)
    return {"inputs_first": all(forward_of[i] < forward_of[t] for i in left),
            "right_first": "".join(pieces[i] for i in right),
            "result": result >= 0 and any(starts[i] >= result for i in right),
            "copy_first": None if copy is None else forward_of[token(start + copy)] < forward_of[t]}


def copy_of(line: str, at: int) -> int | None:
    """Where the line copies its column digit at offset `at`: a chunk's written digit `s` into the ` so ` result
    (chunks run from the units up, the result from the top digit down), its carry-out `d` into the next chunk's
    carry-in; None for any other character (or a carry-out of the last chunk)."""
    m = LINE.match(line)
    if m is None or not m.start("columns") <= at < m.end("columns"):
        return None
    chunks = m["columns"].split(" ")
    offset = m.start("columns")
    for j, chunk in enumerate(chunks):
        if offset <= at < offset + len(chunk):
            if at == offset + len(chunk) - 1 and len(m["y"]) == len(chunks):  # s: the result's digit
                return m.start("y") + len(chunks) - 1 - j
            if at == offset + len(chunk) - 2 and j + 1 < len(chunks):  # d: the next chunk's carry-in
                return offset + len(chunk) + 1 + len(chunks[j + 1]) - 4
            return None
        offset += len(chunk) + 1
    return None


def orders(model, rows: list[dict], seed: int, gen_length: int, block_length: int, right_rows: int = 20) -> dict:
    """`commit_order` of the first wrong column digit of each wrong row of a dump whose first error is a column,
    and of every written column digit of its first `right_rows` right rows (the base rate), each decoded again
    with LLaDA's sampler (one token per step); counts over each."""
    import polestar
    from polestar.config import resolve

    references = {ex.prompt: ex for ex in tasks.make("arith", max(300, len(rows)), seed)}
    cfg = resolve("baseline", gen_length=gen_length, block_length=block_length)
    failures: collections.Counter = collections.Counter()
    base: collections.Counter = collections.Counter()
    wrong = [r for r in rows if not r["correct"]
             and first_error(references[r["prompt"]].answer, r["completion"]) == "columns"]
    for row in wrong + [r for r in rows if r["correct"]][:right_rows]:
        pieces, commits = traced_commits(model, polestar.generate(model, row["prompt"], cfg, trace=True))
        counts = base if row["correct"] else failures
        if "".join(pieces).strip() != row["completion"].strip():
            counts["decoded differently from the dump (skipped)"] += 1
            continue
        forward_of = [commits[i][2] for i in range(len(pieces))]
        text = "".join(pieces)
        digits = ([v.offset for v in digit_verdicts(text) if v.kind == "written"] if row["correct"]
                  else [first_wrong_column(text)])
        for digit in digits:
            order = commit_order(pieces, forward_of, digit)
            counts["digits"] += 1
            counts["every token to the left first"] += order["inputs_first"]
            counts["a token to the right first"] += bool(order["right_first"])
            counts["the line's result first"] += order["result"]
            if order["copy_first"] is not None:
                counts["digits with a copy"] += 1
                counts["its own copy first"] += order["copy_first"]
    return {"first wrong column digits": dict(failures),
            f"written column digits of {right_rows} right answers": dict(base)}


def classify(rows: list[dict], seed: int = 0) -> dict:
    """Counts of first errors over a dump's wrong rows, and how many right rows had a wrong restatement."""
    references = {ex.prompt: ex for ex in tasks.make("arith", max(300, len(rows)), seed)}
    kinds: collections.Counter = collections.Counter()
    restated = 0
    for row in rows:
        ex = references.get(row["prompt"])
        if ex is None:
            raise SystemExit(f"a prompt of the dump is not among the first held-out examples of seed {seed}: "
                             "pass the seed the evaluation used (--seed)")
        if row["correct"]:
            ref_lines, got_lines = ex.answer.split("\n"), row["completion"].split("\n")
            restated += any((a := LINE.match(r)) and (b := LINE.match(g)) and a["restatement"] != b["restatement"]
                            for r, g in zip(ref_lines, got_lines))
        else:
            kinds[first_error(ex.answer, row["completion"]) or "none found"] += 1
    return {"n": len(rows), "wrong": sum(kinds.values()), "first_error": dict(kinds.most_common()),
            "right_with_a_wrong_restatement": restated}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dump", help="a JSONL dump of `polestar.train.evaluate --tasks arith --dump`")
    parser.add_argument("--seed", type=int, default=0, help="the seed the evaluation used (its default: 0)")
    parser.add_argument("--order", metavar="MODEL", default=None,
                        help="decode the column failures again with this model and report their commit order")
    parser.add_argument("--gen-length", type=int, default=256, help="with --order: the evaluation's generation")
    parser.add_argument("--block-length", type=int, default=32, help="with --order: the evaluation's block")
    parser.add_argument("--right", type=int, default=20, help="with --order: right answers for the base rate")
    parser.add_argument("--threads", type=int, default=0, help="with --order: torch threads (0: polestar.threads)")
    args = parser.parse_args()
    with open(args.dump) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rows = [r for r in rows if r.get("task") == "arith"]
    result = {"dump": args.dump, **classify(rows, args.seed)}
    if args.order:
        from polestar.threads import quiet_openmp, set_decode_threads

        quiet_openmp()
        import polestar

        model = polestar.load_model(args.order)
        set_decode_threads(model, args.threads)
        result["order"] = orders(model, rows, args.seed, args.gen_length, args.block_length, args.right)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
