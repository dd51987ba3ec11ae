"""`load_model`: a local Hugging Face-layout directory or a hub id -> `Transformer` with its tokenizer.

Safety and memory rules: safetensors only (a pickle-only directory is refused), never remote code, and the
weights are copied one tensor at a time from memory-mapped shards into parameters allocated once in the
target dtype and device, so an 8B checkpoint never needs twice its size in RAM. The tensor set is checked
against the architecture before any weight is read: every expected name present with its shape, nothing
unexpected.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import torch

from polestar.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    TensorMismatchError,
    TokenizerMismatchError,
    UnsafeCheckpointError,
)
from polestar.models.families import Family, family_of
from polestar.models.transformer import Transformer

log = logging.getLogger(__name__)

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
HUB_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "*.txt"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def load_model(
    name_or_path: str | Path,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str | None = None,
) -> Transformer:
    """Load a LLaDA or Dream checkpoint. `dtype` defaults to the stored dtype (on a CPU without native bf16, see
    `compute_dtype`), `device` to the CPU."""
    root = resolve_checkpoint(name_or_path)
    cfg = _read_json(root / "config.json", "config.json")
    family = family_of(cfg)
    spec = family.parse(cfg)
    target_device = torch.device(device) if device is not None else torch.device("cpu")

    shards = _shard_files(root)
    with torch.device("meta"):
        model = Transformer(spec)
    n_params = sum(p.numel() for p in model.parameters())
    target_dtype = (_as_dtype(dtype) if dtype is not None
                    else compute_dtype(_as_dtype(spec.torch_dtype), target_device, n_params))
    expected = family.tensor_names(spec)
    own_shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    _check_tensors(root, shards, expected, own_shapes)

    model = model.to_empty(device=target_device).to(target_dtype)
    _copy_weights(model, root, shards, expected)
    model.requires_grad_(False).eval()
    model.config, model.path = cfg, str(root)
    model.tokenizer = load_tokenizer(root, family, spec.mask_id, spec.eos_id)
    log.info("loaded %s (%s, %d layers) as %s on %s", root, family.name, spec.n_layers, target_dtype, target_device)
    return model


def native_bf16_cpu() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX). Without it torch emulates bf16 matmuls:
    0.9 GFLOPS against 86 GFLOPS in float32 on one core of an AVX2 machine (measured), so a bf16 forward of the
    embedded model took 557 ms instead of about 30."""
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(probe() for probe in probes if probe is not None)


def compute_dtype(stored: torch.dtype, device: torch.device, n_params: int) -> torch.dtype:
    """The dtype a checkpoint stored as `stored` runs in by default: as stored, except on a CPU without native
    bf16 (`native_bf16_cpu`), where a half-precision checkpoint is upcast to float32 (exact) if that copy takes
    at most a quarter of the machine's memory; a larger one (an 8B model) stays as stored. Pass `dtype` to
    `load_model` to choose yourself."""
    if device.type != "cpu" or stored not in (torch.bfloat16, torch.float16) or native_bf16_cpu():
        return stored
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # no sysconf (Windows): keep the stored dtype
        return stored
    return torch.float32 if 4 * n_params <= memory / 4 else stored


