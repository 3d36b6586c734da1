"""Where the sweep's time goes against an independent naive harness, on the same items in one run (issue 29).

Phases, one after the other on the same model types and worker count (each a separate process tree):

  naive      benchmarks/naive_harness.py: build once per type, fullgraph=True, stop at the first break
  call       `enablebot sweep --pass dynamo --task base --scenario call`: the default pass (padded
             batch, cache at its default), eval + train
  engine     the same sweep with `--scenario naive`: the naive harness's own call (unpadded, the
             model's defaults) through the engine, eval + train; against `naive` it prices the engine
  variants   `--scenario call_unpadded --scenario call_nocache`, eval: what padding and the cache cost

Per item it splits the sweep's time into build (`resolve` + `create`: config, shrink, build, inputs,
the copy of a kept build), trace (`trace` + `fullgraph`: Dynamo) and engine (everything else in the
worker: the eager step, the scenario's plan, the result), and the naive harness's into build (its
share of the type's build) and compile. Totals are compared on the items every compared scenario
ran, and on those full graph in all of them. After each phase it (re)writes OUT/split.json and
OUT/split.md, so a run cut short still leaves the finished phases. `--budget-min` time-boxes the
whole run: a sweep gets `--max-minutes` of what is left (less a margin for its last items), and any
phase still running at the budget is stopped (SIGTERM, then SIGKILL), keeping what it checkpointed.

    PYTHONPATH=. python benchmarks/speed_split.py --first 15 --jobs 2 --timeout 120 --out /tmp/split \\
        --baseline results/cpu-dynamo-default
    PYTHONPATH=. python benchmarks/speed_split.py --first 100 --jobs 14 --timeout 120 --device cuda \\
        --budget-min 5.5 --baseline results/gpu/cuda-dynamo-default --out $OUT/split
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from naive_vs_sweep import _become_subreaper, _reap_orphans, pick_models  # noqa: E402

PHASES = ("naive", "call", "engine", "variants")
SWEEP_SCENARIOS = {"call": (("call",), ("eval", "train")), "engine": (("naive",), ("eval", "train")),
                   "variants": (("call_unpadded", "call_nocache"), ("eval",))}
# The rows of the split: (label, phase, scenario); `naive` is the independent harness.
ROWS = (("naive harness", "naive", None), ("naive call, engine", "engine", "naive"), ("call (default)", "call", "call"),
        ("call_unpadded", "variants", "call_unpadded"), ("call_nocache", "variants", "call_nocache"))


def run_phase(cmd: list[str], env: dict[str, str], deadline: float) -> dict:
    """Run `cmd` until it exits or `deadline`; then SIGTERM (a sweep keeps its checkpoint), SIGKILL."""
    r0, t0, load0 = os.times(), time.perf_counter(), os.getloadavg()[0]
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
    stopped = False
    try:
        p.wait(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        stopped = True
        _stop(p)
    except BaseException:  # this benchmark was stopped (Ctrl-C, SIGTERM): stop the phase with it
        _stop(p)
        raise
    wall = time.perf_counter() - t0
    _reap_orphans(5.0)
    r1 = os.times()
    cpu = (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)
    # The load average at the start and end: on a shared machine, what else ran beside the phase.
    return {"rc": p.returncode, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "stopped_at_budget": stopped,
            "load_avg": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def _stop(p: subprocess.Popen) -> None:
    """SIGTERM (a sweep then kills its busy workers and keeps its checkpoint), SIGKILL after 20 s."""
    os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def naive_rows(out: Path) -> list[dict]:
    """The harness's rows: its merged file, or the per-worker parts of a stopped run."""
    from enablebot import jsonl

    files = [out / "naive.jsonl"] if (out / "naive.jsonl").is_file() else sorted(out.glob("naive.jsonl.*"))
    return [row for f in files for row in jsonl.read_values(f)]


