"""Our forward against stock transformers run bidirectionally, partial forwards against a cache, attention
probabilities, and the loader's error cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import polestar
from polestar.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    TensorMismatchError,
    TokenizerMismatchError,
    UnsafeCheckpointError,
    UnsupportedArchitectureError,
)
from tests.hf_reference import llama_reference, qwen2_reference, run_reference
from tests.tiny_checkpoints import dream_config, dream_tensors, llada_config, llada_tensors, write_checkpoint

EPS32 = torch.finfo(torch.float32).eps
EPS64 = torch.finfo(torch.float64).eps

CASES = [  # (family, shards, heads, kv_heads)
    ("llada", 1, 4, 4),
    ("llada", 3, 4, 2),
    ("dream", 1, 4, 2),
    ("dream", 2, 4, 4),
]


def _reference(family: str, root: Path, dtype: torch.dtype, attn: str = "sdpa"):
    cfg = json.loads((root / "config.json").read_text())
    tensors = {}
    for f in root.glob("*.safetensors"):
        tensors |= load_file(str(f))
    build = llama_reference if family == "llada" else qwen2_reference
    return build(cfg, tensors, dtype, attn)


def _ids(n: int = 23, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 90, (2, n), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-shards{c[1]}-h{c[2]}kv{c[3]}")
def case(request, tmp_path_factory):
    family, shards, heads, kv = request.param
    root = write_checkpoint(tmp_path_factory.mktemp(family), family, shards=shards, heads=heads, kv_heads=kv)
    return family, root


def _aligned(family: str, ref_logits: torch.Tensor) -> torch.Tensor:
    """Dream's published sampler rolls logits right by one; our model returns them already aligned."""
    if family == "llada":
        return ref_logits
    return torch.cat([ref_logits[:, :1], ref_logits[:, :-1]], dim=1)


def test_logits_match_transformers_reference(case):
    """fp64: the two implementations agree to rounding (same math). fp32: our error against the fp64 reference
    is at most twice the stock model's own fp32 error plus a few ulps (observed: both are identical to the stock
    model, difference 0.0 in fp64 and error ratio 1.0 in fp32, all four cases)."""
    family, root = case
    ids = _ids()
    ref64 = _aligned(family, run_reference(_reference(family, root, torch.float64), ids).logits)
    ref32 = _aligned(family, run_reference(_reference(family, root, torch.float32), ids).logits).double()
    ours64 = polestar.load_model(root, dtype=torch.float64)(ids)
    ours32 = polestar.load_model(root, dtype=torch.float32)(ids).double()
    scale = ref64.abs().max().item()
    assert (ours64 - ref64).abs().max().item() <= 1e3 * EPS64 * scale
    ref_err = (ref32 - ref64).abs().max().item()
    ours_err = (ours32 - ref64).abs().max().item()
    assert ours_err <= 2 * ref_err + 8 * EPS32 * scale, (ours_err, ref_err)
    assert ours_err < 1e-4 * max(scale, 1.0)


def test_hidden_states_and_attention_match_reference(case):
    family, root = case
    ids = _ids(19, seed=2)
    ref = run_reference(_reference(family, root, torch.float64), ids)
    eager = run_reference(_reference(family, root, torch.float64, attn="eager"), ids)
    out = polestar.load_model(root, dtype=torch.float64).run(ids, output_hidden_states=True, output_attentions=True)
    n = len(out.hidden_states) - 1
    for ours, theirs in zip(out.hidden_states[:n], ref.hidden_states[:n]):  # inputs of each layer
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e3 * EPS64 * theirs.abs().max().item())
    # the eager reference computes its softmax in fp32: agreement to fp32 rounding is all it can show
    for ours, theirs in zip(out.attentions, eager.attentions):
        torch.testing.assert_close(ours.double(), theirs, rtol=0, atol=1e3 * EPS32)
        torch.testing.assert_close(ours.sum(-1), torch.ones_like(ours.sum(-1)), rtol=0, atol=1e3 * EPS32)


