"""A worker killed from outside (what an OOM kill looks like) gives a `crash`; on resume the
item runs once more (attempts recorded), then a second crash is final."""

import os
import signal
from pathlib import Path

import pytest

from enablebot.sweep.checkpoint import load_results
from enablebot.sweep.checkpoint import RESULTS_FILE
from enablebot.sweep.engine import SweepItem, SweepOptions, run_sweep


@pytest.fixture(autouse=True)
def spawned_workers(monkeypatch):
    # Workers spawned by this process (not forked from the fork server), so they can be found and killed.
    monkeypatch.setenv("ENABLEBOT_POOL_START", "spawn")


def _kill_workers(_spec) -> None:
    """on_start: SIGKILL this process's pool workers, as the OOM killer would."""
    me = str(os.getpid())
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me and b"spawn_main" in cmd:
            os.kill(int(pid), signal.SIGKILL)


def test_a_killed_worker_is_retried_once_on_resume(tmp_path):
    items = [SweepItem("bert", "base", "eval")]
    opts = SweepOptions(pass_="dynamo", device="cpu")
    out = tmp_path / "sweep"

    def results():
        return list(load_results(out / RESULTS_FILE).values())

    s1 = run_sweep(items, opts, out, jobs=1, on_start=_kill_workers)
    (r,) = results()
    assert s1.ran == 1 and r.verdict == "crash" and r.attempts == 1 and "SIGKILL" in r.error.message
    # Resume: the crash is not final yet, it runs again (killed again here).
    s2 = run_sweep(items, opts, out, jobs=1, on_start=_kill_workers)
    (r,) = results()
    assert s2.ran == 1 and r.verdict == "crash" and r.attempts == 2
    # Now it is final: a third resume runs nothing.
    s3 = run_sweep(items, opts, out, jobs=1)
    assert s3.ran == 0 and s3.skipped_done == 1
    assert results()[0].attempts == 2


def test_a_retried_crash_that_then_runs_counts_two_attempts(tmp_path):
    items = [SweepItem("bert", "base", "eval")]
    opts = SweepOptions(pass_="dynamo", device="cpu")
    out = tmp_path / "sweep"
    run_sweep(items, opts, out, jobs=1, on_start=_kill_workers)
    stats = run_sweep(items, opts, out, jobs=1)
    (r,) = load_results(out / RESULTS_FILE).values()
    assert stats.ran == 1 and r.ok and r.attempts == 2
