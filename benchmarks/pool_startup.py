"""Worker start-up cost of the sweep's pool: spawned interpreters vs workers forked from a
pre-imported fork server (enablebot.execute.preload). CPU time, read from /proc, so it holds on a
loaded machine.

Each start method runs in its own process (a fork server is one per process): a pool of N workers
gets N items of MODEL (default: an unknown id, so the item itself is ~free and what is left is
start-up: imports, registry, catalog). Per worker it reads the CPU the worker had used when its
first result arrived; for the fork server it adds the server's own one-time CPU.

    PYTHONPATH=. python benchmarks/pool_startup.py --jobs 4
    PYTHONPATH=. python benchmarks/pool_startup.py --jobs 4 --model llama   # start-up + a first real item
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux /proc)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def one(method: str, jobs: int, model: str) -> dict:
    from enablebot.execute.pool import WorkerPool
    from enablebot.results import RunSpec

    per_worker: list[float] = []

    class Probe(WorkerPool):
        def _collect(self, w, ready):  # noqa: ANN001 - the pool's own types
            result = super()._collect(w, ready)
            if result is not None and w.proc.is_alive():
                per_worker.append(cpu_s(w.proc.pid))
            return result

    specs = [RunSpec(model_id=model, mode="eval", fast=True, numerics=False, timing=False, timeout_s=600)
             for _ in range(jobs)]
    pool = Probe(jobs=jobs, log_dir=Path(tempfile.mkdtemp(prefix="pool-startup-")), threads=1, start_method=method)
    t0 = time.perf_counter()
    verdicts = [r.verdict for r in pool.run(specs)]
    wall = time.perf_counter() - t0
    server = 0.0
    if method == "forkserver":
        from multiprocessing import forkserver

        server = cpu_s(forkserver._forkserver._forkserver_pid)
    return {"method": method, "jobs": jobs, "model": model, "verdicts": verdicts, "wall_s": round(wall, 2),
            "worker_cpu_s": [round(x, 2) for x in per_worker], "server_cpu_s": round(server, 2),
            "total_cpu_s": round(sum(per_worker) + server, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--model", default="no-such-model-startup-probe")
    ap.add_argument("--methods", nargs="+", default=["spawn", "forkserver"])
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, args.jobs, args.model)))
        return 0
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rows = []
    for method in args.methods:
        p = subprocess.run([sys.executable, __file__, "--one", method, "--jobs", str(args.jobs), "--model", args.model],
                           env=env, capture_output=True, text=True, check=True)
        rows.append(json.loads(p.stdout.strip().splitlines()[-1]))
    for r in rows:
        per = sum(r["worker_cpu_s"]) / max(len(r["worker_cpu_s"]), 1)
        print(f"{r['method']:10s} {r['jobs']} workers: CPU per worker {per:5.2f} s + server {r['server_cpu_s']:5.2f} s "
              f"= {r['total_cpu_s']:6.2f} s total; wall {r['wall_s']:6.2f} s; {r['verdicts']}")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
