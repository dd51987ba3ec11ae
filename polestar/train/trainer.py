"""LLaDA's SFT objective on the task suite: train a LLaDA-architecture model from scratch on the CPU.

Objective (LLaDA §2.3): the prompt is never masked; each response position (answer + EOS padding) is masked
independently with probability t ~ U(eps, 1), drawn per sequence; the loss is the cross-entropy on masked
positions weighted by 1/t and normalised by the response length; other row types (block-causal, focus,
focus-block) are in `polestar/train/objective.py`. AdamW with linear warm-up and cosine decay, bf16 autocast,
gradient clipping, on the CPU or a GPU. Checkpoints (safetensors + JSON, no pickle) every `ckpt_every` steps; a
rerun with the same `out_dir` resumes from the last one.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from polestar.errors import ConfigError
from polestar.models.families import LLADA
from polestar.models.spec import ModelSpec
from polestar.models.transformer import Transformer
from polestar.train.data import TaskBatcher
from polestar.train.objective import sft_loss
from polestar.train.tokenizer import train_tokenizer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainConfig:
    """The defaults are the shipped model's GPU recipe in one cosine schedule (it was trained as 2,404 + 2,396 +
    1,400 steps with the schedule re-opened twice, then fine-tuned on the CPU for 512-token canvases: see its
    model card). About 10 minutes on one H200 with `--device cuda --workers 12`; on a CPU use a smaller
    `--token-budget` and expect hours."""

    out_dir: str = field(default="runs/polestar-tiny", metadata={"help": "run directory (resumes if it exists)"})
    d_model: int = field(default=256, metadata={"help": "hidden size"})
    n_layers: int = field(default=8, metadata={"help": "transformer layers"})
    n_heads: int = field(default=8, metadata={"help": "attention heads"})
    mlp_hidden: int = field(default=768, metadata={"help": "SwiGLU inner width"})
    vocab_size: int = field(default=2048, metadata={"help": "tokenizer size (embedding rows)"})
    max_seq_len: int = field(default=1024, metadata={"help": "max_sequence_length written to config.json"})
    steps: int = field(default=6200, metadata={"help": "optimizer steps"})
    lr: float = field(default=1e-3, metadata={"help": "peak learning rate"})
    warmup: int = field(default=300, metadata={"help": "linear warm-up steps"})
    min_lr_ratio: float = field(default=0.1, metadata={"help": "final lr as a fraction of the peak"})
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW weight decay"})
    grad_clip: float = field(default=1.0, metadata={"help": "gradient norm clip"})
    token_budget: int = field(default=65536, metadata={"help": "tokens per batch"})
    response_lengths: tuple[int, ...] = field(default=(64, 128, 256),
                                              metadata={"help": "response lengths (one drawn per batch)"})
    tasks: tuple[str, ...] = field(default=("arith", "lists"),
                                   metadata={"help": "task mix: a batch's rows cycle through these task names "
                                                     "(repeat a name to weight it; one name for a single-task phase)"})
    mask_eps: float = field(default=1e-3, metadata={"help": "lower bound of the mask ratio t"})
    block_rows: float = field(default=0.0, metadata={"help": "fraction of rows masked block-causally: a clean prefix "
                                                            "of whole blocks, one block masked with ratio t, the "
                                                            "rest all masked; only that block is scored"})
    block_length: int = field(default=32, metadata={"help": "block size of the block-causal rows"})
    focus_rows: float = field(default=0.0, metadata={"help": "fraction of the rows of tasks that mark what they "
                                                            "compute (tasks.computed: drill columns; word-problem "
                                                            "columns and results) masked only there, each "
                                                            "such token with the row's ratio t: the one-digit facts "
                                                            "with nothing to copy"})
    focus_block_rows: float = field(default=0.0, metadata={"help": "fraction of the focus rows that are also "
                                                                  "block-causal: clean blocks up to a block holding "
                                                                  "focus tokens, its focus tokens masked with the "
                                                                  "row's ratio t, everything after it masked (the "
                                                                  "canvas one-token-per-step decoding computes in)"})
    order_rows: float = field(default=0.0, metadata={"help": "fraction of the rows showing the canvas confidence-"
                                                            "ordered decoding builds in a block: clean blocks "
                                                            "before it, a share of it unmasked (reference tokens) "
                                                            "most confident first, everything after it masked; "
                                                            "its masked positions scored"})
    order_rounds: int = field(default=2, metadata={"help": "no-grad forwards that rank an order row's block"})
    seed: int = field(default=0, metadata={"help": "seed of init and data"})
    tokenizer_corpus: int = field(default=20000, metadata={"help": "examples per task to train the tokenizer on"})
    split_digits: bool = field(default=False, metadata={"help": "one token per digit (else BPE merges numbers)"})
    init_from: str = field(default="", metadata={"help": "start from this LLaDA-format checkpoint (its weights and "
                                                          "tokenizer), e.g. the shipped model, instead of random"})
    new_tokenizer: bool = field(default=False, metadata={"help": "with --init-from: train a new tokenizer (by "
                                                                 "--vocab-size, --split-digits) and move the "
                                                                 "embedding rows over by token string"})
    autocast: bool = field(default=True, metadata={"help": "bf16 autocast (on the CPU or the GPU); on a CPU without "
                                                           "native bf16 use --no-autocast: emulated bf16 made a "
                                                           "step 18x slower (104 s against 5.8 s, measured); "
                                                           "with native bf16 (AVX512-BF16) a step was 1.3-1.7x "
                                                           "faster than in float32"})
    device: str = field(default="cpu", metadata={"help": "where to train: cpu, cuda or cuda:N"})
    workers: int = field(default=0, metadata={"help": "processes that build batches ahead (0: in the training "
                                                       "loop); a GPU run needs a few to keep the GPU fed"})
    log_every: int = field(default=25, metadata={"help": "log interval in steps"})
    ckpt_every: int = field(default=200, metadata={"help": "checkpoint interval in steps"})
    threads: int = field(default=0, metadata={"help": "torch threads (0: torch's default)"})

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model {self.d_model} must be divisible by n_heads {self.n_heads}")
        from polestar import tasks

        unknown = [t for t in self.tasks if t not in tasks.TASKS]
        if not self.tasks or unknown:
            raise ConfigError(f"tasks must name tasks from {', '.join(tasks.TASKS)}, got {list(self.tasks)}")
        if not 0 <= self.focus_rows <= 1:
            raise ConfigError(f"focus_rows must be in [0, 1], got {self.focus_rows}")
        if not 0 <= self.focus_block_rows <= 1:
            raise ConfigError(f"focus_block_rows must be in [0, 1], got {self.focus_block_rows}")
        if not 0 <= self.block_rows <= 1 or self.block_length < 1:
            raise ConfigError(f"block_rows must be in [0, 1] and block_length ≥ 1, got {self.block_rows}, "
                              f"{self.block_length}")
        if not 0 <= self.order_rows <= 1 or self.order_rounds < 1:
            raise ConfigError(f"order_rows must be in [0, 1] and order_rounds ≥ 1, got {self.order_rows}, "
                              f"{self.order_rounds}")
        if not 0 < self.mask_eps < 1:
            raise ConfigError(f"mask_eps must be in (0, 1), got {self.mask_eps}")
        if self.steps < 1 or self.warmup < 0 or self.token_budget < 64:
            raise ConfigError("steps ≥ 1, warmup ≥ 0 and token_budget ≥ 64 are required")
        if not (self.device == "cpu" or self.device == "cuda" or self.device.startswith("cuda:")):
            raise ConfigError(f"device must be cpu, cuda or cuda:N, got {self.device!r}")
        if self.workers < 0:
            raise ConfigError(f"workers must be ≥ 0, got {self.workers}")


def llada_config(cfg: TrainConfig, special: dict[str, int]) -> dict:
    """config.json in LLaDA-8B-Instruct's exact keys (docs/checkpoints.md §1.1), for our size."""
    return {
        "model_type": "llada", "architectures": ["LLaDAModelLM"], "d_model": cfg.d_model, "n_heads": cfg.n_heads,
        "n_kv_heads": cfg.n_heads, "n_layers": cfg.n_layers, "mlp_hidden_size": cfg.mlp_hidden, "mlp_ratio": 4,
        "activation_type": "silu", "block_type": "llama", "block_group_size": 1, "vocab_size": cfg.vocab_size,
        "embedding_size": cfg.vocab_size, "weight_tying": False, "rope": True, "rope_full_precision": True,
        "rope_theta": 10000.0, "alibi": False, "alibi_bias_max": 8.0, "max_sequence_length": cfg.max_seq_len,
        "layer_norm_type": "rms", "rms_norm_eps": 1e-5, "layer_norm_with_affine": True,
        "bias_for_layer_norm": False, "attention_layer_norm": False, "attention_layer_norm_with_affine": True,
        "include_bias": False, "include_qkv_bias": False, "input_emb_norm": False, "scale_logits": False,
        "flash_attention": False, "attention_dropout": 0.0, "residual_dropout": 0.0, "embedding_dropout": 0.0,
        "multi_query_attention": None, "init_device": "meta", "init_fn": "mitchell", "init_std": 0.02,
        "eos_token_id": special["eos"], "pad_token_id": special["eos"], "bos_token_id": special["bos"],
        "mask_token_id": special["mask"], "precision": "amp_bf16", "use_cache": False, "torch_dtype": "bfloat16",
    }