def sweep_rows(out: Path, phase: str) -> list[dict]:
    """One row per finished sweep item: verdict and the build / trace / engine split."""
    from enablebot.sweep.checkpoint import RESULTS_FILE, load_results

    path = out / phase / RESULTS_FILE
    if not path.is_file():
        return []
    rows = []
    for r in load_results(path).values():
        st, cs = r.stage_s, r.stage_cpu_s
        build = st.get("resolve", 0.0) + st.get("create", 0.0)
        trace = st.get("trace", 0.0) + st.get("fullgraph", 0.0)
        cpu = sum(cs.values())
        build_cpu = cs.get("resolve", 0.0) + cs.get("create", 0.0)
        trace_cpu = cs.get("trace", 0.0) + cs.get("fullgraph", 0.0)
        rows.append({"model_type": r.spec.model_id, "mode": r.spec.mode, "scenario": r.spec.scenario,
                     "verdict": str(r.verdict), "seconds": r.duration_s, "build_s": build, "trace_s": trace,
                     "engine_s": max(0.0, r.duration_s - build - trace), "eager_s": st.get("eager", 0.0),
                     "cpu": cpu, "build_cpu": build_cpu, "trace_cpu": trace_cpu,
                     "engine_cpu": max(0.0, cpu - build_cpu - trace_cpu), "eager_cpu": cs.get("eager", 0.0),
                     "build": r.build})
    return rows


