"""A pool of long-lived, isolated model workers for sweeps.

Importing torch + transformers costs ~3 s a process, more than a Dynamo pass over
one tiny model, so a sweep reuses worker processes. Isolation is kept: each worker
is a separate process (spawned, own process group); when one dies (segfault, abort,
OOM kill) or exceeds the per-model timeout, its model gets a `crash`/`timeout`
result with the tail of that worker's log, the worker is replaced, and the other
workers carry on. Workers are also recycled every `recycle_after` models so state
that leaks between models (caches, memory) stays bounded.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Callable, Iterable, Iterator

from .isolation import _failed, _tail
from .results import ErrorInfo, RunResult, RunSpec
from .sandbox import Limits


def _worker_main(conn: Connection, log_path: str, limits: "Limits | None", threads: int | None) -> None:
    # Own process group: killing it also kills Inductor's compile workers.
    os.setsid()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.environ["PYTHONUNBUFFERED"] = "1"
    if limits is not None:
        limits.apply()  # address space etc.: an over-sized model fails here, not the machine
    if threads:
        import torch

        # N workers each using every core oversubscribe the CPU; tiny models gain nothing from threads.
        torch.set_num_threads(threads)
    from enablebot.runner import run_spec

    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        spec = RunSpec.from_dict(msg)
        print(f"=== {spec.model_id} {spec.task or ''} {spec.mode}", flush=True)
        result = run_spec(spec, progress=lambda m: print("[enablebot] " + m, flush=True))
        conn.send(result.to_dict())


@dataclass
class _Worker:
    proc: mp.process.BaseProcess
    conn: Connection
    log_path: Path
    done: int = 0
    last_model: str | None = None
    spec: RunSpec | None = None
    started: float = 0.0
    log_offset: int = 0


@dataclass
class WorkerPool:
    jobs: int
    log_dir: Path
    recycle_after: int = 200
    max_rss_mb: int = 6000  # retire a worker whose memory grew past this (leaks across models)
    threads: int | None = None  # torch intra-op threads per worker (None: torch's default)
    limits: Limits | None = None  # rlimits of each worker (enablebot.sandbox.Limits)
    # Candidate code (an overlay) never runs in a pool worker: it goes through the sandboxed
    # isolation.run_in_child; kept as a field so that a caller passing one fails loudly.
    overlay_dir: str | None = None
    _ctx: mp.context.SpawnContext = field(default_factory=lambda: mp.get_context("spawn"))
    _serial: int = 0

    def __post_init__(self) -> None:
        if self.overlay_dir:
            raise ValueError("WorkerPool does not run candidate code (overlay_dir); use isolation.run_in_child, "
                             "which sandboxes it")

    def _spawn(self) -> _Worker:
        self._serial += 1
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"worker-{os.getpid()}-{self._serial}.log"
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker_main, args=(child, str(log_path), self.limits, self.threads), daemon=True)
        proc.start()
        child.close()
        return _Worker(proc=proc, conn=parent, log_path=log_path)

    @staticmethod
    def _kill(w: _Worker) -> None:
        try:
            os.killpg(w.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        w.proc.join(timeout=10)
        w.conn.close()

    def run(self, specs: Iterable[RunSpec], on_start: Callable[[RunSpec], None] | None = None,
            should_stop: Callable[[], bool] | None = None) -> Iterator[RunResult]:
        """Yield a RunResult per spec as they finish (not in input order). Once `should_stop()`
        is true no new spec is started; those in flight finish."""
        pending = list(specs)[::-1]
        workers: list[_Worker] = []
        try:
            while pending or any(w.spec for w in workers):
                if pending and should_stop and should_stop():
                    pending.clear()
                    if not any(w.spec for w in workers):
                        break
                # Hand out work.
                while pending and len([w for w in workers if w.spec]) < self.jobs:
                    idle = next((w for w in workers if w.spec is None), None)
                    if idle is None:
                        idle = self._spawn()
                        workers.append(idle)
                    spec = pending.pop(_affine(pending, idle.last_model))
                    idle.last_model = spec.model_id
                    idle.spec, idle.started = spec, time.time()
                    idle.log_offset = idle.log_path.stat().st_size if idle.log_path.exists() else 0
                    idle.conn.send(spec.to_dict())
                    if on_start:
                        on_start(spec)
                busy = [w for w in workers if w.spec]
                deadline = min(w.started + w.spec.timeout_s for w in busy)
                ready = wait([w.conn for w in busy] + [w.proc.sentinel for w in busy],
                             timeout=max(0.05, min(deadline - time.time(), 1.0)))
                for w in list(busy):
                    result = self._collect(w, ready)
                    if result is None:
                        continue
                    yield result
                    w.spec = None
                    w.done += 1
                    if (not w.proc.is_alive() or w.done >= self.recycle_after or _poisoned(result)
                            or _rss_mb(w.proc.pid) > self.max_rss_mb):
                        self._retire(w)
                        workers.remove(w)
        finally:
            for w in workers:
                self._retire(w)

    def _collect(self, w: _Worker, ready: list) -> RunResult | None:
        assert w.spec is not None
        if w.conn in ready:
            try:
                return RunResult.from_dict(w.conn.recv())
            except (EOFError, OSError):
                pass  # died while sending: a crash, below
        elif w.proc.sentinel not in ready and time.time() < w.started + w.spec.timeout_s:
            return None
        elapsed = round(time.time() - w.started, 3)
        tail = _tail_since(w.log_path, w.log_offset)
        if w.proc.is_alive() and time.time() >= w.started + w.spec.timeout_s:
            self._kill(w)
            info = ErrorInfo("child", "Timeout", f"no result after {w.spec.timeout_s:.0f} s; the worker was killed")
            return _failed(w.spec, "timeout", info, tail, elapsed)
        w.proc.join(timeout=5)
        code = w.proc.exitcode
        how = f"killed by {signal.Signals(-code).name}" if code and code < 0 else f"exited with status {code}"
        return _failed(w.spec, "crash", ErrorInfo("child", "Crash", f"the model process {how}"), tail, elapsed)

    def _retire(self, w: _Worker) -> None:
        if w.proc.is_alive():
            try:
                w.conn.send(None)
                w.proc.join(timeout=5)
            except (OSError, BrokenPipeError):
                pass
        if w.proc.is_alive():
            self._kill(w)
        else:
            w.conn.close()


def _affine(pending: list[RunSpec], model_id: str | None) -> int:
    """Index of the next spec to hand a worker: the same architecture as its last one when
    one is queued (its modeling module is already imported there), else the next in order.
    `pending` is reversed (next at the end); the search looks a few items ahead only."""
    if model_id is not None:
        for i in range(len(pending) - 1, max(len(pending) - 9, -1), -1):
            if pending[i].model_id == model_id:
                return i
    return len(pending) - 1


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0  # not Linux, or already gone: recycling by count still applies


def _poisoned(result: RunResult) -> bool:
    """Whether the worker must not run another model: after a crash or timeout, and after any
    failure on CUDA, since a device-side assert poisons the CUDA context for every later
    model in that process (seen on the H200: one assert turned 61 later models into errors)."""
    if result.verdict in ("crash", "timeout"):
        return True
    # create_error / missing_dependency happen while building on the CPU, before any CUDA work.
    touched_cuda = result.verdict not in ("create_error", "missing_dependency")
    return result.spec.device.startswith("cuda") and touched_cuda and not result.ok


def _tail_since(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return _tail(path)
    return data[-4000:].decode("utf-8", "replace")
