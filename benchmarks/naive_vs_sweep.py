"""The sweep engine against a naive harness on the same models, same jobs, same machine (issue 18).

Runs benchmarks/naive_harness.py, then `enablebot sweep --pass dynamo --task base` (or the other
way round with --sweep-first) on the same model types and modes, one after the other, and prints
wall time, worker time (the sum of per-item seconds), the ratios, the same split into the sweep's
full-graph and breaking items, and where the two verdicts agree. Writes OUT/naive_vs_sweep.json.

    PYTHONPATH=. python benchmarks/naive_vs_sweep.py --first 100 --jobs 14 --out /tmp/nvs
    PYTHONPATH=. python benchmarks/naive_vs_sweep.py --models-file sweeps/x.txt --modes eval --jobs 2
    PYTHONPATH=. python benchmarks/naive_vs_sweep.py --first 20 -- --fullgraph-check   # extra sweep options

The naive harness reports fullgraph=True failures as graph_break; the sweep's Dynamo pass reads
explain, which also reports breaks fullgraph=True captures (.item() under capture_scalar_outputs,
e.g. jetmoe): those show up as disagreements, explained, not hidden.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GROUPS = ("full_graph", "graph_break", "other")


def pick_models(first: int | None, listed: list[str], modes: tuple[str, ...]) -> list[str]:
    """The listed types, or the first N (sorted) that the sweep plans a base item for."""
    from enablebot.model.registry import Registry
    from enablebot.sweep.engine import SweepOptions, plan

    reg = Registry.load()
    opts = SweepOptions(modes=modes, tasks=("base",))
    items = plan(reg, opts, listed or None)
    have = sorted({it.model_id for it in items})
    if listed:
        dropped = [m for m in listed if m not in have]
        if dropped:
            print(f"no base item for (skipped): {', '.join(dropped)}", file=sys.stderr)
        return [m for m in listed if m in have]
    return have[:first]


def _become_subreaper() -> bool:
    """Orphaned descendants (the pool's fork server and, through it, its workers) get reparented
    to this process, so reaping them adds their CPU time to ours (Linux only)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _reap_orphans(wait_s: float = 30.0) -> None:
    deadline = time.time() + wait_s
    while time.time() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)


def timed(cmd: list[str], env: dict[str, str]) -> tuple[int, float, float]:
    """(return code, wall s, CPU s of the command and all its descendants) of one command."""
    r0 = os.times()
    t0 = time.perf_counter()
    rc = subprocess.run(cmd, cwd=ROOT, env=env).returncode
    wall = time.perf_counter() - t0
    _reap_orphans()
    r1 = os.times()
    return rc, wall, (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)


