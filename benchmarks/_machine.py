"""The machine's speed as docs/results.md states it, for the benchmarks that print it beside their figures."""

from __future__ import annotations

import time


def matmul_gflops(repeats: int = 5) -> float:
    """A 1600 x 768 @ 768 x 3072 fp32 product (torch), best of `repeats`, in GFLOP/s."""
    import torch

    a, b = torch.randn(1600, 768), torch.randn(768, 3072)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * 1600 * 768 * 3072 / best / 1e9
