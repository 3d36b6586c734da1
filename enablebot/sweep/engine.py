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
from typing import Any, Callable, Iterable

from .checkpoint import Checkpoint
from ..model.registry import Registry
from ..results import RunResult, RunSpec

PASSES = ("build", "dynamo", "inductor")
# What a pass covers when no --scenario is given: every item in `call`; generative heads in
# eval also take a `decode` step (the inference hot path) in the Dynamo pass.
DEFAULT_SCENARIOS = {"build": ("call",), "dynamo": ("call", "decode"), "inductor": ("call",)}


@dataclass(frozen=True)
class SweepItem:
    model_id: str
    task: str  # base | head
    mode: str  # eval | train
    scenario: str = "call"


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
    scenarios: tuple[str, ...] | None = None  # None: DEFAULT_SCENARIOS[pass]


@dataclass
class SweepStats:
    planned: int = 0
    skipped_done: int = 0
    reused: int = 0  # taken from --reuse DIR because their cache key matched (incremental.py)
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
    from ..model.catalog import known_architectures

    known = known_architectures()
    wanted = list(models) if models else sorted(mt for mt in registry.entries if mt in known)
    scenarios = opts.scenarios or DEFAULT_SCENARIOS[opts.pass_]
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
            task_name = (e.task if e else None) or k.task
            for mode in opts.modes:
                for scenario in scenarios:
                    if applies(scenario, task, mode, task_name):
                        items.append(SweepItem(mt, task, mode, scenario))
    if shard:
        i, n = shard
        items = [it for it in items if _bucket(it.model_id, n) == i - 1]
    # Hash order, not alphabetical: a sweep cut short by --max-minutes still samples every family.
    return sorted(items, key=lambda it: (hashlib.sha1(it.model_id.encode()).hexdigest(), it.task, it.mode,
                                         it.scenario))


def applies(scenario: str, task: str, mode: str, head_task: str | None) -> bool:
    """Whether a sweep plans `scenario` for an item: `call` (and the diagnostic `naive`) always;
    `decode` for a generative head in eval; the others in eval. (A scenario run on a model it does not fit is `skipped`.)"""
    from ..model.catalog import GENERATIVE_TASKS

    from ..measure.scenarios import TRAIN_SCENARIOS

    if scenario in TRAIN_SCENARIOS:
        return True
    if mode != "eval":
        return False
    if scenario == "decode":
        return task == "head" and head_task in GENERATIVE_TASKS
    return True


def _bucket(key: str, n: int) -> int:
    return int(hashlib.sha1(key.encode()).hexdigest(), 16) % n


def to_spec(item: SweepItem, opts: SweepOptions) -> RunSpec:
    light = opts.pass_ != "inductor"
    return RunSpec(model_id=item.model_id, task=item.task, mode=item.mode, scenario=item.scenario,
                   pass_name=opts.pass_, device=opts.device, dtype=opts.dtype,
                   backend=opts.backend or ("eager" if light else "inductor"), size=opts.size,
                   batch_size=opts.batch_size, seq_len=opts.seq_len, repeats=opts.repeats,
                   warmup=min(5, opts.repeats), timeout_s=item_timeout(item, opts),
                   numerics=not light, timing=not light, registry=opts.registry,
                   fullgraph_check=opts.fullgraph_check or not light)


def item_timeout(item: SweepItem, opts: SweepOptions) -> float:
    """The item's limit: an explicit per-type override (opts.timeouts), else the sweep's timeout
    raised to the registry entry's `timeout_s` (data: an architecture whose cold compile is known
    to outlast a short limit is not cut at it; a longer sweep limit still wins)."""
    if item.model_id in opts.timeouts:
        return opts.timeouts[item.model_id]
    entry = Registry.load_cached(opts.registry).get(item.model_id)
    return max(opts.timeout_s, float(entry.timeout_s)) if entry is not None and entry.timeout_s else opts.timeout_s


def _threads_per_worker(jobs: int) -> int:
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, jobs))