def test_attention_probs_equal_explicit_softmax(case):
    """The probabilities returned by `layer(need_attn=True)` equal softmax(q·kᵀ/√d) of the rotated q/k."""
    _, root = case
    model = polestar.load_model(root, dtype=torch.float64)
    ids = _ids(13, seed=3)
    positions = torch.arange(ids.shape[1])
    h = model.embed(ids)
    q, k, _ = model.project_qkv(0, h)
    q, k = model.rope.apply(q, positions), model.rope.apply(k, positions)
    group = model.spec.n_heads // model.spec.n_kv_heads
    k = k.repeat_interleave(group, dim=1)
    expected = torch.softmax(q @ k.transpose(-1, -2) / model.spec.head_dim**0.5, dim=-1)
    out = model.layer(0, h, positions, model.new_cache(2, ids.shape[1]), need_attn=True)
    torch.testing.assert_close(out.attn.double(), expected, rtol=0, atol=1e3 * EPS32)
    plain = model.layer(0, h, positions, None, need_attn=False)
    torch.testing.assert_close(out.hidden, plain.hidden, rtol=0, atol=1e3 * EPS64 * plain.hidden.abs().max().item())


def test_partial_forward_against_cache_equals_full_forward(case):
    """A block of query rows run layer by layer against a cache filled by a full forward reproduces the full
    forward's hidden states and logits for those rows (the cache then holds exactly the same K/V)."""
    _, root = case
    model = polestar.load_model(root, dtype=torch.float64)
    ids = _ids(29, seed=4)
    cache = model.new_cache(2, ids.shape[1])
    full = model.run(ids, cache=cache, output_hidden_states=True)
    block = torch.arange(11, 19)
    h = model.embed(ids[:, block])
    for index in range(model.spec.n_layers):
        h = model.layer(index, h, block, cache).hidden
        torch.testing.assert_close(h, full.hidden_states[index + 1][:, block], rtol=0, atol=1e-12)
    rows = model.predicting_rows(block)
    logits = model.head(full.hidden_states[-1][:, rows])
    torch.testing.assert_close(logits, full.logits[:, block], rtol=0, atol=0)


def test_read_only_rows_attend_over_the_cache_as_it_is(case):
    """`layer(..., write=False)` (Polestar's packet recompute) leaves the cache untouched and gives the rows
    exactly what `write=True` gives them when the cache already holds their K/V (the full forward wrote them); a
    cache whose rows were changed is what the read-only rows attend over."""
    _, root = case
    model = polestar.load_model(root, dtype=torch.float64)
    ids = _ids(21, seed=5)
    cache = model.new_cache(2, ids.shape[1])
    full = model.run(ids, cache=cache, output_hidden_states=True)
    rows, layer = torch.tensor([2, 7, 8, 15]), 1
    h = full.hidden_states[layer][:, rows]
    before = cache.k.clone(), cache.v.clone()
    read_only = model.layer(layer, h, rows, cache, write=False).hidden
    assert torch.equal(cache.k, before[0]) and torch.equal(cache.v, before[1])
    torch.testing.assert_close(read_only, model.layer(layer, h, rows, cache).hidden, rtol=0, atol=1e-12)
    cache.v[layer] += 1.0  # now the cache differs from what the rows' own inputs would write
    shifted = model.layer(layer, h, rows, cache, write=False).hidden
    assert not torch.allclose(shifted, read_only)


def test_rotary_reuses_angles_only_for_the_same_unchanged_positions():
    """The table keeps the angles of the last positions tensor; an in-place change of that tensor, or another
    tensor, is rotated at its own positions, and inverse ∘ forward is the identity up to the
    fp32 table's rounding."""
    from polestar.models.rope import RotaryTable

    table = RotaryTable(8, 10000.0, 16, in_fp32=True)
    x = torch.randn(1, 2, 4, 8, dtype=torch.float64)
    positions = torch.tensor([0, 3, 5, 9])
    first = table.apply(x, positions)
    positions += 1
    moved = table.apply(x, positions)
    assert torch.equal(moved, table.apply(x, torch.tensor([1, 4, 6, 10])))
    assert not torch.equal(first, moved)
    # the angle table is fp32: cos² + sin² = 1 within a few units of 2^-24, applied to two terms per component
    atol = 8 * 2.0 ** -24 * float(x.abs().max())
    torch.testing.assert_close(table.apply(moved, positions, inverse=True), x, rtol=0, atol=atol)
    assert torch.equal(table.apply(x, torch.tensor([0, 0, 0, 0])), x)  # angle 0: cos 1, sin 0


