"""`python -m kernels.bench` runs its device code path end to end (here under the interpreter, small shapes), and
every kernel passes its on-device parity check there."""

from __future__ import annotations

import pytest
import torch

from kernels import bench


def test_bench_smoke_on_cpu_interpreter(capsys):
    results = bench.run(torch.device("cpu"), small=True, repeat=1)
    names = [r["kernel"] for r in results]
    assert len(names) == 8 and all(r["parity"] for r in results), results
    assert all(r["ms"] > 0 for r in results)
    assert capsys.readouterr().out.count("\n") == len(results)  # one JSON line per kernel


def test_bench_without_cuda_says_what_to_do(capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the no-device message is not shown")
    assert bench.main([]) == 2
    assert "TRITON_INTERPRET=1 python -m kernels.bench --device cpu --small" in capsys.readouterr().err
