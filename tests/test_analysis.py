"""Smoke tests of the paper-figure scripts (`analysis/fig*.py`) on the embedded model at a small n: each writes its
CSV with the expected columns, finite numbers, its summary JSON and its HTML; `analysis.findings` builds
docs/findings.md from those outputs."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch

FIGURES = {
    "fig3_drift_staleness": {"panel", "bin", "mean_staleness", "count", "onset_step", "peak_drift_step", "gap"},
    "fig4_drift_heatmap": {"example", "step", "committed", "drift_block", "drift_window", "drift_beyond"},
    "fig6a_selection": {"layer", "candidates", "k", "precision_kl_entry", "precision_cosine",
                        "precision_uncertainty", "precision_random", "precision_nearest_block"},
    "fig6_ablations": {"suite", "method", "correct", "nfe", "content_tokens", "wall_s", "drift_commits"},
    "fig7_window": {"suite", "method", "correct", "nfe", "content_tokens", "wall_s", "refresh_steps"},
    "fig8_multitoken_drift": {"step", "committed", "group", "local_drift"},
    "fig9_hyperparameters": {"suite", "method", "correct", "nfe", "content_tokens", "wall_s", "suffix_commits"},
    "commit_reliability": {"config", "grouping", "group", "digits", "wrong", "wrong_rate"},
    "suffix_commits": {"example", "nfe", "past_block_end", "packet_confidence", "fresh_confidence", "agreement"},
}
# extra runs of a script with a flag: output name -> (script, flags)
VARIANTS = {"commit_reliability_samplers": ("commit_reliability", ["--samplers"])}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    import importlib

    out = tmp_path_factory.mktemp("figures")
    runs = [(name, []) for name in FIGURES] + list(VARIANTS.values())
    for name, flags in runs:
        importlib.import_module(f"analysis.{name}").main(["--n", "1", "--gen-length", "64", "--out", str(out),
                                                          "--no-png", *flags])
    importlib.import_module("analysis.polestar_firing").main(["--n", "1", "--gen-length", "64", "--polestar-delta-max",
                                                              "0", "--out", str(out / "drift_gate.json")])
    return out


@pytest.mark.parametrize("name", list(FIGURES) + list(VARIANTS))
def test_figure_script_writes_finite_rows(outputs, name):
    with (outputs / f"{name}.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert rows and FIGURES[VARIANTS.get(name, (name,))[0]] <= set(rows[0]), set(rows[0])
    numbers = [float(v) for r in rows for k, v in r.items() if v not in ("", None) and _numeric(v)]
    assert numbers and all(math.isfinite(x) for x in numbers)
    summary = json.loads((outputs / f"{name}.json").read_text())
    assert summary["settings"]["n"] == 1 and (outputs / f"{name}.html").stat().st_size > 1000


def test_step_cost_measures_every_system_setting(capsys):
    """The lent GPU's one command (`python -m kernels.bench --step-cost` runs it) on the embedded model's shape: a
    row per system setting, in order, with finite costs, Polestar's refresh steps timed apart, Fast-dLLM the unit."""
    from analysis import step_cost

    step_cost.main(["--small", "--device", "cpu", "--gen-lengths", "32"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["method"] for row in rows] == [name for name, *_ in step_cost.SYSTEM]
    assert all(math.isfinite(row["ms_per_step"]) and row["ms_per_step"] > 0 for row in rows)
    assert rows[0]["over_fastdllm_ms_per_step"] == 1.0
    assert all(row["steps_by_pass"].get("refresh", 0) > 0 for row in rows[1:])


def test_sampler_run_judges_the_samplers_of_the_model_card(outputs):
    summary = json.loads((outputs / "commit_reliability_samplers.json").read_text())
    assert list(summary["configs"]) == ["LLaDA sampler, 1 token per step", "τ = 0.9, no cache"]
    assert summary["configs"]["LLaDA sampler, 1 token per step"]["digits_by_reason"].keys() <= {"quota"}


def test_findings_page_is_built_from_the_outputs(outputs, tmp_path):
    from analysis import findings

    page = findings.render(outputs, tables=tmp_path)
    for name in ("Fig 3", "Fig 4", "Fig 6a", "Fig 6b", "Fig 7", "Fig 8", "Fig 9", "Drift gate", "Suffix commits"):
        assert name in page
    assert "No output yet" not in page
    assert "verdict" in page.lower() and "n = 1" in page
    summary = page.split("## Summary\n\n", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    assert len(summary) == page.count("\n**Verdict: ") and "| Fig 9a: block size B |" in summary[9]


def test_verdict_summary_reads_each_verdict_under_its_nearest_heading():
    from analysis.findings import verdict_summary

    page = ("## Fig 1: a\n\ntext\n\n**Verdict: partly** (1 of 2 checks hold)\n  - ✓ x\n\n## Fig 2: b\n\n### Fig 2a: c\n\n"
            "**Verdict: not** (0 of 3 checks hold; 1 cannot be decided here)\n\n## Table: d\n\nno verdict\n")
    assert verdict_summary(page).splitlines()[4:] == [
        "| Fig 1: a | partly | 1 of 2 checks hold |",
        "| Fig 2a: c | not | 0 of 3 checks hold; 1 cannot be decided here |"]
    assert verdict_summary("## nothing\n") == ""


def test_findings_never_presents_a_figure_of_other_weights(outputs, tmp_path):
    """Every summary records its weights; a figure measured on weights other than the shipped ones is replaced by
    a line saying so (a new model must not inherit the old one's findings)."""
    import shutil

    import polestar
    from analysis import findings
    from polestar import bench

    shipped = bench.weights_key(polestar.DEFAULT_MODEL)
    names = list(FIGURES) + ["drift_gate"]
    assert {json.loads((outputs / f"{n}.json").read_text())["settings"]["weights"] for n in names} == {shipped}
    figures = tmp_path / "figures"
    shutil.copytree(outputs, figures)
    summary = json.loads((figures / "fig4_drift_heatmap.json").read_text())
    summary["settings"]["weights"] = "0" * 16
    (figures / "fig4_drift_heatmap.json").write_text(json.dumps(summary))
    summary = json.loads((figures / "fig8_multitoken_drift.json").read_text())
    del summary["settings"]["weights"]  # unrecorded weights are not presumed to be the shipped ones
    (figures / "fig8_multitoken_drift.json").write_text(json.dumps(summary))
    page = findings.render(figures, tables=tmp_path)
    assert f"## fig4_drift_heatmap\n\nMeasured on other weights ({'0' * 16}; these are {shipped})" in page
    assert f"## fig8_multitoken_drift\n\nMeasured on other weights (weights not recorded; these are {shipped})" in page
    assert "Fig 4" not in page and "Fig 8" not in page and "Fig 3" in page and "Drift gate" in page


def _numeric(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


def test_arith_failures_names_the_first_error_of_each_wrong_answer():
    from analysis.arith_failures import classify, earlier_layout, first_error
    from polestar import tasks

    ex = tasks.make("arith", 1, 0)[0]
    lines = ex.answer.split("\n")
    assert first_error(ex.answer, ex.answer) is None
    col = lines[0].index(": ") + 2 + 6  # the first column's carry-out (`a+b+c=ds`: index 6)
    wrong_digit = "7" if lines[0][col] != "7" else "8"
    broken = lines[0][:col] + wrong_digit + lines[0][col + 1:]
    assert first_error(ex.answer, "\n".join([broken, *lines[1:]])) == "columns"
    restatement, equation = lines[0].split(". ", 1)
    x, op, rest = equation.split(" ", 2)
    other = "-" if op != "-" else "+"
    assert first_error(ex.answer, "\n".join([f"{restatement}. {x} {other} {rest}", *lines[1:]])) == "event"
    assert first_error(ex.answer, "\n".join(lines[:-2] + lines[-1:])) == "lines"
    reworded = "\n".join([f"Does something. {equation}", *lines[1:]])  # right answer, wrong words
    rows = [{"prompt": ex.prompt, "completion": reworded, "correct": True},
            {"prompt": ex.prompt, "completion": lines[0], "correct": False}]
    assert classify(rows) == {"n": 2, "wrong": 1, "first_error": {"lines": 1}, "right_with_a_wrong_restatement": 1}
    # a product line in the layout the shipped weights were trained on (`a*m+c=ds`) is right, not a column error
    product = tasks.make("arith", 40, 0)
    ex = next(e for e in product if " * " in e.answer)
    assert earlier_layout("9*9=81+0=81 1*9=09+8=17 0*9=00+1=01") == "9*9+0=81 1*9+8=17 0*9+1=01"
    old = "\n".join(earlier_layout(line) for line in ex.answer.split("\n"))
    assert old != ex.answer and first_error(ex.answer, old) is None


def test_digit_verdicts_charge_an_error_to_the_digit_that_made_it():
    from analysis.commit_reliability import commit_of_each_digit, digit_verdicts
    from polestar import tasks

    ex = next(e for e in tasks.make("arith", 40, 0) if " * " in e.answer and " + " in e.answer)
    verdicts = digit_verdicts(ex.answer)
    lines = ex.answer.split("\n")[:-1]
    # per line three chunks: a sum or difference has a carry and two written digits, a product two more
    assert len(verdicts) == sum(3 * (3 + 2 * (" * " in line)) for line in lines)
    assert all(v.right for v in verdicts)
    at = ex.answer.index("*", ex.answer.index(" * ") + 3) + 4  # the first product chunk's units product digit
    wrong = ex.answer[:at] + str((int(ex.answer[at]) + 1) % 10) + ex.answer[at + 1:]
    # that digit is wrong, and so is what it feeds within the chunk (the written pair); nothing else
    bad = [v for v in digit_verdicts(wrong) if not v.right]
    assert [(v.kind, v.offset) for v in bad] == [("product", at), ("written", at + 4), ("written", at + 5)]
    sum_line = next(i for i, line in enumerate(lines) if " + " in line)
    start = sum(len(line) + 1 for line in lines[:sum_line]) + lines[sum_line].index(": ") + 2
    carry = start + 9 + 4  # the second chunk's carry-in: `a+b+c=ds a+b+c=ds`
    flipped = ex.answer[:carry] + str(1 - int(ex.answer[carry])) + ex.answer[carry + 1:]
    bad = [v for v in digit_verdicts(flipped) if not v.right]
    assert ("carry", carry) in [(v.kind, v.offset) for v in bad]
    # a product chunk in the earlier layout (no product pair) is judged on its written pair: 1·8 + 5 is not 14
    assert [(v.kind, v.right) for v in digit_verdicts("7*8+0=56 1*8+5=14")] == [
        ("carry", True), ("written", True), ("written", True), ("carry", True), ("written", False), ("written", False)]
    # each digit is traced to the token that holds it (an empty piece, a special token, holds none), and its
    # inputs to theirs: here the written pair is committed by forward 5, with its product's units digit
    pieces = ["2", "*", "3", "=", "0", "6", "+", "0", "=", "", "0", "6"]
    forward = {i: 5 if i in (10, 11) else i for i in range(len(pieces))}
    commits = {i: ("threshold" if i != 5 else "drift", i, forward[i]) for i in range(len(pieces))}  # confidence i
    traced = commit_of_each_digit(pieces, commits, digit_verdicts("".join(pieces)))
    assert [(r, c, first) for r, c, first, _ in traced] == [
        ("threshold", 4, True), ("drift", 5, True), ("threshold", 7, True), ("threshold", 10, False),
        ("threshold", 11, False)]


def test_column_order_needs_both_written_digits_after_every_input():
    from analysis.commit_reliability import COLUMN_ORDERS, column_orders, commit_of_each_digit, digit_verdicts

    text = "8+7+0=15 6+5+1=13"  # the second chunk's written pair is wrong (6 + 5 + 1 = 12)
    pieces = list(text)
    forward = dict(enumerate([0] * len(pieces)))
    forward.update({6: 3, 7: 3, 15: 3, 16: 2})  # chunk 1: pair after its inputs; chunk 2: its digit `3` at 2,
    forward[13] = 2  # ... while its carry-in `1` is committed at 2 too (not earlier): out of order
    commits = {i: ("threshold", 1.0, f) for i, f in forward.items()}
    judged = commit_of_each_digit(pieces, commits, digit_verdicts(text))
    assert column_orders(judged) == [(COLUMN_ORDERS[0], True), (COLUMN_ORDERS[1], False)]


def test_step_breakdown_interleaves_methods_and_averages_repeats():
    import polestar
    from analysis.step_breakdown import markdown, measure
    from polestar import tasks
    from polestar.api import encode_prompt
    from polestar.config import resolve
    from polestar.decode import decode

    model = polestar.load_model(polestar.DEFAULT_MODEL)
    prompts = [ex.prompt for ex in tasks.make("lists", 2, seed=0)]
    rows = measure(model, prompts, ["fast-dllm", "polestar"], 64, repeats=2)
    assert [r["method"] for r in rows] == ["fast-dllm", "polestar"]
    for row in rows:  # per pass over the prompts: the NFE of one plain decode of each
        alone = sum(decode(model, encode_prompt(model, p), resolve(row["method"], gen_length=64)).nfe
                    for p in prompts)
        assert row["nfe"] == alone and row["sections"]["forward (cache policy)"] > 0
        assert 0 < row["sections"]["forward (cache policy)"] <= row["wall_s"] * 1.001
    assert "--repeats 2" in markdown(rows, 2, "lists", 64, 1, repeats=2)


def test_gate_agreement_compares_band_predictions_with_the_final_canvas():
    """With δ_max 0 the drift rule fires nowhere, yet its signals are traced: every in-band target of every step
    is counted once under its gate outcome, and with the drift rule on, a would-fire token committed on the spot
    agrees with the final canvas by construction."""
    import polestar
    from analysis.polestar_firing import measure

    model = polestar.load_model(polestar.DEFAULT_MODEL)
    n = 3  # one example at generation 64 may hold no band target (v12's first); three hold 20 between them
    silent = measure(model, "arith", n, {"gen_length": 64, "polestar_delta_max": 0.0})
    assert silent["mean_per_example"]["drift_commits"] == 0
    counted = sum(silent["gate_agreement"][gate]["all"]["n"] for gate in ("would fire", "would not fire"))
    assert counted == silent["block_targets"]["in band"] > 0
    for gate in silent["gate_agreement"].values():
        bins = [v["n"] for k, v in gate.items() if k.startswith("confidence")]
        assert sum(bins) == gate["all"]["n"]
    firing = measure(model, "arith", n, {"gen_length": 64})
    assert firing["mean_per_example"]["drift_commits"] > 0
    fired = firing["gate_agreement"]["would fire"]["all"]
    assert fired["n"] == firing["block_targets"]["in band, gate <= delta < delta_max"] and fired["agree"] == 1.0


def test_commit_order_reads_the_first_wrong_column_against_the_tokens_around_it():
    from analysis.arith_failures import commit_order, first_wrong_column
    from polestar import tasks

    ex = tasks.make("arith", 1, 0)[0]
    line = ex.answer.split("\n")[0]
    assert first_wrong_column(ex.answer) is None
    col = line.index(": ") + 2 + 7  # the first column's written digit (`a+b+c=ds`: index 7)
    wrong = line[:col] + ("7" if line[col] != "7" else "8") + line[col + 1:]
    text = "\n".join([wrong, *ex.answer.split("\n")[1:]])
    assert first_wrong_column(text) == col
    pieces = list(text)  # one character a token
    so = wrong.index(" so ") + len(" so ")
    # written left to right: all inputs first, nothing to the right before it
    assert commit_order(pieces, list(range(len(pieces))), col) == {"inputs_first": True, "right_first": "",
                                                                   "result": False, "copy_first": False}
    # the result's first digit committed at forward -1, before everything: a result digit first
    forward_of = list(range(len(pieces)))
    forward_of[so] = -1
    assert commit_order(pieces, forward_of, col) == {"inputs_first": True, "right_first": text[so], "result": True,
                                                     "copy_first": False}
    # the first column's written digit is the result's units digit (the result's last), here committed first
    forward_of = list(range(len(pieces)))
    forward_of[so + 2] = -1
    assert commit_order(pieces, forward_of, col)["copy_first"] is True
    # a carry-out's copy is the next column's carry-in; a carry-in has no copy
    first_chunk = wrong[line.index(": ") + 2:].split(" ")[0]
    carry_in_next = line.index(": ") + 2 + len(first_chunk) + 1 + len(wrong.split(": ")[1].split(" ")[1]) - 4
    forward_of = list(range(len(pieces)))
    forward_of[carry_in_next] = -1
    assert commit_order(pieces, forward_of, col - 1)["copy_first"] is True
    assert commit_order(pieces, forward_of, col - 3)["copy_first"] is None
    # the next line's first digit, committed first, is outside the line
    forward_of = list(range(len(pieces)))
    forward_of[len(line) + 1 + text.split("\n")[1].index(": ") - 1] = -1
    assert commit_order(pieces, forward_of, col)["right_first"] == ""
    # a later column of the line committed first is to the right but not the result
    forward_of = list(range(len(pieces)))
    forward_of[col + 2] = -1
    assert commit_order(pieces, forward_of, col) == {"inputs_first": True, "right_first": text[col + 2],
                                                     "result": False, "copy_first": False}
    # a carry-in (to the left) committed after the wrong digit: its inputs were not all seen
    forward_of = list(range(len(pieces)))
    forward_of[col - 3] = len(pieces)
    assert commit_order(pieces, forward_of, col)["inputs_first"] is False


def test_suffix_probe_reads_the_step_input_canvas_and_leaves_the_decode_alone():
    """The fresh forward of `analysis.suffix_commits` sees the canvas the packet saw (the step's own commits masked
    again, everything else as after the step), records every content suffix commit, and changes no token."""
    import polestar
    from analysis.suffix_commits import fresh_views
    from polestar import tasks

    model = polestar.load_model(polestar.DEFAULT_MODEL)
    prompt = tasks.make("arith", 1, 0)[0].prompt
    seen, on_step = fresh_views(model)
    inputs = []
    forward = model.forward

    def spy(event, canvas):
        model.forward = lambda ids: inputs.append((ids.clone(), canvas.clone(), event)) or forward(ids)
        try:
            on_step(event, canvas)
        finally:
            del model.forward  # the class's method again

    probed = polestar.generate(model, prompt, "polestar", gen_length=64, on_step=spy)
    plain = polestar.generate(model, prompt, "polestar", gen_length=64)
    assert probed.token_ids == plain.token_ids
    suffix = {c.position for e in probed.trace.events for c in e.commits if c.reason == "suffix"}
    assert suffix and set(seen) == suffix
    for before, after, event in inputs:
        committed = torch.tensor([c.position for c in event.commits])
        assert (before[0, committed] == model.mask_id).all()
        kept = torch.ones(after.shape[1], dtype=torch.bool)
        kept[committed] = False
        assert torch.equal(before[0, kept], after[0, kept])


def test_accuracy_checks_are_paired_sign_tests():
    """A drop counts only when an exact one-sided sign test on the examples one setting alone gets right gives
    p < 0.05: five of five discordant examples against a setting do (p = 1/32), four do not (p = 1/16)."""
    from analysis.findings import _less, _not_less, _sign_test

    assert _sign_test(0, 5) == 1 / 32 and _sign_test(0, 4) == 1 / 16 and _sign_test(5, 0) == 1.0
    assert _sign_test(0, 0) == 1.0 and abs(_sign_test(1, 1) - 0.75) < 1e-12

    def panel(a, b):
        return {"a": {"correct": a}, "b": {"correct": b}}

    five = panel([0, 0, 0, 0, 0, 1, 0], [1, 1, 1, 1, 1, 1, 0])
    assert _less(five, "a", "b")[1] is True and _not_less(five, "a", "b")[1] is False
    four = panel([0, 0, 0, 0, 1], [1, 1, 1, 1, 1])
    assert _less(four, "a", "b")[1] is None and _not_less(four, "a", "b")[1] is True
    better = panel([1, 1, 0], [0, 1, 0])
    assert _less(better, "a", "b")[1] is False and _not_less(better, "a", "b")[1] is True
    assert _less({"a": {}, "b": {}}, "a", "b") == ("no per-example results", None)
    assert "4 examples only b gets right, 0 only a; one-sided p = 0.062" in _less(four, "a", "b")[0]