# A worker killed from outside (an OOM kill looks the same) is not the model's fault every
# time: a `crash` runs once more on resume, then it is final.
MAX_CRASH_ATTEMPTS = 2


def is_final(result: RunResult) -> bool:
    """Whether a checkpointed result stands on resume (a first crash does not)."""
    return result.verdict != "crash" or result.attempts >= MAX_CRASH_ATTEMPTS


def mark_contention(result: RunResult, jobs: int) -> None:
    """Speedups timed on a CPU while other workers ran are not comparable: flag them (the
    worker cannot see its siblings; the sweep knows how many it started)."""
    from ..measure.timing import add_flags, cores

    t = result.timing
    if t is None or t.speedup is None or result.spec.device != "cpu":
        return
    if jobs > 1:
        add_flags(t, "parallel_workers")
    if jobs > cores():
        add_flags(t, "oversubscribed")


# What an Inductor sweep's workers run with unless the environment already says otherwise.
# TORCHINDUCTOR_UNIQUE_KERNEL_NAMES=0 names every generated Triton kernel `triton_` (PyTorch's own
# setting "to maximize caching"; the descriptive name stays in the kernel's metadata for profilers):
# a kernel another model of the sweep already compiled is then found in the shared Triton cache
# instead of compiled again. The generated code is otherwise the same. Measured side by side on 80
# items (results/gpu/inductor-ab-names-2026-12-07): the same verdicts, graphs, ops, numerics and
# speedups, worker time 0.82 of before (B ran second: 5-18% is the names', README "A kernel compiled
# once for the whole sweep").
INDUCTOR_ENV = {"TORCHINDUCTOR_UNIQUE_KERNEL_NAMES": "0"}


def with_inductor_env(environ: dict[str, str]) -> dict[str, str]:
    """The INDUCTOR_ENV settings `environ` lacks (a setting the user made is kept)."""
    return {k: v for k, v in INDUCTOR_ENV.items() if k not in environ}


def default_jobs(pass_: str, device: str) -> int:
    """CPU Inductor sweeps time speedups: one model at a time, so the numbers are comparable."""
    return 1 if (pass_ == "inductor" and device == "cpu") else 2


def spec_key(spec: RunSpec) -> str:
    return RunResult(spec=spec, verdict="").key


