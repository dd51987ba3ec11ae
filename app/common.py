"""Pieces every tab's handlers share: bounded per-session state, the ZeroGPU wrapper, keyword-named endpoints."""

from __future__ import annotations

import inspect
from collections import OrderedDict
from pathlib import Path

import gradio as gr

MAX_SESSIONS = 64  # per-session runs kept in memory; the least recently stored beyond this are dropped


class Sessions(OrderedDict):
    """Per-session values, bounded: storing one makes it the newest and evicts the oldest beyond the cap.
    Entries also go when their browser session ends (`demo.unload`)."""

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > MAX_SESSIONS:
            self.popitem(last=False)


MAX_PROMPT_CHARS = 4000


def check_prompt(prompt) -> str:
    """The prompt a handler may decode, or a gr.Error saying what to change (every tab checks it the same way)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise gr.Error("The prompt is empty: type a question or pick an example.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise gr.Error(f"The prompt has {len(prompt)} characters; the limit is {MAX_PROMPT_CHARS}.")
    return prompt


def zero_gpu() -> bool:
    """True on a Hugging Face ZeroGPU Space, where the `spaces` package is installed."""
    import importlib.util

    return importlib.util.find_spec("spaces") is not None


def on_gpu(fn):
    """On a ZeroGPU Space the handler gets a GPU for its duration (`spaces.GPU`); the GPU exists only inside that
    call, so the model host runs its work inside it there (`ModelHost(inline=True)`). Anywhere else the handler
    is returned unchanged."""
    if not zero_gpu():
        return fn
    import spaces

    return spaces.GPU(duration=120)(fn)


def layer_count(model_path: str, fallback: int = 64) -> int:
    """The checkpoint's layer count from its config.json (no weights read); `fallback` for a hub id."""
    import json

    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return fallback
    return int(config.get("n_layers") or config.get("num_hidden_layers") or fallback)


def named(fn, names: list[str]):
    """Wrap `fn(*values, request)` so its signature names every input: API clients can then pass
    `gen_length=64` by keyword (Gradio names endpoint parameters after the handler's signature)."""

    def split(args):
        if args and isinstance(args[-1], gr.Request):  # Gradio passes the request as the last positional
            return args[:-1], args[-1]
        return args, None

    if inspect.isgeneratorfunction(fn):
        def handler(*args, request: gr.Request = None):
            values, passed = split(args)
            yield from fn(*values, request=passed or request)
    else:
        def handler(*args, request: gr.Request = None):
            values, passed = split(args)
            return fn(*values, request=passed or request)

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter(n, kind) for n in names]
    params.append(inspect.Parameter("request", kind, default=None, annotation=gr.Request))
    handler.__signature__ = inspect.Signature(params)
    return handler
