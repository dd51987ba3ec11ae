"""Runs the decoder for the app: the shared model host, and a streaming run that fills a RunRecord.

All model work (loading, decoding, the analysis probe) runs on the host's one long-lived worker thread, which
also serialises runs from different sessions. One thread matters on a CPU: torch ops issued from a second Python
thread start a second OpenMP team, the two teams' idle workers spin and fight for the cores, and from then on
both threads decode slowly (measured on 2 cores: 0.44 s per decode on the thread that loaded the model, 1.3 s on
any thread once two had run torch ops). Handlers therefore never touch torch; they only build figures.

The Gradio generator samples the record at most every `FRAME_S` seconds, and less often when drawing a frame is
slow (`FRAME_SHARE`); it always yields the final state, so the browser is never flooded. A stop flag is checked
by the decoder after every step.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from app.record import RunRecord
from polestar.config import DecodeConfig

log = logging.getLogger(__name__)
FRAME_S = 0.25  # ≤ 4 frames per second: each frame re-sends every changed figure
# the next frame waits FRAME_SHARE times as long as the caller took to draw the last one, so drawing (Python that
# holds the GIL the decoder's thread needs too) takes at most about a quarter of the run: five Plotly figures
# cost 0.12 s a frame, 0.19 s beside a decode, and one frame per step once made a 3.3 s decode take 8-9 s
FRAME_SHARE = 3.0


@dataclass
class ModelHost:
    """The one model every session shares, loaded on first use, and the one thread that runs all work on it:
    `submit(fn)` queues `fn()` there, so runs from different sessions queue instead of interleaving forwards."""

    path: str
    device: str | None = None
    # ZeroGPU: the GPU exists only inside the decorated handler's call, so each job runs on a thread of that call
    # (started by it, ended before it returns) instead of the long-lived worker, which lives outside every call
    inline: bool = False
    _load_lock: threading.Lock = field(default_factory=threading.Lock)
    _model: object = None
    cpu_threads: int = 1  # torch's thread count when the model loaded: the most a run on the CPU uses
    _worker: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=1, thread_name_prefix="model"))

    def submit(self, fn: Callable[[], object]) -> Future:
        if not self.inline:
            return self._worker.submit(fn)
        future: Future = Future()

        def job() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the caller like the worker's futures
                future.set_exception(exc)

        threading.Thread(target=job, name="model-call", daemon=True).start()
        return future

    def preload(self) -> Future:
        """Load the model on the worker thread in the background (the page is served meanwhile)."""
        return self.submit(self.get)

    def get(self):
        with self._load_lock:  # the background preload and a first run may race: load once
            if self._model is None:
                import torch

                import polestar

                device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
                self._model = polestar.load_model(self.path, device=device)
                self.cpu_threads = torch.get_num_threads()  # a run's probe gains from them (polestar/threads.py)
                log.info("model %s loaded on %s", self.path, device)
        return self._model


def stream_run(host: ModelHost, prompt: str, cfg: DecodeConfig, label: str, stop: threading.Event,
               probe: bool = True, frame_s: float = FRAME_S) -> Iterator[RunRecord]:
    """Yield the growing RunRecord while the decode runs (throttled), then the finished one. Errors from the
    decoder (bad input) are re-raised in the caller's thread."""
    import torch

    import polestar
    from polestar.api import encode_prompt
    from polestar.probe import AttentionProbe
    from polestar.threads import threads_for_load

    model = host.submit(host.get).result()
    ids = host.submit(lambda: encode_prompt(model, prompt)).result()  # torch stays on the model thread
    vocab = model.tokenizer.convert_ids_to_tokens(list(range(len(model.tokenizer)))) if model.tokenizer else []
    rec = RunRecord(label=label, config=cfg, prompt_len=ids.shape[1], vocab=vocab, mask_id=model.mask_id,
                    eos_id=model.eos_id)
    probe_fn = AttentionProbe(model, ids.shape[1]) if probe else None
    updates: queue.Queue = queue.Queue()

    def on_step(event, canvas) -> bool:
        rec.canvases.append(canvas[0, rec.prompt_len:].cpu().numpy().astype(np.int32))
        if probe_fn is not None:
            frame = probe_fn(canvas)
            rec.drift.append(frame.drift.numpy())
            rec.values.append(frame.values.numpy())
        rec.events.append(event)
        updates.put("step")
        return stop.is_set()

    def work() -> None:
        try:
            if model.device.type == "cpu":  # fewer threads while other processes keep cores busy
                torch.set_num_threads(threads_for_load(host.cpu_threads))
            # the probe's forward over the canvas after step t is the staleness reference of step t + 1
            result = polestar.generate(model, ids, cfg, on_step=on_step,
                                       staleness_reference=probe_fn.reference if probe_fn is not None else None)
            rec.metrics = {**result.summary(), "stopped": stop.is_set()}  # the library's metrics, one rounding
            updates.put("done")
        except Exception as exc:  # handed to the caller's thread
            updates.put(exc)

    host.submit(work)
    next_frame = 0.0
    while True:
        item = updates.get()
        if isinstance(item, Exception):
            raise item
        if item == "done":
            rec.done = True
            yield rec
            return
        if time.perf_counter() >= next_frame:
            handed = time.perf_counter()
            yield rec  # the caller draws its frame before this returns
            drawn = time.perf_counter()
            next_frame = drawn + max(frame_s, FRAME_SHARE * (drawn - handed))
