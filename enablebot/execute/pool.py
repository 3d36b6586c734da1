"""A pool of long-lived, isolated model workers for sweeps.

Importing torch + transformers costs ~3 s a process, more than a Dynamo pass over
one tiny model, so a sweep reuses worker processes. Isolation is kept: each worker
is a separate process (spawned, own process group); when one dies (segfault, abort,
OOM kill) or exceeds the per-model timeout, its model gets a `crash`/`timeout`
result with the tail of that worker's log, the worker is replaced, and the other
workers carry on. Workers are also recycled every `recycle_after` models so state
that leaks between models (caches, memory) stays bounded.

Workers start from a fork server by default (`start_method="forkserver"`): one process
imports torch, Dynamo, transformers and the runner once (`enablebot.execute.preload`, which never
initialises CUDA) and every worker is forked from it, so a new or replacement worker costs
milliseconds instead of seconds of imports. `start_method="spawn"` (or the environment
variable ENABLEBOT_POOL_START=spawn) gives fresh interpreters. Workers never run candidate code: an overlay goes through the sandboxed
`isolation.run_in_child`, and the pool refuses one.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Callable, Iterable, Iterator

from .isolation import failed_result, log_tail
from .worker import serve
from ..results import ErrorInfo, RunResult, RunSpec
from .sandbox import Limits
from ..validate import DataError


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
    limits: Limits | None = None  # rlimits of each worker (enablebot.execute.sandbox.Limits)
    # Candidate code (an overlay) never runs in a pool worker: it goes through the sandboxed
    # isolation.run_in_child; kept as a field so that a caller passing one fails loudly.
    overlay_dir: str | None = None
    start_method: str | None = None  # forkserver | spawn; None: ENABLEBOT_POOL_START, else forkserver
    _ctx: mp.context.BaseContext | None = None
    _serial: int = 0

    def __post_init__(self) -> None:
        if self.overlay_dir:
            raise ValueError("WorkerPool does not run candidate code (overlay_dir); use isolation.run_in_child, "
                             "which sandboxes it")
        self.start_method = _start_method(self.start_method)
        if self._ctx is None:
            self._ctx = mp.get_context(self.start_method)
            if self.start_method == "forkserver":
                self._ctx.set_forkserver_preload(list(PRELOAD))

    def _spawn(self) -> _Worker:
        self._serial += 1
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"worker-{os.getpid()}-{self._serial}.log"
        parent, child = self._ctx.Pipe()
        env = dict(os.environ) if self.start_method == "forkserver" else None
        proc = self._ctx.Process(target=serve, args=(child, str(log_path), self.limits, self.threads, env),
                                 daemon=True)
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
        if any(s.allow_remote_code for s in pending):
            # Like an overlay: Hub remote code runs only in isolation.run_in_child's sandbox.
            raise ValueError("WorkerPool does not run remote code (allow_remote_code); use isolation.run_in_child, "
                             "which fetches it in the parent and runs it sandboxed")
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
                    # Architectures another live worker has built (running now, or idle and
                    # about to be handed its next item of the same type).
                    owned = {w.last_model for w in workers if w is not idle and w.last_model}
                    spec = pending.pop(_affine(pending, idle.last_model, owned))
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
                    if (not w.proc.is_alive() or w.done >= self.recycle_after
                            or result.verdict.poisons_worker(result.spec.device)
                            or _rss_mb(w.proc.pid) > self.max_rss_mb):
                        self._retire(w)
                        workers.remove(w)
        finally:
            # Normal end: every worker is idle and retires cleanly. Unwinding (Ctrl-C, SIGTERM, an
            # error) leaves some mid-model: kill those now rather than wait for them.
            for w in workers:
                if w.spec is not None:
                    self._kill(w)
                else:
                    self._retire(w)

    def _collect(self, w: _Worker, ready: list) -> RunResult | None:
        assert w.spec is not None
        if w.conn in ready:
            try:
                return RunResult.from_dict(w.conn.recv())
            except (EOFError, OSError):
                pass  # died while sending: a crash, below
            except DataError as e:  # a result of the wrong shape: that item crashed (as in isolation), the sweep goes on
                info = ErrorInfo("child", "DataError", f"unreadable result: {e}")
                return failed_result(w.spec, "crash", info, _tail_since(w.log_path, w.log_offset),
                                     round(time.time() - w.started, 3))
        elif w.proc.sentinel not in ready and time.time() < w.started + w.spec.timeout_s:
            return None
        elapsed = round(time.time() - w.started, 3)
        tail = _tail_since(w.log_path, w.log_offset)
        if w.proc.is_alive() and time.time() >= w.started + w.spec.timeout_s:
            self._kill(w)
            info = ErrorInfo("child", "Timeout", f"no result after {w.spec.timeout_s:.0f} s; the worker was killed")
            return failed_result(w.spec, "timeout", info, tail, elapsed)
        w.proc.join(timeout=5)
        code = w.proc.exitcode
        how = f"killed by {signal.Signals(-code).name}" if code and code < 0 else f"exited with status {code}"
        return failed_result(w.spec, "crash", ErrorInfo("child", "Crash", f"the model process {how}"), tail, elapsed)

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


PRELOAD = ("enablebot.execute.preload",)
START_METHODS = ("forkserver", "spawn")


def start_fork_server(start_method: str | None = None) -> bool:
    """Start the fork server now, without waiting for it: its imports (seconds) then overlap the
    caller's own start-up and planning instead of following them; the pool's first worker waits
    only for what is left. False when workers are spawned instead (nothing to start)."""
    if _start_method(start_method) != "forkserver":
        return False
    from multiprocessing import forkserver

    mp.get_context("forkserver").set_forkserver_preload(list(PRELOAD))
    forkserver.ensure_running()
    return True


def _start_method(asked: str | None) -> str:
    method = asked or os.environ.get("ENABLEBOT_POOL_START") or "forkserver"
    if method not in START_METHODS:
        raise ValueError(f"pool start method must be one of {START_METHODS}, got {method!r}")
    if method not in mp.get_all_start_methods():
        return "spawn"  # no fork server off POSIX
    return method


def _affine(pending: list[RunSpec], model_id: str | None, owned: set[str] | frozenset = frozenset()) -> int:
    """Index of the next spec to hand an idle worker (`pending` is reversed: next at the end):
    1. an item of the architecture it ran last (built and imported there: prepare.py keeps the
       build, so eval, train and the scenarios of one type cost one build per worker);
    2. else the next item of an architecture no other worker has built (`owned`: that worker
       takes it next, by rule 1; before this rule, eval and train of one type went to two idle
       workers side by side and both built it);
    3. else the next item: only items of other workers' architectures are left, and a second
       build costs less than an idle worker at the tail."""
    if model_id is not None:
        for i in range(len(pending) - 1, -1, -1):
            if pending[i].model_id == model_id:
                return i
    for i in range(len(pending) - 1, -1, -1):
        if pending[i].model_id not in owned:
            return i
    return len(pending) - 1


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0  # not Linux, or already gone: recycling by count still applies


def _tail_since(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return log_tail(path)
    return data[-4000:].decode("utf-8", "replace")
