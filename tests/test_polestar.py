"""Polestar-Cache and Polestar-Commit: reduction to Fast-dLLM, exact propagation of update packets, the
commit rules on hand-built values, and Dream's alignment of suffix commits."""

from __future__ import annotations

import pytest
import torch

import polestar
from polestar.caches.polestar import PolestarCache
from polestar.clustering import kl_drift, spherical_kmeans, split_counts
from polestar.config import resolve
from polestar.caches.base import ExtraTargets
from polestar.decode import _extra_commits, decode
from polestar.kinds import CommitReason
from polestar.policies.commit import CommitContext, DriftCommitPolicy, make_extra_target_policy
from tests.tiny_checkpoints import write_checkpoint

PROMPT = [[5, 9, 11, 7, 13, 20, 21, 8]]
EXACT = dict(gen_length=32, block_length=8, polestar_window_prefix=8, polestar_window_suffix=8, polestar_centroids=8,
             polestar_refresh_clusters=8, polestar_refresh_clusters_last=8, polestar_tau_upd=1,
             polestar_hidden_format="fp16", polestar_current_commit=False, polestar_suffix_commit=False)


@pytest.fixture(scope="module", params=["llada", "dream"])
def tiny(request, tmp_path_factory):
    root = write_checkpoint(tmp_path_factory.mktemp(request.param), request.param, kv_heads=2)
    return polestar.load_model(root)


def test_all_components_off_is_fast_dllm(tiny):
    ids = torch.tensor(PROMPT)
    off = dict(polestar_cache=False, polestar_current_commit=False, polestar_suffix_commit=False)
    for tau in (0.05, 0.3):
        a = decode(tiny, ids, resolve("fast-dllm", gen_length=64, block_length=8, tau_s=tau))
        b = decode(tiny, ids, resolve("polestar", gen_length=64, block_length=8, tau_s=tau, **off))
        assert torch.equal(a.canvas, b.canvas) and a.nfe == b.nfe


def test_refresh_propagates_exactly(tiny):
    """Window over the whole canvas, every cluster refreshed every step, fp16 storage: after each refresh step
    the cache equals a full recompute (staleness at fp16 storage rounding, ~1e-7), while the same run with
    refreshes off leaves the suffix visibly stale."""
    ids = torch.tensor(PROMPT)
    on = decode(tiny, ids, resolve("polestar", tau_s=0.3, measure_staleness=True, **EXACT), trace=True)
    off = decode(tiny, ids, resolve("polestar", tau_s=0.3, measure_staleness=True, **(EXACT | {"polestar_tau_upd": 0})),
                 trace=True)
    refresh_steps = [e for e in on.trace.events if e.kind == "refresh"]
    assert refresh_steps
    worst_on = max(max(max(row) for row in e.extra["staleness"]) for e in refresh_steps)
    block_steps = [e for e in off.trace.events if e.kind == "block"]
    worst_off = max(max(max(row) for row in e.extra["staleness"]) for e in block_steps)
    assert worst_on < 1e-5, worst_on
    assert worst_off > 100 * max(worst_on, 1e-7), (worst_off, worst_on)


