"""How long does loading a whole pass's results.jsonl take, now and at ed153a0?

ed153a0's `Serializable.from_dict` ran `typing.get_type_hints` again for every object (a result
holds ~20 of them); now each class has one pydantic TypeAdapter, built once, that validates too.
Both versions load the same committed file through the same entry point
(`enablebot.sweep.checkpoint.load_results`), each in its own fresh process (imports are paid
before the clock starts). ed153a0's package is taken with `git archive` into a temp directory.
Rounds alternate old/new so load on the machine hits both alike; the first load of a process
includes building the validators (what a CLI command pays), the best of the later ones does not.
Wall time swings with other work on the cores, so each load's CPU time is printed too.

    .venv/bin/python benchmarks/load_speed.py [--results results/cpu-dynamo/results.jsonl] [--rounds 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OLD = "ed153a0"

# Runs in a fresh process with PYTHONPATH at one version's package.
LOAD = r'''
import json, sys, time
from pathlib import Path
from enablebot.sweep.checkpoint import load_results
import enablebot.results
path, repeats = Path(sys.argv[1]), int(sys.argv[2])
times, cpu = [], []
for _ in range(repeats):
    t, c = time.perf_counter(), time.process_time()
    got = load_results(path)
    times.append(time.perf_counter() - t)
    cpu.append(time.process_time() - c)
print(json.dumps({"n": len(got), "times": times, "cpu": cpu, "package": enablebot.results.__file__,
                  "sample": sorted(got)[0], "verdicts": sorted({str(r.verdict) for r in got.values()})}))
'''


def old_package(dest: Path, commit: str = OLD) -> Path:
    """`commit`'s enablebot package under dest (git archive: no worktree, nothing in .git changes)."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "enablebot"], check=True,
                          capture_output=True).stdout
    tar = dest / "old.tar"
    tar.write_bytes(data)
    with tarfile.open(tar) as t:
        t.extractall(dest, filter="data")
    return dest


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()


def load_once(root: Path, results: Path, repeats: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", LOAD, str(results), str(repeats)], env=env, cwd=str(root),
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=ROOT / "results" / "cpu-dynamo" / "results.jsonl")
    ap.add_argument("--rounds", type=int, default=3, help="fresh processes per version, alternating")
    ap.add_argument("--repeats", type=int, default=3, help="loads per process (the first builds the validators)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)
    results = args.results.resolve()
    lines = sum(1 for ln in results.read_text(encoding="utf-8").splitlines() if ln.strip())
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory(prefix="load-speed-") as tmp:
        roots = {"old": old_package(Path(tmp)), "new": ROOT}
        for i in range(args.rounds):
            for side in (("old", "new") if i % 2 == 0 else ("new", "old")):
                got = load_once(roots[side], results, args.repeats)
                assert Path(got["package"]).resolve().is_relative_to(roots[side].resolve()), got["package"]
                runs[side].append(got)
    a, b = runs["old"][0], runs["new"][0]
    assert a["n"] == b["n"] and a["sample"] == b["sample"] and a["verdicts"] == b["verdicts"], "the versions disagree"
    fig = {}
    for side, rs in runs.items():
        fig[side] = {"first_load_s": statistics.median(r["times"][0] for r in rs),
                     "first_load_cpu_s": statistics.median(r["cpu"][0] for r in rs),
                     "first_loads_s": [r["times"][0] for r in rs],
                     "best_later_load_s": min((t for r in rs for t in r["times"][1:]), default=None),
                     "best_later_load_cpu_s": min((t for r in rs for t in r["cpu"][1:]), default=None)}
    ratio = {k: round(fig["old"][k] / fig["new"][k], 1) for k in fig["new"] if k != "first_loads_s" and fig["new"][k]}
    rel = results.relative_to(ROOT) if results.is_relative_to(ROOT) else results
    print(f"{rel}: {lines} lines, {a['n']} results (both versions read the same keys and verdicts)")
    print(f"median of {args.rounds} fresh processes for the first load; best of the later loads")
    cols = (("first_load_s", "first load"), ("first_load_cpu_s", "(cpu)"),
            ("best_later_load_s", "later load"), ("best_later_load_cpu_s", "(cpu)"))
    print(f"{'':8}" + "".join(f"{label:>12}" for _, label in cols))
    for side, label in (("old", OLD), ("new", "now")):
        print(f"{label:8}" + "".join(f"{fig[side][k]:>10.3f} s" if fig[side][k] is not None else f"{'-':>12}"
                                      for k, _ in cols))
    print(f"{'ratio':8}" + "".join(f"{ratio[k]:>10.1f} x" if k in ratio else f"{'-':>12}" for k, _ in cols))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "results": str(rel), "lines": lines, "results_loaded": a["n"], "old_commit": OLD,
            "new_commit": git("rev-parse", "--short", "HEAD"),
            # the measured code: enablebot/ files that differ from that commit (none: it is the commit's)
            "new_uncommitted": git("status", "--porcelain", "--", "enablebot").splitlines(), "rounds": args.rounds,
            "repeats": args.repeats, "python": platform.python_version(), "cpus": os.cpu_count(),
            "old": fig["old"], "new": fig["new"], "ratio_old_over_new": ratio}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