def _lr(cfg: TrainConfig, step: int) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def build_model(cfg: TrainConfig, special: dict[str, int]) -> Transformer:
    c = llada_config(cfg, special)
    spec = LLADA.parse(c | {"torch_dtype": "float32"})
    model = Transformer(spec)
    model.init_weights(torch.Generator().manual_seed(cfg.seed))
    return model


def train(cfg: TrainConfig, until: int | None = None) -> Path:
    """Train (or resume) into `cfg.out_dir`; returns the run directory. `until` stops after that many steps
    in total (checkpointed), so a later call resumes on the same schedule."""
    from transformers import PreTrainedTokenizerFast

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = Path(cfg.out_dir)
    tok_dir = out / "tokenizer"
    if cfg.init_from and not cfg.new_tokenizer and not (tok_dir / "tokenizer.json").is_file():
        import shutil

        tok_dir.mkdir(parents=True, exist_ok=True)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(Path(cfg.init_from) / name, tok_dir / name)
    if not (tok_dir / "tokenizer.json").is_file():
        from polestar import tasks

        corpus = [ex.prompt + "\n" + ex.answer for name in ("arith", "lists")
                  for ex in tasks.make(name, cfg.tokenizer_corpus, 1, "train")]
        train_tokenizer(corpus + ["user", "assistant"], cfg.vocab_size, tok_dir, cfg.split_digits)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(tok_dir))
    special = {k: tokenizer.convert_tokens_to_ids(v) for k, v in
               {"eos": tokenizer.eos_token, "bos": tokenizer.bos_token, "mask": tokenizer.mask_token}.items()}
    device = torch.device(cfg.device)
    if device.type == "cpu" and cfg.autocast:
        from polestar.models.loader import native_bf16_cpu

        if not native_bf16_cpu():
            log.warning("this CPU has no native bf16: bf16 autocast is emulated and slow, pass --no-autocast")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda was asked for but torch sees no GPU: train with --device cpu")
    model = build_model(cfg, special).to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    start = _resume(out, model, opt)
    if start == 0 and cfg.init_from:
        _init_from(model, Path(cfg.init_from), tokenizer)
    batcher = TaskBatcher(tokenizer, special["eos"], cfg.seed, cfg.token_budget, cfg.response_lengths, cfg.tasks)
    model.train()
    out.mkdir(parents=True, exist_ok=True)
    t0, logf = time.time(), open(out / "log.jsonl", "a")
    stop = cfg.steps if until is None else min(until, cfg.steps)
    for step, batch in zip(range(start, stop), _batches(batcher, start, stop, cfg.workers)):
        ids, response = batch.ids.to(device, non_blocking=True), batch.response.to(device, non_blocking=True)
        g = torch.Generator().manual_seed(cfg.seed * 7919 + step)
        for group in opt.param_groups:
            group["lr"] = _lr(cfg, step)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.autocast):
            loss = sft_loss(model, ids, response, special["mask"], cfg.mask_eps, g, cfg.block_rows,
                            cfg.block_length, special["eos"], batch.focus, cfg.focus_rows, cfg.focus_block_rows,
                            cfg.order_rows, cfg.order_rounds)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        if step % cfg.log_every == 0 or step == cfg.steps - 1:
            row = {"step": step, "loss": round(loss.item(), 4), "lr": _lr(cfg, step),
                   "grad_norm": round(gnorm.item(), 3), "batch": list(batch.ids.shape),
                   "elapsed_s": round(time.time() - t0, 1)}
            logf.write(json.dumps(row) + "\n")
            logf.flush()
            log.info("%s", row)
        if (step + 1) % cfg.ckpt_every == 0 or step == stop - 1:
            _save(out, model, opt, step + 1, cfg)
    logf.close()
    return out