def test_suffix_commits_land_and_are_aligned(tiny, monkeypatch):
    """With exact propagation, the first refresh's suffix logits equal the full forward's aligned logits of the
    same canvas (Dream: the row one to the left) up to the fp16 storage of the cached inputs (relative 2^-11,
    a few times over two layers), and the committed suffix tokens are in the final canvas. Later refreshes
    differ by design: suffix-committed tokens enter the cached inputs only at the next block entry."""
    captured, seen = [], {}
    original, layers = PolestarCache._suffix, PolestarCache._layers

    def see(self, view, refresh):  # the canvas the step's packets see
        seen["canvas"] = view.canvas.clone()
        return layers(self, view, refresh)

    def spy(self, result, *args):
        original(self, result, *args)
        if result.extra_targets is not None:
            captured.append((seen["canvas"], result.extra_targets.positions.clone(),
                             result.extra_targets.logits.clone()))

    monkeypatch.setattr(PolestarCache, "_layers", see)
    monkeypatch.setattr(PolestarCache, "_suffix", spy)
    cfg = resolve("polestar", tau_s=0.3, **(EXACT | {"polestar_suffix_commit": True, "polestar_tau_suffix": 0.0}))
    out = decode(tiny, torch.tensor(PROMPT), cfg, trace=True)
    assert captured
    canvas, positions, logits = captured[0]
    full = tiny.run(canvas).logits[:, positions]
    scale = full.abs().max().item()
    torch.testing.assert_close(logits.float(), full.float(), rtol=0, atol=8 * 2**-11 * scale)
    assert torch.equal(logits.argmax(-1), full.argmax(-1))
    _, commits = out.trace.frames()
    suffix = commits[commits.reason == "suffix"]
    assert len(suffix) > 0
    assert (out.canvas[0, suffix.position.tolist()] == torch.tensor(suffix.token.tolist())).all()


def test_final_layer_packet_holds_only_rows_the_suffix_commit_reads(tiny):
    """No layer follows the last, so its packet feeds only the suffix commit: it recomputes exactly the picked rows
    that predict a still-masked suffix position (each one an extra target; Dream: the row one to the left), and
    none with the suffix commit off. The earlier layers' packets are unchanged."""
    base = dict(gen_length=32, block_length=8, tau_s=0.3, polestar_tau_upd=1, polestar_tau_suffix=1.0)
    runs = {on: decode(tiny, torch.tensor(PROMPT), resolve("polestar", polestar_suffix_commit=on, **base), trace=True)
            for on in (True, False)}
    last = {on: [e.extra["refreshed_per_layer"][-1] for e in out.trace.events if e.extra.get("refreshed_per_layer")]
            for on, out in runs.items()}
    assert last[True] and any(last[True]) and not any(last[False])
    for event in runs[True].trace.events:
        if event.extra.get("refreshed_per_layer"):  # τ_suffix 1: every suffix target traced, none committed
            assert len(event.extra.get("extra_confidence", [])) == event.extra["refreshed_per_layer"][-1]
    assert torch.equal(runs[True].canvas, runs[False].canvas)  # nothing committed from the suffix at τ_suffix 1
    earlier = {on: [e.extra["refreshed_per_layer"][:-1] for e in out.trace.events if e.extra.get("refreshed_per_layer")]
               for on, out in runs.items()}
    assert earlier[True] == earlier[False]


def test_drift_commit_rule_on_hand_built_values():
    policy = DriftCommitPolicy(tau_s=0.9, alpha=10.0, tau_early=0.7, delta_max=2.0)
    conf = torch.tensor([[0.8, 0.8, 0.8, 0.65, 0.95, 0.75]], dtype=torch.float64)
    # τ_d = 10 · (0.9 − c)²: 0.1 at c = 0.8, 0.225 at c = 0.75
    delta = torch.tensor([[0.2, 0.05, 2.5, 5.0, 0.0, 0.23]], dtype=torch.float64)
    out = policy.select(conf, conf, CommitContext(1, 6, 1, {"delta": delta}))
    assert out.by_reason[CommitReason.DRIFT].tolist() == [[True, False, False, False, False, True]]
    assert out.mask.tolist() == [[True, False, False, False, True, True]]
    assert not out.forced.any()
    torch.testing.assert_close(policy.gate(torch.tensor([0.8, 0.9])), torch.tensor([0.1, 0.0]))


def test_refresh_gate_counts():
    gate = PolestarCache.__new__(PolestarCache)
    gate.cfg, gate.windows = resolve("polestar"), [object()]
    for last, since, expected in [(0, 0, False), (2, 2, True), (1, 2, False), (0, 3, True), (1, 1, False)]:
        gate.last_step_commits, gate.since_refresh = last, since
        assert gate._refresh_now() is expected
    gate.cfg = resolve("polestar", polestar_tau_upd=1)
    gate.last_step_commits, gate.since_refresh = 0, 0
    assert gate._refresh_now()
    gate.cfg = resolve("polestar", polestar_tau_upd=0)
    assert not gate._refresh_now()


