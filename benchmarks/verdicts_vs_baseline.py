"""Whether a sweep's items came out as in an earlier pass: verdict, breaks, graphs and break types.

A speed change must leave every verdict as it was. This compares each item of a sweep directory
with the same item (type, task, mode, scenario) of a committed pass and prints every difference.
Exit status 1 when any item differs.

    PYTHONPATH=. python benchmarks/verdicts_vs_baseline.py OUT results/cpu-dynamo-default
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def load(path: Path) -> dict[tuple, dict]:
    path = path / "results.jsonl" if path.is_dir() else path
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            s = r["spec"]
            out[(s["model_id"], s.get("task"), s["mode"], s.get("scenario") or "call")] = r
    return out


def seen(r: dict) -> tuple:
    breaks = sorted((g.get("gb_type"), g.get("count", 1)) for g in r.get("graph_breaks", []))
    return r["verdict"], r.get("explain_breaks"), r.get("explain_graphs"), breaks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep", type=Path, help="a sweep directory (or its results.jsonl)")
    ap.add_argument("baseline", type=Path, help="the earlier pass to compare with")
    args = ap.parse_args(argv)
    now, then = load(args.sweep), load(args.baseline)
    same, differ, missing = 0, 0, 0
    for key, r in sorted(now.items()):
        b = then.get(key)
        if b is None:
            missing += 1
            print(f"not in the baseline: {'/'.join(map(str, key))}")
        elif seen(r) == seen(b):
            same += 1
        else:
            differ += 1
            print(f"DIFFERS {'/'.join(map(str, key))}: now {seen(r)[:3]}, then {seen(b)[:3]}")
    print(f"{same} of {same + differ} items identical (verdict, breaks, graphs, break types); "
          f"{missing} not in the baseline")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