def run_sweep(items: list[SweepItem], opts: SweepOptions, out_dir: Path, *, jobs: int = 2,
              on_start: Callable[[RunSpec], None] | None = None,
              on_result: Callable[[RunResult], None] | None = None,
              recycle_after: int = 200, max_minutes: float | None = None,
              durations: dict[str, float] | None = None, reuse_from: Path | None = None,
              strict_versions: bool = False, keep_timeouts: bool = False) -> SweepStats:
    """Run `items`, checkpointing each result, in schedule.work_order: longest first by `durations`
    (item key -> seconds, schedule.durations_for) and the checkpoint's own history. With
    `reuse_from`, an item whose cache key (versions, model code, spec, registry knowledge:
    incremental.py) matches a result recorded there or in `out_dir` is reused instead of run;
    every decision and its reason go to incremental.json."""
    from ..execute.pool import WorkerPool
    from .schedule import item_key, work_order

    t0 = time.time()
    ckpt = Checkpoint(out_dir)
    specs = [to_spec(it, opts) for it in items]
    if reuse_from is not None:
        keys = _item_keys(specs, opts)
        todo, reused = _apply_reuse(specs, keys, ckpt, Path(reuse_from), out_dir, strict_versions,
                                     keep_timeouts)
        pending_keys = _Ready(keys)
    else:
        todo, reused = [s for s in specs if spec_key(s) not in ckpt.done], 0
        # No decision waits for the cache keys here: they are computed beside the pool and written
        # as results arrive (importing every type's configuration for them took 8-14 s before the
        # first item, 100 types on 2 loaded cores).
        pending_keys = _Background(_item_keys, specs, opts)
    # A first crash is retried once on resume: a worker killed from outside looks the same.
    todo += [s for s in specs if spec_key(s) in ckpt.done and not is_final(ckpt.done[spec_key(s)]) and s not in todo]
    tried = {spec_key(s): ckpt.done[spec_key(s)].attempts for s in todo if spec_key(s) in ckpt.done}
    stats = SweepStats(planned=len(specs), reused=reused, skipped_done=len(specs) - len(todo) - reused)
    todo = work_order(todo, durations=durations,
                      history={item_key(r.spec): r.duration_s for r in ckpt.done.values()},
                      time_boxed=bool(max_minutes))
    from ..execute.sandbox import Limits

    pool = WorkerPool(jobs=jobs, log_dir=out_dir / "logs", recycle_after=recycle_after,
                      limits=Limits.for_device(opts.device),
                      # On CUDA too: building, input making and Dynamo's own work run on the host,
                      # and N workers each with every core's OpenMP threads oversubscribe it (the
                      # naive harness always set this; the sweep left CUDA workers at the default).
                      threads=_threads_per_worker(jobs))
    deadline = t0 + max_minutes * 60 if max_minutes else None
    stop = (lambda: time.time() > deadline) if deadline else None
    finished = False
    unkeyed: list[str] = []  # results whose cache key is not computed yet
    try:
        for result in pool.run(todo, on_start=on_start, should_stop=stop):
            result.attempts = tried.get(result.key, 0) + 1
            mark_contention(result, jobs)
            ckpt.append(result)
            unkeyed.append(result.key)
            if pending_keys.done():
                _append_keys(out_dir, pending_keys.result(), unkeyed)
            stats.ran += 1
            stats.verdicts[result.verdict] = stats.verdicts.get(result.verdict, 0) + 1
            if on_result:
                on_result(result)
        _append_keys(out_dir, pending_keys.result(), unkeyed)
        finished = True
    finally:
        if not finished and unkeyed and pending_keys.done():
            try:
                _append_keys(out_dir, pending_keys.result(), unkeyed)
            except Exception:  # noqa: BLE001 - unwinding already: a missing key only means a re-run later
                pass
        # A killed sweep (SIGTERM, Ctrl-C) logs its invocation too: a resumed pass's time adds up
        # its invocations, and the killed one's wall would otherwise vanish from it.
        stats.wall_s = round(time.time() - t0, 1)
        stats.not_started = len(todo) - stats.ran
        _log_run(out_dir, stats, opts, jobs, t0, interrupted=not finished)
    return stats


def _append_keys(out_dir: Path, keys: dict, result_keys: list[str]) -> None:
    """Write the cache keys of `result_keys` (emptied) next to their results."""
    from .incremental import append_key

    for rk in result_keys:
        if keys.get(rk) is not None:
            append_key(out_dir, rk, keys[rk])
    result_keys.clear()


class _Ready:
    """A value already computed, read like _Background."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def done(self) -> bool:
        return True

    def result(self) -> Any:
        return self.value


class _Background(_Ready):
    """`fn(*args)` in a daemon thread (a killed sweep does not wait for it); `result()` waits and
    re-raises its error."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        import threading

        super().__init__(None)
        self.error: BaseException | None = None

        def work() -> None:
            try:
                self.value = fn(*args)
            except BaseException as e:  # noqa: BLE001 - re-raised by result()
                self.error = e

        self.thread = threading.Thread(target=work, name="cache-keys", daemon=True)
        self.thread.start()

    def done(self) -> bool:
        return not self.thread.is_alive()

    def result(self) -> Any:
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.value


def _item_keys(specs: list[RunSpec], opts: SweepOptions) -> dict:
    from .incremental import item_keys

    return item_keys(specs, Registry.load(opts.registry))