def test_suffix_commit_rule_on_hand_built_logits():
    cfg = resolve("polestar", polestar_tau_suffix=0.9)
    mask = 2
    canvas = torch.tensor([[1, 0, mask, mask, mask, 1]])
    probs = torch.tensor([[[0.95, 0.05, 0.0], [0.5, 0.5, 0.0], [0.02, 0.98, 0.0], [0.0, 1.0, 0.0]]]) + 1e-9
    positions = torch.tensor([2, 3, 4, 5])  # position 5 is committed already: never overwritten
    result = type("R", (), {"extra_targets": ExtraTargets(positions, probs.log())})()
    positions, tokens, conf, seen = _extra_commits(result, make_extra_target_policy(cfg), cfg, None, mask, canvas)
    assert len(seen) == 4 and (conf >= 0.9).all()
    assert positions.tolist() == [2, 4] and tokens.tolist() == [0, 1]  # 0.5 < τ_suffix: no forced commit
    assert canvas.tolist() == [[1, 0, 0, mask, 1, 1]]


def test_split_counts_and_kmeans():
    assert split_counts(8, 64, 32) == (5, 3)
    assert split_counts(8, 0, 32) == (0, 8) and split_counts(8, 64, 0) == (7, 0)  # the last block: 7 of 8
    assert split_counts(1, 64, 0) == (1, 0)
    assert split_counts(8, 1, 100) == (1, 7)
    g = torch.Generator().manual_seed(0)
    centers = torch.nn.functional.normalize(torch.randn(3, 16, generator=g), dim=-1) * 4
    x = centers.repeat_interleave(10, 0) + 0.01 * torch.randn(30, 16, generator=g)
    labels, centroids, counts = spherical_kmeans(x.unsqueeze(0), 3, 5, torch.tensor([4]))
    assert sorted(counts[0].tolist()) == [10, 10, 10]
    for k in range(3):
        torch.testing.assert_close(centroids[0, k], x[labels[0] == k].mean(0))
    # batched (every layer's window at once): each set clusters exactly as it does alone from the same first seed
    sets = torch.stack([x, x.flip(0), 2 * x[torch.randperm(30, generator=g)]])
    first = torch.tensor([0, 7, 29])
    labels, centroids, counts = spherical_kmeans(sets, 3, 5, first)
    for b in range(3):
        alone = spherical_kmeans(sets[b:b + 1], 3, 5, first[b:b + 1])
        assert torch.equal(labels[b], alone[0][0]) and torch.equal(counts[b], alone[2][0])
        torch.testing.assert_close(centroids[b], alone[1][0])
        assert sorted(counts[b].tolist()) == [10, 10, 10]


def test_kl_drift_properties():
    p = torch.softmax(torch.randn(4, 2, 9, generator=torch.Generator().manual_seed(0)), dim=-1)
    assert torch.equal(kl_drift(p, p), torch.zeros(4))
    q = torch.softmax(torch.randn(4, 2, 9, generator=torch.Generator().manual_seed(1)), dim=-1)
    expected = (p * (p / q).log()).sum(-1).mean(-1)
    torch.testing.assert_close(kl_drift(p, q), expected)


def test_offloaded_window_decodes_identically(tiny):
    """offload='on' (the host-memory store with prefetch of both layers' rows; synchronous on CPU) gives the
    same tokens, commits and drift values as the resident store."""
    ids = torch.tensor(PROMPT)
    cfg = dict(gen_length=32, block_length=8, tau_s=0.3, polestar_tau_upd=2)
    a = decode(tiny, ids, resolve("polestar", offload="off", **cfg), trace=True)
    b = decode(tiny, ids, resolve("polestar", offload="on", **cfg), trace=True)
    assert torch.equal(a.canvas, b.canvas)
    assert any(e.kind == "refresh" for e in a.trace.events)
    assert [e.extra for e in a.trace.events] == [e.extra for e in b.trace.events]


