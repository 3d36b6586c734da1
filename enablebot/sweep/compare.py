"""Release-to-release comparison of two result sets, with each change attributed to a version.

A result set is a sweep directory (results.jsonl) or a baseline file (baselines/*.json).
Items are matched on (model, task, device, mode, dtype, scenario). For each matched item
the comparison lists what was fixed, what newly broke, which graph-break types and counts
changed, and which errors were gained or lost, and attributes the change to torch or to
transformers when only one of them differs between the two runs ("both" when both do,
"neither" when the versions are equal and the harness or registry must have moved).

Pure: loading is at the edge (`load_set`), everything else works on typed values.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..jsonl import JsonlError
from .checkpoint import RESULTS_FILE, read_result_rows
from ..results import OK_VERDICTS, RunResult, Serializable

# Verdicts that mean the harness itself could not build or run the model (or it died).
ERROR_VERDICTS = ("compile_error", "eager_error", "create_error", "timeout", "crash")
CHANGE_KINDS = ("fixed", "newly_broken", "breaks_changed", "error_gained", "error_lost", "error_changed",
                "numerics_fixed", "numerics_broken", "verdict_changed")
ATTRIBUTIONS = ("torch", "transformers", "both", "neither")


class CompareInputError(ValueError):
    """A path that is neither a sweep directory nor a baseline file."""


@dataclass(frozen=True)
class ItemKey:
    model_id: str
    task: str
    device: str
    mode: str
    dtype: str
    scenario: str = "call"

    def label(self) -> str:
        return f"{self.model_id}|{self.task}|{self.device}|{self.mode}|{self.dtype}|{self.scenario}"


@dataclass
class Outcome(Serializable):
    """What one run gave, reduced to what a release comparison looks at."""

    verdict: str
    torch: str = ""
    transformers: str = ""
    graph_breaks: int | None = None
    breaks_by_type: dict[str, int] = field(default_factory=dict)  # GBxxxx (or gb_type) -> count
    error: str | None = None  # "stage: ExceptionType"
    numerics_passed: bool | None = None
    detailed: bool = True  # False for baseline entries: no break types, no error text
    break_names: dict[str, str] = field(default_factory=dict)  # GBxxxx -> gb_type, for the legend


@dataclass
class ResultSet(Serializable):
    label: str
    kind: str  # sweep | baseline
    outcomes: dict[str, Outcome] = field(default_factory=dict)  # ItemKey.label() -> outcome
    keys: dict[str, ItemKey] = field(default_factory=dict)

    def versions(self) -> list[tuple[str, str]]:
        """(torch, transformers) pairs present, most common first."""
        c = Counter((o.torch, o.transformers) for o in self.outcomes.values())
        return [v for v, _ in c.most_common()]


@dataclass
class Change(Serializable):
    kind: str  # one of CHANGE_KINDS
    what: str


@dataclass
class ItemDiff(Serializable):
    model_id: str
    task: str
    device: str
    mode: str
    dtype: str
    scenario: str
    before: Outcome
    after: Outcome
    changes: list[Change] = field(default_factory=list)
    attribution: str = "neither"  # torch | transformers | both | neither


@dataclass
class ShareCount(Serializable):
    """Full-graph share of one set on some items: full_graph out of compiled (full_graph + graph_break)."""

    items: int = 0
    full_graph: int = 0
    compiled: int = 0

    @property
    def rate(self) -> float | None:
        return self.full_graph / self.compiled if self.compiled else None

    def text(self) -> str:
        pct = f"{100 * self.rate:.1f}%" if self.rate is not None else "-"
        return f"{pct} ({self.full_graph} of {self.compiled} compiled)"


@dataclass
class CompareReport(Serializable):
    a: str
    b: str
    versions_a: list[list[str]] = field(default_factory=list)
    versions_b: list[list[str]] = field(default_factory=list)
    compared: int = 0
    unchanged: int = 0
    diffs: list[ItemDiff] = field(default_factory=list)
    only_in_a: list[str] = field(default_factory=list)
    only_in_b: list[str] = field(default_factory=list)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # kind -> attribution -> items
    notes: list[str] = field(default_factory=list)
    break_names: dict[str, str] = field(default_factory=dict)  # GBxxxx -> gb_type of the ids in `diffs`
    # Full-graph share of each side on the items both hold (the comparison), and on all its own items
    # (a different sample whenever only_in_a or only_in_b is not empty: not to be read as a change).
    common_a: ShareCount = field(default_factory=ShareCount)
    common_b: ShareCount = field(default_factory=ShareCount)
    all_a: ShareCount = field(default_factory=ShareCount)
    all_b: ShareCount = field(default_factory=ShareCount)

    def markdown(self) -> str:
        return render_markdown(self)


# ---------------------------------------------------------------- loading (the I/O edge)

def release(version: str) -> str:
    """'2.13.0+cpu' -> '2.13.0': the local build tag (cpu/cu130) is not a different release."""
    return (version or "").split("+")[0]


def _error_text(r: RunResult) -> str | None:
    if r.verdict in OK_VERDICTS or r.verdict == "missing_dependency":
        return None
    if r.error is None:
        return r.verdict
    return f"{r.error.stage}: {r.error.type}"


def breaks_by_type(r: RunResult) -> dict[str, int]:
    """Graph breaks per type, keyed by the stable GBxxxx id where torch gave one."""
    out: dict[str, int] = {}
    for gb in r.graph_breaks:
        label = gb.registry_id or gb.gb_type
        out[label] = out.get(label, 0) + max(1, gb.count)
    return out


def outcome_from_result(r: RunResult) -> Outcome:
    return Outcome(verdict=r.verdict, torch=r.versions.torch, transformers=r.versions.transformers,
                   graph_breaks=r.stats.graph_breaks if r.stats else r.explain_breaks,
                   breaks_by_type=breaks_by_type(r), error=_error_text(r),
                   numerics_passed=r.numerics.passed if r.numerics else None, detailed=True,
                   break_names={gb.registry_id: gb.gb_type for gb in r.graph_breaks if gb.registry_id})


def key_from_result(r: RunResult, raw_spec: dict[str, Any] | None = None) -> ItemKey:
    s = r.spec
    # `scenario` is being added to RunSpec; older results do not carry it: they ran a plain call.
    scenario = getattr(s, "scenario", None) or (raw_spec or {}).get("scenario") or "call"
    return ItemKey(s.model_id, s.task or "default", s.device, s.mode, s.dtype, str(scenario))


def key_from_label(label: str) -> ItemKey:
    parts = label.split("|")
    if len(parts) not in (5, 6):
        raise CompareInputError(f"baseline key {label!r} is not model|task|device|mode|dtype[|scenario]")
    return ItemKey(*parts) if len(parts) == 6 else ItemKey(*parts, scenario="call")


def set_from_results(label: str, rows: list[tuple[RunResult, dict[str, Any]]]) -> ResultSet:
    """rows: (result, its raw spec dict), oldest first; the newest line for a key wins."""
    rs = ResultSet(label=label, kind="sweep")
    for r, raw_spec in rows:
        k = key_from_result(r, raw_spec)
        rs.keys[k.label()] = k
        rs.outcomes[k.label()] = outcome_from_result(r)
    return rs


def set_from_baseline(label: str, data: dict[str, Any]) -> ResultSet:
    from .baseline import Baseline

    b = Baseline.from_dict(data)
    rs = ResultSet(label=label, kind="baseline")
    for key, e in b.entries.items():
        k = key_from_label(key)
        rs.keys[k.label()] = k
        rs.outcomes[k.label()] = Outcome(verdict=e.verdict, torch=b.torch, transformers=b.transformers,
                                         graph_breaks=e.graph_breaks, numerics_passed=e.numerics_passed,
                                         error=e.verdict if e.verdict in ERROR_VERDICTS else None, detailed=False)
    return rs


def load_set(path: Path) -> ResultSet:
    """A sweep directory (or its results.jsonl) or a baseline JSON file."""
    path = Path(path)
    f = path / RESULTS_FILE if path.is_dir() else path
    if not f.exists():
        raise CompareInputError(f"{path}: no such sweep directory or baseline file "
                                f"(give a directory holding {RESULTS_FILE}, or baselines/<device>-torch-<v>.json)")
    if f.name.endswith(".jsonl"):
        try:
            rows = [(r, d.get("spec") or {}) for r, d in read_result_rows(f)]  # a torn last line is dropped
        except JsonlError as e:
            raise CompareInputError(str(e)) from None
        if not rows:
            raise CompareInputError(f"{f}: holds no results")
        return set_from_results(str(path), rows)
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except ValueError as e:
        raise CompareInputError(f"{f}: not JSON ({e}); give a sweep directory or a baseline file") from e
    if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
        raise CompareInputError(f"{f}: not a baseline file (no 'entries'); give a sweep directory or a baseline file")
    return set_from_baseline(str(path), data)


# ---------------------------------------------------------------- comparison (pure)

def attribute(before: Outcome, after: Outcome) -> str:
    t = release(before.torch) != release(after.torch)
    h = before.transformers != after.transformers
    return "both" if t and h else "torch" if t else "transformers" if h else "neither"


def _breaks_text(o: Outcome) -> str:
    if o.breaks_by_type:
        return ", ".join(f"{k} x{v}" for k, v in sorted(o.breaks_by_type.items()))
    return f"{o.graph_breaks} breaks" if o.graph_breaks is not None else "breaks"


def _state(o: Outcome) -> str:
    if o.verdict == "graph_break":
        return f"graph_break ({_breaks_text(o)})"
    if o.error and o.detailed and o.error != o.verdict:
        return f"{o.verdict} ({o.error})"
    return o.verdict


def diff_outcomes(before: Outcome, after: Outcome) -> list[Change]:
    out: list[Change] = []
    was_full, is_full = before.verdict == "full_graph", after.verdict == "full_graph"
    if not was_full and is_full:
        out.append(Change("fixed", f"{_state(before)} -> full_graph"))
    elif was_full and not is_full and after.verdict != "missing_dependency":
        out.append(Change("newly_broken", f"full_graph -> {_state(after)}"))
    elif before.verdict == after.verdict == "graph_break":
        types_changed = before.detailed and after.detailed and before.breaks_by_type != after.breaks_by_type
        count_changed = before.graph_breaks != after.graph_breaks and None not in (before.graph_breaks, after.graph_breaks)
        if types_changed:
            keys = sorted(set(before.breaks_by_type) | set(after.breaks_by_type))
            moved = [f"{k} {before.breaks_by_type.get(k, 0)} -> {after.breaks_by_type.get(k, 0)}" for k in keys
                     if before.breaks_by_type.get(k, 0) != after.breaks_by_type.get(k, 0)]
            out.append(Change("breaks_changed", "; ".join(moved)))
        elif count_changed:
            out.append(Change("breaks_changed", f"graph breaks {before.graph_breaks} -> {after.graph_breaks}"))
    elif before.verdict != after.verdict and not (before.error or after.error):
        # e.g. missing_dependency <-> graph_break: neither fixed nor broken, but visible
        out.append(Change("verdict_changed", f"{before.verdict} -> {_state(after)}"))
    if after.error and not before.error:
        out.append(Change("error_gained", after.error))
    elif before.error and not after.error:
        out.append(Change("error_lost", before.error))
    elif before.error and after.error and before.error != after.error and before.detailed == after.detailed:
        out.append(Change("error_changed", f"{before.error} -> {after.error}"))
    if before.numerics_passed is False and after.numerics_passed is True:
        out.append(Change("numerics_fixed", "numerics fail -> pass"))
    elif before.numerics_passed is True and after.numerics_passed is False:
        out.append(Change("numerics_broken", "numerics pass -> fail"))
    return out


def share(outcomes: dict[str, Outcome], keys) -> ShareCount:
    on = [outcomes[k] for k in keys]
    return ShareCount(len(on), sum(o.verdict == "full_graph" for o in on), sum(o.verdict in OK_VERDICTS for o in on))


def compare_sets(a: ResultSet, b: ResultSet) -> CompareReport:
    rep = CompareReport(a=a.label, b=b.label, versions_a=[list(v) for v in a.versions()],
                        versions_b=[list(v) for v in b.versions()])
    common = sorted(set(a.outcomes) & set(b.outcomes))
    rep.only_in_a = sorted(set(a.outcomes) - set(b.outcomes))
    rep.only_in_b = sorted(set(b.outcomes) - set(a.outcomes))
    counts: dict[str, Counter] = {k: Counter() for k in CHANGE_KINDS}
    for label in common:
        before, after = a.outcomes[label], b.outcomes[label]
        changes = diff_outcomes(before, after)
        rep.compared += 1
        if not changes:
            rep.unchanged += 1
            continue
        k = a.keys[label]
        d = ItemDiff(k.model_id, k.task, k.device, k.mode, k.dtype, k.scenario, before, after, changes,
                     attribute(before, after))
        rep.diffs.append(d)
        for o in (before, after):
            rep.break_names.update(o.break_names)
        for c in changes:
            counts[c.kind][d.attribution] += 1
    rep.counts = {k: dict(v) for k, v in counts.items() if v}
    rep.common_a, rep.common_b = share(a.outcomes, common), share(b.outcomes, common)
    rep.all_a, rep.all_b = share(a.outcomes, a.outcomes), share(b.outcomes, b.outcomes)
    if common and (rep.only_in_a or rep.only_in_b):
        rep.notes.append(f"A and B hold different items ({len(rep.only_in_a)} only in A, {len(rep.only_in_b)} only "
                         f"in B): every change and share here is on the {len(common)} items both hold. Each set's "
                         "share on all its own items is a different sample, not a change.")
    if a.kind == "baseline" or b.kind == "baseline":
        rep.notes.append("A baseline holds verdicts and break counts only: break types and error texts are "
                         "compared where both sides are sweeps.")
    if common and not rep.diffs:
        rep.notes.append("No change between the two result sets.")
    if not common:
        rep.notes.append("The two result sets share no item (model, task, device, mode, dtype, scenario).")
    return rep


def compare_paths(a: Path, b: Path) -> CompareReport:
    return compare_sets(load_set(a), load_set(b))


# ---------------------------------------------------------------- rendering

_TITLES = {
    "fixed": "Fixed", "newly_broken": "Newly broken", "breaks_changed": "Break types or counts changed",
    "error_gained": "Errors gained", "error_lost": "Errors lost", "error_changed": "Errors changed",
    "numerics_fixed": "Numerics fixed", "numerics_broken": "Numerics broken", "verdict_changed": "Other verdict changes",
}


def _versions_text(vs: list[list[str]]) -> str:
    return "; ".join(f"torch {t} + transformers {h}" for t, h in vs) or "-"


def render_markdown(rep: CompareReport, max_rows: int = 400) -> str:
    lines = [f"# Comparison: `{rep.a}` -> `{rep.b}`", "",
             f"- A: {_versions_text(rep.versions_a)}", f"- B: {_versions_text(rep.versions_b)}",
             f"- {rep.compared} items in both, {rep.unchanged} unchanged, {len(rep.diffs)} changed; "
             f"{len(rep.only_in_a)} only in A, {len(rep.only_in_b)} only in B"]
    if rep.compared:
        lines.append(f"- Full graph on the {rep.compared} items both hold: A {rep.common_a.text()} -> "
                     f"B {rep.common_b.text()}")
    if rep.only_in_a or rep.only_in_b:
        lines.append(f"- Each set on all its own items (different samples, not a trend): A {rep.all_a.text()} of "
                     f"{rep.all_a.items} items; B {rep.all_b.text()} of {rep.all_b.items} items")
    lines.append("")
    lines += [f"> {n}" for n in rep.notes] + ([""] if rep.notes else [])
    if rep.counts:
        lines += ["| change | " + " | ".join(ATTRIBUTIONS) + " | total |", "|---" * (len(ATTRIBUTIONS) + 2) + "|"]
        for kind in CHANGE_KINDS:
            c = rep.counts.get(kind)
            if c:
                lines.append(f"| {_TITLES[kind]} | " + " | ".join(str(c.get(a, 0)) for a in ATTRIBUTIONS)
                             + f" | {sum(c.values())} |")
        lines.append("")
    for kind in CHANGE_KINDS:
        rows = [(d, c) for d in rep.diffs for c in d.changes if c.kind == kind]
        if not rows:
            continue
        lines += [f"## {_TITLES[kind]} ({len(rows)})", "", "| model | task/mode | device | scenario | change | attributed to |",
                  "|---|---|---|---|---|---|"]
        for d, c in rows[:max_rows]:
            lines.append(f"| {d.model_id} | {d.task}/{d.mode} | {d.device} | {d.scenario} | {c.what.replace('|', '/')} "
                         f"| {d.attribution} |")
        if len(rows) > max_rows:
            lines.append(f"| ... | {len(rows) - max_rows} more in the JSON | | | | |")
        lines.append("")
    named = {k: v for k, v in sorted(rep.break_names.items()) if any(k in c.what for d in rep.diffs for c in d.changes)}
    if named:
        lines += ["Break ids: " + "; ".join(f"{k} {v}" for k, v in named.items()), ""]
    for title, items in (("Only in A", rep.only_in_a), ("Only in B", rep.only_in_b)):
        if items:
            shown = ", ".join(f"`{k}`" for k in items[:50])
            lines += [f"## {title} ({len(items)})", "", shown + (" ..." if len(items) > 50 else ""), ""]
    return "\n".join(lines).rstrip() + "\n"