class _StepBatches(torch.utils.data.Dataset):
    """Batch `start + i` of a TaskBatcher: batches are pure functions of the step, so workers can build them
    in any order and the run stays the same as with none."""

    def __init__(self, batcher: TaskBatcher, start: int, stop: int) -> None:
        self.batcher, self.start, self.stop = batcher, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, i: int):
        return self.batcher.batch(self.start + i)


def _batches(batcher: TaskBatcher, start: int, stop: int, workers: int):
    if workers == 0:
        return (batcher.batch(step) for step in range(start, stop))
    import os

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the tokenizer is used in forked workers
    return iter(torch.utils.data.DataLoader(_StepBatches(batcher, start, stop), batch_size=None, num_workers=workers,
                                            prefetch_factor=4, pin_memory=torch.cuda.is_available()))


def _save(out: Path, model: Transformer, opt: torch.optim.Optimizer, step: int, cfg: TrainConfig) -> None:
    from safetensors.torch import save_file

    names = {id(p): n for n, p in model.named_parameters()}
    tensors = {f"model/{n}": p.detach().cpu().contiguous() for n, p in model.named_parameters()}
    for p, state in opt.state.items():
        for key in ("exp_avg", "exp_avg_sq", "step"):
            value = state[key].detach().cpu()
            tensors[f"opt/{key}/{names[id(p)]}"] = value.reshape(-1) if key == "step" else value
    tmp = out / "state.safetensors.tmp"
    save_file(tensors, str(tmp))
    tmp.replace(out / "state.safetensors")
    (out / "state.json").write_text(json.dumps({"step": step, "config": asdict(cfg)}, indent=2))