def test_profiling_sections_break_down_a_polestar_step(tiny):
    """Inside `profiling.collect()` the named sections of the loop and of Polestar's forward are timed (the
    breakdown of analysis/step_breakdown.py); outside it nothing is recorded and decoding is unchanged."""
    from polestar import profiling

    ids = torch.tensor(PROMPT)
    cfg = resolve("polestar", gen_length=32, block_length=8, tau_s=0.3, polestar_tau_upd=2)
    plain = decode(tiny, ids, cfg)
    with profiling.collect() as times:
        profiled = decode(tiny, ids, cfg)
    assert torch.equal(plain.canvas, profiled.canvas)
    for name in ("forward (cache policy)", "propose + commit", "entry: forward", "step: block layer",
                 "step: proxy attention + drift", "step: select + fetch + packet"):
        assert times[name] > 0, name
    parts = sum(v for k, v in times.items() if k.startswith(("entry:", "step:")) and " › " not in k)
    assert parts <= times["forward (cache policy)"] * 1.001  # nested sections are parts of the forward
    for parent in ("entry: cluster + quantize + reference", "step: consume packet", "step: select + fetch + packet"):
        sub = [v for k, v in times.items() if k.startswith(parent + " › ")]  # "parent › part": parts of a part
        assert sub and sum(sub) <= times[parent] * 1.001, parent
    assert times["forward (cache policy)"] + times["propose + commit"] <= profiled.wall_s * 1.001
    with profiling.section("outside"):
        pass
    assert "outside" not in times


def test_profiling_sections_break_down_a_dual_cache_step(tiny):
    """Fast-dLLM's dual cache names the same sections as Polestar (entry forward, block layers, head), so the step
    breakdown measures both methods alike; a refresh every 2 steps is timed as its own section."""
    from polestar import profiling

    ids = torch.tensor(PROMPT)
    for refresh in (0, 2):
        cfg = resolve("fast-dllm", gen_length=32, block_length=8, tau_s=0.99, fastdllm_refresh_interval=refresh)
        with profiling.collect() as times:
            out = decode(tiny, ids, cfg)
        assert out.nfe > 4  # more than one forward per block: there are in-block steps
        names = {"entry: forward", "step: block layer", "step: head"} | ({"step: full refresh"} if refresh else set())
        assert {k for k in times if k.startswith(("entry:", "step:"))} == names
        assert all(times[name] > 0 for name in names)
        assert sum(times[name] for name in names) <= times["forward (cache policy)"] * 1.001


def test_untraced_decode_skips_only_trace_work(tiny, monkeypatch):
    """Without a trace, steps that do not refresh skip the proxy attention (its only reader is the trace):
    fewer proxy passes, the same tokens, commits and NFE as the traced decode."""
    import polestar.caches.polestar as module

    calls = []
    original = module.proxy_drift
    monkeypatch.setattr(module, "proxy_drift", lambda *a, **k: calls.append(1) or original(*a, **k))
    ids = torch.tensor(PROMPT)
    cfg = resolve("polestar", gen_length=32, block_length=8, tau_s=0.3, polestar_tau_upd=3)
    traced = decode(tiny, ids, cfg, trace=True)
    n_traced, calls[:] = len(calls), []
    plain = decode(tiny, ids, cfg)
    assert torch.equal(traced.canvas, plain.canvas) and traced.nfe == plain.nfe
    assert any(e.kind == "block" and e.step > 0 for e in traced.trace.events)  # a step without refresh ran
    assert len(calls) < n_traced


