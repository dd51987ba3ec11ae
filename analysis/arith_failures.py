"""Where wrong `arith` answers first go wrong: reads an evaluation dump (`python -m polestar.train.evaluate --dump`)
and walks each wrong completion line by line against the reference, ignoring the restatement words (a wrong
restatement does not change the answer: the equation copies the event's number again).

    python -m analysis.arith_failures reports/eval_v3_arith_g256_quota.jsonl

Each wrong answer gets the first of: `start number` (line 1's left operand is not the story's), `previous result`
(a later line's left operand is not the line before's result), `event` (operator or right operand is not the
event's), `columns` (the scratchpad is not the arithmetic of the line's own operands), `result` (`so y` is not
what its columns computed), `layout` (a line does not parse), `lines` (too few or too many), `final` (`#### N`
does not copy the last result). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import collections
import json
import re

from polestar import tasks
from polestar.tasks.arith import padded, scratchpad

LINE = re.compile(r"^(?P<restatement>.*?)\s*(?P<x>\d+) (?P<op>[-+*]) (?P<b>\d+): (?P<columns>.*?) so (?P<y>\d+)\s*$")


_PRODUCT_COLUMN = re.compile(r"(\d)\*(\d)=\d\d\+(\d)=(\d\d)")


def earlier_layout(columns: str) -> str:
    """A line's column chunks as weights trained before 2026-12-02 write them: a product column `a*m+c=ds` (the
    one-digit product not written), other columns unchanged. The shipped v3 weights write this layout."""
    return _PRODUCT_COLUMN.sub(r"\1*\2+\3=\4", columns)


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
        columns, result = scratchpad(int(line["x"]), line["op"], int(line["b"]))
        if line["columns"] not in (columns, earlier_layout(columns)):
            return "columns"
        if int(line["y"]) != result:
            return "result"
        previous = result
    if len(got) > len(want):
        return "lines"
    final = tasks.arith.extract(completion)
    return None if final is not None and int(final) == previous else "final"


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
    args = parser.parse_args()
    with open(args.dump) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    print(json.dumps({"dump": args.dump, **classify([r for r in rows if r.get("task") == "arith"], args.seed)}))


if __name__ == "__main__":
    main()
