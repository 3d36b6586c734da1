"""How much wall time does the harness add over a bare script doing the same job?

Runs, side by side in one process tree and alternating order, (a) `enablebot run MODEL`
(child process, build from config, eager x2 + fp64 reference, explain, fullgraph check,
Inductor compile, numerics, interleaved timing) and (b) a bare script that builds the
same tiny model and does only the compile and the same interleaved timing. Prints the
wall times, the CPU times (user + system of each process tree) and their ratios.

Wall time is the figure on a quiet machine. On a loaded one (other jobs on the cores) wall time
swings with the load, so the CPU time of each process tree is printed too: it counts the work
each side does, which load barely changes once both run one intra-op thread (`--threads 1`, the
default; with more threads than free cores, OpenMP's spin-waiting inflates both clocks).

    .venv/bin/python benchmarks/harness_overhead.py --model gpt2 --rounds 3 [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BARE = r'''
import statistics, sys, time, torch
torch.set_num_threads(int(sys.argv[3]))
from enablebot.model.build import build_model
from enablebot.model.inputs import build_inputs
from enablebot.model.resolve import resolve
r = resolve(sys.argv[1]); b = build_model(r)
x = build_inputs(b.model, b.config, b.modality, r.entry.inputs if r.entry else None)
m = b.model
c = torch.compile(m)
with torch.no_grad():
    c(**x)
    for _ in range(5): m(**x); c(**x)
    e, k = [], []
    for _ in range(int(sys.argv[2])):
        t = time.perf_counter(); m(**x); e.append(time.perf_counter() - t)
        t = time.perf_counter(); c(**x); k.append(time.perf_counter() - t)
print("speedup", statistics.median(e) / statistics.median(k))
'''


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s of the whole process tree; the harness's child is reaped by its parent,
    so its CPU time is included)."""
    c0, t0 = _children_cpu(), time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads on both sides (OMP_NUM_THREADS)")
    ap.add_argument("--warmup-rounds", type=int, default=1,
                    help="unmeasured rounds first: both sides then meet a warm Inductor cache (the first "
                         "run of either would otherwise compile cold while the other hits its cache)")
    ap.add_argument("--json", type=Path, help="write the runs and ratios here")
    a = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    harness = [sys.executable, "-m", "enablebot.cli", "run", a.model, "--device", "cpu", "--repeats", str(a.repeats)]
    bare = [sys.executable, "-c", BARE, a.model, str(a.repeats), str(a.threads)]
    for _ in range(a.warmup_rounds):
        timed(harness, env), timed(bare, env)
    runs: dict[str, list[tuple[float, float]]] = {"harness": [], "bare": []}
    for i in range(a.rounds):  # alternate the order so cache warmth and load hit both alike
        for name in (("harness", "bare") if i % 2 == 0 else ("bare", "harness")):
            runs[name].append(timed(harness if name == "harness" else bare, env))
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in runs.items()}
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    print(f"model={a.model} repeats={a.repeats} rounds={a.rounds} (+{a.warmup_rounds} unmeasured) "
          f"threads={a.threads} load/core={load:.2f}")
    for k, label in (("harness", "harness (enablebot run)"), ("bare", "bare compile + timing")):
        print(f"{label:24} wall {med[k][0]:5.1f} s  cpu {med[k][1]:5.1f} s   runs (wall/cpu): "
              + ", ".join(f"{w:.1f}/{c:.1f}" for w, c in runs[k]))
    ratio_wall, ratio_cpu = med["harness"][0] / med["bare"][0], med["harness"][1] / med["bare"][1]
    print(f"ratio harness / bare:    wall {ratio_wall:.2f}x   cpu {ratio_cpu:.2f}x")
    if a.json:
        a.json.write_text(json.dumps({"model": a.model, "repeats": a.repeats, "threads": a.threads,
                                      "load_per_core": round(load, 2), "runs": runs,
                                      "ratio_wall": round(ratio_wall, 3), "ratio_cpu": round(ratio_cpu, 3)}, indent=1))


if __name__ == "__main__":
    main()
