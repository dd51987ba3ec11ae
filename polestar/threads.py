"""CPU threading for the programs (CLI, app, lm-eval, training, analysis scripts): OpenMP workers that sleep.

OpenMP's default wait policy keeps an idle torch worker thread spinning for a while before it sleeps. On a CPU
that another process keeps busy, the spinning workers and the other process take turns on the same cores: one
`fast-dllm` decode of an `arith` example (2 torch threads, this 2-core machine, three other busy processes) took
31.5 s by default, 4.8 s with OMP_WAIT_POLICY=PASSIVE and 6.4 s with one thread; alone on the machine the three
are within a few percent. The policy is read once, when torch loads the OpenMP runtime, so a program calls
`quiet_openmp()` before anything imports torch. A value the user set wins.
"""

from __future__ import annotations

import os


def quiet_openmp() -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