def test_block_committed_at_entry_never_clusters(tiny, monkeypatch):
    """The entry's clustering is deferred to the block's first later step: with τ_s = 0 every block is committed
    whole by its entry forward and the deferred work never runs; with τ_s = 0.3 it runs exactly once for each
    block that needs more steps."""
    import polestar.caches.polestar as module

    blocks = []
    finish = module.PolestarCache._finish_entry
    monkeypatch.setattr(module.PolestarCache, "_finish_entry",
                        lambda self: blocks.append(self.pending.block) or finish(self))
    ids = torch.tensor(PROMPT)
    eager = decode(tiny, ids, resolve("polestar", gen_length=32, block_length=8, tau_s=0.0), trace=True)
    assert blocks == [] and eager.nfe == 4  # four blocks, one forward each
    stepped = decode(tiny, ids, resolve("polestar", gen_length=32, block_length=8, tau_s=0.3), trace=True)
    multi = sorted({e.block for e in stepped.trace.events if e.step > 0})
    assert multi and blocks == multi


def test_counters_match_the_trace(tiny):
    """The untraced decode's counters equal what the trace records: refresh passes, and commits by reason
    (drift, suffix and how many of those wrote EOS, forced). A permissive drift gate and suffix threshold make
    every counter non-zero on the random tiny model."""
    ids = torch.tensor(PROMPT)
    cfg = resolve("polestar", gen_length=32, block_length=8, tau_s=0.3, polestar_tau_upd=1, polestar_alpha=0.0,
                  polestar_tau_early=0.0, polestar_delta_max=100.0, polestar_tau_suffix=0.05)
    traced, plain = decode(tiny, ids, cfg, trace=True), decode(tiny, ids, cfg)
    assert torch.equal(traced.canvas, plain.canvas)
    _, commits = traced.trace.frames()
    suffix = commits[commits.reason == "suffix"]
    expected = dict(refresh_steps=sum(e.kind == "refresh" for e in traced.trace.events),
                    drift_commits=int((commits.reason == "drift").sum()), suffix_commits=len(suffix),
                    suffix_eos_commits=int((suffix.token == tiny.eos_id).sum()),
                    forced_commits=int((commits.reason == "forced").sum()))
    assert plain.counters.as_dict() == traced.counters.as_dict() == expected
    assert all(expected[k] > 0 for k in ("refresh_steps", "drift_commits", "suffix_commits", "forced_commits"))


def test_entry_reference_is_the_proxy_distribution_a_step_would_compare(tiny):
    """At a block entry there is nothing to compare against: `proxy_drift` returns the proxy distributions alone
    (drift None), the very probabilities a drift pass over the same cache computes, bit for bit."""
    from polestar.clustering import proxy_drift

    ids = torch.tensor(PROMPT)
    cache = tiny.new_cache(1, ids.shape[1])
    tiny.run(ids, cache)
    centroids = torch.randn(5, tiny.spec.d_model, generator=torch.Generator().manual_seed(0))
    for layer in range(tiny.spec.n_layers):
        probs, drift = proxy_drift(tiny, layer, centroids, cache, None)
        assert drift is None and probs.dtype == torch.float32
        assert torch.allclose(probs.sum(-1), torch.ones(probs.shape[:2]), atol=1e-5)
        again, drift = proxy_drift(tiny, layer, centroids, cache, probs)
        assert torch.equal(again, probs) and drift.abs().max() <= 1e-6



# Torch calls that read a tensor's contents on the host, so on a GPU wait for the device (nonzero and boolean
# indexing also give shapes that depend on the data).
_HOST_READS = {"nonzero", "item", "tolist", "__bool__", "__int__", "__float__", "__index__", "cpu", "unique",
               "masked_select", "equal"}


