"""The bench: rows per example × method, a summary table, a resumable CSV, and the CLI's table output."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import polestar
from polestar import bench
from tests.tiny_checkpoints import write_checkpoint

SMALL = {"gen_length": 16, "block_length": 8}


def test_bench_rows_table_and_resume(tmp_path):
    model = polestar.load_model(write_checkpoint(tmp_path / "m", "llada"))
    out = tmp_path / "bench.csv"
    configs = bench.configs_for(["baseline", "fast-dllm"], SMALL)
    rows = bench.run_bench(model, ["lists"], 2, configs, 0, progress=False, out=out)
    assert [(r["example"], r["method"]) for r in rows] == [(0, "baseline"), (0, "fast-dllm"), (1, "baseline"),
                                                          (1, "fast-dllm")]
    assert all(r["nfe"] == 16 for r in rows if r["method"] == "baseline")
    # the quota rule never forces and no method here refreshes or commits by drift or from the suffix
    assert all(r[k] == 0 for r in rows for k in bench.COUNTERS if k != "forced_commits")
    assert all(r["forced_commits"] == 0 for r in rows if r["method"] == "baseline")
    stamp = out.read_text().splitlines()
    again = bench.run_bench(model, ["lists"], 2, configs, 0, progress=False, out=out)
    assert out.read_text().splitlines() == stamp  # nothing recomputed
    assert [r["nfe"] for r in again] == [r["nfe"] for r in rows]
    assert [[r[k] for k in bench.COUNTERS] for r in again] == [[r[k] for k in bench.COUNTERS] for r in rows]
    table = bench.summarise(again)
    base = next(r for r in table if r["method"] == "baseline")
    assert base["speedup"] == 1.0 and base["n"] == 2 and base["nfe"] == 16
    text = bench.markdown(table, again)
    assert "| lists | fast-dllm | 2 |" in text and f"git {rows[0]['git_sha']}, {rows[0]['timestamp']}" in text
    resumed = again[:2] + [r | {"git_sha": "abc1234", "timestamp": "2999-01-01T00:00:00Z"} for r in again[2:]]
    assert f"git {rows[0]['git_sha']}, abc1234, {rows[0]['timestamp']} to 2999-01-01T00:00:00Z" in bench.markdown(
        bench.summarise(resumed), resumed)  # a resumed bench names every invocation
    assert [r["method"] for r in bench.summarise(again, methods=["fast-dllm", "baseline"])] == ["fast-dllm",
                                                                                               "baseline"]
    no_base = bench.markdown(bench.summarise([r for r in again if r["method"] == "fast-dllm"]), again)
    assert no_base.splitlines()[2].split(" | ")[8] == "—"  # without a baseline in the run there is no speed-up
    partial = bench.run_bench(model, ["lists"], 3, configs, 0, progress=False, out=out, decode=False)
    assert out.read_text().splitlines() == stamp and len(partial) == 4  # the table of the 2 examples there
    with pytest.raises(bench.BenchError, match="--table-only"):
        bench.run_bench(model, ["lists"], 3, bench.configs_for(["parallel"], SMALL), 0, progress=False, out=out,
                        decode=False)


def test_resume_never_mixes_weights_and_refuses_an_old_csv(tmp_path):
    """Rows of other weights in the CSV are not taken as done; a CSV without the weights column is refused."""
    out = tmp_path / "bench.csv"
    configs = bench.configs_for(["baseline"], SMALL)
    first = polestar.load_model(write_checkpoint(tmp_path / "a", "llada", seed=0))
    second = polestar.load_model(write_checkpoint(tmp_path / "b", "llada", seed=1))
    a = bench.run_bench(first, ["lists"], 1, configs, 0, progress=False, out=out)
    b = bench.run_bench(second, ["lists"], 1, configs, 0, progress=False, out=out)
    assert len(out.read_text().splitlines()) == 3  # header + one row per weights
    assert a[0]["model"] and b[0]["model"] and a[0]["model"] != b[0]["model"]
    old = tmp_path / "old.csv"
    lines = out.read_text().splitlines()
    old.write_text(lines[0].replace("model,", "") + "\n")
    with pytest.raises(bench.BenchError, match="older bench"):
        bench.run_bench(first, ["lists"], 1, configs, 0, progress=False, out=old)


def test_table_plot_reads_only_the_served_weights(tmp_path):
    """A paper-table CSV holding rows of two weights is summarised for the given model's weights only; weights
    with no rows get a BenchError that says to run `compute`."""
    from analysis.tables import plot

    out = tmp_path / "reports" / "mixed_g16.csv"
    configs = bench.configs_for(["baseline", "fast-dllm"], SMALL)
    paths = [write_checkpoint(tmp_path / name, "llada", seed=seed) for name, seed in (("a", 0), ("b", 1), ("c", 2))]
    bench.run_bench(polestar.load_model(paths[0]), ["lists"], 2, configs, 0, progress=False, out=out)
    bench.run_bench(polestar.load_model(paths[1]), ["lists"], 1, configs, 0, progress=False, out=out)
    md = plot("mixed_g16", "baseline", "mixed", "cmd", str(paths[0]), root=tmp_path).read_text()
    assert "| lists | baseline | 2 |" in md and "| lists | fast-dllm | 2 |" in md
    dtype = str(polestar.load_model(paths[0]).dtype).removeprefix("torch.")
    assert f"), {dtype}, torch" in md  # the footer names the dtype the rows were decoded in
    md = plot("mixed_g16", "baseline", "mixed", "cmd", str(paths[1]), root=tmp_path).read_text()
    assert "| lists | baseline | 1 |" in md
    with pytest.raises(bench.BenchError, match="compute"):
        plot("mixed_g16", "baseline", "mixed", "cmd", str(paths[2]), root=tmp_path)


def test_cli_bench_json(tmp_path):
    root = write_checkpoint(tmp_path / "m", "dream")
    proc = subprocess.run(
        [sys.executable, "-m", "polestar", "bench", "--model", str(root), "--suite", "arith", "--n", "1",
         "--methods", "baseline,parallel", "--gen-length", "16", "--block-length", "8", "--json",
         "--table-out", str(tmp_path / "t.md")],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {r["method"] for r in summary} == {"baseline", "parallel"}
    assert "| arith | parallel | 1 |" in (tmp_path / "t.md").read_text()


def test_bench_over_two_processes_equals_one(tmp_path):
    """`accelerate launch --num_processes 2 -m polestar bench`: each process decodes half of the work, rank 0
    writes every row in one process's order, and the rows are those of one process."""
    import os

    root = write_checkpoint(tmp_path / "m", "llada")
    bench_args = ["-m", "polestar", "bench", "--model", str(root), "--suite", "arith,lists", "--n", "3",
                  "--methods", "baseline,fast-dllm", "--gen-length", "16", "--block-length", "8"]
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
              "--main_process_port", "29632"]
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    for cmd, out in (([sys.executable], "one.csv"), (launch, "two.csv")):
        proc = subprocess.run([*cmd, *bench_args, "--out", str(tmp_path / out)], capture_output=True, text=True,
                              timeout=600, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
    keys = ("suite", "example", "method", "correct", "nfe", "content_tokens", *bench.COUNTERS)
    one, two = (bench.read_csv(tmp_path / name) for name in ("one.csv", "two.csv"))
    assert len(one) == 12 and [[r[k] for k in keys] for r in one] == [[r[k] for k in keys] for r in two]


def test_batch_throughput_script_checks_every_row(tmp_path):
    import csv

    from analysis import batch_throughput

    out = tmp_path / "batch.csv"
    batch_throughput.main(["--suite", "lists", "--n", "3", "--batch", "2", "--methods", "fast-dllm",
                           "--gen-length", "32", "--out", str(out)])
    row = next(csv.DictReader(out.open()))
    assert row["rows_equal"] == "3" and int(row["forwards_batched"]) <= int(row["forwards_batch1"])
    assert float(row["tps_batch1"]) > 0 and float(row["tps_batched"]) > 0


def test_findings_table_sections_come_from_the_table_rows(tmp_path):
    """docs/findings.md's Table 1, 4 and 11 sections summarise the rows `analysis.<table> compute` writes (the
    tables' own configs), the paper's numbers beside ours; a table with no rows of the weights is listed as
    not measured."""
    from types import SimpleNamespace

    from analysis import findings, table1_methods, table4_ablation, table11_formats

    root = write_checkpoint(tmp_path / "m", "llada")
    model = polestar.load_model(root)
    tables = tmp_path / "reports"
    for name, module, suites in (("table4_ablation", table4_ablation, ["arith"]),
                                 ("table11_formats", table11_formats, ["arith"]),
                                 ("table1_methods", table1_methods, ["arith", "lists"])):
        bench.run_bench(model, suites, 1, module.configs(SimpleNamespace(gen_length=32)), 0, progress=False,
                        out=tables / f"{name}_g256.csv")
    page = findings.render(tmp_path / "no-figures", tables=tables, model_path=str(root))
    assert "## Table 4" in page and "| +suffix-commit | 78.33 % | 3.67 |" in page
    assert "## Table 11" in page and "| nvfp4 | 54.98 % |" in page and "n = 1 `arith`" in page
    assert "## Table 1" in page and "| polestar | 78.33 % | 3.67 | 1.83× |" in page
    assert "| d2cache | – | – | – |" in page and "lists accuracy" in page and "`lists` n = 1" in page
    assert page.count("**Verdict:") == 3 and "Not measured" not in page and "(generation 512)" not in page
    # a table also run at generation 512 gets a second section, read from its own file
    bench.run_bench(model, ["arith"], 1, table4_ablation.configs(SimpleNamespace(gen_length=32)), 0, progress=False,
                    out=tables / "table4_ablation_g512.csv")
    page = findings.render(tmp_path / "no-figures", tables=tables, model_path=str(root))
    assert page.count("**Verdict:") == 4 and "## Table 4: Polestar's components, one at a time (generation 512)" in page
    assert "analysis.table4_ablation compute --n 1 --gen-length 512" in page
    other = write_checkpoint(tmp_path / "other", "llada", seed=1)
    page = findings.render(tmp_path / "no-figures", tables=tables, model_path=str(other))
    assert "## Table 4" not in page and "table1_methods, table4_ablation, table11_formats" in page
