"""Where a cold Inductor pass's compile goes, and how busy the machine's cores were.

Reads a sweep's results (each item's `timing.compile_phases`: Dynamo's own timers, summed per
phase) and, where the run left one, `proc_stat.log` (the machine's first /proc/stat line every 5 s,
written by `scripts/gpu_evidence.sh inductor-whole`). Prints:
- worker time and the trace stage (the first compiled calls) summed over items;
- the main compile phases summed over items (they nest: Dynamo's frame compile holds the backend,
  which holds AOTAutograd and Inductor; Triton's compile and autotuning run inside those);
- the machine's busy cores over the sweep's span (user + system + nice + irq of all cores):
  a compile that keeps every core busy can only get faster with less work, not more workers.

    .venv/bin/python benchmarks/compile_where.py results/gpu/inductor-whole-2026-12-07/cold \
        --proc-stat results/gpu/inductor-whole-2026-12-07/proc_stat.log

With `--against B`: two runs of the same items side by side (scripts/gpu_evidence.sh inductor-ab),
on the items both finished: worker time, trace stage, each phase, A and B and their ratio, and what
must not change (verdicts, graph and op counts, numerics) with the speedups' geomeans.

    .venv/bin/python benchmarks/compile_where.py results/gpu/inductor-ab-names-2026-12-07/inductor-ab-A \
        --against results/gpu/inductor-ab-names-2026-12-07/inductor-ab-B
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
from collections import Counter
from pathlib import Path

# The phases worth reading apart, outermost first (torch's names; see torch/_dynamo/utils.py dynamo_timed).
PHASES = [
    ("_compile.compile_inner", "Dynamo frame compile (all of it, backend included)"),
    ("bytecode_tracing", "  Dynamo bytecode tracing"),
    ("OutputGraph.call_user_compiler", "  backend (AOTAutograd + Inductor)"),
    ("create_aot_dispatcher_function", "    AOTAutograd"),
    ("compile_fx_inner", "    Inductor compile_fx_inner"),
    ("GraphLowering.run", "      lowering"),
    ("Scheduler.__init__", "      scheduler"),
    ("Scheduler.codegen", "      kernel codegen"),
    ("async_compile.precompile", "      Triton compile, in process (compile threads 1)"),
    ("async_compile.wait", "      Triton compile, waiting on the pool (compile threads > 1)"),
    ("PyCodeCache.load_by_key_path", "      loading the generated module"),
    ("CachingAutotuner.benchmark_all_configs", "  Triton autotuning on the GPU (first call)"),
    ("build_guards", "  guards"),
]


def load(results: Path) -> list[dict]:
    return [json.loads(line) for line in (results / "results.jsonl").read_text().splitlines() if line.strip()]


def phases(rows: list[dict]) -> tuple[Counter, int]:
    total: Counter = Counter()
    n = 0
    for r in rows:
        p = (r.get("timing") or {}).get("compile_phases") or {}
        n += bool(p)
        total.update(p)
    return total, n


def samples(log: Path) -> list[tuple[float, int, int]]:
    """(epoch s, busy jiffies, all jiffies) of every core together, per line of the log."""
    out = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) < 10 or parts[1] != "cpu":
            continue
        vals = [int(x) for x in parts[2:10]]  # user nice system idle iowait irq softirq steal
        out.append((float(parts[0]), sum(vals) - vals[3] - vals[4], sum(vals)))
    return out


def busy_cores(rows: list[tuple[float, int, int]], start: float, end: float) -> tuple[float, int, float] | None:
    """Mean busy cores between start and end (epoch s), the core count, and the busiest 5 s share."""
    inside = [s for s in rows if start <= s[0] <= end]
    if len(inside) < 2:
        return None
    (t0, b0, a0), (t1, b1, a1) = inside[0], inside[-1]
    cores = round((a1 - a0) / (t1 - t0) / 100)  # Linux counts 100 jiffies per second per core
    peak = max((b[1] - a[1]) / max(1, b[2] - a[2]) for a, b in zip(inside, inside[1:]))
    return (b1 - b0) / (a1 - a0) * cores, cores, peak


def span(results: Path) -> list[tuple[float, float]]:
    """Each invocation's (start, end), epoch s, from sweep_runs.jsonl."""
    out = []
    for line in (results / "sweep_runs.jsonl").read_text().splitlines():
        r = json.loads(line)
        t0 = dt.datetime.fromisoformat(r["started_at"]).timestamp()
        out.append((t0, t0 + float(r["wall_s"])))
    return out


