"""`polestar` as an lm-evaluation-harness model (lm-eval 0.4.x), and `python -m polestar.lmeval`, lm-eval's own
command line with that model registered.

    python -m polestar.lmeval --model polestar --model_args pretrained=PATH_OR_ID,method=polestar,gen_length=256 \\
        --tasks polestar_arith --apply_chat_template --output_path OUT
    accelerate launch --num_processes N -m polestar.lmeval ...        # data parallel, one model copy per process

lm-eval 0.4 has no plugin hook for model classes, so the harness's CLI is started from here once the class is
registered: the pattern of LLaDA's and Fast-dLLM's `eval_*.py` scripts. Every argument after the program name is
lm-eval's; our task YAMLs (`polestar/lmeval_tasks`) are on the include path by default.

Model args: `pretrained` (a checkpoint directory or hub id; default the embedded model), `method` (a preset),
`dtype`, `samples_out` (a JSONL of per-sample NFE / TPF / TPS / counters; set under `--output_path` by default),
and every `DecodeConfig` field by name (`gen_length=512,tau_s=0.8,polestar_tau_upd=1`). `generate_until` runs the
one decode loop at the configured fixed length, as the paper measures, and applies the stop sequences after it.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from polestar.errors import ConfigError

log = logging.getLogger(__name__)
TASKS_DIR = Path(__file__).parent / "lmeval_tasks"
STATS = ("nfe", "tpf", "tps", "tokens_per_step", "wall_s", "refresh_steps", "drift_commits", "suffix_commits",
         "suffix_eos_commits", "forced_commits")


def cut_at_stop(text: str, until: list[str] | str | None) -> str:
    """`text` up to the earliest stop sequence (stop sequences are applied after the full fixed-length decode)."""
    stops = [until] if isinstance(until, str) else list(until or [])
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=len(text))
    return text[:cut]


@register_model("polestar")
class PolestarLM(LM):
    def __init__(self, pretrained: str | None = None, method: str = "polestar", dtype: str | None = None,
                 device: str | None = None, batch_size: int | str = 1, max_batch_size: int | None = None,
                 samples_out: str = "", **fields: Any) -> None:
        # lm-eval passes batch_size and max_batch_size to every model: `batch_size` N decodes N requests at a time
        # (`polestar.decode_batch`; "auto" takes max_batch_size, else 1)
        super().__init__()
        import torch

        import polestar
        from polestar.config import resolve
        from polestar.decode import batch_problem
        from polestar.distributed import shard

        self.cfg = resolve(method, **fields)
        self.batch_size = _batch_size(batch_size, max_batch_size)
        if self.batch_size > 1 and (problem := batch_problem(self.cfg)):
            raise ConfigError(f"batch_size={batch_size} with method {method}: {problem}, or use --batch_size 1 "
                              "and data parallel processes (accelerate launch)")
        self.shard = shard()
        self._rank, self._world_size = self.shard.rank, self.shard.world
        if self.shard.world > 1 or not device:  # one model copy per process, on its own GPU
            device = self.shard.device
        elif device.startswith("cuda") and not torch.cuda.is_available():  # lm-eval's --device defaults to cuda
            log.warning("--device %s: torch sees no GPU, decoding on the CPU", device)
            device = "cpu"
        self.model = polestar.load_model(pretrained or polestar.DEFAULT_MODEL, device=device,
                                         dtype=getattr(torch, dtype) if dtype else None)
        self.pretrained = pretrained or polestar.DEFAULT_MODEL
        self.samples_out = samples_out
        self.samples: list[dict[str, Any]] = []

    # lm-eval's data-parallel hooks: requests are split by rank; these gather the per-rank results
    def all_gather(self, tensor):
        import torch

        parts = [torch.as_tensor(t) for t in self.shard.all_gather(tensor.cpu())]
        return torch.cat([t.reshape(1) if t.dim() == 0 else t for t in parts])  # as accelerate's gather

    def gather_object(self, obj, dst=0):
        return self.shard.gather(obj)

    def barrier(self) -> None:
        self.shard.barrier()

    @property
    def tokenizer_name(self) -> str:
        return str(self.pretrained).replace("/", "__")

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.model.tokenizer.apply_chat_template(chat_history, tokenize=False,
                                                        add_generation_prompt=add_generation_prompt)

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return self.model.tokenizer.chat_template

    def _encode(self, context: str):
        import torch

        tok = self.model.tokenizer
        # a chat-templated context already starts with the BOS text; a plain one gets the tokenizer's specials
        special = not (tok.bos_token and context.startswith(tok.bos_token))
        ids = tok(context, add_special_tokens=special).input_ids
        if not ids:
            raise ConfigError("an lm-eval request has an empty context")
        return torch.tensor([ids], dtype=torch.long, device=self.model.device)

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        from tqdm import tqdm

        from polestar.api import results_of

        # longest contexts first, so a batch's rows need little padding; answers go back in request order
        ids = [self._encode(req.args[0]) for req in requests]
        order = sorted(range(len(requests)), key=lambda i: -ids[i].shape[1])
        out: list[str | None] = [None] * len(requests)
        with tqdm(total=len(requests), disable=disable_tqdm or self._rank != 0, desc="polestar",
                  unit="request") as bar:
            for first in range(0, len(order), self.batch_size):
                chunk = order[first:first + self.batch_size]
                batch_id = f"{self._rank}:{len(self.samples)}"  # samples of one batch share its wall time
                for i, r in zip(chunk, results_of(self.model, [ids[i] for i in chunk], self.cfg)):
                    req = requests[i]
                    out[i] = cut_at_stop(r.text, req.args[1].get("until"))
                    self.samples.append({"task": req.task_name, "doc_id": req.doc_id, "rank": self._rank,
                                         "batch": batch_id, **{k: v for k, v in r.summary().items() if k in STATS}})
                bar.update(len(chunk))
        self._write_samples()
        return out

    def _write_samples(self) -> None:
        """Rank 0 writes every rank's per-sample rows (a collective: each rank's generate_until calls it once)."""
        gathered = self.shard.gather(self.samples)
        if gathered is None or not self.samples_out:
            return
        rows = sorted((row for rows in gathered for row in rows), key=lambda r: (r["task"], r["doc_id"]))
        path = Path(self.samples_out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise ConfigError("the polestar model generates (generate_until tasks such as gsm8k, humaneval, "
                          "polestar_arith); loglikelihood tasks need a likelihood estimate it does not make")

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        self.loglikelihood(requests)


def summarise(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per task: the mean of every per-sample statistic, and TPF / TPS over all samples (tokens / forwards,
    tokens / seconds; a batch's wall time counted once)."""
    out = {}
    for task in sorted({r["task"] for r in rows}):
        sel = [r for r in rows if r["task"] == task]
        tokens = sum(r["tpf"] * r["nfe"] for r in sel)
        walls = {r.get("batch", i): r["wall_s"] for i, r in enumerate(sel)}
        summary = {"n": len(sel), **{k: statistics.fmean(r[k] for r in sel) for k in STATS}}
        summary |= {"tpf": tokens / max(1, sum(r["nfe"] for r in sel)),
                    "tps": tokens / max(1e-9, sum(walls.values()))}
        out[task] = summary
    return out


