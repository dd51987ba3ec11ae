"""Where Polestar's auxiliary work runs: beside the block's attention and MLP, or in line with them.

A refresh step's per-layer extra work (the centroids' proxy attention and drift, the pick of the top-k clusters,
their rows' recompute into the update packet, and the re-quantization of the previous layer's packet) reads the
layer's K/V cache once the block rows have written theirs, and nothing in the block's own attention and MLP of that
layer reads what it writes; the next layer needs its packet. So it can run beside them (arXiv 2607.14107 §4.3,
"latency hiding"; docs/algorithm.md §4):

- `StreamLane`: on a CUDA device, a side stream that waits for the main stream's work queued so far, and that the
  main stream waits for when the result is taken.
- `ThreadLane`: on a CPU, a worker thread with one torch thread that runs the work on another core (torch releases
  the interpreter lock inside its operations, so the two threads' operations can run at once). It does not pay on
  a CPU (docs/algorithm.md §4: the work is many small operations whose Python side holds the lock, and the block's
  attention and MLP it could hide are short), so only `overlap="on"` takes it; the tests use it to run the step's
  ordering with real concurrency.
- `Inline`: the work runs when its result is taken, on the caller's thread (a CPU's default, and any decode whose
  per-section costs are being timed).

Each returns a handle from `submit(fn, *args)` whose `result()` gives `fn(*args)` once it may be read where the
caller runs. The same operations run on the same tensors in every lane, so with the same torch thread count the
results are the same bit for bit.
"""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

import torch


class _Deferred:
    def __init__(self, fn: Callable, args: tuple) -> None:
        self.fn, self.args, self.done, self.value = fn, args, False, None

    def result(self) -> Any:
        if not self.done:
            self.value, self.done, self.fn, self.args = self.fn(*self.args), True, None, ()
        return self.value


class Inline:
    """Runs the work when its result is first taken, on the caller's thread (so a timed section around the
    submitting code does not include it)."""

    def submit(self, fn: Callable, *args: Any) -> _Deferred:
        return _Deferred(fn, args)


def _under_callers_modes(fn: Callable, args: tuple) -> Callable[[], Any]:
    """`fn(*args)` under the caller's grad and inference modes, which are per thread in torch."""
    grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()

    def run() -> Any:
        with torch.inference_mode(inference), torch.set_grad_enabled(grad):
            return fn(*args)

    return run


class ThreadLane:
    """Runs the work on one worker thread with one torch thread of its own, in the order it is submitted. The
    worker is shared by every lane of the process: work from two decodes at once queues up rather than
    oversubscribing the cores."""

    _pool: ThreadPoolExecutor | None = None
    _lock = threading.Lock()

    @classmethod
    def _executor(cls) -> ThreadPoolExecutor:
        with cls._lock:
            if cls._pool is None:
                cls._pool = ThreadPoolExecutor(1, thread_name_prefix="polestar-side",
                                               initializer=torch.set_num_threads, initargs=(1,))
            return cls._pool

    def submit(self, fn: Callable, *args: Any) -> Future:
        return self._executor().submit(_under_callers_modes(fn, args))


def _tensors(value: Any):
    """Every tensor inside `value` (tuples, lists, dicts and dataclasses, nested)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _tensors(getattr(value, f.name))


class _Joined:
    def __init__(self, value: Any, side: torch.cuda.Stream, main: torch.cuda.Stream) -> None:
        self.value, self.side, self.main, self.joined = value, side, main, False

    def result(self) -> Any:
        if not self.joined:
            self.main.wait_stream(self.side)
            for t in _tensors(self.value):  # made on the side stream, used and freed on the main one
                if t.is_cuda:
                    t.record_stream(self.main)
            self.joined = True
        return self.value


class StreamLane:
    """Queues the work on a side CUDA stream after everything the main stream has queued so far."""

    def __init__(self, device: torch.device) -> None:
        self.stream = torch.cuda.Stream(device=device)

    def submit(self, fn: Callable, *args: Any) -> _Joined:
        main = torch.cuda.current_stream(self.stream.device)
        self.stream.wait_stream(main)
        with torch.cuda.stream(self.stream):
            value = fn(*args)
        return _Joined(value, self.stream, main)


def side_lane(setting: str, device: torch.device, timed: bool = False):
    """The lane for `setting` ('auto', 'on', 'off'; `DecodeConfig.overlap`) on `device`: a side stream on a CUDA
    device unless 'off'; on a CPU the worker thread only when 'on' (module docstring: it does not pay there), else
    in line. `timed` (a per-section cost breakdown is being collected) runs everything in line, so each section's
    time is its own."""
    if setting == "off" or timed:
        return Inline()
    if device.type == "cuda":
        return StreamLane(device)
    return ThreadLane() if setting == "on" else Inline()
