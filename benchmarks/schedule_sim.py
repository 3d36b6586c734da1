"""What longest-first scheduling buys, replayed on the durations of a committed sweep.

Replays a sweep's items on N workers (each free worker takes the next item, as the pool does)
in the plan's hash order and in enablebot.sweep.schedule's longest-first order, ranked by: the true
durations (an oracle) or another result set (--estimates, e.g. another pass or machine). Prints each makespan against the lower bound
max(total / N, longest item).

    PYTHONPATH=. python benchmarks/schedule_sim.py --truth results/cpu-dynamo --jobs 2 14
    PYTHONPATH=. python benchmarks/schedule_sim.py --truth results/gpu/cuda-inductor-tiny \
        --estimates results/cpu-dynamo --jobs 14
    PYTHONPATH=. python benchmarks/schedule_sim.py --truth results/cpu-dynamo-default --shards 4 --jobs 4

With --shards N the items are split as `sweep --shard i/N` splits them (a hash of the model type)
and each shard is replayed alone: the nightly's wall time is its longest shard's.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from enablebot.sweep.checkpoint import RESULTS_FILE, load_results  # noqa: E402
from enablebot.sweep.schedule import estimator, item_key, load_durations, longest_first  # noqa: E402


def makespan(durations: list[float], jobs: int) -> float:
    free = [0.0] * jobs
    for d in durations:
        heapq.heapreplace(free, free[0] + d)
    return max(free)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--truth", type=Path, required=True, help="sweep directory whose durations are replayed")
    ap.add_argument("--estimates", type=Path, help="another sweep directory to rank by")
    ap.add_argument("--jobs", type=int, nargs="+", default=[2, 14])
    ap.add_argument("--shards", type=int, help="replay each of N shards (sweep --shard i/N) alone")
    args = ap.parse_args(argv)
    if args.shards:
        return shards(args.truth, args.shards, args.jobs)
    results = list(load_results(args.truth / RESULTS_FILE).values())
    truth = {item_key(r.spec): r.duration_s for r in results}
    specs = sorted((r.spec for r in results),
                   key=lambda s: (hashlib.sha1(s.model_id.encode()).hexdigest(), s.task or "", s.mode))
    orders = {"plan (hash) order": specs,
              "longest first, oracle": longest_first(specs, estimator(truth))}
    if args.estimates:
        est = load_durations(args.estimates)
        hit = sum(1 for s in specs if item_key(s) in est)
        orders[f"longest first, from {args.estimates.name} ({hit}/{len(specs)} items known)"] = \
            longest_first(specs, estimator(est))
    total = sum(truth.values())
    print(f"{len(specs)} items, {total:.0f} s of worker time, longest {max(truth.values()):.1f} s ({args.truth})")
    for jobs in args.jobs:
        bound = max(total / jobs, max(truth.values()))
        print(f"{jobs} workers: lower bound {bound:.0f} s")
        for name, order in orders.items():
            m = makespan([truth[item_key(s)] for s in order], jobs)
            print(f"  {name:60s} {m:8.0f} s  ({m / bound:.3f}x the bound)")
    return 0


def shards(truth_dir: Path, n: int, jobs_list: list[int]) -> int:
    """Each shard's makespan on `jobs` workers, longest first by its own durations (the nightly
    passes the night before's) and in plan order."""
    from enablebot.sweep.engine import _bucket

    results = list(load_results(truth_dir / RESULTS_FILE).values())
    truth = {item_key(r.spec): r.duration_s for r in results}
    print(f"{len(results)} items, {sum(truth.values()):.0f} s of worker time ({truth_dir}), {n} shards")
    for jobs in jobs_list:
        for i in range(n):
            specs = sorted((r.spec for r in results if _bucket(r.spec.model_id, n) == i),
                           key=lambda s: (hashlib.sha1(s.model_id.encode()).hexdigest(), s.task or "", s.mode))
            total = sum(truth[item_key(s)] for s in specs)
            lf = makespan([truth[item_key(s)] for s in longest_first(specs, estimator(truth))], jobs)
            plain = makespan([truth[item_key(s)] for s in specs], jobs)
            print(f"  shard {i + 1}/{n}, {jobs} workers: {len(specs)} items, {total:.0f} s of worker time; "
                  f"makespan {lf / 60:.1f} min longest first, {plain / 60:.1f} min in plan order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
