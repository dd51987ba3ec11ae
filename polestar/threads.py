"""CPU threading for the programs (CLI, app, lm-eval, training, analysis scripts): OpenMP workers that sleep, and
one torch thread where a model's operations are too small to share.

OpenMP's default wait policy keeps an idle torch worker thread spinning for a while before it sleeps. On a CPU
that another process keeps busy, the spinning workers and the other process take turns on the same cores: one
`fast-dllm` decode of an `arith` example (2 torch threads, this 2-core machine, three other busy processes) took
31.5 s by default, 4.8 s with OMP_WAIT_POLICY=PASSIVE and 6.4 s with one thread; alone on the machine the three
are within a few percent. The policy is read once, when torch loads the OpenMP runtime, so a program calls
`quiet_openmp()` before anything imports torch. A value the user set wins.

Sleeping workers have a price: every parallel operation wakes them. A decode of the embedded model is thousands
of operations on a few dozen rows of width 256, too small for a second thread to pay for its wake-up. Measured on
a 2-core AVX2 CPU (2026-12-02, float32, 3 held-out `arith` examples, generation 256, OMP_WAIT_POLICY=PASSIVE):
fast-dllm 8.9 s with 2 threads against 5.9 s with 1, polestar 14.2 s against 9.3 s; with a second process keeping
one core busy 9.3 s against 8.6 s and 13.5 s against 9.9 s. So a decode of a model below SMALL_MODEL_PARAMS runs
on one torch thread (`decode_threads`: the CLI, the bench, the analysis scripts); an 8B checkpoint's operations are
thousands of times larger and keep every thread. The app keeps torch's count: its runs add the analysis probe, a
full forward over the whole canvas per step, where the second thread pays (the app's default example with its
frames, three runs each, idle: 8.2–10.1 s with 2 threads against 9.4–12.6 s with 1).
"""

from __future__ import annotations

import os

SMALL_MODEL_PARAMS = 50_000_000  # below this, one torch thread decodes fastest on a CPU (module docstring)


def quiet_openmp() -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def decode_threads(model, requested: int = 0) -> int:
    """Torch threads for decoding with `model`: `requested` when > 0; else 1 for a model on a CPU with fewer than
    SMALL_MODEL_PARAMS parameters, else torch's current count."""
    import torch

    if requested > 0:
        return requested
    first = next(model.parameters())
    if first.device.type == "cpu" and sum(p.numel() for p in model.parameters()) < SMALL_MODEL_PARAMS:
        return 1
    return torch.get_num_threads()


def set_decode_threads(model, requested: int = 0) -> int:
    """Set torch's intra-op threads to `decode_threads(model, requested)` (process-wide); returns the count."""
    import torch

    threads = decode_threads(model, requested)
    torch.set_num_threads(threads)
    return threads