def _naive_as_rows(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        if "model_type" not in r:
            continue
        build = r.get("build_s", 0.0)
        build_cpu = r.get("build_cpu_s", build)
        verdict = r["verdict"] if r["verdict"] in ("full_graph", "graph_break", "create_error") else "error"
        out.append({"model_type": r["model_type"], "mode": r["mode"], "scenario": None, "verdict": verdict,
                    "seconds": r["seconds"], "build_s": build, "trace_s": r["seconds"] - build, "engine_s": 0.0,
                    "eager_s": 0.0, "cpu": r.get("cpu_s", 0.0), "build_cpu": build_cpu,
                    "trace_cpu": r.get("cpu_s", 0.0) - build_cpu, "engine_cpu": 0.0, "eager_cpu": 0.0, "build": ""})
    return out


def split(rows_by: dict[str, list[dict]], labels: list[str], mode: str, only_full_graph: bool) -> dict:
    """Totals per label over the (type, mode) items every label ran (and, if asked, all full graph)."""
    keyed = {lab: {r["model_type"]: r for r in rows if r["mode"] == mode and r["verdict"] != "skipped"}
             for lab, rows in rows_by.items() if lab in labels}
    keyed = {lab: v for lab, v in keyed.items() if v}  # a phase that ran nothing (or not yet) drops out
    if len(keyed) < 2:
        return {}
    common = set.intersection(*(set(v) for v in keyed.values()))
    if only_full_graph:
        common = {t for t in common if all(keyed[lab][t]["verdict"] == "full_graph" for lab in keyed)}
    out = {"items": len(common), "types": sorted(common), "by": {}}
    for lab in labels:
        if lab not in keyed:
            continue
        picked = [keyed[lab][t] for t in common]
        tot = {k: round(sum(r[k] for r in picked), 2) for k in ("seconds", "build_s", "trace_s", "engine_s", "eager_s",
                                                                   "cpu", "build_cpu", "trace_cpu", "engine_cpu",
                                                                   "eager_cpu")}
        tot["per_item_s"] = round(tot["seconds"] / len(picked), 3) if picked else None
        tot["per_item_cpu"] = round(tot["cpu"] / len(picked), 3) if picked else None
        tot["fresh_builds"] = sum(1 for r in picked if r["build"] == "fresh")
        out["by"][lab] = tot
    base = out["by"].get("naive harness", {})
    for tot in out["by"].values():
        tot["vs_naive"] = round(tot["seconds"] / base["seconds"], 3) if base.get("seconds") else None
        tot["cpu_vs_naive"] = round(tot["cpu"] / base["cpu"], 3) if base.get("cpu") else None
    return out


def agreement(a: list[dict], b: list[dict]) -> dict:
    ka = {(r["model_type"], r["mode"]): r["verdict"] for r in a}
    kb = {(r["model_type"], r["mode"]): r["verdict"] for r in b}
    common = sorted(set(ka) & set(kb))
    differ = [{"item": f"{t}/{m}", "a": ka[(t, m)], "b": kb[(t, m)]} for t, m in common if ka[(t, m)] != kb[(t, m)]]
    return {"common": len(common), "agree": len(common) - len(differ), "differ": differ}


def against_baseline(out: Path, baseline: Path) -> dict:
    """The `call` phase's verdicts against an earlier default pass of the same device (the same
    item: type, base, mode, scenario `call`): the changes must leave them as they were."""
    from enablebot.sweep.checkpoint import RESULTS_FILE, load_results

    mine = {(r["model_type"], r["mode"]): r["verdict"] for r in sweep_rows(out, "call")}
    base = {(r.spec.model_id, r.spec.mode): str(r.verdict)
            for r in load_results(baseline / RESULTS_FILE).values()
            if r.spec.task == "base" and r.spec.scenario == "call" and r.spec.pass_name == "dynamo"}
    common = sorted(set(mine) & set(base))
    differ = [{"item": f"{t}/{m}", "baseline": base[(t, m)], "now": mine[(t, m)]} for t, m in common
              if base[(t, m)] != mine[(t, m)]]
    return {"baseline": str(baseline), "common": len(common), "agree": len(common) - len(differ), "differ": differ}


def report(out: Path, meta: dict, phases: dict, baseline: Path | None = None) -> dict:
    rows_by: dict[str, list[dict]] = {}
    if "naive" in phases:
        rows_by["naive harness"] = _naive_as_rows(naive_rows(out))
    for label, phase, scen in ROWS[1:]:
        if phase in phases:
            rows_by[label] = [r for r in sweep_rows(out, phase) if r["scenario"] == scen]
    for name, ph in phases.items():
        got = rows_by["naive harness"] if name == "naive" else [r for r in sweep_rows(out, name)]
        ph["items"] = len(got)
        ph["worker_s"] = round(sum(r["seconds"] for r in got), 2)
        if name != "naive":
            ph["fresh_builds"] = sum(1 for r in got if r["build"] == "fresh")
            ph.update(_wall_parts(out / name, ph["wall_s"]))
    labels = [lab for lab, _, _ in ROWS]
    tables = {}
    for mode in ("eval", "train"):
        labs = labels if mode == "eval" else labels[:3]
        tables[mode] = {"all": split(rows_by, labs, mode, False), "full_graph": split(rows_by, labs, mode, True)}
    nw, nc = phases.get("naive", {}).get("wall_s"), phases.get("naive", {}).get("cpu_s")
    for ph in phases.values():
        ph["wall_vs_naive"] = round(ph["wall_s"] / nw, 3) if nw else None
        ph["cpu_vs_naive"] = round(ph["cpu_s"] / nc, 3) if nc else None
    agree = {}
    if "naive harness" in rows_by and "naive call, engine" in rows_by:
        agree["naive harness vs naive call, engine"] = agreement(rows_by["naive harness"], rows_by["naive call, engine"])
    if "naive call, engine" in rows_by and "call (default)" in rows_by:
        agree["naive call, engine vs call"] = agreement(rows_by["naive call, engine"], rows_by["call (default)"])
    if baseline is not None and "call" in phases:
        meta["against_baseline"] = against_baseline(out, baseline)
    data = {**meta, "phases": phases, "split": tables, "agreement": agree}
    (out / "split.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    (out / "split.md").write_text(markdown(data), encoding="utf-8")
    return data


def _wall_parts(sweep_dir: Path, wall_s: float) -> dict:
    """A sweep phase's wall split: its start-up and planning before the loop (startup_s, which the
    sweep logs), the loop (its wall_s) and the rest, the process's exit."""
    from enablebot.sweep.engine import load_runs

    try:
        last = load_runs(sweep_dir)[-1]
    except (FileNotFoundError, IndexError):
        return {}
    if last.get("startup_s") is None:
        return {"loop_s": last["wall_s"]}
    return {"startup_s": last["startup_s"], "loop_s": last["wall_s"],
            "exit_s": round(wall_s - last["startup_s"] - last["wall_s"], 2)}


def markdown(d: dict) -> str:
    lines = [f"# Speed split: {len(d['models'])} base types, {d['jobs']} workers, device {d['device']}, "
             f"timeout {d['timeout']} s", "", f"torch {d['torch']}, transformers {d['transformers']}; {d['host']}", "",
             "| phase | what | items | wall s | wall / naive | start-up / loop / exit s | CPU s | CPU / naive | worker s | "
             "fresh builds | load avg (start, end) | stopped at budget |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    what = {"naive": "naive harness", "call": "sweep `call` (default pass)", "engine": "sweep `naive` (naive call, engine)",
            "variants": "sweep `call_unpadded` + `call_nocache` (eval)"}
    for name, ph in d["phases"].items():
        parts = " / ".join(str(ph.get(k, "")) for k in ("startup_s", "loop_s", "exit_s")) if "loop_s" in ph else ""
        lines.append(f"| {name} | {what[name]} | {ph.get('items', 0)} | {ph['wall_s']} | {ph.get('wall_vs_naive')} | "
                     f"{parts} | {ph['cpu_s']} | {ph.get('cpu_vs_naive')} | {ph.get('worker_s')} | {ph.get('fresh_builds', '')} | "
                     f"{ph.get('load_avg', '')} | {ph['stopped_at_budget']} |")
    # CPU time on a CPU run (other jobs on shared cores stretch wall time, not CPU time); wall time
    # on CUDA, where CPU time misses the waits for the device.
    cpu = d["device"] == "cpu"
    k = {"s": "cpu", "build": "build_cpu", "trace": "trace_cpu", "engine": "engine_cpu", "eager": "eager_cpu",
         "per": "per_item_cpu", "vs": "cpu_vs_naive"} if cpu else \
        {"s": "seconds", "build": "build_s", "trace": "trace_s", "engine": "engine_s", "eager": "eager_s",
         "per": "per_item_s", "vs": "vs_naive"}
    for mode, groups in d["split"].items():
        for group, s in groups.items():
            if not s:
                continue
            title = "all items every row ran" if group == "all" else "items full graph in every row"
            lines += ["", f"## {mode}: {title} ({s['items']} types), {'CPU' if cpu else 'wall'} seconds", "",
                      "| row | seconds | per item | build | trace (Dynamo) | engine (rest) | of which eager | fresh builds | vs naive harness |",
                      "|---|---|---|---|---|---|---|---|---|"]
            for lab, t in s["by"].items():
                lines.append(f"| {lab} | {t[k['s']]} | {t[k['per']]} | {t[k['build']]} | {t[k['trace']]} | "
                             f"{t[k['engine']]} | {t[k['eager']]} | {t['fresh_builds']} | {t[k['vs']]} |")
    b = d.get("against_baseline")
    if b:
        lines += ["", f"Verdicts of `call` against the earlier default pass `{b['baseline']}`: {b['agree']} of "
                  f"{b['common']} items agree."]
        lines += [f"- {x['item']}: {x['baseline']} then, {x['now']} now" for x in b["differ"]]
    for name, a in d["agreement"].items():
        lines += ["", f"Verdicts, {name}: {a['agree']} of {a['common']} items agree."]
        lines += [f"- {x['item']}: {x['a']} / {x['b']}" for x in a["differ"]]
    lines += ["", "build: resolve + create (the naive harness: its share of the type's build); trace: trace + "
              "fullgraph stages (the naive harness: its compile step); engine: the rest of the item's worker time "
              "(eager step, plan, result). Worker time excludes the pool and process start-up; wall includes them. "
              "CPU: every process of the phase (start-up included), the robust figure when other jobs share the "
              "cores (see the load average)."]
    return "\n".join(lines) + "\n"


def publish(out: Path, dest: Path) -> None:
    """split.json, split.md and one archive of every phase's results in `dest` (a device's $OUT
    brings back a few files, not a sweep's tree of logs)."""
    import shutil
    import tarfile

    dest.mkdir(parents=True, exist_ok=True)
    for name in ("split.json", "split.md"):
        shutil.copyfile(out / name, dest / name)
    keep = [p for p in out.rglob("*") if p.is_file() and p.parent.name != "logs"
            and (p.name.endswith(".jsonl") or p.name.startswith("naive.jsonl") or p.name == "models.txt")]
    tmp = dest / "split-results.tar.gz.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        for p in keep:
            tar.add(p, arcname=str(p.relative_to(out)))
    tmp.replace(dest / "split-results.tar.gz")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--first", type=int, help="the first N model types (sorted) with a base model")
    src.add_argument("--models-file", type=Path, help="model types, one per line")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120.0, help="the sweep's per-item timeout")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--phases", nargs="+", default=list(PHASES), choices=PHASES)
    ap.add_argument("--budget-min", type=float, default=None, help="time box for the whole run, minutes")
    ap.add_argument("--baseline", type=Path, help="an earlier default Dynamo pass on this device (a sweep "
                    "directory): the `call` phase's verdicts are compared with it")
    ap.add_argument("--out", type=Path, required=True, help="a fresh directory")
    ap.add_argument("--resume", action="store_true", help="keep the finished phases of an earlier run in --out "
                    "and run the others (a phase that ran nothing runs again)")
    ap.add_argument("--publish", type=Path, help="after each phase, copy the report and an archive of the "
                    "results here (a GPU machine's $OUT)")
    args = ap.parse_args(argv)
    previous = {}
    if (args.out / "split.json").exists():
        if not args.resume:
            print(f"{args.out} holds a previous run: pass a fresh --out (or --resume)", file=sys.stderr)
            return 2
        previous = json.loads((args.out / "split.json").read_text(encoding="utf-8"))["phases"]
    listed = []
    if args.models_file:
        listed = [ln.strip() for ln in args.models_file.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    models = pick_models(args.first, listed, ("eval", "train"))
    if not models:
        print("no model types to run", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "models.txt").write_text("\n".join(models) + "\n", encoding="utf-8")
    t_start = time.time()
    deadline = t_start + args.budget_min * 60 if args.budget_min else float("inf")
    _become_subreaper()
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    import platform

    import torch
    import transformers

    meta = {"models": models, "jobs": args.jobs, "device": args.device, "timeout": args.timeout,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "host": f"{platform.node()}, {len(os.sched_getaffinity(0))} cores",
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)), "budget_min": args.budget_min}
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    py = sys.executable
    phases: dict[str, dict] = {k: v for k, v in previous.items() if v.get("items")}
    for name in args.phases:
        if name in phases:
            continue
        left = deadline - time.time()
        if left < 20:
            print(f"== {name}: skipped, {left:.0f} s of the budget left", file=sys.stderr)
            break
        if name == "naive":
            cmd = [py, str(ROOT / "benchmarks" / "naive_harness.py"), "--models-file", str(args.out / "models.txt"),
                   "--jobs", str(args.jobs), "--device", args.device, "--out", str(args.out / "naive.jsonl")]
        else:
            scenarios, modes = SWEEP_SCENARIOS[name]
            cmd = [py, "-m", "enablebot.cli", "sweep", "--pass", "dynamo", "--task", "base", "--device", args.device,
                   "--out", str(args.out / name), "--models-file", str(args.out / "models.txt"),
                   "--jobs", str(args.jobs), "--timeout", str(args.timeout), "--no-report",
                   *[a for m in modes for a in ("--mode", m)], *[a for s in scenarios for a in ("--scenario", s)]]
            if left != float("inf"):
                # Start no item after this; the ones running may take a while to finish.
                cmd += ["--max-minutes", f"{max(0.1, (left - min(60.0, left / 3)) / 60):.2f}"]
        print(f"== {name}: {len(models)} types, {args.jobs} jobs, {left:.0f} s of the budget left", file=sys.stderr)
        phases[name] = run_phase(cmd, env, deadline)
        report(args.out, meta, phases, args.baseline)
        if args.publish:
            publish(args.out, args.publish)
    data = report(args.out, meta, phases, args.baseline)
    if args.publish:
        publish(args.out, args.publish)
    print((args.out / "split.md").read_text(encoding="utf-8"))
    return 0 if all(p["rc"] == 0 or p["stopped_at_budget"] for p in data["phases"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