def test_forward_and_rotary_under_inference_mode(case):
    """Inference tensors keep no version counter: a forward under `torch.inference_mode` gives the logits of one
    under `no_grad`, and the rotary table never reuses angles for an inference positions tensor changed in place."""
    from polestar.models.rope import RotaryTable

    _, root = case
    model = polestar.load_model(root, dtype=torch.float64)
    ids = _ids(17, seed=6)
    with torch.no_grad():
        expected = model(ids)
    with torch.inference_mode():
        got = model(ids)
        table = RotaryTable(8, 10000.0, 16, in_fp32=True)
        x = torch.randn(1, 2, 4, 8, dtype=torch.float64)
        positions = torch.tensor([0, 3, 5, 9])
        first = table.apply(x, positions)
        positions += 1
        moved = table.apply(x, positions)
    assert torch.equal(got, expected)
    assert torch.equal(moved, table.apply(x, torch.tensor([1, 4, 6, 10])))
    assert not torch.equal(first, moved)


def test_model_identity(case):
    family, root = case
    model = polestar.load_model(root)
    assert model.mask_id == (2 if family == "llada" else 3)
    assert model.eos_id == 0 and model.config["model_type"] in ("llada", "Dream")
    assert model.tokenizer.convert_ids_to_tokens(model.mask_id) in ("<|mdm_mask|>", "<|mask|>")
    assert model.logit_shift == (0 if family == "llada" else 1)
    assert model.tokenizer.chat_template
    assert model.dtype == torch.float32 and not any(p.requires_grad for p in model.parameters())


def test_dtype_and_device_arguments(tmp_path):
    root = write_checkpoint(tmp_path / "m", "llada")
    model = polestar.load_model(root, dtype="bfloat16", device="cpu")
    assert model.dtype == torch.bfloat16 and model.device.type == "cpu"
    assert model(_ids()).dtype == torch.bfloat16
    with pytest.raises(CheckpointError, match="unknown dtype"):
        polestar.load_model(root, dtype="float13")


def test_half_precision_runs_in_float32_on_a_cpu_without_native_bf16(tmp_path, monkeypatch):
    from polestar.models import loader

    cpu, small, huge = torch.device("cpu"), 7_000_000, 8_000_000_000_000
    monkeypatch.setattr(loader, "native_bf16_cpu", lambda: False)
    assert loader.compute_dtype(torch.bfloat16, cpu, small) == torch.float32
    assert loader.compute_dtype(torch.float16, cpu, small) == torch.float32
    assert loader.compute_dtype(torch.bfloat16, cpu, huge) == torch.bfloat16  # its fp32 copy would not fit
    assert loader.compute_dtype(torch.bfloat16, torch.device("meta"), small) == torch.bfloat16  # not a CPU
    assert loader.compute_dtype(torch.float64, cpu, small) == torch.float64
    root = write_checkpoint(tmp_path / "m", "llada")
    config = json.loads((root / "config.json").read_text())
    (root / "config.json").write_text(json.dumps({**config, "torch_dtype": "bfloat16"}))
    assert polestar.load_model(root).dtype == torch.float32
    assert polestar.load_model(root, dtype="bfloat16").dtype == torch.bfloat16  # an explicit dtype wins
    monkeypatch.setattr(loader, "native_bf16_cpu", lambda: True)
    assert polestar.load_model(root).dtype == torch.bfloat16


# --- bad input ----------------------------------------------------------------------------------------