def _batch_size(batch_size: int | str, max_batch_size: int | None) -> int:
    if str(batch_size).startswith("auto"):
        return int(max_batch_size or 1)
    try:
        size = int(batch_size)
    except ValueError:
        raise ConfigError(f"batch_size={batch_size!r}: give a whole number ≥ 1 or 'auto'") from None
    if size < 1:
        raise ConfigError(f"batch_size={size}: give a whole number ≥ 1")
    return size


def _with_defaults(argv: list[str]) -> tuple[list[str], Path | None]:
    """lm-eval's argv with our task folder on the include path and, under --output_path, a samples file."""
    argv = list(argv)
    if "--include_path" not in argv:
        argv += ["--include_path", str(TASKS_DIR)]
    samples = None
    if "--output_path" in argv and "--model_args" in argv:
        i = argv.index("--model_args") + 1
        if "samples_out=" not in argv[i]:
            samples = Path(argv[argv.index("--output_path") + 1]) / "polestar_samples.jsonl"
            argv[i] = f"{argv[i]},samples_out={samples}" if argv[i] else f"samples_out={samples}"
    return argv, samples


def main(argv: list[str] | None = None) -> None:
    from polestar.threads import quiet_openmp

    quiet_openmp()  # before torch loads (the model class imports it)
    from lm_eval.__main__ import cli_evaluate

    args, samples = _with_defaults(sys.argv[1:] if argv is None else argv)
    sys.argv = ["lm_eval", *args]
    cli_evaluate()
    if samples is not None and samples.is_file() and int(os.environ.get("RANK", "0")) == 0:
        rows = [json.loads(line) for line in samples.read_text().splitlines()]
        summary = summarise(rows)
        (samples.parent / "polestar_summary.json").write_text(json.dumps(summary, indent=2))
        print("\npolestar decode statistics (per-sample means; TPF and TPS over all samples):")
        print("| task | n | " + " | ".join(STATS) + " |")
        print("|---" * (len(STATS) + 2) + "|")
        for task, s in summary.items():
            print(f"| {task} | {s['n']} | " + " | ".join(f"{s[k]:.4g}" for k in STATS) + " |")


if __name__ == "__main__":
    main()
