"""How fast is a sweep, and where does its time go?

Runs `enablebot sweep` into a fresh directory (no resume) with the options given after `--`,
then prints items, wall time, models/minute, the projected time for the whole planned set
(when --max-minutes cut it short), time per stage summed over models (create, eager,
explain, compile, ...), the share of graph-breaking models, and the slowest models.
With --results DIR it reads an existing sweep instead (wall time from its sweep_runs.jsonl,
summed over resumed invocations).

    .venv/bin/python benchmarks/sweep_speed.py -- --jobs 2                       # the CPU Dynamo pass, everything
    .venv/bin/python benchmarks/sweep_speed.py -- --jobs 2 --max-minutes 5       # a sample, projected
    .venv/bin/python benchmarks/sweep_speed.py --results results/cpu-dynamo
    .venv/bin/python benchmarks/sweep_speed.py --cold-warm --out /tmp/cw -- --pass inductor \
        --models-file sweeps/cpu-inductor.txt --task main --mode eval   # the Inductor cache, side by side

--cold-warm runs the same sweep twice, into OUT/cold and OUT/warm, sharing a fresh Inductor cache
(TORCHINDUCTOR_CACHE_DIR=OUT/inductor-cache): the first compiles everything from scratch, the
second hits the FX graph, AOTAutograd and Triton caches the first wrote.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from enablebot.sweep.engine import load_runs, planned_of  # noqa: E402 - after the path set-up above


def report(out: Path, wall_s: float, planned: int, jobs: int | None = None):
    """Print the figures for one sweep directory; returns its SweepSummary."""
    from enablebot.sweep.checkpoint import RESULTS_FILE, load_results
    from enablebot.sweep.reports import summarize

    results = list(load_results(out / RESULTS_FILE).values())
    n = len(results)
    rate = n / (wall_s / 60) if wall_s else 0.0
    print(f"items: {n} of {planned} planned; wall {wall_s / 60:.1f} min; {rate:.1f} models/min")
    if n < planned and rate:
        print(f"projected for all {planned}: {planned / rate:.1f} min")
    s = summarize(results)
    print(f"verdicts: {dict(sorted(s.verdicts.items()))}; built and ran eager: {s.coverage:.1%}")
    total = sum(s.stage_seconds.values()) or 1.0
    print(f"worker time {s.model_seconds_total:.0f} s (median {s.model_seconds_p50} s, p90 {s.model_seconds_p90} s a model)")
    for k, v in s.stage_seconds.items():
        print(f"  {k:45s} {v:8.0f} s  {v / total:6.1%}")
    by_verdict = Counter()
    for r in results:
        by_verdict[r.verdict] += r.duration_s
    for v, secs in by_verdict.most_common():
        k = s.verdicts[v]
        print(f"  verdict {v:15s} {k:5d} models ({k / n:5.1%}) {secs:8.0f} s ({secs / (s.model_seconds_total or 1):5.1%})")
    busy = busy_share(results, jobs)
    if busy is not None:
        # Items' own clocks against the time their workers were up: work between items (a worker's
        # garbage collection, its restart) shows here and nowhere else.
        print(f"workers busy in items: {busy[0]:.1f} of {busy[1]} worker slots ({busy[0] / busy[1]:.1%}) "
              f"from the first item's start to the last one's end")
    print("slowest:")
    for r in sorted(results, key=lambda r: -r.duration_s)[:10]:
        print(f"  {r.spec.model_id}/{r.spec.task}/{r.spec.mode}: {r.duration_s:.1f} s {r.verdict} "
              f"{json.dumps(r.stage_s)}")
    return s


def busy_share(results: list, jobs: int | None = None) -> tuple[float, int] | None:
    """(mean items in flight, the workers: `jobs`, else the most items ever in flight) over the span
    from the first item's start to the last item's end, from each item's `started_at` and
    `duration_s` (`started_at` has whole seconds)."""
    import datetime as dt

    spans = sorted((dt.datetime.fromisoformat(r.started_at).timestamp(), r.duration_s)
                   for r in results if getattr(r, "started_at", None))
    if len(spans) < 2:
        return None
    start, end = spans[0][0], max(t + d for t, d in spans)
    events = sorted([(t, 1) for t, _ in spans] + [(t + d, -1) for t, d in spans])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return sum(d for _, d in spans) / (end - start), jobs or peak


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    sweep_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, help="analyse this existing sweep directory instead of running one")
    ap.add_argument("--out", type=Path, help="where the new sweep writes (default: a fresh temporary directory)")
    ap.add_argument("--cold-warm", action="store_true", help="run it twice: empty, then warm Inductor cache")
    args = ap.parse_args(own)
    if args.results:
        runs = load_runs(args.results)
        planned = planned_of(runs)
        report(args.results, sum(r["wall_s"] for r in runs), planned, jobs=runs[-1].get("jobs") if runs else None)
        return 0
    out = args.out or Path(tempfile.mkdtemp(prefix="sweep-speed-"))
    if not args.cold_warm:
        return run_one(out, sweep_args, dict(os.environ))[0]
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(out / "inductor-cache"))
    if (out / "inductor-cache").exists():
        print(f"{out}/inductor-cache exists: a cold run needs a fresh --out", file=sys.stderr)
        return 2
    walls, compiles, workers = [], [], []
    for phase in ("cold", "warm"):
        print(f"\n== {phase} Inductor cache ==")
        rc, wall, compile_s, worker_s = run_one(out / phase, sweep_args, env)
        if rc:
            return rc
        walls.append(wall)
        compiles.append(compile_s)
        workers.append(worker_s)

    def ratio(a: float, b: float) -> str:
        return f"{a:.0f} s vs {b:.0f} s ({a / max(b, 1e-9):.2f}x)"

    print(f"\ncold vs warm: sweep wall {ratio(*walls)}; worker time {ratio(*workers)}; "
          f"compile stage {ratio(*compiles)}")
    return 0


# The stage holding Dynamo + AOT + Inductor compile: "trace" since one trace answers explain and
# compile, "compile" in older results.
COMPILE_STAGES = ("trace", "compile")


def run_one(out: Path, sweep_args: list[str], env: dict[str, str]) -> tuple[int, float, float, float]:
    """One fresh sweep and its report: (return code, sweep wall s, compile-stage s, worker s)."""
    from enablebot.sweep.checkpoint import RESULTS_FILE

    if (out / RESULTS_FILE).exists():
        print(f"{out} holds a sweep already: a benchmark starts fresh (pass another --out)", file=sys.stderr)
        return 2, 0.0, 0.0, 0.0
    t0 = time.time()
    p = subprocess.Popen([sys.executable, "-m", "enablebot.cli", "sweep", "--out", str(out), *sweep_args],
                         cwd=ROOT, env=env)
    # `timeout` or a cancelled job stops this script: pass it on, so the sweep stops its workers.
    signal.signal(signal.SIGTERM, lambda signum, _f: p.send_signal(signum))
    rc = p.wait()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    wall = time.time() - t0
    if rc:
        return rc, wall, 0.0, 0.0
    runs = load_runs(out)
    print(f"\nsweep command wall time (incl. start-up and reports): {wall / 60:.1f} min; results in {out}")
    summary = report(out, runs[-1]["wall_s"], runs[-1]["planned"], jobs=runs[-1].get("jobs"))
    compile_s = sum(summary.stage_seconds.get(k, 0.0) for k in COMPILE_STAGES)
    return 0, runs[-1]["wall_s"], compile_s, summary.model_seconds_total or 0.0


if __name__ == "__main__":
    sys.exit(main())
