"""Where the fix playbook applies: every graph break of a committed sweep pass, matched against
the playbook (enablebot/data/playbook.yaml) at the installed sources.

    python benchmarks/fixbench/playbook_coverage.py [--results results/cpu-dynamo-default/results.jsonl]
                                                    [--json OUT.json]

For each break (deduplicated by model type, GB id and user frame) it builds the user stack as
`Site`s from the installed files and asks `enablebot.fix.draft.rewrites` which rewrites propose a
candidate and which idea-only entries match. It prints one Markdown table per entry (model
types and break sites) and the breaks no entry matches. The installed torch / transformers
must be the pass's versions (checked: a mismatch is an error, a moved line would match wrong
code).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent.parent) not in sys.path:  # run as a script from the repo root
    sys.path.insert(0, str(HERE.parent.parent))

from enablebot.fix.draft.rewrites import load_playbook, matching_entries, propose, rewrite_diff  # noqa: E402
from enablebot.fix.draft.sites import sites_of  # noqa: E402
from enablebot.results import GraphBreak  # noqa: E402
from enablebot.versions import current  # noqa: E402

DEFAULT_RESULTS = HERE.parent.parent / "results" / "cpu-dynamo-default" / "results.jsonl"


def coverage(results: Path, diffs: Path | None = None) -> dict:
    playbook = load_playbook()
    rows = [json.loads(ln) for ln in results.read_text(encoding="utf-8").splitlines() if ln.strip()]
    versions = {json.dumps({k: r["versions"].get(k) for k in ("torch", "transformers")}, sort_keys=True) for r in rows}
    cache: dict[str, str | None] = {}
    seen: set[tuple] = set()
    by_entry: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))  # entry -> site -> types
    rewrites: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    unmatched: dict[str, set[str]] = defaultdict(set)
    breaks = 0
    for r in rows:
        for gb in r.get("graph_breaks") or []:
            uf = gb.get("user_frame") or {}
            key = (r["model_type"], gb.get("registry_id"), gb.get("gb_type"), uf.get("filename"), uf.get("lineno"))
            if key in seen:
                continue
            seen.add(key)
            breaks += 1
            sites = sites_of(GraphBreak.from_dict(gb), cache)
            where = (f"{gb.get('registry_id') or gb.get('gb_type', '')[:30]} "
                     f"{Path(uf.get('filename') or '?').name}:{uf.get('lineno')} {uf.get('function')}: "
                     f"`{(uf.get('source') or '').strip()[:70]}`")
            matched = matching_entries(gb.get("gb_type") or "", gb.get("registry_id"), sites, playbook)
            for e in matched:
                by_entry[e.id][where].add(r["model_type"])
            for rw in propose(gb.get("gb_type") or "", gb.get("registry_id"), sites, playbook):
                rewrites[rw.entry][f"{where} -> {rw.function}"].add(r["model_type"])
                if diffs is not None:
                    old = next(s.text for s in sites if s.path == rw.path)
                    name = f"{rw.entry}__{Path(rw.path).stem}__{rw.function.replace('.', '_')}.diff"
                    diffs.mkdir(parents=True, exist_ok=True)
                    (diffs / name).write_text(rewrite_diff(rw, old), encoding="utf-8")
            if not matched:
                unmatched[where].add(r["model_type"])
    shown = results.resolve()
    shown = shown.relative_to(HERE.parent.parent) if shown.is_relative_to(HERE.parent.parent) else shown
    return {"results": str(shown), "versions": sorted(versions), "breaks": breaks,
            "entries": {e.id: {"rewrite": e.rewrite, "sites": {w: sorted(t) for w, t in sorted(by_entry[e.id].items())},
                               "rewritten": {w: sorted(t) for w, t in sorted(rewrites[e.id].items())}}
                        for e in playbook},
            "unmatched": {w: sorted(t) for w, t in sorted(unmatched.items(), key=lambda kv: -len(kv[1]))}}


def render(cov: dict) -> str:
    out = [f"# Playbook coverage of {cov['results']}", "",
           f"Versions of the pass: {', '.join(cov['versions'])}. "
           f"Distinct breaks (model type, id, frame): {cov['breaks']}.", "",
           "| entry | rewrite | model types with a proposed rewrite | model types matched (idea) |", "|---|---|---|---|"]
    for eid, e in cov["entries"].items():
        rw_types = sorted({t for ts in e["rewritten"].values() for t in ts})
        idea_types = sorted({t for ts in e["sites"].values() for t in ts})
        out.append(f"| {eid} | {e['rewrite'] or '-'} | {len(rw_types)} | {len(idea_types)} |")
    for eid, e in cov["entries"].items():
        out += ["", f"## {eid} ({'rewrite ' + e['rewrite'] if e['rewrite'] else 'idea only'})", ""]
        table = e["rewritten"] if e["rewrite"] else e["sites"]
        if not table:
            out.append("no break in this pass matches")
            continue
        out += ["| break site | model types |", "|---|---|"]
        for where, types in table.items():
            out.append(f"| {where.replace('|', '/')} | {', '.join(types)} |")
    out += ["", "## Breaks no entry matches", "", "| break site | model types |", "|---|---|"]
    for where, types in cov["unmatched"].items():
        out.append(f"| {where.replace('|', '/')} | {', '.join(types)} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    ap.add_argument("--json", type=Path, default=None, help="also write the coverage as JSON here")
    ap.add_argument("--diffs", type=Path, default=None, help="write each proposed rewrite as a unified diff here")
    args = ap.parse_args(argv)
    cov = coverage(args.results, args.diffs)
    here = current()
    want = {json.dumps({"torch": here.torch, "transformers": here.transformers}, sort_keys=True)}
    if set(cov["versions"]) != want:
        print(f"the pass ran on {cov['versions']}, installed here {sorted(want)}: line numbers would not match",
              file=sys.stderr)
        return 2
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(cov, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    sys.stdout.write(render(cov))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
