"""Eager vs compiled timing, the way PyTorch's benchmark harness does it.

Warm-up, then `repeats` rounds each timing one eager call and one compiled call
back to back (interleaved, so frequency scaling and load changes hit both alike);
synchronised on CUDA with events; speedup = median(eager) / median(compiled).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from .results import Timing


def _timer(device: str) -> Callable[[Callable[[], Any]], float]:
    import torch

    if device.startswith("cuda"):
        def run_cuda(fn: Callable[[], Any]) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            return float(start.elapsed_time(end))

        return run_cuda

    def run_cpu(fn: Callable[[], Any]) -> float:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3

    return run_cpu


def peak_memory_mb(device: str, fn: Callable[[], Any]) -> float | None:
    """Peak device memory of one call (CUDA only; CPU has no per-call allocator stats)."""
    import torch

    if not device.startswith("cuda"):
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**20


def interleaved(eager: Callable[[], Any], compiled: Callable[[], Any], *, device: str, repeats: int,
                warmup: int) -> Timing:
    timer = _timer(device)
    for _ in range(warmup):
        timer(eager)
        timer(compiled)
    e_ms, c_ms = [], []
    for _ in range(repeats):
        e_ms.append(timer(eager))
        c_ms.append(timer(compiled))
    e, c = statistics.median(e_ms), statistics.median(c_ms)
    return Timing(repeats=repeats, eager_ms=e, compiled_ms=c, speedup=(e / c) if c > 0 else None,
                  eager_peak_mb=peak_memory_mb(device, eager), compiled_peak_mb=peak_memory_mb(device, compiled))