def compare(naive_rows: list[dict], sweep_results: list) -> dict:
    """Worker time by the sweep's verdict group, and verdict agreement, over items both ran."""
    naive = {(r["model_type"], r["mode"]): r for r in naive_rows if "model_type" in r}
    sweep = {(r.spec.model_id, r.spec.mode): r for r in sweep_results}
    common = sorted(set(naive) & set(sweep))
    groups: dict[str, dict] = {}
    agree, disagree = 0, []
    for key in common:
        s, n = sweep[key], naive[key]
        g = s.verdict if s.verdict in ("full_graph", "graph_break") else "other"
        d = groups.setdefault(g, {"items": 0, "naive_s": 0.0, "sweep_s": 0.0, "naive_cpu_s": 0.0,
                                  "sweep_stage_s": {}})
        d["items"] += 1
        d["naive_s"] += n["seconds"]
        d["naive_cpu_s"] += n.get("cpu_s", 0.0)
        d["sweep_s"] += s.duration_s
        for k, v in s.stage_s.items():
            d["sweep_stage_s"][k] = round(d["sweep_stage_s"].get(k, 0.0) + v, 3)
        nv = n["verdict"] if n["verdict"] in ("full_graph", "graph_break") else "other"
        if nv == g:
            agree += 1
        else:
            disagree.append({"model_type": key[0], "mode": key[1], "sweep": s.verdict, "naive": n["verdict"],
                             "naive_error": n.get("error"), "sweep_fullgraph_ok": s.fullgraph_ok})
    for d in groups.values():
        d["ratio"] = round(d["sweep_s"] / d["naive_s"], 3) if d["naive_s"] else None
        d["naive_s"], d["sweep_s"], d["naive_cpu_s"] = (round(d[k], 3) for k in ("naive_s", "sweep_s", "naive_cpu_s"))
    return {"common_items": len(common), "only_naive": sorted(map(list, set(naive) - set(sweep))),
            "only_sweep": sorted(map(list, set(sweep) - set(naive))), "groups": groups,
            "verdicts_agree": agree, "verdicts_disagree": disagree}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--first", type=int, help="the first N model types (sorted) with a base model")
    src.add_argument("--models-file", type=Path, help="model types, one per line")
    ap.add_argument("--modes", nargs="+", default=["eval", "train"], choices=["eval", "train"])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0, help="the sweep's per-item timeout")
    ap.add_argument("--out", type=Path, required=True, help="a fresh directory for both result sets")
    ap.add_argument("--sweep-first", action="store_true", help="run the sweep before the naive harness")
    args = ap.parse_args(own)
    if (args.out / "sweep" / "results.jsonl").exists():
        print(f"{args.out} holds a previous run: pass a fresh --out", file=sys.stderr)
        return 2
    listed = []
    if args.models_file:
        listed = [ln.strip() for ln in args.models_file.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        if not listed:
            print(f"{args.models_file} lists no model types", file=sys.stderr)
            return 2
    models = pick_models(args.first, listed, tuple(args.modes))
    if not models:
        print("no model types to run", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "models.txt").write_text("\n".join(models) + "\n", encoding="utf-8")
    _become_subreaper()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    py = sys.executable
    cmds = {
        "naive": [py, str(ROOT / "benchmarks" / "naive_harness.py"), "--models-file", str(args.out / "models.txt"),
                  "--modes", *args.modes, "--jobs", str(args.jobs), "--out", str(args.out / "naive.jsonl")],
        "sweep": [py, "-m", "enablebot.cli", "sweep", "--pass", "dynamo", "--task", "base", "--out",
                  str(args.out / "sweep"), "--models-file", str(args.out / "models.txt"), "--jobs", str(args.jobs),
                  "--timeout", str(args.timeout), "--no-report", *[a for m in args.modes for a in ("--mode", m)],
                  *extra],
    }
    runs = {}
    for name in (("sweep", "naive") if args.sweep_first else ("naive", "sweep")):
        print(f"== {name}: {len(models)} model types x {'/'.join(args.modes)}, {args.jobs} jobs", file=sys.stderr)
        rc, wall, cpu = timed(cmds[name], env)
        if rc:
            print(f"{name} exited with {rc}", file=sys.stderr)
            return 1
        runs[name] = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}

    from enablebot.sweep.checkpoint import RESULTS_FILE, load_results
    from enablebot.sweep.engine import load_runs

    from enablebot import jsonl

    naive_rows = jsonl.read_values(args.out / "naive.jsonl")
    sweep_results = list(load_results(args.out / "sweep" / RESULTS_FILE).values())
    runs["naive"].update(items=sum(1 for r in naive_rows if "model_type" in r),
                         worker_s=round(sum(r.get("seconds", 0.0) for r in naive_rows), 2),
                         import_s=round(sum(r.get("import_s", 0.0) for r in naive_rows), 2))
    runs["sweep"].update(items=len(sweep_results), worker_s=round(sum(r.duration_s for r in sweep_results), 2),
                         pool_wall_s=load_runs(args.out / "sweep")[-1]["wall_s"])
    cmp = compare(naive_rows, sweep_results)
    report = {"models": models, "modes": args.modes, "jobs": args.jobs, "sweep_args": extra, "runs": runs,
              "wall_ratio": round(runs["sweep"]["wall_s"] / runs["naive"]["wall_s"], 3),
              "worker_ratio": round(runs["sweep"]["worker_s"] / max(runs["naive"]["worker_s"], 1e-9), 3), **cmp}
    (args.out / "naive_vs_sweep.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print_report(report)
    return 0


def print_report(r: dict) -> None:
    n, s = r["runs"]["naive"], r["runs"]["sweep"]
    print(f"{len(r['models'])} model types x {'/'.join(r['modes'])}, {r['jobs']} jobs")
    print(f"{'':12s} {'items':>6s} {'wall s':>8s} {'worker s':>9s} {'cpu s':>8s}")
    print(f"{'naive':12s} {n['items']:6d} {n['wall_s']:8.1f} {n['worker_s']:9.1f} {n['cpu_s']:8.1f}")
    print(f"{'sweep':12s} {s['items']:6d} {s['wall_s']:8.1f} {s['worker_s']:9.1f} {s['cpu_s']:8.1f}"
          f"   (pool wall {s['pool_wall_s']:.1f} s)")
    print(f"sweep / naive: wall {r['wall_ratio']:.2f}x, worker time {r['worker_ratio']:.2f}x "
          f"(targets: wall <= 1.0x; full-graph worker time <= 1.1x)")
    for g in GROUPS:
        d = r["groups"].get(g)
        if d:
            stages = ", ".join(f"{k} {v:.1f}" for k, v in sorted(d["sweep_stage_s"].items(), key=lambda kv: -kv[1]))
            print(f"  by sweep verdict {g:11s}: {d['items']:4d} items, naive {d['naive_s']:7.1f} s, "
                  f"sweep {d['sweep_s']:7.1f} s = {d['ratio']}x  [sweep stages: {stages}]")
    total = r["common_items"]
    print(f"verdicts agree on {r['verdicts_agree']} of {total} items")
    for d in r["verdicts_disagree"]:
        print(f"  {d['model_type']}/{d['mode']}: sweep {d['sweep']} (fullgraph_ok={d['sweep_fullgraph_ok']}), "
              f"naive {d['naive']} {d['naive_error'] or ''}"[:220])


if __name__ == "__main__":
    sys.exit(main())
