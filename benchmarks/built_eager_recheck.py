"""Built+eager coverage of a default pass after harness changes, without re-running the whole pass.

Every item of the types that did not build or run eager in BASE (or whose inputs changed) was
re-run (the default Dynamo pass, `--models-file`) into RECHECK; the other types' items are taken
from BASE as they were. Several RECHECK directories apply in order (a later one's types replace
the earlier ones'). Prints the coverage before and after (the share of counted items that built
and ran eager, as `sweep`'s summary defines it), the items still failing, by type, and the eval
`call` items that leave a tower unrun; writes coverage.json into the last RECHECK.

    PYTHONPATH=. .venv/bin/python benchmarks/built_eager_recheck.py results/cpu-dynamo-default \
        results/cpu-built-recheck results/cpu-towers-recheck
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from enablebot.sweep.checkpoint import RESULTS_FILE, load_results
from enablebot.sweep.reports import summarize


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", type=Path)
    ap.add_argument("recheck", type=Path, nargs="+")
    a = ap.parse_args()
    base = load_results(a.base / RESULTS_FILE)
    merged = dict(base)
    again: dict = {}
    for d in a.recheck:
        part = load_results(d / RESULTS_FILE)
        redone = {r.spec.model_id for r in part.values()}
        merged = {k: v for k, v in merged.items() if v.spec.model_id not in redone} | part
        again = {k: v for k, v in again.items() if v.spec.model_id not in redone} | part
    types = {r.spec.model_id for r in again.values()}
    unrun = sorted(f"{r.spec.model_id}/{r.spec.task}: {', '.join(r.towers_not_run)}" for r in merged.values()
                   if r.spec.mode == "eval" and r.spec.scenario == "call" and r.towers_not_run)
    before, after = summarize(list(base.values())), summarize(list(merged.values()))
    failing = Counter(r.spec.model_id for r in merged.values() if r.verdict.counted and r.verdict.builder_failure)
    counted = sum(1 for r in merged.values() if r.verdict.counted)
    out = {"base": str(a.base), "recheck": [str(d) for d in a.recheck], "types_rerun": len(types),
           "items_rerun": len(again), "before": before.coverage, "after": after.coverage,
           "counted_after": counted, "failing_after": sum(failing.values()),
           "failing_by_type": dict(failing.most_common()), "eval_call_towers_not_run": unrun,
           "versions": sorted({f"torch {r.versions.torch}, transformers {r.versions.transformers}" for r in again.values()})}
    (a.recheck[-1] / "coverage.json").write_text(json.dumps(out, indent=1) + "\n")
    print(f"built+eager: {before.coverage:.1%} -> {after.coverage:.1%} "
          f"({counted - sum(failing.values())} of {counted} counted items; {len(again)} items of {len(types)} types re-run)")
    for mt, n in failing.most_common():
        print(f"  {mt}: {n}")
    print(f"eval call items with a tower not run: {len(unrun)}")
    for line in unrun:
        print(f"  {line}")


if __name__ == "__main__":
    main()