def resolve_checkpoint(name_or_path: str | Path) -> Path:
    """A local directory as is; otherwise a hub id, downloaded (or found in the local hub cache)."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise CheckpointError(f"{path} is a file: pass the checkpoint directory that holds config.json")
    name = str(name_or_path)
    if not _HUB_ID.match(name):
        raise CheckpointNotFoundError(f"no checkpoint directory at {path}: pass an existing local directory")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id=name, allow_patterns=HUB_PATTERNS))
    except Exception as exc:  # offline, unknown repo, gated repo: all mean "give us a local path"
        raise CheckpointNotFoundError(
            f"cannot fetch '{name}' from the Hugging Face hub ({type(exc).__name__}: {exc}). "
            f"Download it where you have network (huggingface-cli download {name} --local-dir DIR) and pass "
            f"the local directory instead: load_model('DIR')"
        ) from exc


def _read_json(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise CheckpointError(f"{path.parent} has no {what}: pass a directory in Hugging Face layout")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path} is not valid JSON ({exc}); re-download the file") from exc


def _as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    resolved = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(resolved, torch.dtype):
        raise CheckpointError(f"unknown dtype {dtype!r}: use e.g. 'bfloat16', 'float16' or 'float32'")
    return resolved


def _shard_files(root: Path) -> list[str]:
    index = root / INDEX_FILE
    if index.is_file():
        weight_map = _read_json(index, INDEX_FILE).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index} has no weight_map: re-download the index file")
        shards = sorted(set(weight_map.values()))
        missing = [s for s in shards if not (root / s).is_file()]
        if missing:
            raise CheckpointError(f"{root} lacks shards named in {INDEX_FILE}: {', '.join(missing)}")
        return shards
    if (root / SINGLE_FILE).is_file():
        return [SINGLE_FILE]
    pickles = sorted(p.name for p in root.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise UnsafeCheckpointError(
            f"{root} holds only pickle weights ({', '.join(pickles[:4])}); safetensors is required because "
            "pickle files can run arbitrary code. Convert them where you trust the source, or download the "
            "safetensors release of the model"
        )
    raise CheckpointError(f"{root} has no {SINGLE_FILE} or {INDEX_FILE}: it is not a safetensors checkpoint")


def _check_tensors(
    root: Path, shards: list[str], expected: dict[str, str], own_shapes: dict[str, tuple[int, ...]]
) -> None:
    from safetensors import safe_open

    found: dict[str, tuple[int, ...]] = {}
    for shard in shards:
        with safe_open(str(root / shard), framework="pt") as f:
            for key in f.keys():
                found[key] = tuple(f.get_slice(key).get_shape())
    wanted = {theirs: own_shapes[ours] for ours, theirs in expected.items()}
    missing = sorted(set(wanted) - set(found))
    unexpected = sorted(set(found) - set(wanted))
    wrong = sorted(f"{n} {found[n]} (expected {wanted[n]})" for n in set(wanted) & set(found) if found[n] != wanted[n])
    problems = []
    if missing:
        problems.append(f"missing tensors: {', '.join(missing)}")
    if unexpected:
        problems.append(f"unexpected tensors: {', '.join(unexpected)}")
    if wrong:
        problems.append(f"wrong shapes: {', '.join(wrong)}")
    if problems:
        raise TensorMismatchError(
            f"{root} does not match its config.json: " + "; ".join(problems)
            + ". The checkpoint is incomplete, of another architecture, or its config was edited"
        )


def _copy_weights(model: Transformer, root: Path, shards: list[str], expected: dict[str, str]) -> None:
    from safetensors import safe_open

    params = dict(model.named_parameters())
    ours_of = {theirs: ours for ours, theirs in expected.items()}
    with torch.no_grad():
        for shard in shards:  # one shard open at a time, one tensor in flight at a time
            with safe_open(str(root / shard), framework="pt") as f:
                for key in f.keys():
                    params[ours_of[key]].copy_(f.get_tensor(key))


def load_tokenizer(root: Path, family: Family, mask_id: int, eos_id: int):
    """AutoTokenizer from tokenizer.json / tokenizer_config.json, cross-checked against the config's ids."""
    if not ((root / "tokenizer.json").is_file() or (root / "tokenizer_config.json").is_file()):
        raise CheckpointError(
            f"{root} has no tokenizer.json or tokenizer_config.json: copy the model's tokenizer files")
    import warnings

    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    # AutoTokenizer peeks at config.json and warns that "llada"/"Dream" are unknown model types: expected here.
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            tokenizer = AutoTokenizer.from_pretrained(str(root), trust_remote_code=False)
    finally:
        hf_logging.set_verbosity(verbosity)
    n_tokens = len(tokenizer)
    if not 0 <= mask_id < n_tokens:
        raise TokenizerMismatchError(
            f"mask_token_id {mask_id} in config.json is outside the tokenizer's {n_tokens} tokens: "
            "the tokenizer files belong to another model"
        )
    mask_token = tokenizer.convert_ids_to_tokens(mask_id)
    accepted = set(family.mask_tokens) | ({tokenizer.mask_token} if tokenizer.mask_token else set())
    if mask_token not in accepted:
        raise TokenizerMismatchError(
            f"config.json says the mask is id {mask_id}, but the tokenizer's token {mask_id} is {mask_token!r}, "
            f"not one of {sorted(accepted)}: fix mask_token_id or use the model's own tokenizer"
        )
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id != eos_id:
        log.warning(
            "tokenizer eos %s (%d) differs from config eos_token_id %d; the config's id is used",
            tokenizer.eos_token, tokenizer.eos_token_id, eos_id,
        )
    return tokenizer


def weights_fingerprint(model_path: str | Path) -> str:
    """sha256 of a checkpoint directory's weight files (*.safetensors, sorted), or '' for a hub id: names the
    exact weights a replay or a benchmark row was made with."""
    import hashlib

    root = Path(model_path)
    files = sorted(root.glob("*.safetensors")) if root.is_dir() else []
    if not files:
        return ""
    digest = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 24), b""):
                digest.update(chunk)
    return digest.hexdigest()