def _key(r: dict) -> tuple:
    s = r["spec"]
    return s["model_id"], s["task"], s["mode"], s["scenario"]


def _geomean(xs: list[float]) -> float:
    return statistics.geometric_mean(xs) if xs else float("nan")


def side_by_side(a_rows: list[dict], b_rows: list[dict]) -> None:
    """Print run A against run B on the items both finished (no timeout in either)."""
    a = {_key(r): r for r in a_rows}
    b = {_key(r): r for r in b_rows}
    common = [k for k in a if k in b and "timeout" not in (a[k]["verdict"], b[k]["verdict"])]
    print(f"A {len(a)} items, B {len(b)} items; {len(common)} finished in both")

    def total(rows: dict, f) -> float:
        return sum(f(rows[k]) for k in common)

    def line(label: str, x: float, y: float) -> None:
        print(f"  {label:<62} {x:>8,.0f} {y:>8,.0f}  {y / x if x else float('nan'):.3f}")

    print(f"  {'':<62} {'A s':>8} {'B s':>8}  B/A")
    line("worker time", total(a, lambda r: r.get("duration_s") or 0.0), total(b, lambda r: r.get("duration_s") or 0.0))
    for stage in ("create", "eager", "trace", "timing"):
        line(f"stage {stage}", total(a, lambda r: (r.get("stage_s") or {}).get(stage, 0.0)),
             total(b, lambda r: (r.get("stage_s") or {}).get(stage, 0.0)))
    pa, _ = phases([a[k] for k in common])
    pb, _ = phases([b[k] for k in common])
    for key, label in PHASES:
        if key in pa or key in pb:
            line(label, pa.get(key, 0.0), pb.get(key, 0.0))
    same = ("verdict", "explain_graphs", "ops_captured")
    diffs = [k for k in a if k in b and any(a[k].get(f) != b[k].get(f) for f in same)]
    num = [k for k in common if (a[k].get("numerics") or {}).get("passed") != (b[k].get("numerics") or {}).get("passed")]
    print(f"items whose verdict, graph count or op count differ: {len(diffs)} {diffs[:5]}")
    print(f"items whose numerics verdict differs: {len(num)} {num[:5]}")
    pairs = [((a[k].get("timing") or {}).get("speedup"), (b[k].get("timing") or {}).get("speedup")) for k in common]
    pairs = [(x, y) for x, y in pairs if x and y]
    print(f"speedup geomean on {len(pairs)} items: A {_geomean([x for x, _ in pairs]):.3f}, "
          f"B {_geomean([y for _, y in pairs]):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("--proc-stat", type=Path)
    ap.add_argument("--against", type=Path, help="run B's results dir: A and B side by side")
    a = ap.parse_args()
    rows = load(a.results)
    if a.against:
        side_by_side(rows, load(a.against))
        return
    worker = sum(r.get("duration_s") or 0.0 for r in rows)
    trace = sum((r.get("stage_s") or {}).get("trace", 0.0) for r in rows)
    total, n = phases(rows)
    print(f"{len(rows)} items, worker time {worker:,.0f} s, trace stage {trace:,.0f} s ({100 * trace / worker:.1f}%)")
    print(f"compile phases recorded on {n} items (summed over items; nested phases overlap):")
    for key, label in PHASES:
        if key in total:
            print(f"  {label:<62} {total[key]:>9,.0f} s  {100 * total[key] / trace:5.1f}% of trace")
    if a.proc_stat and a.proc_stat.exists():
        rows = samples(a.proc_stat)
        for i, (t0, t1) in enumerate(span(a.results), 1):
            got = busy_cores(rows, t0, t1)
            if got:
                busy, cores, peak = got
                print(f"invocation {i} ({t1 - t0:,.0f} s): {busy:.1f} of {cores} cores busy on average "
                      f"({100 * busy / cores:.0f}%), busiest 5 s {100 * peak:.0f}%")


if __name__ == "__main__":
    main()
