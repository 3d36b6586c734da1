"""Eager vs compiled timing, the way PyTorch's benchmark harness does it.

Warm-up, then `repeats` rounds each timing one eager call and one compiled call
back to back (interleaved, so frequency scaling and load changes hit both alike);
synchronised on CUDA with events; speedup = median(eager) / median(compiled).

A median alone hides how much to trust it. Each Timing also carries the spread
(p10/p50/p90, IQR, CV of both sides) and flags for what makes a speedup untrustworthy:
  spread       IQR / median > SPREAD_LIMIT on either side (the noise verdict)
  high_cv      stdev / mean > CV_LIMIT on either side (outliers: preemption, page faults)
  cpu_steal    the hypervisor took > STEAL_LIMIT of the CPU while timing (/proc/stat)
  load         more runnable processes than cores (1-minute load average) when timing began
  few_repeats  fewer than MIN_REPEATS repeats
  parallel_workers / oversubscribed  set by the sweep: other workers shared the CPU
`noise` is "ok" only without any flag; reports take geomeans over "ok" speedups only.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any, Callable

from ..results import Timing


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


SPREAD_LIMIT = 0.10  # IQR / median
CV_LIMIT = 0.25
STEAL_LIMIT = 0.02
MIN_REPEATS = 5


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cpu_times() -> tuple[int, int] | None:
    """(steal, total) jiffies over all CPUs from /proc/stat; None where there is no /proc."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    vals = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return (vals[7] if len(vals) > 7 else 0), sum(vals)


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    if before is None or after is None or after[1] <= before[1]:
        return None
    return round((after[0] - before[0]) / (after[1] - before[1]), 4)


def spread(ms: list[float]) -> tuple[float, float, float, float, float]:
    """(p10, p50, p90, IQR, CV) of a list of times."""
    p50 = statistics.median(ms)
    if len(ms) < 2:
        return p50, p50, p50, 0.0, 0.0
    dec = statistics.quantiles(ms, n=10, method="inclusive")
    q = statistics.quantiles(ms, n=4, method="inclusive")
    mean = statistics.fmean(ms)
    cv = statistics.stdev(ms) / mean if mean > 0 else 0.0
    return dec[0], p50, dec[8], q[2] - q[0], cv


def add_flags(t: Timing, *flags: str) -> Timing:
    """Add contention/noise flags and recompute the verdict (the sweep adds what only it knows)."""
    for f in flags:
        if f not in t.flags:
            t.flags.append(f)
    t.noise = "noisy" if t.flags else "ok"
    return t


def assess(t: Timing, e_ms: list[float], c_ms: list[float], *, steal: float | None, load_per_core: float | None) -> Timing:
    """Fill the spread of `t` from the raw repeats and set its flags and noise verdict."""
    flags = []
    t.eager_p10_ms, _, t.eager_p90_ms, t.eager_iqr_ms, t.eager_cv = (round(x, 5) for x in spread(e_ms))
    t.compiled_p10_ms, _, t.compiled_p90_ms, t.compiled_iqr_ms, t.compiled_cv = (round(x, 5) for x in spread(c_ms))
    e, c = t.eager_ms or 0.0, t.compiled_ms or 0.0
    if (e > 0 and t.eager_iqr_ms / e > SPREAD_LIMIT) or (c > 0 and t.compiled_iqr_ms / c > SPREAD_LIMIT):
        flags.append("spread")
    if max(t.eager_cv, t.compiled_cv) > CV_LIMIT:
        flags.append("high_cv")
    t.cpu_steal, t.load_per_core = steal, load_per_core
    if steal is not None and steal > STEAL_LIMIT:
        flags.append("cpu_steal")
    if load_per_core is not None and load_per_core > 1.0:
        flags.append("load")
    if t.repeats < MIN_REPEATS:
        flags.append("few_repeats")
    return add_flags(t, *flags)


def load_per_core() -> float | None:
    try:
        return round(os.getloadavg()[0] / cores(), 3)
    except OSError:
        return None


def compile_cache_state(counters: Any) -> str | None:
    """warm | cold | partial from Inductor's FX graph cache counters after a compile; None when
    nothing went through Inductor (eager / aot_eager backends, or the cache is off)."""
    ind = counters.get("inductor", {}) if counters is not None else {}
    hits, misses = int(ind.get("fxgraph_cache_hit", 0)), int(ind.get("fxgraph_cache_miss", 0))
    if not hits and not misses:
        return None
    return "warm" if not misses else ("cold" if not hits else "partial")


def compile_phases(min_s: float = 0.005) -> dict[str, float]:
    """Seconds per phase Dynamo's timers recorded since the last `torch._dynamo.reset()` (which
    clears them), summed over calls; phases under `min_s` left out. Empty where torch lacks them."""
    try:
        from torch._dynamo.utils import compilation_time_metrics
    except ImportError:
        return {}
    total = {k: round(sum(v), 3) for k, v in compilation_time_metrics.items()}
    return {k: v for k, v in sorted(total.items(), key=lambda kv: -kv[1]) if v >= min_s}


def interleaved(eager: Callable[[], Any], compiled: Callable[[], Any], *, device: str, repeats: int,
                warmup: int) -> Timing:
    timer = _timer(device)
    for _ in range(warmup):
        timer(eager)
        timer(compiled)
    load = load_per_core() if not device.startswith("cuda") else None
    before = cpu_times()
    e_ms, c_ms = [], []
    for _ in range(repeats):
        e_ms.append(timer(eager))
        c_ms.append(timer(compiled))
    steal = steal_share(before, cpu_times())
    e, c = statistics.median(e_ms), statistics.median(c_ms)
    t = Timing(repeats=repeats, eager_ms=e, compiled_ms=c, speedup=(e / c) if c > 0 else None,
               eager_peak_mb=peak_memory_mb(device, eager), compiled_peak_mb=peak_memory_mb(device, compiled))
    return assess(t, e_ms, c_ms, steal=steal, load_per_core=load)