def _init_from(model: Transformer, path: Path, tokenizer) -> None:
    """Copy the weights of a LLaDA-format checkpoint (same layers and width) into `model`, in fp32.

    When the run's tokenizer differs from the checkpoint's (say, numbers merged into single tokens), the
    embedding and LM-head rows move by token string, and a token the checkpoint lacks starts from the mean of
    the rows of the pieces the checkpoint's tokenizer splits it into: the layers keep what they learnt."""
    from polestar.models.loader import load_model

    source = load_model(path, dtype=torch.float32)
    if source.spec.d_model != model.spec.d_model or source.spec.n_layers != model.spec.n_layers:
        raise ConfigError(f"{path} has d_model {source.spec.d_model} × {source.spec.n_layers} layers; the run wants "
                          f"{model.spec.d_model} × {model.spec.n_layers}: pass the same size flags")
    theirs = dict(source.named_parameters())
    vocab_rows = {"embed_tokens.weight", "lm_head.weight"}
    rows = _vocab_map(tokenizer, source.tokenizer)
    with torch.no_grad():
        for name, p in model.named_parameters():
            q = theirs[name]
            if name in vocab_rows and rows is not None:
                p[: len(rows)] = torch.stack([q[ids].mean(0) for ids in rows])
            else:
                p.copy_(q)
    log.info("initialised from %s%s", path, "" if rows is None else " (vocabulary moved by token string)")


