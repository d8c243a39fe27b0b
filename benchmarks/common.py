"""Shared helpers for the benchmark scripts (timing and a same-run matmul peak)."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def median_time(fn: Callable[[], object], reps: int, warmup: int = 1) -> float:
    """Median wall seconds of ``fn()`` over ``reps`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def matmul_peak_flops(n: int = 1024, reps: int = 5, dtype: torch.dtype = torch.float32, device: str = "cpu") -> float:
    """Achievable dense-matmul FLOP/s on this machine, measured now (2·n³ per n×n matmul)."""
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)

    def run() -> None:
        for _ in range(4):
            a @ b
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    return 4 * 2 * n**3 / median_time(run, reps)
