"""How reliable is each commit rule? Decode held-out `arith` examples with Fast-dLLM and Polestar's components
switched on one at a time, judge every computed scratchpad digit of each completion against the tokens it is a
function of, and group the verdicts by the rule that committed the digit and by its confidence at commit.

    python -m analysis.commit_reliability --n 80 --out reports/figures
    python -m analysis.commit_reliability --samplers --n 24 --out reports/figures

`--samplers` decodes with the samplers of the model card's accuracy rows instead (LLaDA's, one token per step,
and τ = 0.9 parallel decoding without a cache) and writes `commit_reliability_samplers.*`: the same verdicts say
whether the model's own mistakes come from what it knows or from the order it commits in.

A column chunk is `a+b+c=ds`, `a-b-c=ds` or `a*m=pp+c=ds` (model card, "Workload"). Its computed digits and what
each is judged against, all read from the completion itself:
- carry `c`: the carry out `d` of the line's previous chunk (0 in the first chunk);
- product `pp` (two digits): a·m of the chunk's own digits;
- written `d`, `s`: the chunk's own a ± b ± c, or pp + c.
So a digit is wrong when it is not the function of its neighbours it must be, whatever happened earlier in the
line: an error is charged to the token that made it, not to the ones that copied it. Each digit is then
traced to its canvas position and the commit that wrote it (reason, confidence).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from analysis import figio
from polestar.tasks.arith import CARRY_IN, CARRY_OUT, COLUMN, DIGIT

NAME = "commit_reliability"
REASONS = ("threshold", "drift", "suffix", "forced", "quota", "factor")
BANDS = (0.0, 0.7, 0.8, 0.9, 0.99)  # lower bounds of the confidence bands; the last one ends at 1 inclusive


@dataclass(frozen=True)
class DigitVerdict:
    offset: int  # character offset of the digit in the completion
    kind: str  # "carry" | "product" | "written"
    right: bool
    inputs: tuple[int, ...]  # character offsets of the digits it is a function of


def digit_verdicts(text: str) -> list[DigitVerdict]:
    """Every computed digit of every column chunk in `text`, judged against the chunk's own digits (carry: the
    previous chunk of the same line). A product chunk without its product pair (`a*m+c=ds`, the earlier layout)
    has no product digits to judge; its written pair is judged against a·m + c."""
    verdicts = []
    line_start = 0
    for line in text.split("\n"):
        carry_out, carry_from = 0, ()  # the carry out of the line's previous chunk (none before the first: 0)
        for m in COLUMN.finditer(line):  # the chunk starts `a op b`: its first three characters
            at = lambda group: line_start + m.start(group)  # noqa: E731
            first = line_start + m.start()
            a, op, b = int(line[m.start()]), line[m.start() + 1], int(line[m.start() + 2])
            c, d, s = int(m[CARRY_IN]), int(m[CARRY_OUT]), int(m[DIGIT])
            if op != "*":  # a ± b ± c = ds
                value = a + b + c if op == "+" else a - b - c
                written_ok = (10 * d + s == value) if op == "+" else (d in (0, 1) and s - 10 * d == value)
                written_inputs = (first, first + 2, at(CARRY_IN))
            elif m[1] is None:  # a * m + c = ds: the earlier product layout, which a decode may still write
                written_ok = 10 * d + s == a * b + c
                written_inputs = (first, first + 2, at(CARRY_IN))
            else:  # a * m = pp + c = ds
                product = a * b
                verdicts += [DigitVerdict(at(1), "product", int(m[1]) == product // 10, (first, first + 2)),
                             DigitVerdict(at(2), "product", int(m[2]) == product % 10, (first, first + 2))]
                written_ok = 10 * d + s == 10 * int(m[1]) + int(m[2]) + c
                written_inputs = (at(1), at(2), at(CARRY_IN))
            verdicts += [DigitVerdict(at(CARRY_IN), "carry", c == carry_out, carry_from),
                         DigitVerdict(at(CARRY_OUT), "written", written_ok, written_inputs),
                         DigitVerdict(at(DIGIT), "written", written_ok, written_inputs)]
            carry_out, carry_from = d, (at(CARRY_OUT),)
        line_start += len(line) + 1
    return verdicts


def token_of_char(pieces: list[str]):
    """(start offset of each piece, a function from a character offset of the joined pieces to the index of the
    piece that holds it)."""
    starts, offset = [], 0
    for piece in pieces:
        starts.append(offset)
        offset += len(piece)

    def token(char: int) -> int:
        index = bisect.bisect_right(starts, char) - 1
        while index > 0 and not pieces[index]:  # an empty piece (a special token) holds no character
            index -= 1
        return index

    return starts, token


def traced_commits(model, r) -> tuple[list[str], dict[int, tuple[str, float, int]]]:
    """(the generated tokens' strings in canvas order, generated index -> (reason, confidence, forward)) of a
    traced `polestar.generate` result."""
    pieces = [model.tokenizer.decode([t], skip_special_tokens=True) for t in r.token_ids]
    return pieces, {c.gen_index: (c.reason, c.confidence, e.nfe) for e in r.trace.events for c in e.commits}


def commit_of_each_digit(pieces: list[str], commits: dict[int, tuple[str, float, int]], text_verdicts):
    """(reason, confidence, inputs_first, verdict) for each judged digit: `pieces` are the generated tokens'
    strings in canvas order (their concatenation is the text judged), `commits` maps a generated index to its
    commit (reason, confidence, forward). `inputs_first`: every digit it is a function of was committed by an
    earlier forward, so the model saw them when it wrote this one."""
    _, token = token_of_char(pieces)
    out = []
    for v in text_verdicts:
        reason, confidence, step = commits[token(v.offset)]
        out.append((reason, confidence, all(commits[token(i)][2] < step for i in v.inputs), v))
    return out


COLUMN_ORDERS = ("both written digits after every input", "a written digit before an input")


def column_orders(judged) -> list[tuple[str, bool]]:
    """(order, right) per column chunk, from `commit_of_each_digit`'s output: a chunk's two written digits (carry
    out and digit, judged together) are consecutive and share their inputs. The chunk is in order when both were
    committed by a later forward than every input, so the model saw all of them when it wrote either digit; a
    per-digit count charges the second digit of a chunk for the first one's mistake, this one does not."""
    out = []
    for (_, _, first, v), (_, _, first_next, nxt) in zip(judged, judged[1:]):
        if v.kind == "written" and nxt.kind == "written" and v.inputs == nxt.inputs and v.offset < nxt.offset:
            out.append((COLUMN_ORDERS[0] if first and first_next else COLUMN_ORDERS[1], v.right))
    return out


def configs(gen_length: int) -> dict:
    from polestar.config import resolve

    def pol(**kw):
        return resolve("polestar", gen_length=gen_length, **kw)

    return {
        "Fast-dLLM": resolve("fast-dllm", gen_length=gen_length),
        "Polestar-Cache only": resolve("polestar-cache", gen_length=gen_length),
        "cache + drift rule": pol(polestar_suffix_commit=False),
        "cache + suffix commits": pol(polestar_current_commit=False),
        "both rules, no cache": pol(polestar_cache=False),
        "Polestar (defaults)": pol(),
        "Polestar, τ_early 0.8": pol(polestar_tau_early=0.8),
        "Polestar, τ_early 0.85": pol(polestar_tau_early=0.85),
    }


def sampler_configs(gen_length: int) -> dict:
    from polestar.config import resolve

    return {"LLaDA sampler, 1 token per step": resolve("baseline", gen_length=gen_length),
            "τ = 0.9, no cache": resolve("parallel", gen_length=gen_length)}


def band_of(confidence: float) -> str:
    i = max(0, bisect.bisect_right(BANDS, confidence) - 1)
    return f"[{BANDS[i]:g}, {BANDS[i + 1]:g})" if i + 1 < len(BANDS) else f"[{BANDS[i]:g}, 1]"


def _tally(counts: dict, key, right: bool) -> None:
    """counts[key] = (seen, wrong), one more verdict added."""
    n, wrong = counts.get(key, (0, 0))
    counts[key] = (n + 1, wrong + (not right))


def _rates(counts: dict, unit: str) -> dict:
    """{group: (seen, wrong)} -> {group: {unit: seen, "wrong_rate": wrong / seen}}."""
    return {g: {unit: n, "wrong_rate": w / n} for g, (n, w) in counts.items()}


def measure(model, examples, cfgs: dict, pooled_over: tuple[str, ...] = ()) -> tuple[list[dict], dict]:
    """Verdict counts per configuration and grouping; the confidence bands are also pooled over the
    configurations named in `pooled_over` (all of them when it is empty)."""
    import polestar
    from polestar import tasks

    rows, summary, pooled = [], {}, {}
    for name, cfg in cfgs.items():
        correct, nfe, counts = 0, 0, {}
        for ex in examples:
            r = polestar.generate(model, ex.prompt, cfg, trace=True)
            correct += tasks.score("arith", ex, r.text)
            nfe += r.nfe
            pieces, commits = traced_commits(model, r)
            judged = commit_of_each_digit(pieces, commits, digit_verdicts("".join(pieces)))
            for key, right in column_orders(judged):
                _tally(counts, ("column, order", key), right)
            for reason, confidence, first, v in judged:
                order = "inputs committed first" if first else "an input not yet committed"
                band = band_of(confidence)
                for key in (("reason", reason), ("confidence", band), ("kind", v.kind),
                            ("order", order), ("kind, order", f"{v.kind}, {order}")):
                    _tally(counts, key, v.right)
                if not pooled_over or name in pooled_over:
                    _tally(pooled, band, v.right)
        for (grouping, group), (n, wrong) in sorted(counts.items()):
            rows.append({"config": name, "grouping": grouping, "group": group, "digits": n, "wrong": wrong,
                         "wrong_rate": wrong / n})
        def grouped(grouping: str) -> dict:  # group -> (seen, wrong) of one grouping
            return {g: nw for (k, g), nw in counts.items() if k == grouping}

        summary[name] = {"accuracy": correct / len(examples), "nfe": nfe / len(examples),
                         "wrong_rate_by_reason": {g: w / n for g, (n, w) in grouped("reason").items()},
                         "digits_by_reason": {g: n for g, (n, _) in grouped("reason").items()},
                         "wrong_rate_by_kind": {g: w / n for g, (n, w) in grouped("kind").items()},
                         "by_order": _rates(grouped("kind, order"), "digits"),
                         "by_column_order": _rates(grouped("column, order"), "columns")}
    pooled_rates = _rates({band: pooled[band] for band in map(band_of, BANDS) if band in pooled}, "digits")
    return rows, {"configs": summary, "pooled_by_confidence": pooled_rates,
                  "pooled_over": list(pooled_over or cfgs)}


def figure(summary: dict, title: str):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from app.figures import COLOURS  # the app's colour-blind-safe commit-reason palette

    fig = make_subplots(rows=2, cols=2, column_widths=[0.68, 0.32], horizontal_spacing=0.1, vertical_spacing=0.3,
                        specs=[[{}, {}], [{"colspan": 2}, None]],
                        subplot_titles=("wrong digits by commit rule", "wrong digits by confidence at commit",
                                        "wrong written digits by commit order"))
    names = list(summary["configs"])
    for reason in REASONS:
        ys = [100 * summary["configs"][c]["wrong_rate_by_reason"].get(reason, float("nan")) for c in names]
        if all(y != y for y in ys):
            continue
        fig.add_trace(go.Bar(x=names, y=ys, name=reason, marker_color=COLOURS[reason]), 1, 1)
    bands = list(summary["pooled_by_confidence"])  # in BANDS order (`measure`)
    fig.add_trace(go.Bar(x=bands, y=[100 * summary["pooled_by_confidence"][b]["wrong_rate"] for b in bands],
                         name="any rule, by confidence", marker_color="#000000"), 1, 2)  # its own legend entry
    for order, colour in (("inputs committed first", "#555555"), ("an input not yet committed", "#bbbbbb")):
        ys = [100 * summary["configs"][c]["by_order"].get(f"written, {order}", {}).get("wrong_rate", float("nan"))
              for c in names]
        fig.add_trace(go.Bar(x=names, y=ys, name=f"written, {order}", marker_color=colour,
                             marker_pattern_shape="/" if order.startswith("an") else ""), 2, 1)
    fig.update_yaxes(title_text="wrong written digits (%)", row=2, col=1)
    fig.update_xaxes(title_text="configuration", row=2, col=1)
    for col in (1, 2):
        fig.update_yaxes(title_text="wrong computed digits (%)", row=1, col=col)
    fig.update_xaxes(title_text="configuration", tickangle=-30, row=1, col=1)
    left_out = [name for name in names if name not in summary["pooled_over"]]
    pooled = f"all but {', '.join(left_out)}" if left_out else "all configurations"
    fig.update_xaxes(title_text=f"confidence band ({pooled} pooled)", row=1, col=2)
    fig.update_layout(title=title, barmode="group", height=860, legend_title_text="committed by / order",
                      template="plotly_white")
    return fig


def main(argv: list[str] | None = None) -> None:
    p = figio.parser(__doc__.split("\n\n")[0], n=80)
    p.add_argument("--samplers", action="store_true",
                   help="decode with LLaDA's sampler and τ = 0.9 without a cache instead of the cache methods")
    args = p.parse_args(argv)
    if args.task != "arith":
        raise SystemExit("commit_reliability judges arith scratchpads: run it with --task arith")
    model = figio.setup(args)
    cfgs = sampler_configs(args.gen_length) if args.samplers else configs(args.gen_length)
    pooled_over = () if args.samplers else tuple(name for name in cfgs if name != "Fast-dLLM")
    rows, summary = measure(model, figio.examples(args), cfgs, pooled_over)
    fig = figure(summary, f"Which commits write wrong scratchpad digits (arith, n = {args.n}, "
                          f"generation {args.gen_length})")
    figio.write(args, f"{NAME}_samplers" if args.samplers else NAME, rows, summary, fig)
    for name, s in summary["configs"].items():
        rates = ", ".join(f"{r} {100 * w:.1f} %" for r, w in sorted(s["wrong_rate_by_reason"].items()))
        print(f"{name}: right {100 * s['accuracy']:.0f} %, NFE {s['nfe']:.1f}; wrong digits: {rates}")


if __name__ == "__main__":
    main()