class _HostReads(torch.overrides.TorchFunctionMode):
    """Records each torch call in `_HOST_READS`, and each indexing by a boolean tensor, made while active."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        index = args[1] if name in ("__getitem__", "__setitem__") and len(args) > 1 else ()
        index = index if isinstance(index, tuple) else (index,)
        if name in _HOST_READS or any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in index):
            self.seen.append(name)
        return func(*args, **(kwargs or {}))


def _in_refresh_loops(patch, context) -> list:
    """Run each refresh step's layer loop inside `context()` (through `patch`); the contexts entered, in order."""
    import polestar.caches.polestar as module

    entered, loop = [], module.PolestarCache._layers

    def wrapped(self, view, refresh):
        if not refresh:
            return loop(self, view, refresh)
        with context() as ctx:
            entered.append(ctx)
            return loop(self, view, refresh)

    patch.setattr(module.PolestarCache, "_layers", wrapped)
    return entered


def _refresh_loop_reads(model, cfg, monkeypatch) -> tuple[list[list[str]], object]:
    """Decode PROMPT with `cfg`; the host reads of each refresh step's layer loop, and the result."""
    with monkeypatch.context() as patch:
        modes = _in_refresh_loops(patch, _HostReads)
        out = decode(model, torch.tensor(PROMPT), cfg, trace=True)
    return [mode.seen for mode in modes], out


def _events(out) -> list[tuple]:
    """What a traced decode did, step by step: refreshed positions, commits and the step's extra record (drift
    values included), for comparing two decodes exactly."""
    return [(e.refreshed_positions, [(c.position, c.token, c.reason) for c in e.commits], e.extra)
            for e in out.trace.events]


REFRESHING = dict(gen_length=32, block_length=8, tau_s=0.3, polestar_tau_upd=1, polestar_tau_suffix=0.05,
                  offload="off")


def test_device_selection_reads_nothing_on_the_host_between_layers(tiny, monkeypatch):
    """With device-side selection a refresh step's layer loop (consume, block layer, drift, pick, packet, for
    every layer) never reads a tensor on the host, so on a GPU it never waits for the device mid-forward; the
    host path reads the packet's size at every refreshed layer (`nonzero`), which the detector sees. (The side
    work runs in line here: a torch function mode sees only its own thread's calls.)"""
    cfg = {**REFRESHING, "overlap": "off"}
    host, _ = _refresh_loop_reads(tiny, resolve("polestar", device_select="off", **cfg), monkeypatch)
    device, out = _refresh_loop_reads(tiny, resolve("polestar", device_select="on", **cfg), monkeypatch)
    assert host and all("nonzero" in seen for seen in host)
    assert len(device) == len(host) and all(seen == [] for seen in device)
    assert any(c.reason == "suffix" for e in out.trace.events for c in e.commits)  # the last packet was used


def test_device_selection_decodes_as_the_host_path(tiny, monkeypatch):
    """Device-side selection pads each packet to its layer's bound and keeps the padding out of every write.
    The CPU's kernels round a row by how many rows share its call, and a padded packet has more, so as they are
    the two paths agree in tokens, refreshed positions and commits (these prompts) while drift values move in the
    last bits; with the packet's layer and K/V projection computed one row per call, so that no row's rounding
    depends on the others, they are the same decode bit for bit, drift values included."""
    ids = torch.tensor(PROMPT)
    model_type = type(tiny)
    layer, kv_rows = model_type.layer, model_type.kv_rows

    def row_by_row(fn, h, positions, join):
        return join([fn(h[:, i : i + 1], positions[i : i + 1]) for i in range(len(positions))])

    def packet_layer(self, index, h, positions, cache=None, need_attn=False, write=True, pad=None, keep=None,
                     after_write=None):
        if write:  # the block rows: the same call on both paths
            return layer(self, index, h, positions, cache, need_attn, write, pad, keep, after_write)
        return row_by_row(lambda x, p: layer(self, index, x, p, cache, write=False), h, positions,
                          lambda outs: type(outs[0])(hidden=torch.cat([o.hidden for o in outs], 1), attn=None))

    def packet_kv(self, index, h, positions):
        return row_by_row(lambda x, p: kv_rows(self, index, x, p), h, positions,
                          lambda outs: tuple(torch.cat(t, dim=2) for t in zip(*outs)))

    def events(cfg, device_select):
        out = decode(tiny, ids, resolve("polestar", device_select=device_select, **cfg), trace=True)
        return out, _events(out)

    for extra in ({}, dict(polestar_refresh_clusters=1, polestar_refresh_clusters_last=1), dict(offload="on")):
        cfg = {**REFRESHING, **extra}
        (a, host), (b, device) = events(cfg, "off"), events(cfg, "on")
        assert torch.equal(a.canvas, b.canvas) and a.nfe == b.nfe
        assert [e[:2] for e in host] == [e[:2] for e in device]
        with monkeypatch.context() as patch:
            patch.setattr(model_type, "layer", packet_layer)
            patch.setattr(model_type, "kv_rows", packet_kv)
            (_, host), (_, device) = events(cfg, "off"), events(cfg, "on")
        assert any(e[2].get("refresh") for e in host) and host == device