def _vocab_map(ours, theirs) -> list[list[int]] | None:
    """For each row of `ours`, the rows of `theirs` that make up the same text; None when they are the same."""
    if ours.get_vocab() == theirs.get_vocab():
        return None
    their_vocab = theirs.get_vocab()
    by_id = {i: t for t, i in ours.get_vocab().items()}
    rows = []
    for i in range(len(by_id)):
        token = by_id[i]
        if token in their_vocab:
            rows.append([their_vocab[token]])
        else:  # byte-level text of a merged token: re-split it with their tokenizer
            rows.append(theirs(ours.convert_tokens_to_string([token]), add_special_tokens=False).input_ids)
    return rows


def _resume(out: Path, model: Transformer, opt: torch.optim.Optimizer) -> int:
    if not (out / "state.json").is_file():
        return 0
    from safetensors.torch import load_file

    step = json.loads((out / "state.json").read_text())["step"]
    tensors = load_file(str(out / "state.safetensors"))
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(tensors[f"model/{n}"])
    for n, p in params.items():
        if f"opt/exp_avg/{n}" in tensors:
            opt.state[p] = {"step": tensors[f"opt/step/{n}"].reshape(()),  # moments may be stored compact
                            "exp_avg": tensors[f"opt/exp_avg/{n}"].to(p.device, p.dtype),
                            "exp_avg_sq": tensors[f"opt/exp_avg_sq/{n}"].to(p.device, p.dtype)}
    log.info("resumed %s at step %d", out, step)
    return step


def compact(run_dir: Path, dest: Path) -> Path:
    """A copy of the run's resumable state to commit: weights in fp32, Adam's moments in bf16 (half the bytes of
    the run's own state). A run resumed from it continues the same schedule and data; its first steps differ
    from an uninterrupted run's by the moments' rounding (bf16 keeps 8 bits of mantissa)."""
    import shutil

    from safetensors.torch import load_file, save_file

    tensors = load_file(str(run_dir / "state.safetensors"))
    small = {k: v.to(torch.bfloat16) if k.startswith(("opt/exp_avg/", "opt/exp_avg_sq/")) else v
             for k, v in tensors.items()}
    dest.mkdir(parents=True, exist_ok=True)
    save_file(small, str(dest / "state.safetensors"))
    for name in ("state.json", "log.jsonl"):
        shutil.copy(run_dir / name, dest / name)
    shutil.copytree(run_dir / "tokenizer", dest / "tokenizer", dirs_exist_ok=True)
    return dest


def export(run_dir: Path, dest: Path) -> Path:
    """Write the trained run as a LLaDA-format checkpoint: config.json, bf16 model.safetensors, tokenizer."""
    import shutil

    from safetensors.torch import load_file, save_file

    state = json.loads((run_dir / "state.json").read_text())
    cfg = TrainConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in state["config"].items()})
    tensors = load_file(str(run_dir / "state.safetensors"))
    dest.mkdir(parents=True, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(run_dir / "tokenizer" / f, dest / f)
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(str(run_dir / "tokenizer"))
    special = {k: tok.convert_tokens_to_ids(v) for k, v in
               {"eos": tok.eos_token, "bos": tok.bos_token, "mask": tok.mask_token}.items()}
    config = llada_config(cfg, special)
    spec: ModelSpec = LLADA.parse(config)
    names = LLADA.tensor_names(spec)
    out = {theirs: tensors[f"model/{ours}"].to(torch.bfloat16).contiguous() for ours, theirs in names.items()}
    save_file(out, str(dest / "model.safetensors"), metadata={"format": "pt"})
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    return dest