def _apply_reuse(specs: list[RunSpec], keys: dict, ckpt: Checkpoint, reuse_from: Path, out_dir: Path,
                 strict: bool, keep_timeouts: bool = False) -> tuple[list[RunSpec], int]:
    """Copy matching results from `reuse_from` into the checkpoint; return (specs to run, reused count).
    Results already in `out_dir` (a resumed incremental sweep) are judged by the same key."""
    import json

    from .checkpoint import RESULTS_FILE, load_results
    from .incremental import DECISIONS_FILE, append_key, load_keys, plan_reuse
    from ..fileio import atomic_write_text

    t0 = time.time()
    previous = load_results(reuse_from / RESULTS_FILE)
    previous_keys = load_keys(reuse_from)
    if Path(out_dir).resolve() != Path(reuse_from).resolve():
        previous.update(ckpt.done)
        previous_keys.update(load_keys(out_dir))
    plan = plan_reuse(keys, previous, previous_keys, strict=strict, keep_timeouts=keep_timeouts)
    reused = 0
    for rk, r in plan.reused.items():
        # A result this sweep already holds (a resumed or second sweep into the same folder) is
        # counted as already done, not as reused again.
        if ckpt.done.get(rk) is not r:
            ckpt.append(r)
            append_key(out_dir, rk, keys[rk])
            reused += 1
    run_keys = {d.key for d in plan.decisions if d.action == "run"}
    report = {"reuse_from": str(reuse_from), "strict_versions": strict, "plan_s": round(time.time() - t0, 2),
              "counts": plan.counts(), "reasons": plan.reasons(), "decisions": [d.to_dict() for d in plan.decisions]}
    atomic_write_text(Path(out_dir) / DECISIONS_FILE, json.dumps(report, indent=1) + "\n")
    return [s for s in specs if spec_key(s) in run_keys], reused


RUNS_FILE = "sweep_runs.jsonl"


def _log_run(out_dir: Path, stats: SweepStats, opts: SweepOptions, jobs: int, t0: float,
             interrupted: bool = False) -> None:
    """One line per sweep invocation (a resumed sweep has several): wall time and throughput
    belong to the invocation, not to any one result, and benchmarks/sweep_speed.py adds them up."""
    import datetime as _dt

    from .. import jsonl

    line = {"started_at": _dt.datetime.fromtimestamp(t0, _dt.timezone.utc).replace(microsecond=0).isoformat(),
            "pass": opts.pass_, "device": opts.device, "jobs": jobs, "planned": stats.planned,
            "skipped_done": stats.skipped_done, "reused": stats.reused, "ran": stats.ran, "not_started": stats.not_started,
            "wall_s": stats.wall_s, **({"interrupted": True} if interrupted else {})}
    if (startup := _process_age_s(t0)) is not None:
        # the process's start-up and planning before this loop: with the loop's wall, what a
        # user waits for (benchmarks/speed_split.py sets both against the phase's wall)
        line["startup_s"] = startup
    jsonl.append(out_dir / RUNS_FILE, line)


def _process_age_s(at: float) -> float | None:
    """Seconds from this process's start to `at` (Linux /proc; None elsewhere)."""
    import os

    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat", encoding="ascii") as f:
            boot = next(int(ln.split()[1]) for ln in f if ln.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return round(at - (boot + ticks / os.sysconf("SC_CLK_TCK")), 2)


def load_runs(out_dir: Path) -> list[dict]:
    """The invocations _log_run recorded for a sweep directory, oldest first; a torn last line
    (a sweep killed while logging) is dropped. FileNotFoundError when there is no log."""
    from .. import jsonl

    path = out_dir / RUNS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such sweep log")
    return jsonl.read_values(path)


def planned_of(runs: list[dict]) -> int:
    """Items a directory's invocations planned: the resumed invocations of one sweep plan the same
    items (the largest plan counts), the shards `merge` tagged with their `from` add up."""
    by_source: dict[str | None, int] = {}
    for r in runs:
        by_source[r.get("from")] = max(by_source.get(r.get("from"), 0), int(r.get("planned", 0)))
    return sum(by_source.values())