class _Eager:
    """A side lane that runs the work the moment it is submitted: the earliest the step's ordering allows."""

    def submit(self, fn, *args):
        value = fn(*args)
        return type("Done", (), {"result": lambda self: value})()


@pytest.fixture
def one_thread():
    """One torch thread, as a decode of a small model runs and as the side lane's worker runs (a kernel's rounding
    can depend on how many threads share it)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_side_lane_decodes_bit_for_bit(tiny, monkeypatch, one_thread):
    """A layer's side work (re-quantize the previous packet, proxy attention and drift, pick, packet) reads only
    what is final once the block rows wrote their K/V, and the rows' attention and MLP read nothing it writes. So
    run when its result is taken (in line), the moment it is submitted (between the rows' K/V write and their
    attention), or on a worker thread at the same time as the main thread's work, the decode is the same bit for
    bit: tokens, NFE, refreshed positions, commits and every drift value of the trace."""
    import polestar.caches.polestar as module
    from polestar.side import ThreadLane

    def run(cfg, lane):
        with monkeypatch.context() as patch:
            if lane is not None:
                patch.setattr(module, "side_lane", lambda *args, **kwargs: lane)
            out = decode(tiny, torch.tensor(PROMPT), resolve("polestar", **cfg), trace=True)
        return out.canvas, out.nfe, _events(out)

    for extra in ({}, dict(device_select="on"), dict(offload="on"), dict(polestar_drift_reference="previous_step")):
        cfg = {**REFRESHING, "overlap": "off", **extra}
        inline = run(cfg, None)
        assert any(e[2].get("refresh") for e in inline[2])
        for lane in (_Eager(), ThreadLane()):
            canvas, nfe, events = run(cfg, lane)
            assert torch.equal(canvas, inline[0]) and nfe == inline[1] and events == inline[2], (extra, lane)


def test_side_lane_choice_and_thread_modes():
    """'auto' keeps a CPU decode in line (a worker thread does not pay there: docs/algorithm.md §4), 'on' takes the
    worker thread, 'off' and a timed breakdown run in line; the worker runs under the caller's grad and inference
    modes, and an error raised there reaches the caller."""
    from polestar.config import upgrade_names
    from polestar.side import Inline, ThreadLane, side_lane

    cpu = torch.device("cpu")
    assert isinstance(side_lane("auto", cpu), Inline) and isinstance(side_lane("off", cpu), Inline)
    assert isinstance(side_lane("on", cpu), ThreadLane) and isinstance(side_lane("on", cpu, timed=True), Inline)
    modes = lambda: (torch.is_grad_enabled(), torch.is_inference_mode_enabled())  # noqa: E731
    with torch.inference_mode():
        assert ThreadLane().submit(modes).result() == (False, True)
    with torch.no_grad():
        assert ThreadLane().submit(modes).result() == (False, False)
    assert ThreadLane().submit(modes).result() == (True, False)
    with pytest.raises(ZeroDivisionError):
        ThreadLane().submit(lambda: 1 / 0).result()
    assert upgrade_names({"overlap": True}) == {"overlap": "auto"}
    assert upgrade_names({"overlap": False}) == {"overlap": "off"}
    with pytest.raises(polestar.errors.ConfigError, match="overlap"):
        resolve("polestar", overlap="sometimes")


def test_device_selection_packet_of_padding_only_changes_nothing(tiny, monkeypatch):
    """When a refresh picks no row, the device path still runs a packet of `bound` padding rows (the host cannot
    know it is empty) and consumes it: every write keeps the old contents and the centroids do not move, so the
    decode is the host path's, whose empty packets are skipped, bit for bit."""
    import polestar.caches.polestar as module

    pick = module.PolestarCache._pick
    monkeypatch.setattr(module.PolestarCache, "_pick", lambda self, picked, bound: pick(self, picked & False, bound))
    ids = torch.tensor(PROMPT)
    runs = [decode(tiny, ids, resolve("polestar", device_select=mode, **REFRESHING), trace=True) for mode in ("off", "on")]
    assert torch.equal(runs[0].canvas, runs[1].canvas)
    assert any(e.kind == "refresh" for e in runs[0].trace.events)
    assert [e.extra for e in runs[0].trace.events] == [e.extra for e in runs[1].trace.events]


