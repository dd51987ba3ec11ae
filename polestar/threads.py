"""CPU threading for the programs (CLI, app, lm-eval, training, analysis scripts): OpenMP workers that spin only
briefly, or sleep when the machine is busy, and one torch thread where a model's operations are too small to share.

OpenMP's default wait policy keeps an idle torch worker thread spinning for a while before it sleeps. On a CPU
that another process keeps busy, the spinning workers and the other process take turns on the same cores: one
`fast-dllm` decode of an `arith` example (2 torch threads, this 2-core machine, three other busy processes) took
31.5 s by default, 4.8 s with OMP_WAIT_POLICY=PASSIVE and 6.4 s with one thread; alone on the machine the three
are within a few percent. The policy is read once, when torch loads the OpenMP runtime, so a program calls
`quiet_openmp()` before anything imports torch. A value the user set wins.

Sleeping workers have a price: every parallel operation wakes them, and a forward of the embedded model is a few
hundred of them. A 320-token forward on 2 threads (2-core AMD EPYC, bf16, `python -m polestar.train.evaluate
--time-forward --tasks ''`, each run the median of 30 forwards, 2026-12-04, assets/models/polestar-tiny/README.md):
idle, 42.8–61.8 ms with PASSIVE (10 runs), 26.8–36.5 ms with workers that spin SPIN_COUNT rounds first (GNU
OpenMP's GOMP_SPINCOUNT; 23 runs, median 30.05 ms) and 26.6–43.7 ms with OMP_WAIT_POLICY=ACTIVE (9 runs); beside
one busy process, 57 ms with PASSIVE and 189 ms with the short spin (one thread: 45 ms; one run each). So
`quiet_openmp` asks for the short spin where no other process keeps a core busy when the program starts and for
PASSIVE otherwise (and always for PASSIVE too: an OpenMP runtime other than GNU's ignores GOMP_SPINCOUNT and sleeps).

A decode of the embedded model is thousands of operations on a few dozen rows of width 256, too small for a
second thread to pay for its wake-up. Measured on a 2-core AVX2 CPU (2026-12-02, float32, 3 held-out `arith`
examples, generation 256, OMP_WAIT_POLICY=PASSIVE): fast-dllm 8.9 s with 2 threads against 5.9 s with 1, polestar
14.2 s against 9.3 s; with a second process keeping one core busy 9.3 s against 8.6 s and 13.5 s against 9.9 s. So
a decode of a model below SMALL_MODEL_PARAMS runs on one torch thread (`decode_threads`: the CLI, the bench, the
analysis scripts); an 8B checkpoint's operations are thousands of times larger and keep every thread. The app
keeps torch's count: its runs add the analysis probe, a full forward over the whole canvas per step, where the
second thread pays (the app's default example with its frames, three runs each, idle: 8.2–10.1 s with 2 threads
against 9.4–12.6 s with 1), unless another process keeps a core busy (the same decode and probe: 10.2–11.4 s with
2 against 9.4–9.7 s with 1): so each run starts with `threads_for_load`, the threads left after what other
processes used over the next 0.05 s (five 10 ms clock ticks per core: enough to tell a busy core from an idle
one). A run on one thread has no workers to spin, so a machine that became busy after the program started costs
the short spin nothing there.
"""

from __future__ import annotations

import os
import time

SMALL_MODEL_PARAMS = 50_000_000  # below this, one torch thread decodes fastest on a CPU (module docstring)
SPIN_COUNT = 10_000  # GOMP_SPINCOUNT when idle; forward medians: 3,000 30.6 ms (1 run), 30,000 26.5–39.8 (4)


def quiet_openmp() -> None:
    """OpenMP workers for torch that spin SPIN_COUNT rounds before they sleep when no other process keeps a core
    busy now, else that sleep at once (module docstring); and one OpenBLAS thread for numpy, whose linear algebra
    here is small (the app's PCA, statistics) and whose pool spins like OpenMP's: a 135 × 512 SVD took 209 ms with
    two OpenBLAS threads beside a busy process and 30 ms with one. Both are read when the library loads: call this
    first. A wait policy or spin count the user set wins."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    busy = others_busy_cores()
    if busy is not None and round(busy) == 0:
        os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)  # GNU OpenMP: overrides PASSIVE; other runtimes ignore it


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


def _cpu_seconds() -> tuple[float, float] | None:
    """(busy CPU seconds of the whole machine, CPU seconds of this process) so far; None without /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    except (OSError, ValueError):
        return None
    idle = fields[3] + fields[4]
    own = os.times()
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK"), own.user + own.system


def others_busy_cores(interval: float = 0.05) -> float | None:
    """Cores that other processes kept busy over the next `interval` seconds (the machine's busy time minus this
    process's, per second); None where the machine does not say (no /proc/stat)."""
    before = _cpu_seconds()
    time.sleep(interval)
    after = _cpu_seconds()
    if before is None or after is None:
        return None
    return max(0.0, (after[0] - before[0]) - (after[1] - before[1])) / interval


def threads_for_load(available: int, interval: float = 0.05) -> int:
    """Torch threads for work starting now: `available` less the cores other processes keep busy (rounded), at
    least 1; `available` where the load cannot be read. A busy core would make every parallel operation wait for
    the thread that shares it (module docstring)."""
    busy = others_busy_cores(interval)
    if busy is None:
        return available
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(available, cores - round(busy)))
