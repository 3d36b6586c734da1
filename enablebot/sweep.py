"""The sweep: every architecture through the Dynamo pass or the Inductor pass.

Planning (which model/task/mode items, which shard) is pure; execution runs the
items through the isolated WorkerPool and checkpoints each result as it arrives,
so a killed sweep resumes without redoing or losing anything.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from .checkpoint import Checkpoint
from .registry import Registry
from .results import RunResult, RunSpec

PASSES = ("dynamo", "inductor")


@dataclass(frozen=True)
class SweepItem:
    model_id: str
    task: str  # base | head
    mode: str  # eval | train


@dataclass
class SweepOptions:
    pass_: str = "dynamo"  # dynamo (graph breaks, eager backend) | inductor (numerics, speedup)
    device: str = "cpu"
    modes: tuple[str, ...] = ("eval", "train")
    tasks: tuple[str, ...] = ("base", "head")  # "main": the head where there is one, else the base
    dtype: str = "float32"
    size: str = "tiny"
    batch_size: int = 2
    seq_len: int = 32
    repeats: int = 10
    timeout_s: float = 300.0
    timeouts: dict[str, float] = field(default_factory=dict)  # per-model-type overrides of timeout_s
    registry: str | None = None
    backend: str | None = None  # default: eager for dynamo, inductor for inductor
    fullgraph_check: bool = False  # dynamo pass: also run fullgraph=True on breaking models


@dataclass
class SweepStats:
    planned: int = 0
    skipped_done: int = 0
    ran: int = 0
    not_started: int = 0  # left for a later (resumed) sweep by --max-minutes
    wall_s: float = 0.0
    verdicts: dict[str, int] = field(default_factory=dict)


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """'2/4' -> (2, 4); shards are 1-based so they read like GitHub's matrix."""
    if not text:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError as e:
        raise ValueError(f"--shard must look like i/n (e.g. 2/4), got {text!r}") from e
    if not (1 <= i <= n):
        raise ValueError(f"--shard {text}: need 1 <= i <= n")
    return i, n


def plan(registry: Registry, opts: SweepOptions, models: Iterable[str] | None = None,
         shard: tuple[int, int] | None = None) -> list[SweepItem]:
    """Every (model_type, base/head, mode) the installed transformers can build, optionally one shard.
    Shards partition by a hash of the model type, so a model's items stay together and
    shard membership does not move when other architectures are added."""
    from .catalog import known_architectures

    known = known_architectures()
    wanted = list(models) if models else sorted(mt for mt in registry.entries if mt in known)
    items = []
    for mt in wanted:
        e = registry.get(mt)
        k = known.get(mt)
        if k is None:
            continue
        base = (e.base if e else None) or k.base
        head = (e.head if e else None) or k.head
        tasks = [("head" if head else "base") if t == "main" else t for t in opts.tasks]
        for task in dict.fromkeys(tasks):  # "main" may repeat base/head: once each
            if (task == "base" and not base) or (task == "head" and not head):
                continue
            if task == "base" and head == base:
                continue
            for mode in opts.modes:
                items.append(SweepItem(mt, task, mode))
    if shard:
        i, n = shard
        items = [it for it in items if _bucket(it.model_id, n) == i - 1]
    # Hash order, not alphabetical: a sweep cut short by --max-minutes still samples every family.
    return sorted(items, key=lambda it: (hashlib.sha1(it.model_id.encode()).hexdigest(), it.task, it.mode))


def _bucket(key: str, n: int) -> int:
    return int(hashlib.sha1(key.encode()).hexdigest(), 16) % n


def to_spec(item: SweepItem, opts: SweepOptions) -> RunSpec:
    fast = opts.pass_ == "dynamo"
    return RunSpec(model_id=item.model_id, task=item.task, mode=item.mode, device=opts.device, dtype=opts.dtype,
                   backend=opts.backend or ("eager" if fast else "inductor"), size=opts.size,
                   batch_size=opts.batch_size, seq_len=opts.seq_len, repeats=opts.repeats,
                   warmup=min(5, opts.repeats), timeout_s=opts.timeouts.get(item.model_id, opts.timeout_s), fast=fast, numerics=not fast,
                   timing=not fast, registry=opts.registry, fullgraph_check=opts.fullgraph_check or not fast)


def _threads_per_worker(jobs: int) -> int:
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, jobs))


def mark_contention(result: RunResult, jobs: int) -> None:
    """Speedups timed on a CPU while other workers ran are not comparable: flag them (the
    worker cannot see its siblings; the sweep knows how many it started)."""
    from .timing import add_flags, cores

    t = result.timing
    if t is None or t.speedup is None or result.spec.device != "cpu":
        return
    if jobs > 1:
        add_flags(t, "parallel_workers")
    if jobs > cores():
        add_flags(t, "oversubscribed")


def default_jobs(pass_: str, device: str) -> int:
    """CPU Inductor sweeps time speedups: one model at a time, so the numbers are comparable."""
    return 1 if (pass_ == "inductor" and device == "cpu") else 2


def spec_key(spec: RunSpec) -> str:
    return RunResult(spec=spec, verdict="").key


def run_sweep(items: list[SweepItem], opts: SweepOptions, out_dir: Path, *, jobs: int = 2,
              on_start: Callable[[RunSpec], None] | None = None,
              on_result: Callable[[RunResult], None] | None = None,
              recycle_after: int = 200, max_minutes: float | None = None) -> SweepStats:
    from .pool import WorkerPool

    ckpt = Checkpoint(out_dir)
    specs = [to_spec(it, opts) for it in items]
    todo = [s for s in specs if spec_key(s) not in ckpt.done]
    stats = SweepStats(planned=len(specs), skipped_done=len(specs) - len(todo))
    t0 = time.time()
    pool = WorkerPool(jobs=jobs, log_dir=out_dir / "logs", recycle_after=recycle_after,
                      threads=_threads_per_worker(jobs) if opts.device == "cpu" else None)
    deadline = t0 + max_minutes * 60 if max_minutes else None
    stop = (lambda: time.time() > deadline) if deadline else None
    for result in pool.run(todo, on_start=on_start, should_stop=stop):
        mark_contention(result, jobs)
        ckpt.append(result)
        stats.ran += 1
        stats.verdicts[result.verdict] = stats.verdicts.get(result.verdict, 0) + 1
        if on_result:
            on_result(result)
    stats.wall_s = round(time.time() - t0, 1)
    stats.not_started = len(todo) - stats.ran
    _log_run(out_dir, stats, opts, jobs, t0)
    return stats


RUNS_FILE = "sweep_runs.jsonl"


def _log_run(out_dir: Path, stats: SweepStats, opts: SweepOptions, jobs: int, t0: float) -> None:
    """One line per sweep invocation (a resumed sweep has several): wall time and throughput
    belong to the invocation, not to any one result, and benchmarks/sweep_speed.py adds them up."""
    import datetime as _dt
    import json

    line = {"started_at": _dt.datetime.fromtimestamp(t0, _dt.timezone.utc).replace(microsecond=0).isoformat(),
            "pass": opts.pass_, "device": opts.device, "jobs": jobs, "planned": stats.planned,
            "skipped_done": stats.skipped_done, "ran": stats.ran, "not_started": stats.not_started,
            "wall_s": stats.wall_s}
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / RUNS_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def load_runs(out_dir: Path) -> list[dict]:
    """The invocations _log_run recorded for a sweep directory, oldest first."""
    import json

    text = (out_dir / RUNS_FILE).read_text(encoding="utf-8")
    return [json.loads(ln) for ln in text.splitlines() if ln.strip()]
