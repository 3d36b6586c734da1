"""README's fidelity table: which models break only in the paths a user runs.

For each result set (a sweep directory) it lists, per device and torch/transformers version:
  only in decode      the decode scenario breaks (prefill or decode step) while `call` does not;
  only with padding  `call` breaks while `call_unpadded` (the same call, every row at full
                      length) compiles to one graph;
  only with the cache  `call` breaks while `call_nocache` (use_cache=False passed) does not;
  only in the user call  with --minimal: the model compiled to one graph under the old minimal
                      harness (use_cache=False, no padding) and breaks in `call` (cache at its
                      default, padded batch): the breaks the minimal call hid.
The two diagnostic scenarios run only where asked (`sweep --scenario call_unpadded ...`); a
column stays "not run" for a result set without them.

    python scripts/scenario_table.py results/gpu/cuda-dynamo-default \\
        --minimal results/gpu/cuda-inductor-tiny [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from enablebot.sweep.checkpoint import RESULTS_FILE, load_results  # noqa: E402
from enablebot.results import RunResult  # noqa: E402


def _load(d: Path) -> list[RunResult]:
    return list(load_results(Path(d) / RESULTS_FILE).values())


def _label(r: RunResult) -> str:
    return f"{r.spec.device} · torch {r.versions.torch.split('+')[0]} · transformers {r.versions.transformers}"


def _breaks(r: RunResult) -> str:
    ids = sorted({f"{b.registry_id or b.gb_type}" for b in r.graph_breaks})
    return ", ".join(ids[:3])


def _by_item(results: list[RunResult]) -> dict[tuple, dict[str, RunResult]]:
    by: dict[tuple, dict[str, RunResult]] = defaultdict(dict)
    for r in results:
        if r.spec.mode == "eval":
            by[(r.spec.model_id, r.spec.task)][r.spec.scenario] = r
    return by


def only_in_decode(results: list[RunResult]) -> dict[str, list[str]]:
    by = _by_item(results)
    out: dict[str, list[str]] = defaultdict(list)
    for (model, task), sc in sorted(by.items()):
        call, dec = sc.get("call"), sc.get("decode")
        if call and dec and call.verdict == "full_graph" and dec.verdict == "graph_break":
            steps = sorted({b.step or "?" for b in dec.graph_breaks})
            out[_label(dec)].append(f"{model}/{task} ({_breaks(dec)} in {'/'.join(steps)})")
    return out


def only_without(results: list[RunResult], diagnostic: str) -> dict[str, list[str]] | None:
    """`call` breaks, and the diagnostic variant (one thing changed) compiles to one graph.
    None when no result of that diagnostic scenario is in the set."""
    by = _by_item(results)
    if not any(diagnostic in sc for sc in by.values()):
        return None
    out: dict[str, list[str]] = defaultdict(list)
    for (model, task), sc in sorted(by.items()):
        call, diag = sc.get("call"), sc.get(diagnostic)
        if call and diag and call.verdict == "graph_break" and diag.verdict == "full_graph":
            out[_label(call)].append(f"{model}/{task} ({_breaks(call)})")
    return out


def only_in_user_call(results: list[RunResult], minimal: list[RunResult]) -> dict[str, list[str]]:
    old = {(r.spec.model_id, r.spec.task, r.spec.mode): r for r in minimal}
    out: dict[str, list[str]] = defaultdict(list)
    for r in sorted(results, key=lambda r: r.spec.model_id):
        if r.spec.scenario != "call":
            continue
        o = old.get((r.spec.model_id, r.spec.task, r.spec.mode))
        if o and o.verdict == "full_graph" and r.verdict == "graph_break" and o.versions.torch == r.versions.torch:
            out[_label(r)].append(f"{r.spec.model_id}/{r.spec.task}/{r.spec.mode} ({_breaks(r)})")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", type=Path)
    ap.add_argument("--minimal", type=Path, action="append", default=[],
                    help="a result set from the old minimal harness (cache off, no padding), same device/version")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    # A later result set replaces an earlier one's result for the same item (a re-run).
    sets = list({r.key: r for d in args.results for r in _load(d)}.values())
    minimal = [r for d in args.minimal for r in _load(d)]
    table = {"only_in_decode": only_in_decode(sets),
             "only_with_padding": only_without(sets, "call_unpadded"),
             "only_with_cache": only_without(sets, "call_nocache"),
             "only_in_user_call": only_in_user_call(sets, minimal) if minimal else None}
    columns = (("only_in_decode", "breaks only in `decode`"), ("only_with_padding", "only with padding"),
               ("only_with_cache", "only with the cache on"),
               ("only_in_user_call", "only in the user call (vs the minimal harness)"))
    print("| device · versions | " + " | ".join(h for _, h in columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    labels = {lab for col in table.values() if col for lab in col} | {_label(r) for r in sets if r.spec.scenario == "call"}

    def cell(col: dict | None, label: str) -> str:
        if col is None:
            return "not run"
        xs = col.get(label, [])
        return f"{len(xs)}: " + "; ".join(xs[:12]) + (" …" if len(xs) > 12 else "") if xs else "0"

    for label in sorted(labels):
        print(f"| {label} | " + " | ".join(cell(table[k], label) for k, _ in columns) + " |")
    if args.json:
        args.json.write_text(json.dumps(table, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
