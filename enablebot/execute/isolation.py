"""Run one model in a child process with a wall-clock timeout.

A segfault, abort, OOM kill or hang in the model or the compiler becomes a `crash`
or `timeout` result carrying the tail of the child's log; the caller never dies.
The child runs in its own process group so Inductor's compile workers die with it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from ..results import ErrorInfo, RunResult, RunSpec, Versions
from ..shipped import PACKAGE_DIR
from .worker import PROGRESS_PREFIX

LOG_TAIL_CHARS = 4000


def log_tail(path: Path, n: int = LOG_TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(size - n, 0))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code} without writing a result"


def child_env(spec: RunSpec) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    # The child must import this very enablebot (a source checkout need not be installed).
    root = str(PACKAGE_DIR.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if spec.trace_dir:
        env["TORCH_TRACE"] = str(Path(spec.trace_dir).resolve())
    return env


def child_command(cmd: list[str], spec: RunSpec, *, writable: list[Path], readable: list[Path] = (),
                  sandbox: bool | None = None) -> tuple[list[str], dict[str, str]]:
    """argv and env of a model child. A spec with an overlay (candidate code), one allowed to run
    a Hub repo's remote code (whatever `sandbox` says), or `sandbox=True`, runs in the sandbox
    (enablebot.execute.sandbox; raises SandboxUnavailable when there is none and no opt-out); every
    child gets the address-space / CPU rlimits of its device."""
    from .sandbox import Limits, sandboxed

    limits = Limits.for_device(spec.device, spec.timeout_s)
    if sandbox or spec.allow_remote_code or (sandbox is None and spec.overlay_dir):
        env = child_env(spec)
        extra = {k: env[k] for k in ("PYTHONPATH", "TORCH_TRACE") if k in env}
        code_dir = (spec.resolved or {}).get("code_dir")  # remote code the parent fetched (remote_code.fetch_for)
        inputs = [p for p in (spec.overlay_dir, spec.registry, code_dir) if p] + list(readable)
        sb = sandboxed(cmd, writable=writable, readable=inputs, device=spec.device, limits=limits, extra_env=extra)
        return sb.argv, sb.env
    prlimit = shutil.which("prlimit")
    wrap = [prlimit, *limits.prlimit_args(), "--"] if prlimit and limits.prlimit_args() else []
    return [*wrap, *cmd], child_env(spec)


def run_in_child(spec: RunSpec, *, log_dir: Path | None = None,
                 progress: Callable[[str], None] | None = None, sandbox: bool | None = None) -> RunResult:
    """Run `spec` in a fresh Python process; always returns a RunResult. Candidate code (an
    overlay) and Hub remote code always run sandboxed; `sandbox=True` sandboxes any spec.

    Remote code (`spec.allow_remote_code`) is split in two: this process resolves the repo and
    fetches its config and code files at the pinned commit (remote_code.fetch_for: files only,
    nothing imported), and the sandboxed child, with no network and no token, builds the model
    from that local copy."""
    if spec.allow_remote_code and spec.resolved is None:
        started = time.time()
        try:
            from ..model.remote_code import fetch_for

            spec = fetch_for(spec)
        except Exception as e:  # noqa: BLE001 - a refused or unreachable repo is this run's verdict
            return failed_result(spec, "create_error", ErrorInfo("resolve", type(e).__name__, str(e)), "",
                                 round(time.time() - started, 3))
        try:
            return run_in_child(spec, log_dir=log_dir, progress=progress, sandbox=True)
        finally:
            code_dir = (spec.resolved or {}).get("code_dir")
            if code_dir:
                shutil.rmtree(code_dir, ignore_errors=True)
    workdir = Path(tempfile.mkdtemp(prefix="enablebot-run-"))
    log_path = (Path(log_dir) if log_dir else workdir) / f"{_safe(spec.model_id)}-{spec.device}-{spec.mode}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path, out_path = workdir / "spec.json", workdir / "result.json"
    spec_path.write_text(json.dumps(spec.to_dict()), encoding="utf-8")
    started = time.time()
    with open(log_path, "wb") as log:
        writable = [workdir] + ([Path(spec.trace_dir)] if spec.trace_dir else [])
        argv, env = child_command([sys.executable, "-m", "enablebot.execute.worker", "run", str(spec_path), str(out_path)],
                                  spec, writable=writable, sandbox=sandbox)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
        timed_out = _wait(proc, spec.timeout_s, log_path, progress)
    elapsed = round(time.time() - started, 3)
    tail = log_tail(log_path)

    if not timed_out and out_path.exists():
        try:
            result = RunResult.from_dict(json.loads(out_path.read_text(encoding="utf-8")))
            result.log_tail = tail if not result.ok else ""
            return result
        except (ValueError, TypeError) as e:
            return failed_result(spec, "crash", ErrorInfo("child", type(e).__name__, f"unreadable result: {e}"), tail, elapsed)
    if timed_out:
        info = ErrorInfo("child", "Timeout", f"no result after {spec.timeout_s:.0f} s; the process group was killed")
        return failed_result(spec, "timeout", info, tail, elapsed)
    info = ErrorInfo("child", "Crash", f"the model process {_describe_exit(proc.returncode)}")
    return failed_result(spec, "crash", info, tail, elapsed)


def _wait(proc: subprocess.Popen, timeout_s: float, log_path: Path,
          progress: Callable[[str], None] | None) -> bool:
    """Wait for the child, relaying its progress lines; True when it timed out."""
    deadline = time.time() + timeout_s
    pos = 0
    while True:
        try:
            proc.wait(timeout=0.25)
            done = True
        except subprocess.TimeoutExpired:
            done = False
        if progress:
            pos = _relay(log_path, pos, progress)
        if done:
            return False
        if time.time() > deadline:
            _kill_group(proc)
            return True


def _relay(log_path: Path, pos: int, progress: Callable[[str], None]) -> int:
    try:
        with open(log_path, "rb") as f:
            f.seek(pos)
            chunk = f.read()
    except OSError:
        return pos
    end = chunk.rfind(b"\n") + 1  # only whole lines
    for line in chunk[:end].decode("utf-8", "replace").splitlines():
        if line.startswith(PROGRESS_PREFIX):
            progress(line[len(PROGRESS_PREFIX):])
    return pos + end


def failed_result(spec: RunSpec, verdict: str, info: ErrorInfo, tail: str, elapsed: float) -> RunResult:
    import datetime as _dt

    return RunResult(spec=spec, verdict=verdict, versions=parent_versions(), error=info, log_tail=tail,
                     duration_s=elapsed,
                     started_at=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat())


def parent_versions() -> Versions:
    # Versions without importing torch in the parent (it may be the sweep's light process).
    from importlib.metadata import PackageNotFoundError, version

    def v(pkg: str) -> str:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return ""

    import platform

    return Versions(torch=v("torch"), transformers=v("transformers"), python=platform.python_version())


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80]
