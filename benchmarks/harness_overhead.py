"""How much wall time does the harness add over a bare script doing the same job?

Runs, side by side in one process tree and alternating order, (a) `enablebot run MODEL`
(child process, build from config, eager x2 + fp64 reference, explain, fullgraph check,
Inductor compile, numerics, interleaved timing) and (b) a bare script that builds the
same tiny model and does only the compile and the same interleaved timing. Prints the
wall times and their ratio.

    .venv/bin/python benchmarks/harness_overhead.py --model gpt2 --rounds 2
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BARE = r'''
import statistics, sys, time, torch
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


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    harness = [sys.executable, "-m", "enablebot.cli", "run", a.model, "--device", "cpu", "--repeats", str(a.repeats)]
    bare = [sys.executable, "-c", BARE, a.model, str(a.repeats)]
    h, b = [], []
    for i in range(a.rounds):  # alternate the order so cache warmth and load hit both alike
        for name in (("harness", "bare") if i % 2 == 0 else ("bare", "harness")):
            (h if name == "harness" else b).append(timed(harness if name == "harness" else bare))
    hm, bm = statistics.median(h), statistics.median(b)
    print(f"model={a.model} repeats={a.repeats} rounds={a.rounds}")
    print(f"harness (enablebot run): {hm:.1f} s   runs: {', '.join(f'{x:.1f}' for x in h)}")
    print(f"bare compile + timing:   {bm:.1f} s   runs: {', '.join(f'{x:.1f}' for x in b)}")
    print(f"ratio harness / bare:    {hm / bm:.2f}x")


if __name__ == "__main__":
    main()
