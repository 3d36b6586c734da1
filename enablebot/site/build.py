"""Load what the bot wrote into typed rows and derive the site's views.

Inputs: sweep directories (results.jsonl), baseline files (baselines/*.json), fix
bundles (fixes/<model>/<cluster>/bundle.json + verification.json), PR outcomes
(`enablebot pr --json`), the registry (modality, first_seen) and, optionally, a
compare file. Everything here is pure apart from the `load_*` functions.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from ..jsonl import JsonlError
from ..sweep.checkpoint import RESULTS_FILE, read_result_rows
from ..results import OK_VERDICTS, RunResult
from ..sweep.triage import Cluster, cluster_breaks, location
from ..versions import release_key
from .links import public_version
from .trend import trend_lines

PASS_NAMES = {"eager": "dynamo", "inductor": "inductor"}


class SiteInputError(ValueError):
    """An input is missing or malformed (the command exits 2)."""


# ---- typed rows ------------------------------------------------------------------------------
@dataclass
class Row:
    """One model x task x mode x scenario on one device and version, from one result set."""

    set_label: str
    model: str
    task: str
    mode: str
    scenario: str
    device: str
    dtype: str
    torch: str  # public version
    transformers: str
    pass_: str  # dynamo | inductor | "" (a baseline does not say)
    verdict: str
    breaks: int | None = None
    break_ids: list[str] = field(default_factory=list)  # GBxxxx, or the gb_type where there is no id
    modality: str = ""
    numerics: bool | None = None
    speedup: float | None = None
    recompiles: int | None = None
    result: RunResult | None = None  # None for baseline rows

    @property
    def key(self) -> str:
        return f"{self.model}|{self.task}|{self.mode}|{self.scenario}|{self.device}|{self.dtype}"

    @property
    def version(self) -> str:
        return f"{self.torch}/{self.transformers}"

    def signatures(self) -> set[tuple[str, str, str]] | None:
        """The breaks as (gb_type, id, location); None when the source has no break detail."""
        if self.result is None:
            return None
        return {(b.gb_type, b.registry_id or "", location(b)) for b in self.result.graph_breaks}


@dataclass
class ResultSet:
    label: str
    source: str
    kind: str  # sweep | baseline
    started_at: str = ""
    devices: list[str] = field(default_factory=list)
    torch: str = ""
    transformers: str = ""
    pass_: str = ""
    variant: str = ""  # size and dtype when not the sweep default (tiny, float32): another series
    rows: list[Row] = field(default_factory=list)

    @property
    def results(self) -> list[RunResult]:
        return [r.result for r in self.rows if r.result is not None]

    @property
    def series(self) -> str:
        """Sets in one series are comparable over time: same device(s) and pass."""
        return "+".join(self.devices) + (f" {self.pass_}" if self.pass_ else "") + (f" {self.variant}" if self.variant else "")


@dataclass
class Share:
    set_label: str
    series: str
    device: str
    scenario: str
    torch: str
    transformers: str
    full_graph: int
    compiled: int  # full_graph + graph_break
    total: int

    @property
    def rate(self) -> float | None:
        return self.full_graph / self.compiled if self.compiled else None


@dataclass
class NewBreak:
    key: str
    model: str
    series: str
    before_set: str
    after_set: str
    what: str  # "GB0033 Data dependent operator at models/x/modeling_x.py:fn" or "graph breaks 0 -> 2"
    registry_id: str = ""


@dataclass
class NewArch:
    model: str
    first_seen: str | None
    first_set: str  # the first result set it appears in
    supported_at: str | None  # first full_graph run with numerics passing (or the registry's record)
    seconds: float | None
    latest_verdict: str
    why: str  # "new in <set>" | "found on the Hub"


@dataclass
class VersionChange:
    """Two versions compared on the runs both have (model, task, mode, scenario), any device."""

    before: ResultSet
    after: ResultSet
    common: int
    before_full_graph: int
    after_full_graph: int
    compiled_both: int  # runs that compiled (full_graph or graph_break) on both
    before_full_graph_compiled: int
    after_full_graph_compiled: int
    changed: list[tuple[str, str, str]] = field(default_factory=list)  # (run, verdict before, verdict after)


@dataclass
class BundleView:
    path: str
    fix_key: str
    model: str
    gb_type: str
    registry_id: str | None
    function: str | None
    target: str
    kind: str
    verified: bool
    recipe: dict[str, Any] | None
    files: list[str]
    before: dict[str, Any]
    after: dict[str, Any]
    verification: str  # passed | failed: <checks> | not run
    pr_url: str | None = None
    pr_state: str = ""  # opened | updated | unchanged | skipped (from `enablebot pr --json`)


@dataclass
class ClusterView:
    key: str
    cluster: Cluster
    series: list[str]
    recipes: list[tuple[str, str]]  # (id, settings) the fix loop tries for it
    bundles: list[BundleView] = field(default_factory=list)

    @property
    def fix_state(self) -> str:
        if any(b.verified for b in self.bundles):
            return "verified fix"
        if self.bundles:
            return "fix drafted, not verified"
        return "no fix yet"


@dataclass
class SiteData:
    sets: list[ResultSet]
    generated_at: str
    notes: list[str] = field(default_factory=list)
    shares: list[Share] = field(default_factory=list)
    new_breaks: list[NewBreak] = field(default_factory=list)
    new_archs: list[NewArch] = field(default_factory=list)
    clusters: list[ClusterView] = field(default_factory=list)
    bundles: list[BundleView] = field(default_factory=list)
    version_changes: list[VersionChange] = field(default_factory=list)
    trends: list[Any] = field(default_factory=list)  # trend.TrendLine: the chart's lines, on shared runs
    compare: Any = None
    compare_source: str = ""
    replay: Any = None  # replay.report.ReplayReport: the time-to-support page

    @property
    def rows(self) -> list[Row]:
        return [r for s in self.sets for r in s.rows]

    def by_model(self) -> dict[str, list[Row]]:
        out: dict[str, list[Row]] = defaultdict(list)
        for r in self.rows:
            out[r.model].append(r)
        return dict(sorted(out.items()))


# ---- loading ---------------------------------------------------------------------------------
def _scenario(raw_spec: dict[str, Any]) -> str:
    # Results do not carry a scenario yet; a plain forward call is what every run so far did.
    return str(raw_spec.get("scenario") or "call")


def _pass(raw_spec: dict[str, Any], backend: str) -> str:
    # Newer results name the pass; older ones imply it by the backend (eager: the Dynamo pass).
    return str(raw_spec.get("pass_name") or PASS_NAMES.get(backend, backend))


def _row_from_result(label: str, r: RunResult, scenario: str, modality_of: dict[str, str], pass_: str = "") -> Row:
    s = r.spec
    ids = []
    for b in r.graph_breaks:
        bid = b.registry_id or b.gb_type
        if bid not in ids:
            ids.append(bid)
    return Row(set_label=label, model=s.model_id, task=s.task or "default", mode=s.mode, scenario=scenario,
               device=s.device, dtype=s.dtype, torch=public_version(r.versions.torch),
               transformers=r.versions.transformers, pass_=pass_ or PASS_NAMES.get(s.backend, s.backend),
               verdict=r.verdict, breaks=r.stats.graph_breaks if r.stats else (len(r.graph_breaks) or None),
               break_ids=ids, modality=r.modality or modality_of.get(r.model_type or s.model_id, ""),
               numerics=r.numerics.passed if r.numerics else None,
               speedup=r.timing.speedup if r.timing and r.timing.speedup else None,
               recompiles=r.stats.recompiles if r.stats else None, result=r)


def _most_common(values: Iterable[str]) -> str:
    c = Counter(v for v in values if v)
    return c.most_common(1)[0][0] if c else ""


def load_sweep(path: Path, modality_of: dict[str, str] | None = None, label: str | None = None) -> ResultSet:
    """A sweep or merge directory. The newest line per key wins, as in the checkpoint; a torn
    line is skipped. The scenario is read from the raw spec (RunSpec may not know the field)."""
    f = path / RESULTS_FILE
    if not f.is_file():
        raise SiteInputError(f"{path}: no {RESULTS_FILE}; pass a sweep/merge directory or a baseline JSON file")
    label = label or _label(path)
    latest: dict[str, Row] = {}
    try:
        rows_read = read_result_rows(f)  # a torn last line is dropped; another bad line names file:line
    except JsonlError as e:
        raise SiteInputError(str(e)) from None
    for r, raw in rows_read:
        spec = raw.get("spec") or {}
        row = _row_from_result(label, r, _scenario(spec), modality_of or {}, _pass(spec, r.spec.backend))
        latest[row.key] = row
    if not latest:
        raise SiteInputError(f"{f}: holds no results")
    rows = sorted(latest.values(), key=lambda r: r.key)
    results = [r.result for r in rows if r.result]
    started = sorted(r.started_at for r in results if r.started_at)
    return ResultSet(label=label, source=str(path), kind="sweep", started_at=started[0] if started else "",
                     devices=sorted({r.device for r in rows}), torch=_most_common(r.torch for r in rows),
                     transformers=_most_common(r.transformers for r in rows),
                     pass_=_most_common(r.pass_ for r in rows), variant=_variant(results), rows=rows)


def _variant(results: list[RunResult]) -> str:
    size = _most_common(r.spec.size for r in results)
    dtype = _most_common(r.spec.dtype for r in results)
    return " ".join(x for x in (size if size != "tiny" else "", dtype if dtype != "float32" else "") if x)


# model|task|device|mode|dtype, then |scenario since baselines have scenarios (older ones: `call`).
_KEY = re.compile(r"^(?P<model>[^|]+)\|(?P<task>[^|]*)\|(?P<device>[^|]+)\|(?P<mode>[^|]+)\|(?P<dtype>[^|]+)"
                  r"(?:\|(?P<scenario>[^|]+))?$")


def load_baseline(path: Path, modality_of: dict[str, str] | None = None) -> ResultSet:
    """A baseline file: verdicts and break counts per key, no break detail and no time."""
    from ..sweep.baseline import Baseline

    try:
        b = Baseline.load(path)
    except (FileNotFoundError, ValueError) as e:
        raise SiteInputError(str(e)) from e
    label = f"baseline {path.stem}"
    rows = []
    for key, e in sorted(b.entries.items()):
        m = _KEY.match(key)
        if not m:
            continue
        rows.append(Row(set_label=label, model=m["model"], task=m["task"], mode=m["mode"],
                        scenario=m["scenario"] or "call", device=m["device"], dtype=m["dtype"],
                        torch=public_version(b.torch), transformers=b.transformers, pass_=b.kind(),
                        verdict=e.verdict, breaks=e.graph_breaks,
                        modality=(modality_of or {}).get(m["model"], ""), numerics=e.numerics_passed))
    if not rows:
        raise SiteInputError(f"{path}: a baseline without entries")
    return ResultSet(label=label, source=str(path), kind="baseline", devices=[b.device], pass_=b.kind(),
                     torch=public_version(b.torch), transformers=b.transformers, rows=rows)


def _label(path: Path) -> str:
    parts = path.resolve().parts
    return "/".join(parts[-2:]) if parts[-1] in ("merged", "results") else parts[-1]


def load_inputs(paths: list[Path], modality_of: dict[str, str] | None = None) -> list[ResultSet]:
    sets = []
    for p in paths:
        if p.is_dir():
            sets.append(load_sweep(p, modality_of))
        elif p.is_file() and p.suffix == ".json":
            sets.append(load_baseline(p, modality_of))
        else:
            raise SiteInputError(f"{p}: not a sweep directory (with {RESULTS_FILE}) or a baseline .json file")
    labels = Counter(s.label for s in sets)
    for s in sets:  # two merged/ dirs from two nightlies: make the labels distinct
        if labels[s.label] > 1:
            s.label = f"{s.label} ({s.started_at[:16] or s.source})"
            for r in s.rows:
                r.set_label = s.label
    return sets


def load_bundles(root: Path | None, prs: Path | None = None) -> list[BundleView]:
    """Every fix bundle under root (fixes/<model>/<cluster>/bundle.json), with its verification."""
    from ..fix.bundle import FixBundle

    if root is None:
        return []
    if not root.is_dir():
        raise SiteInputError(f"{root}: no such fixes directory (the fix command writes fixes/<model>/<cluster>/)")
    outcomes: dict[str, dict[str, Any]] = {}
    if prs is not None:
        try:
            for o in json.loads(prs.read_text(encoding="utf-8")):
                outcomes[str(o.get("fix_key"))] = o
        except (OSError, ValueError, AttributeError) as e:
            raise SiteInputError(f"{prs}: not the JSON list `enablebot pr --json` writes ({e})") from e
    out = []
    for meta in sorted(root.rglob("bundle.json")):
        try:
            b = FixBundle.load(meta.parent)
        except (ValueError, TypeError, KeyError) as e:
            raise SiteInputError(f"{meta}: not a fix bundle ({e})") from e
        verification = "not run"
        vf = meta.parent / "verification.json"
        if vf.is_file():
            try:
                v = json.loads(vf.read_text(encoding="utf-8"))
                failed = [c.get("name", "?") for c in v.get("checks", []) if not c.get("passed")]
                verification = "passed" if v.get("passed") else "failed: " + (", ".join(failed) or "see verification.json")
            except ValueError:
                verification = "unreadable verification.json"
        o = outcomes.get(b.fix_key, {})
        out.append(BundleView(path=str(meta.parent), fix_key=b.fix_key, model=b.model_id, gb_type=b.cluster.gb_type,
                              registry_id=b.cluster.registry_id, function=b.cluster.function, target=b.target,
                              kind=b.kind, verified=b.verified, recipe=b.recipe, files=list(b.files),
                              before=b.before.to_dict(), after=b.after.to_dict(), verification=verification,
                              pr_url=o.get("url"), pr_state=str(o.get("action") or "")))
    return out


def load_compare(path: Path | None) -> Any:
    if path is None:
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SiteInputError(f"{path}: not a readable JSON file ({e})") from e


# ---- ordering and de-duplication ---------------------------------------------------------------
def order_sets(sets: list[ResultSet]) -> list[ResultSet]:
    """Oldest first: by torch, then transformers version in release order (a dev or rc build
    before its release), then start time (nightlies on one version)."""
    return sorted(sets, key=lambda s: (release_key(s.torch), release_key(s.transformers), s.started_at or "", s.label))


def drop_duplicate_baselines(sets: list[ResultSet]) -> tuple[list[ResultSet], list[str]]:
    """A baseline refreshed from a sweep that is also given says nothing new: show it once."""
    kept, notes = [], []
    sweeps = [s for s in sets if s.kind == "sweep"]
    for s in sets:
        if s.kind == "baseline":
            keys = {r.key for r in s.rows}
            twin = next((w for w in sweeps if (w.devices, w.torch, w.transformers) == (s.devices, s.torch, s.transformers)
                         and keys <= {r.key for r in w.rows}), None)
            if twin:
                notes.append(f"{s.source}: the same device, versions and runs as {twin.label}; shown once.")
                continue
        kept.append(s)
    return kept, notes


# ---- derived views ---------------------------------------------------------------------------
def shares(sets: list[ResultSet]) -> list[Share]:
    out = []
    for s in sets:
        groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
        for r in s.rows:
            groups[(r.device, r.scenario)].append(r)
        for (device, scenario), rows in sorted(groups.items()):
            fg = sum(r.verdict == "full_graph" for r in rows)
            compiled = sum(r.verdict in OK_VERDICTS for r in rows)
            out.append(Share(s.label, s.series, device, scenario, s.torch, s.transformers, fg, compiled, len(rows)))
    return out


def series_pairs(sets: list[ResultSet]) -> list[tuple[ResultSet, ResultSet]]:
    """(previous, latest) per series, for "new since the last run"."""
    by: dict[str, list[ResultSet]] = defaultdict(list)
    for s in sets:
        by[s.series].append(s)
    return [(ss[-2], ss[-1]) for _, ss in sorted(by.items()) if len(ss) >= 2]


def new_breaks(sets: list[ResultSet]) -> list[NewBreak]:
    out = []
    for prev, last in series_pairs(sets):
        before = {r.key: r for r in prev.rows}
        for r in last.rows:
            p = before.get(r.key)
            if p is None:
                continue
            now, was = r.signatures(), p.signatures()
            if now is not None and was is not None:
                for gb_type, rid, loc in sorted(now - was):
                    out.append(NewBreak(r.key, r.model, last.series, prev.label, last.label, f"{gb_type} at {loc}", rid))
            elif (r.breaks or 0) > (p.breaks or 0) or (p.verdict == "full_graph" and r.verdict == "graph_break"):
                out.append(NewBreak(r.key, r.model, last.series, prev.label, last.label,
                                    f"{p.verdict} -> {r.verdict}, graph breaks {p.breaks if p.breaks is not None else '?'} "
                                    f"-> {r.breaks if r.breaks is not None else '?'}",
                                    r.break_ids[0] if r.break_ids else ""))
    return out


def _run_key(r: Row) -> str:
    return f"{r.model}|{r.task}|{r.mode}|{r.scenario}"


def version_changes(sets: list[ResultSet]) -> list[VersionChange]:
    """Each version against the next (largest sweep of each), on the runs both have: the
    release-over-release view (same models, not whatever each sweep happened to cover)."""
    by_version: dict[tuple[str, str], ResultSet] = {}
    for s in sets:  # already ordered by version
        v = (s.torch, s.transformers)
        if s.kind == "sweep" and (v not in by_version or len(s.rows) > len(by_version[v].rows)):
            by_version[v] = s
    chosen = list(by_version.values())
    out = []
    for a, b in zip(chosen, chosen[1:]):
        ra = {_run_key(r): r for r in a.rows}
        rb = {_run_key(r): r for r in b.rows}
        common = sorted(set(ra) & set(rb))
        if not common:
            continue
        changed = [(k, ra[k].verdict, rb[k].verdict) for k in common if ra[k].verdict != rb[k].verdict]
        both = [k for k in common if ra[k].verdict in OK_VERDICTS and rb[k].verdict in OK_VERDICTS]
        out.append(VersionChange(a, b, len(common), sum(ra[k].verdict == "full_graph" for k in common),
                                 sum(rb[k].verdict == "full_graph" for k in common), len(both),
                                 sum(ra[k].verdict == "full_graph" for k in both),
                                 sum(rb[k].verdict == "full_graph" for k in both), changed))
    return out


def _supported(r: Row) -> bool:
    return r.verdict == "full_graph" and r.numerics is True


def _parse(ts: str | None) -> datetime | None:
    if not ts:
        return None
    try:
        d = datetime.fromisoformat(str(ts).replace("Z", "+00:00"))
    except ValueError:
        return None
    return d if d.tzinfo else d.replace(tzinfo=timezone.utc)


def new_architectures(sets: list[ResultSet], registry: Any | None) -> list[NewArch]:
    """Architectures new in the latest set of a series (absent from every earlier set), and those the
    watcher found on the Hub; time-to-support from first_seen to the first supported run."""
    wanted: dict[str, str] = {}
    for _, last in series_pairs(sets):
        # New to the bot: in no earlier result set of any series (a time-boxed sweep may have skipped it).
        before = {r.model for s in sets[:sets.index(last)] for r in s.rows}
        for m in sorted({r.model for r in last.rows} - before):
            wanted.setdefault(m, f"new in {last.label}")
    entries = getattr(registry, "entries", {}) if registry is not None else {}
    for mt, e in entries.items():
        if e.seen_in or e.origin != "transformers":
            wanted.setdefault(mt, "found on the Hub" if e.seen_in else f"origin: {e.origin}")
    out = []
    rows_by_model: dict[str, list[tuple[ResultSet, Row]]] = defaultdict(list)
    for s in sets:
        for r in s.rows:
            rows_by_model[r.model].append((s, r))
    for m, why in sorted(wanted.items()):
        e = entries.get(m)
        seen = e.first_seen if e else None
        pairs = rows_by_model.get(m, [])
        supported = [(r.result.started_at if r.result else "") or s.started_at for s, r in pairs if _supported(r)]
        supported = [t for t in supported if t]
        recorded = [st.get("supported_at") for st in (e.status.values() if e else []) if st and st.get("supported_at")]
        when = min([*supported, *map(str, recorded)], default=None, key=lambda t: _parse(t) or datetime.max.replace(tzinfo=timezone.utc))
        secs = None
        if when and seen and _parse(when) and _parse(seen):
            secs = max(0.0, (_parse(when) - _parse(seen)).total_seconds())
        out.append(NewArch(model=m, first_seen=seen, first_set=pairs[0][0].label if pairs else "",
                           supported_at=when, seconds=secs, latest_verdict=pairs[-1][1].verdict if pairs else "not run",
                           why=why))
    return out


def _bundle_matches(b: BundleView, c: Cluster) -> bool:
    if b.gb_type != c.gb_type or (b.registry_id and c.registry_id and b.registry_id != c.registry_id):
        return False
    return not b.function or c.location.endswith(":" + b.function)


def clusters(sets: list[ResultSet], bundles: list[BundleView]) -> list[ClusterView]:
    """Break clusters over the newest sweep of each series: what breaks now, ranked by models affected."""
    from ..fix.recipes import candidates, load_recipes, settings_text

    latest: dict[str, ResultSet] = {}
    for s in sets:
        if s.kind == "sweep":
            latest[s.series] = s
    results = [r for s in latest.values() for r in s.results]
    series_of: dict[str, set[str]] = defaultdict(set)
    for s in latest.values():
        for r in s.results:
            series_of[r.spec.model_id].add(s.series)
    recipes = load_recipes()
    out = []
    for c in cluster_breaks(results):
        key = f"{c.gb_type}|{c.registry_id or ''}|{c.location}"
        tried = [(r.id, settings_text(r.settings)) for r in candidates(c.example, recipes)] if c.example else []
        out.append(ClusterView(key=key, cluster=c, series=sorted({x for m in c.models for x in series_of[m]}),
                               recipes=tried, bundles=[b for b in bundles if _bundle_matches(b, c)]))
    return out


def build(paths: list[Path], *, registry: Any | None = None, fixes: Path | None = None, prs: Path | None = None,
          compare: Path | None = None, replay: Path | None = None, now: datetime | None = None) -> SiteData:
    modality_of = {mt: e.modality for mt, e in (registry.entries.items() if registry is not None else [])}
    sets, notes = drop_duplicate_baselines(order_sets(load_inputs(paths, modality_of)))
    bundles = load_bundles(fixes, prs)
    data = SiteData(sets=sets, notes=notes,
                    generated_at=(now or datetime.now(timezone.utc)).replace(microsecond=0).isoformat())
    data.shares = shares(sets)
    data.trends = trend_lines(sets)
    data.new_breaks = new_breaks(sets)
    data.version_changes = version_changes(sets)
    data.new_archs = new_architectures(sets, registry)
    data.bundles = bundles
    data.clusters = clusters(sets, bundles)
    data.compare = load_compare(compare)
    data.compare_source = str(compare) if compare else ""
    if replay is not None:
        from ..replay.report import REPORT_FILE, load as load_replay

        if not (replay / REPORT_FILE).exists():
            raise SiteInputError(f"--replay {replay}: no {REPORT_FILE} there (run `enablebot replay --out {replay}`)")
        data.replay = load_replay(replay)
    return data
