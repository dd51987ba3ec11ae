"""Polestar-Cache and the drift signals of Polestar-Commit (arXiv 2607.14107; docs/algorithm.md).

On top of Fast-dLLM's dual cache:
- Block entry (docs/algorithm.md §2): a full forward, or (`polestar_entry_schedule`) a windowed forward over the
  local window Ω_b (prefix `polestar_window_prefix`·B and suffix `polestar_window_suffix`·B around the block) ∪ the
  block, reusing every other K/V row. Then, per layer, the window's layer inputs are clustered (spherical k-means,
  prefix and suffix separately), stored as residuals against their centroids in `polestar_hidden_format`, and each
  centroid's content-only proxy attention is kept as the drift reference. That work is only read by the block's later
  steps, so it is deferred to the first of them: a block the entry forward commits whole (an EOS tail) never
  pays for it. Nothing writes the cache in between, so the deferred work sees exactly the entry's state; the
  k-means seeding is drawn from `seed` + block, so it does not depend on which earlier blocks clustered.
- Each step: the block runs against the cache as in the dual cache. Per layer, the centroids' proxy attention
  gives a per-cluster KL drift. On a refresh step (the τ_upd gate), the top-k drifting clusters' members are
  recomputed at that layer from their cached inputs: their outputs form the update packet that the next layer
  consumes first (cached inputs rewritten, K/V rows recomputed, centroids shifted to stay the mean). The final
  layer's packet gives logits for suffix positions (Polestar-Commit's suffix commit). On a step that does
  not refresh, the cluster drift is read only by the trace (with the default `last_refresh` reference), so an
  untraced decode skips it; the tokens are the same either way.
- At the final layer, the block queries' attention is compared with the previous forward's: token drift δ,
  and Δ = δ − mean of the last `polestar_history` drift vectors, for the early commit rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.token_kl import token_drift_kl
from polestar import profiling
from polestar.caches.base import CachePolicy, ExtraTargets, Pass, StepView
from polestar.clustering import proxy_drift, spherical_kmeans, split_counts
from polestar.config import DriftReference, EntrySchedule
from polestar.kinds import PassKind
from polestar.quant import RowStore, get_format
from polestar.side import side_lane


@dataclass
class _PendingEntry:
    """What the block entry leaves for its first later step: the window's layer inputs and the block rows'
    final-layer inputs (the cache is untouched until then)."""

    block: int
    block_start: int
    window: torch.Tensor  # [n] window positions
    window_inputs: list[torch.Tensor]  # per layer [n, d]: the window rows' layer inputs
    block_inputs: torch.Tensor  # [1, rows, d]: final-layer inputs of the block rows (token-drift reference)


@dataclass
class LayerWindow:
    """Cached state of one layer's local window."""

    positions: torch.Tensor  # [n] canvas positions of the window, sorted
    labels: torch.Tensor  # [n] cluster of each member
    centroids: torch.Tensor  # [K, d] fp32, the live means
    counts: torch.Tensor  # [K]
    store: RowStore  # the members' layer inputs, quantized
    reference: torch.Tensor  # [K, heads, length] proxy attention the drift is measured against
    bound: int  # most members a refresh of this layer can pick: its top-k largest clusters together


@dataclass
class _Packet:
    """A layer's update packet, which the next layer consumes first: the picked window rows (`members`, ascending)
    and their recomputed outputs. With device-side selection the rows are padded to the layer's bound by repeating
    the last one, member and outputs alike, and `real` marks the picked ones (a step then never reads the selection
    on the host)."""

    members: torch.Tensor  # [m] window indices
    real: torch.Tensor | None  # [m] bool; None: every row is picked
    hidden: torch.Tensor  # [1, m, d] the rows' outputs of this layer
    fetched: object | None  # the next layer's rows, prefetched (offloaded stores)


@dataclass
class _LayerRun:
    """What a step's layer loop leaves for after its last layer, still on the device."""

    hidden: torch.Tensor  # [1, rows, d] the block rows' final hidden states
    attn: torch.Tensor | None  # the final layer's attention of the block rows (drift commit)
    drifts: list[torch.Tensor]  # [K] cluster drift per layer that measured it
    selected: list[torch.Tensor]  # picked clusters per refreshed layer
    refreshed: list[tuple[torch.Tensor, torch.Tensor | None]]  # (positions, real) per refreshed layer
    packet: _Packet | None  # the final layer's (suffix commit)
    window: LayerWindow | None  # the final layer's


