"""`polestar.generate`: a prompt (text or ids) + a method name (or config) + field overrides -> a result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from polestar.config import DecodeConfig, resolve
from polestar.decode import DecodeCounters, DecodeResult, decode, decode_batch
from polestar.errors import ConfigError
from polestar.trace import StepEvent, Trace


@dataclass
class GenerationResult:
    text: str  # the generated region decoded, special tokens (EOS padding) removed
    token_ids: list[int]  # the generated region, EOS padding included
    nfe: int
    tpf: float
    tps: float
    tokens_per_step: float
    wall_s: float
    trace: Trace | None
    config: DecodeConfig
    prompt_ids: list[int]
    counters: DecodeCounters  # refresh steps, drift / suffix (EOS) / forced commits

    def summary(self) -> dict[str, Any]:
        return {"text": self.text, "nfe": self.nfe, "tpf": round(self.tpf, 4), "tps": round(self.tps, 2),
                "tokens_per_step": round(self.tokens_per_step, 4), "wall_s": round(self.wall_s, 4),
                **self.counters.as_dict()}


def chat_prompt_ids(tokenizer, prompt: str) -> list[int]:
    """A user message rendered with the tokenizer's chat template (generation prompt appended) -> token ids.
    Training, evaluation and `generate` all encode prompts through this one function."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                         tokenize=False)
    return tokenizer(text, add_special_tokens=False).input_ids


def encode_prompt(model, prompt: str | list[int] | torch.Tensor, raw: bool = False) -> torch.Tensor:
    """Prompt -> ids [1, P] on the model's device. Text goes through the chat template when the tokenizer has
    one (unless `raw`); token ids are used as given."""
    if isinstance(prompt, torch.Tensor):
        ids = prompt.reshape(1, -1).tolist()[0]
    elif isinstance(prompt, str):
        if not prompt.strip():
            raise ConfigError("the prompt is empty: type a question or instruction")
        tok = model.tokenizer
        if tok is None:
            raise ConfigError("this model has no tokenizer: pass token ids instead of text")
        if tok.chat_template and not raw:
            ids = chat_prompt_ids(tok, prompt)
        else:
            ids = tok(prompt).input_ids
    else:
        ids = list(prompt)
    if not ids:
        raise ConfigError("the prompt is empty: give at least one token")
    return torch.tensor([ids], dtype=torch.long, device=model.device)


def generate(
    model,
    prompt: str | list[int] | torch.Tensor,
    method: str | DecodeConfig = "fast-dllm",
    *,
    raw: bool = False,
    trace: bool = False,
    on_step: Callable[[StepEvent, torch.Tensor], bool | None] | None = None,
    staleness_reference: Callable[[torch.Tensor], Any] | None = None,
    **overrides: Any,
) -> GenerationResult:
    """Decode `prompt` with a preset (`polestar.config.PRESETS`) or a `DecodeConfig`, fields overridden by
    keyword (e.g. `gen_length=128, tau_s=0.8`). `on_step` and `staleness_reference`: see `polestar.decode.decode`."""
    cfg = resolve(method, **overrides)
    return result_of(model, encode_prompt(model, prompt, raw), cfg, trace=trace, on_step=on_step,
                     staleness_reference=staleness_reference)


def generate_batch(model, prompts: Sequence[str | list[int] | torch.Tensor], method: str | DecodeConfig = "fast-dllm",
                   *, raw: bool = False, **overrides: Any) -> list[GenerationResult]:
    """Decode several prompts in one batch (`polestar.decode.decode_batch`): one result per prompt, each equal to
    its `generate` alone except `wall_s` and `tps`, which are the batch's wall time and its tokens over it."""
    cfg = resolve(method, **overrides)
    return results_of(model, [encode_prompt(model, p, raw) for p in prompts], cfg)


def result_of(model, ids: torch.Tensor, cfg: DecodeConfig, trace: bool = False,
              on_step: Callable[[StepEvent, torch.Tensor], bool | None] | None = None,
              staleness_reference: Callable[[torch.Tensor], Any] | None = None) -> GenerationResult:
    """Decode prompt ids [1, P] with `cfg` and describe the result: text, NFE, TPF, TPS, counters."""
    return _described(model, decode(model, ids, cfg, trace=trace, on_step=on_step,
                                    staleness_reference=staleness_reference), cfg)


def results_of(model, ids: Sequence[torch.Tensor], cfg: DecodeConfig) -> list[GenerationResult]:
    """Decode prompt ids (each [1, P_i] or [P_i]) in one batch with `cfg`; one described result per prompt."""
    return [_described(model, out, cfg) for out in decode_batch(model, ids, cfg)]


def _described(model, out: DecodeResult, cfg: DecodeConfig) -> GenerationResult:
    gen = out.token_ids.tolist()
    text = model.tokenizer.decode(gen, skip_special_tokens=True) if model.tokenizer is not None else ""
    return GenerationResult(
        text=text, token_ids=gen, nfe=out.nfe, tpf=out.tpf, tps=out.tps, tokens_per_step=out.tokens_per_step,
        wall_s=out.wall_s, trace=out.trace, config=cfg, prompt_ids=out.canvas[0, :out.prompt_len].tolist(),
        counters=out.counters,
    )