def test_device_selection_pick_is_nonzero_padded():
    """`_pick` on the device: the picked rows ascending (what `nonzero` gives), padded to the bound by the last
    one, and a mask of the real ones; nothing picked gives the first row, none real."""
    cache = PolestarCache.__new__(PolestarCache)
    cache.device_select = True
    for picked in ([0, 1, 0, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0, 0], [0] * 7, [1] * 7):
        picked = torch.tensor(picked, dtype=torch.bool)
        count = int(picked.sum())
        members, real = cache._pick(picked, 7)
        assert members[:count].tolist() == picked.nonzero().flatten().tolist()
        assert real.tolist() == [i < count for i in range(7)]
        assert members[count:].tolist() == [members[count - 1] if count else 0] * (7 - count)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the CPU test above checks the code)")
def test_device_selection_never_waits_for_a_cuda_device(tmp_path, monkeypatch):
    """On a GPU, under CUDA's sync debug mode (every synchronising call raises), the refresh steps' layer loops
    of a device-selection decode run through; the host path's raise at its first `nonzero`."""
    import contextlib

    @contextlib.contextmanager
    def synchronising_raises():
        torch.cuda.set_sync_debug_mode("error")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode("default")

    model = polestar.load_model(write_checkpoint(tmp_path, "llada", kv_heads=2), device="cuda")
    _in_refresh_loops(monkeypatch, synchronising_raises)
    ids = torch.tensor(PROMPT, device="cuda")
    out = decode(model, ids, resolve("polestar", device_select="auto", **REFRESHING), trace=True)
    assert any(e.kind == "refresh" for e in out.trace.events)
    with pytest.raises(RuntimeError):
        decode(model, ids, resolve("polestar", device_select="off", **REFRESHING))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the CPU test above checks the code)")
def test_side_stream_decodes_as_in_line(tmp_path):
    """On a GPU the side work runs on a side stream (`overlap="auto"`) beside the block's attention and MLP: the
    same kernels on the same inputs, so the decode equals the in-line one bit for bit, drift values included. A
    missing wait between the streams (side work reading the cache before the block's K/V write lands, or the next
    layer taking a packet before it is made) shows here as different values."""
    model = polestar.load_model(write_checkpoint(tmp_path, "llada", kv_heads=2), device="cuda")
    ids = torch.tensor(PROMPT, device="cuda")
    runs = []
    for overlap in ("off", "auto"):
        for device_select in ("off", "on"):
            out = decode(model, ids, resolve("polestar", overlap=overlap, device_select=device_select, **REFRESHING),
                         trace=True)
            runs.append((out.canvas.tolist(), out.nfe, _events(out)))
    assert any(e[2].get("refresh") for e in runs[0][2])
    assert runs[0] == runs[2] and runs[1] == runs[3]