@dataclass
class _Aux:
    """One layer's auxiliary work (`PolestarCache._aux`), still on the device: its cluster drift and, on a refresh
    step, the clusters it picked, the rows refreshed (`real` as in `_Packet`) and its packet."""

    drift: torch.Tensor  # [K]
    chosen: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    real: torch.Tensor | None = None
    packet: _Packet | None = None


class PolestarCache(CachePolicy):
    def __init__(self, model, cfg) -> None:
        super().__init__(model, cfg)
        self.fmt = get_format(cfg.polestar_hidden_format, cfg.impl)
        self.generator = torch.Generator().manual_seed(cfg.seed)
        self.windows: list[LayerWindow] | None = None
        self.pending: _PendingEntry | None = None  # the block entry's deferred work
        self.prev_attn: torch.Tensor | None = None  # final-layer attention of the block rows [1, H, rows, L]
        self.history: list[torch.Tensor] = []
        self.since_refresh = 0
        self.last_step_commits = 0
        device = next(model.parameters()).device
        self.offload = cfg.offload == "on" or (cfg.offload == "auto" and device.type == "cuda")
        self.lane = side_lane(cfg.overlap, device, timed=profiling.collecting())
        self.device_select = cfg.device_select == "on" or (
            cfg.device_select == "auto" and device.type == "cuda" and not self.offload)

    # --- block entry ------------------------------------------------------------------------------------
    def window(self, view: StepView) -> torch.Tensor:
        b, length = self.cfg.block_length, view.canvas.shape[1]
        lo = max(0, view.block_start - self.cfg.polestar_window_prefix * b)
        hi = min(length, view.block_end + self.cfg.polestar_window_suffix * b)
        pos = torch.arange(lo, hi, device=view.canvas.device)
        return pos[(pos < view.block_start) | (pos >= view.block_end)]

    def _windowed_entry(self, view: StepView) -> bool:
        if not self.cfg.polestar_cache or view.block == 0:
            return False
        if self.cfg.polestar_entry_schedule == EntrySchedule.ALTERNATE:
            return view.block % 2 == 1
        return view.block % 4 == 3

    def begin_block(self, view: StepView) -> None:
        self.ensure_cache(view.canvas)
        self.history, self.since_refresh, self.last_step_commits = [], 0, 0

    def _entry(self, view: StepView) -> Pass:
        model, canvas = self.model, view.canvas
        block = torch.arange(view.block_start, view.block_end, device=canvas.device)
        window = self.window(view)
        with profiling.section("entry: forward"):
            if self._windowed_entry(view):
                rows = self.with_predictors(torch.cat([window, block]))
                inputs, hidden = self._rows_with_inputs(canvas, rows)
                result = Pass(logits=self.predict(hidden, rows, view.targets), kind=PassKind.WINDOWED_ENTRY,
                              rows=len(rows))
                index_of = lambda pos: torch.searchsorted(rows, pos)  # noqa: E731
            else:
                result, out = self.full_pass(view, output_hidden_states=True)
                inputs = out.hidden_states
                index_of = lambda pos: pos  # noqa: E731
        self.windows, self.prev_attn = None, None  # the previous block's state must never serve this one
        self.block_rows = self.with_predictors(block)
        window_index = index_of(window)
        self.pending = _PendingEntry(
            block=view.block, block_start=view.block_start, window=window,
            window_inputs=[inputs[index][0, window_index] for index in range(model.spec.n_layers)],
            block_inputs=inputs[model.spec.n_layers - 1][:, index_of(self.block_rows)])
        return result

    def _finish_entry(self) -> None:
        """The block entry's deferred work, run by the block's first later step before anything else."""
        entry, self.pending = self.pending, None
        if self.cfg.polestar_cache and len(entry.window):
            with profiling.section("entry: cluster + quantize + reference"):
                self.generator.manual_seed(self.cfg.seed + entry.block)
                self.windows = self._cluster(entry)
        if self.cfg.polestar_current_commit:
            with profiling.section("entry: token-drift reference"):
                last = self.model.spec.n_layers - 1
                self.prev_attn = self.model.attention_probs(last, entry.block_inputs, self.block_rows, self.cache)

    def _rows_with_inputs(self, canvas: torch.Tensor, rows: torch.Tensor):
        h = self.model.embed(canvas[:, rows])
        inputs = []
        for index in range(self.model.spec.n_layers):
            inputs.append(h)
            h = self.model.layer(index, h, rows, self.cache).hidden
        return inputs, h

    def _cluster(self, entry: _PendingEntry) -> list[LayerWindow]:
        """Spherical k-means of every layer's window at once, the prefix and the suffix separately; then each
        layer's members are quantized against their centroids and its proxy-attention reference is taken."""
        positions = entry.window
        is_prefix = positions < entry.block_start
        n_pre = int(is_prefix.sum())
        n_suf = len(positions) - n_pre
        k_pre, k_suf = split_counts(self.cfg.polestar_centroids, n_pre, n_suf)
        parts = [(part, k, n) for part, k, n in ((is_prefix, k_pre, n_pre), (~is_prefix, k_suf, n_suf)) if k and n]
        # the first seed of each (layer, part), drawn layer by layer, the prefix's before the suffix's
        first = torch.tensor([[int(torch.randint(n, (1,), generator=self.generator)) for *_, n in parts]
                              for _ in entry.window_inputs], dtype=torch.long, device=positions.device)
        inputs = torch.stack(entry.window_inputs)  # [layers, n, d]
        labels = torch.empty(inputs.shape[:2], dtype=torch.long, device=inputs.device)
        centroids, counts, offset = [], [], 0
        for column, (part, k, _) in enumerate(parts):
            with profiling.section("entry: cluster + quantize + reference › k-means"):
                part_labels, part_centroids, part_counts = spherical_kmeans(
                    inputs[:, part], k, self.cfg.polestar_kmeans_iters, first[:, column])
            labels[:, part] = part_labels + offset
            centroids.append(part_centroids)
            counts.append(part_counts)
            offset += part_centroids.shape[1]
        centroids, counts = torch.cat(centroids, dim=1), torch.cat(counts, dim=1)  # [layers, K, d], [layers, K]
        largest = counts.sort(dim=1, descending=True).values.cumsum(dim=1).tolist()  # one read per block
        last = len(entry.window_inputs) - 1
        windows = []
        for layer, h in enumerate(entry.window_inputs):
            with profiling.section("entry: cluster + quantize + reference › quantize"):
                store = RowStore(self.fmt, h.float(), centroids[layer], labels[layer], offload=self.offload)
            with profiling.section("entry: cluster + quantize + reference › proxy reference"):
                reference, _ = proxy_drift(self.model, layer, centroids[layer], self.cache, None, self.cfg.impl)
            k = self.cfg.polestar_refresh_clusters_last if layer == last else self.cfg.polestar_refresh_clusters
            windows.append(LayerWindow(positions, labels[layer], centroids[layer], counts[layer], store, reference,
                                       bound=largest[layer][min(k, len(largest[layer])) - 1]))
        return windows

    # --- steps ------------------------------------------------------------------------------------------
    def forward(self, view: StepView) -> Pass:
        if view.step == 0:
            return self._entry(view)
        return self._step(view)

    def _refresh_now(self) -> bool:
        tau = self.cfg.polestar_tau_upd
        if not self.cfg.polestar_cache or self.windows is None or tau == 0:
            return False
        return self.last_step_commits >= tau - 1 or self.since_refresh >= tau

    def _step(self, view: StepView) -> Pass:
        if self.pending is not None:
            self._finish_entry()
        cfg, n_layers = self.cfg, self.model.spec.n_layers
        refresh = self._refresh_now()
        run = self._layers(view, refresh)
        # after the last layer: the step reads what the loop left on the device
        drifts, selected = [d.tolist() for d in run.drifts], [c.tolist() for c in run.selected]
        refreshed = [p if real is None else p[real] for p, real in run.refreshed]
        with profiling.section("step: head"):
            result = Pass(logits=self.predict(run.hidden, self.block_rows, view.targets),
                          kind=PassKind.REFRESH if refresh else PassKind.BLOCK, rows=len(self.block_rows))
        if cfg.polestar_current_commit:
            with profiling.section("step: token drift"):
                drift, delta = self._token_drift(view, run.attn, self.block_rows)
                result.signals = {"drift": drift, "delta": delta}
        if refresh:
            self.since_refresh = 0
            result.refreshed_positions = torch.unique(torch.cat(refreshed)) if refreshed else None
            result.refreshed_layers = list(range(n_layers))
            if cfg.polestar_suffix_commit and run.packet is not None:
                with profiling.section("step: suffix logits"):
                    self._suffix(result, run.window, run.packet)
        result.extra = {"refresh": refresh, "cluster_drift": drifts, "selected_clusters": selected}
        if refresh and refreshed:
            result.extra["refreshed_per_layer"] = [len(p) for p in refreshed]
        return result

    def _layers(self, view: StepView, refresh: bool) -> _LayerRun:
        """The step's layer loop: the block rows layer by layer against the cache, each layer first writing the
        K/V rows of the previous one's update packet. Once a layer's block rows have written their K/V, the
        layer's auxiliary work (`_aux`: the cluster drift when something reads it and, on a refresh step, the
        top-k clusters' packet) runs beside their attention and MLP on the side lane (`polestar.side`); a refresh
        step takes the packet before the next layer. Nothing in it waits for the device on the host with
        device-side selection (`_pick`): the picks and drifts are read after the last layer."""
        model, cfg = self.model, self.cfg
        rows, n_layers = self.block_rows, model.spec.n_layers
        drift_read = refresh or self.traced or cfg.polestar_drift_reference == DriftReference.PREVIOUS_STEP
        h = model.embed(view.canvas[:, rows])
        packet, win, done = None, None, None
        aux, selected, refreshed = [], [], []
        for index in range(n_layers):
            win = self.windows[index] if (cfg.polestar_cache and self.windows is not None) else None
            if packet is not None:
                with profiling.section("step: consume packet"), profiling.section("step: consume packet › K/V rows"):
                    self._write_packet(index, win, packet)
            launch = None
            if win is not None and drift_read:
                def launch(index=index, win=win, previous=packet):
                    aux.append(self.lane.submit(self._aux, view, index, win, previous, refresh))
            with profiling.section("step: block layer"):
                out = model.layer(index, h, rows, self.cache, after_write=launch,
                                  need_attn=cfg.polestar_current_commit and index == n_layers - 1)
            h, packet = out.hidden, None
            if launch is not None and refresh:  # the next layer consumes this one's packet first
                done = aux[-1].result()
                packet = done.packet
                selected.append(done.chosen)
                refreshed.append((done.positions, done.real))
        drifts = [task.result().drift for task in aux]
        return _LayerRun(h, out.attn, drifts, selected, refreshed, done.packet if done is not None else None, win)

    def _aux(self, view: StepView, index: int, win: LayerWindow, previous: _Packet | None, refresh: bool) -> _Aux:
        """Layer `index`'s auxiliary work: the previous layer's packet re-quantized into this layer's window (its
        K/V rows are already written), the centroids' proxy attention and cluster drift, and on a refresh step the
        top-k drifting clusters' members recomputed at this layer (its packet). It reads the layer's cache as the
        block rows left it and writes only the window's state, which their attention and MLP never read."""
        model, cfg = self.model, self.cfg
        if previous is not None:
            with profiling.section("step: consume packet"), profiling.section("step: consume packet › re-quantize"):
                self._requantize(win, previous)
        with profiling.section("step: proxy attention + drift"):
            now, drift = proxy_drift(model, index, win.centroids, self.cache, win.reference, cfg.impl)
        if cfg.polestar_drift_reference == DriftReference.PREVIOUS_STEP:
            win.reference = now
        if not refresh:
            return _Aux(drift)
        with profiling.section("step: select + fetch + packet"):
            last = index == model.spec.n_layers - 1  # no next layer takes the last packet: only the suffix reads it
            k = cfg.polestar_refresh_clusters_last if last else cfg.polestar_refresh_clusters
            chosen = drift.topk(min(k, len(drift))).indices
            if last and not cfg.polestar_suffix_commit:
                members, real = win.labels[:0], None
            else:
                picked = torch.isin(win.labels, chosen)
                if last:
                    picked &= self._suffix_targets(view, win.positions)
                members, real = self._pick(picked, win.bound)
            positions, packet = win.positions[members], None
            if len(members):
                # refreshed here and consumed by the next layer: fetch both layers' rows now
                fetched = win.store.prefetch(members)
                fetched_next = self.windows[index + 1].store.prefetch(members) if not last else None
                h_in = win.store.get(members, fetched).to(model.dtype).unsqueeze(0)
                with profiling.section("step: select + fetch + packet › packet layer"):
                    hidden = model.layer(index, h_in, positions, self.cache, write=False).hidden
                if real is not None:  # padding repeats the last picked row's outputs, not a recompute of them
                    hidden = hidden[:, (real.cumsum(0) - 1).clamp_min(0)]  # (kernels round by row count)
                packet = _Packet(members, real, hidden, fetched_next)
        if cfg.polestar_drift_reference == DriftReference.LAST_REFRESH:
            win.reference = now
        return _Aux(drift, chosen, positions, real, packet)

    def _pick(self, picked: torch.Tensor, bound: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The window rows where `picked` [n] holds, ascending, and which of them are real (None: all). On the
        host path exactly those rows (reading how many is free on a CPU). With device-side selection they are
        padded to `bound` rows, the most `picked` can hold, by repeating the last one, so the shapes never depend
        on the device's data; when nothing is picked, every row is the window's first and none is real."""
        if not self.device_select:
            return picked.nonzero().flatten(), None
        order = torch.argsort((~picked).to(torch.uint8), stable=True)[:bound]  # picked rows first, ascending
        count = picked.sum()
        slots = torch.arange(bound, device=picked.device)
        return order[torch.minimum(slots, (count - 1).clamp_min(0))], slots < count

    def _write_packet(self, index: int, win: LayerWindow, packet: _Packet) -> None:
        """Layer `index` takes the previous layer's packet, first its K/V rows (before the block rows attend).
        Padding rows repeat the last real row, so they write what it writes; a packet with no real row writes
        nothing."""
        positions = win.positions[packet.members]
        k, v = self.model.kv_rows(index, packet.hidden, positions)
        keep = None if packet.real is None else (~packet.real.any()).expand(1, len(packet.members))
        self.cache.write(index, positions, k, v, keep=keep)

    @staticmethod
    def _requantize(win: LayerWindow, packet: _Packet) -> None:
        """The rest of taking the previous layer's packet (`_aux`): the window's cached inputs rewritten and the
        centroids shifted to stay the means. Padding rows are left out of the shift, and out of every write when
        the packet has no real row."""
        members, real, hidden = packet.members, packet.real, packet.hidden
        old = win.store.get(members, packet.fetched)
        new = hidden[0].float()
        labels = win.labels[members]
        moved = new - old if real is None else (new - old) * real.unsqueeze(-1)
        shift = torch.zeros_like(win.centroids).index_add_(0, labels, moved)
        win.centroids += shift / win.counts.clamp_min(1).unsqueeze(-1).to(shift.dtype)
        win.store.set(members, new, win.centroids, labels, keep=None if real is None else ~real.any())

    def _token_drift(self, view: StepView, attn: torch.Tensor, rows: torch.Tensor):
        """(δ, Δ) per target [1, n]: δ = final-layer attention KL against the previous forward, read on the
        target's predicting row; Δ = δ minus the mean of the block's last `polestar_history` drift vectors."""
        drift_rows = token_drift_kl(attn[0].transpose(0, 1), self.prev_attn[0].transpose(0, 1), self.cfg.impl)
        self.prev_attn = attn
        baseline = torch.stack(self.history).mean(0) if self.history else torch.zeros_like(drift_rows)
        if self.cfg.polestar_history > 0:
            self.history = (self.history + [drift_rows])[-self.cfg.polestar_history:]
        index = torch.searchsorted(rows, self.model.predicting_rows(view.targets))
        return drift_rows[index].unsqueeze(0).double(), (drift_rows - baseline)[index].unsqueeze(0).double()

    def _suffix_targets(self, view: StepView, rows: torch.Tensor) -> torch.Tensor:
        """Which of the window positions `rows` predict a still-masked position of the suffix window (bool)."""
        predicted = rows + self.model.logit_shift
        hi = view.block_end + self.cfg.polestar_window_suffix * self.cfg.block_length
        keep = (predicted >= view.block_end) & (predicted < min(hi, view.canvas.shape[1]))
        return keep & (view.canvas[0, predicted.clamp(max=view.canvas.shape[1] - 1)] == self.model.mask_id)

    def _suffix(self, result: Pass, win: LayerWindow, packet: _Packet) -> None:
        """The final layer's packet rows (each predicting a still-masked suffix position) as extra targets."""
        members, hidden = packet.members, packet.hidden
        if packet.real is not None:  # after the last layer, where the step reads its selection anyway
            members, hidden = members[packet.real], hidden[:, packet.real]
            if not len(members):
                return
        predicted = win.positions[members] + self.model.logit_shift
        result.extra_targets = ExtraTargets(predicted, self.model.head(hidden))

    def observe(self, view: StepView, logits: torch.Tensor, committed: torch.Tensor) -> None:
        n = int(committed.sum())
        self.last_step_commits = n
        self.since_refresh += n