def test_missing_path(tmp_path):
    with pytest.raises(CheckpointNotFoundError, match="no checkpoint directory"):
        polestar.load_model(tmp_path / "nope")


def test_file_instead_of_directory(tmp_path):
    f = tmp_path / "model.safetensors"
    f.write_bytes(b"x")
    with pytest.raises(CheckpointError, match="pass the checkpoint directory"):
        polestar.load_model(f)


def test_offline_hub_id_names_the_local_path(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(CheckpointNotFoundError, match=r"pass\s+the local directory instead"):
        polestar.load_model("GSAI-ML/LLaDA-8B-Instruct")


def test_pickle_only_directory_is_refused(tmp_path):
    root = tmp_path / "m"
    root.mkdir()
    (root / "config.json").write_text(json.dumps(llada_config()))
    (root / "pytorch_model.bin").write_bytes(b"\x80\x04not-unpickled")
    with pytest.raises(UnsafeCheckpointError, match="safetensors is required"):
        polestar.load_model(root)


def test_missing_tensor_is_named(tmp_path):
    root = write_checkpoint(tmp_path / "m", "llada")
    tensors = load_file(str(root / "model.safetensors"))
    del tensors["model.transformer.blocks.1.up_proj.weight"]
    save_file(tensors, str(root / "model.safetensors"))
    with pytest.raises(TensorMismatchError, match=r"missing tensors: model\.transformer\.blocks\.1\.up_proj\.weight"):
        polestar.load_model(root)


def test_wrong_shape_is_named(tmp_path):
    root = write_checkpoint(tmp_path / "m", "dream", shards=2)
    cfg = dream_config()
    tensors = dream_tensors(cfg)
    tensors["model.layers.0.self_attn.k_proj.bias"] = torch.zeros(7)
    for f in root.glob("model-*.safetensors"):
        f.unlink()
    (root / "model.safetensors.index.json").unlink()
    save_file(tensors, str(root / "model.safetensors"))
    with pytest.raises(TensorMismatchError, match=r"k_proj\.bias \(7,\) \(expected \(32,\)\)"):
        polestar.load_model(root)


def test_unexpected_tensor_is_named(tmp_path):
    root = write_checkpoint(tmp_path / "m", "llada")
    tensors = llada_tensors(llada_config()) | {"model.transformer.blocks.0.mask_head.weight": torch.zeros(2, 2)}
    save_file(tensors, str(root / "model.safetensors"))
    with pytest.raises(TensorMismatchError, match=r"unexpected tensors: .*mask_head\.weight"):
        polestar.load_model(root)


def test_missing_shard_is_named(tmp_path):
    root = write_checkpoint(tmp_path / "m", "llada", shards=3)
    (root / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model-00002-of-00003"):
        polestar.load_model(root)


@pytest.mark.parametrize(
    "edit",
    [
        {"model_type": "llama", "architectures": ["LlamaForCausalLM"]},
        {"architectures": ["LLaDAMoEModelLM"]},
        {"model_type": "mystery", "architectures": None},
    ],
)
def test_unknown_architecture_is_refused_by_name(tmp_path, edit):
    root = write_checkpoint(tmp_path / "m", "llada")
    cfg = json.loads((root / "config.json").read_text()) | edit
    (root / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedArchitectureError, match="unsupported architecture"):
        polestar.load_model(root)


def test_unsupported_llada_variant_is_refused(tmp_path):
    root = write_checkpoint(tmp_path / "m", "llada")
    cfg = json.loads((root / "config.json").read_text()) | {"block_type": "sequential"}
    (root / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedArchitectureError, match="block_type"):
        polestar.load_model(root)


def test_mask_id_must_match_tokenizer(tmp_path):
    root = write_checkpoint(tmp_path / "m", "llada")
    cfg = json.loads((root / "config.json").read_text()) | {"mask_token_id": 7}
    (root / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(TokenizerMismatchError, match="mask is id 7"):
        polestar.load_model(root)


def test_missing_config(tmp_path):
    root = write_checkpoint(tmp_path / "m", "dream")
    (root / "config.json").unlink()
    with pytest.raises(CheckpointError, match="has no config.json"):
        polestar.load_model(root)


def test_import_loads_nothing():
    import subprocess
    import sys

    code = "import polestar, sys; assert 'torch' not in sys.modules, 'torch imported'; print(polestar.DEFAULT_MODEL)"
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_decode_threads_one_for_a_small_cpu_model_else_torch_default(tmp_path):
    """A model below SMALL_MODEL_PARAMS on a CPU decodes on one torch thread (polestar/threads.py has the
    measurements); a count the user asks for wins; a larger model keeps torch's count."""
    import types

    from polestar.threads import SMALL_MODEL_PARAMS, decode_threads, set_decode_threads

    small = polestar.load_model(write_checkpoint(tmp_path / "m", "llada"))
    assert decode_threads(small) == 1 and decode_threads(small, requested=3) == 3
    # parameters as views that own no memory: one element expanded past the threshold
    large = types.SimpleNamespace(parameters=lambda: iter([torch.zeros(1).expand(SMALL_MODEL_PARAMS)]))
    assert decode_threads(large) == torch.get_num_threads()
    before = torch.get_num_threads()
    try:
        assert set_decode_threads(small) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_quiet_openmp_spins_briefly_only_on_an_idle_machine_and_a_users_setting_wins(monkeypatch):
    """Idle at start: PASSIVE plus GNU OpenMP's short spin (which overrides it); another process keeping a core
    busy, or no load reading: PASSIVE alone; a wait policy or spin count the user set is left as it is."""
    import os

    from polestar import threads

    def run(busy, **env):
        for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_NUM_THREADS"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(threads, "others_busy_cores", lambda interval=0.05: busy)
        threads.quiet_openmp()
        return os.environ.get("OMP_WAIT_POLICY"), os.environ.get("GOMP_SPINCOUNT"), os.environ["OPENBLAS_NUM_THREADS"]

    spin = str(threads.SPIN_COUNT)
    assert run(0.1) == ("PASSIVE", spin, "1")
    assert run(0.9) == ("PASSIVE", None, "1")
    assert run(None) == ("PASSIVE", None, "1")
    assert run(0.0, OMP_WAIT_POLICY="ACTIVE") == ("ACTIVE", None, "1")
    assert run(0.0, GOMP_SPINCOUNT="5") == (None, "5", "1")
    assert run(0.0, OPENBLAS_NUM_THREADS="2") == ("PASSIVE", spin, "2")


def test_threads_for_load_leaves_the_cores_other_processes_keep_busy(monkeypatch):
    """A run on a 2-core CPU takes both threads when the machine is idle, one when another process keeps a core busy
    (its own CPU time does not count as another's), and the count it was given where the load cannot be read."""
    import os

    from polestar import threads

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(threads.time, "sleep", lambda s: None)

    def machine(busy: float, own: float):
        readings = iter([(100.0, 50.0), (100.0 + busy, 50.0 + own)])  # (machine busy s, own s) before and after
        monkeypatch.setattr(threads, "_cpu_seconds", lambda: next(readings))

    machine(busy=0.0, own=0.0)
    assert threads.threads_for_load(2, interval=0.1) == 2
    machine(busy=0.1, own=0.0)  # another process: one core for the whole 0.1 s
    assert threads.threads_for_load(2, interval=0.1) == 1
    machine(busy=0.2, own=0.2)  # only this process was busy
    assert threads.threads_for_load(2, interval=0.1) == 2
    machine(busy=0.3, own=0.0)  # more than the cores: still one thread
    assert threads.threads_for_load(2, interval=0.1) == 1
    monkeypatch.setattr(threads, "_cpu_seconds", lambda: None)
    assert threads.threads_for_load(2, interval=0.1) == 2
    assert threads.others_busy_cores(0.0) is None
    monkeypatch.undo()
    if Path("/proc/stat").exists():  # the real reading parses
        assert threads.others_busy_cores(0.05) >= 0
