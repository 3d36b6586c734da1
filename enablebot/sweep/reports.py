"""Sweep reports: CSV (PyTorch benchmark columns), JSON summary, triage, Markdown, HTML with plots.

Everything is derived from the results.jsonl of a sweep or a merge; writing the
reports twice from the same results gives the same files.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .checkpoint import RESULTS_FILE, load_results
from ..fileio import atomic_write_text
from ..results import OK_VERDICTS, VERDICTS, RunResult, Serializable
from ..verdict import Verdict
from .triage import Cluster, by_type, cluster_breaks

CSV_COLUMNS = ("dev", "name", "task", "mode", "dtype", "batch_size", "status", "accuracy", "graph_breaks",
               "unique_graph_breaks", "speedup", "abs_latency", "compilation_latency", "graphs", "recompiles",
               "torch", "transformers", "speedup_p10", "speedup_p90", "noise", "flags", "compile_cache")


@dataclass
class SweepSummary(Serializable):
    total: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)
    coverage: float = 0.0  # share that built and ran eager, out of all but missing_dependency
    create_eager_error_rate: float = 0.0
    full_graph_rate: float = 0.0  # among those that ran
    numerics_pass_rate: float | None = None  # among judged runs: inconclusive ones are left out
    numerics_inconclusive: int = 0  # eager not deterministic beyond tolerance: no judgement
    speedup_median: float | None = None  # over trustworthy speedups only (no noise/contention flag)
    speedup_geomean: float | None = None
    speedups_measured: int = 0
    speedups_trusted: int = 0
    speedup_flags: dict[str, int] = field(default_factory=dict)  # why the others are not trusted
    compile_cache: dict[str, int] = field(default_factory=dict)  # warm | cold | partial -> runs
    versions: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    missing_dependency: dict[str, list[str]] = field(default_factory=dict)  # package -> models
    failures: list[dict] = field(default_factory=list)  # every create/eager/crash/timeout with its reason
    # Where the time goes: per-model wall time in the worker (build, eager, explain, compile, ...).
    model_seconds_total: float = 0.0
    model_seconds_p50: float | None = None
    model_seconds_p90: float | None = None
    slowest: list[dict] = field(default_factory=list)
    stage_seconds: dict[str, float] = field(default_factory=dict)  # summed over models: create, eager, explain...


def accuracy(r: RunResult) -> str:
    """The harness's accuracy column."""
    return r.verdict.accuracy(r.numerics.accuracy if r.numerics else None)


def summarize(results: list[RunResult]) -> SweepSummary:
    s = SweepSummary(total=len(results))
    s.verdicts = {v: n for v, n in Counter(r.verdict for r in results).items()}
    considered = [r for r in results if r.verdict.counted]
    ran = [r for r in considered if not r.verdict.builder_failure]
    if considered:
        s.coverage = round(len(ran) / len(considered), 4)
        s.create_eager_error_rate = round(1 - s.coverage, 4)
    ok = [r for r in results if r.ok]
    if ok:
        s.full_graph_rate = round(sum(r.verdict == "full_graph" for r in ok) / len(ok), 4)
    judged = [r for r in ok if r.numerics is not None and r.numerics.status != "inconclusive"]
    s.numerics_inconclusive = sum(1 for r in ok if r.numerics is not None and r.numerics.status == "inconclusive")
    if judged:
        s.numerics_pass_rate = round(sum(r.numerics.status == "pass" for r in judged) / len(judged), 4)
    measured = [r.timing for r in ok if r.timing and r.timing.speedup]
    speedups = [t.speedup for t in measured if t.trustworthy]
    s.speedups_measured, s.speedups_trusted = len(measured), len(speedups)
    s.speedup_flags = dict(Counter(f for t in measured for f in (t.flags or (["not_assessed"] if not t.noise else [])))
                           .most_common())
    caches = Counter(r.timing.compile_cache for r in ok if r.timing and r.timing.compile_cache)
    s.compile_cache = dict(caches.most_common())
    if speedups:
        s.speedup_median = round(statistics.median(speedups), 3)
        s.speedup_geomean = round(statistics.geometric_mean(speedups), 3)
    # Public versions: a parent-made timeout records "2.11.0", the worker "2.11.0+cu130".
    s.versions = sorted({f"torch {r.versions.torch.split('+')[0]} / transformers {r.versions.transformers}"
                         for r in results})
    s.devices = sorted({r.spec.device for r in results})
    missing: dict[str, set] = defaultdict(set)
    for r in results:
        if r.verdict == Verdict.MISSING_DEPENDENCY:
            missing[r.missing_dependency or "?"].add(r.spec.model_id)
        elif r.verdict.failed:
            msg = (r.error.message.strip().splitlines() or [""])[0][:240] if r.error else ""
            s.failures.append({"key": r.key, "verdict": r.verdict, "stage": r.error.stage if r.error else "",
                               "error": f"{r.error.type}: {msg}" if r.error else ""})
    s.missing_dependency = {k: sorted(v) for k, v in sorted(missing.items())}
    durations = sorted(r.duration_s for r in results)
    if durations:
        s.model_seconds_total = round(sum(durations), 1)
        s.model_seconds_p50 = round(statistics.median(durations), 2)
        s.model_seconds_p90 = round(durations[int(0.9 * (len(durations) - 1))], 2)
        s.slowest = [{"key": r.key, "seconds": r.duration_s, "verdict": r.verdict}
                     for r in sorted(results, key=lambda r: -r.duration_s)[:8]]
    stages: Counter = Counter()
    for r in results:
        stages.update(r.stage_s)
    untimed = s.model_seconds_total - sum(stages.values())
    if stages and untimed > 0:
        stages["other (imports, process setup, timeouts, crashes)"] = untimed
    s.stage_seconds = {k: round(v, 1) for k, v in stages.most_common()}
    s.failures.sort(key=lambda f: f["key"])
    return s


def write_csv(path: Path, results: list[RunResult]) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in sorted(results, key=lambda r: r.key):
        st, t = r.stats, r.timing
        w.writerow([r.spec.device, r.spec.model_id, r.spec.task or "", r.spec.mode, r.spec.dtype, r.spec.batch_size,
                    r.verdict, accuracy(r), st.graph_breaks if st else "", st.unique_graph_breaks if st else "",
                    f"{t.speedup:.4f}" if t and t.speedup else "", f"{t.compiled_ms / 1e3:.6f}" if t and t.compiled_ms else "",
                    f"{t.compile_s:.3f}" if t and t.compile_s is not None else "", st.graphs if st else "",
                    st.recompiles if st else "", r.versions.torch, r.versions.transformers,
                    *_speedup_band(t), (t.noise or "not_assessed") if t and t.speedup else "",
                    " ".join(t.flags) if t else "", (t.compile_cache or "") if t else ""])
    atomic_write_text(path, buf.getvalue())


def where(c: Cluster) -> str:
    """A cluster's place with a line number (of its example break): path:line in function."""
    uf = c.example.user_frame if c.example else None
    if uf is None or ":" not in c.location:
        return c.location
    path, function = c.location.rsplit(":", 1)
    return f"{path}:{uf.lineno} in {function}" if uf.lineno else c.location


def _speedup_band(t) -> tuple[str, str]:
    """Speedup range from the spread: p10 eager / p90 compiled .. p90 eager / p10 compiled."""
    if not (t and t.speedup and t.eager_p10_ms and t.compiled_p90_ms and t.compiled_p10_ms):
        return "", ""
    return f"{t.eager_p10_ms / t.compiled_p90_ms:.4f}", f"{t.eager_p90_ms / t.compiled_p10_ms:.4f}"


def _family_table(results: list[RunResult]) -> dict[str, Counter]:
    fam: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        fam[r.modality or "unknown"][r.verdict] += 1
    return fam


def markdown(summary: SweepSummary, clusters: list[Cluster], results: list[RunResult], top: int = 15) -> str:
    s = summary
    lines = ["# enablebot sweep report", "",
             f"{s.total} runs on {', '.join(s.devices)}; {'; '.join(s.versions)}", "",
             "| verdict | runs |", "|---|---|"]
    lines += [f"| {v} | {s.verdicts[v]} |" for v in VERDICTS if v in s.verdicts]
    lines += ["", f"- built and ran eager: **{s.coverage:.1%}** (create/eager errors {s.create_eager_error_rate:.1%}, "
                  "missing optional packages excluded)",
              f"- full graph among those that ran: {s.full_graph_rate:.1%}"]
    if s.numerics_pass_rate is not None:
        lines.append(f"- numerics pass (fp64 reference): {s.numerics_pass_rate:.1%}"
                     + (f"; {s.numerics_inconclusive} inconclusive (eager not deterministic beyond tolerance)"
                        if s.numerics_inconclusive else ""))
    if s.speedups_measured:
        why = ", ".join(f"{k} {v}" for k, v in s.speedup_flags.items())
        if s.speedup_median is not None:
            lines.append(f"- speedup median {s.speedup_median:.2f}x, geomean {s.speedup_geomean:.2f}x over the "
                         f"{s.speedups_trusted} trustworthy of {s.speedups_measured} measured"
                         + (f" (left out: {why})" if why else ""))
        else:
            lines.append(f"- speedup: none of the {s.speedups_measured} measured is trustworthy ({why}); "
                         "no geomean. Rerun on a quiet machine with --jobs 1")
    if s.compile_cache:
        lines.append("- Inductor cache at first compile: " + ", ".join(f"{k} {v}" for k, v in s.compile_cache.items())
                     + " (warm compile times are not cold-start times)")
    if s.model_seconds_p50 is not None:
        lines.append(f"- time per model: median {s.model_seconds_p50:.1f} s, p90 {s.model_seconds_p90:.1f} s, "
                     f"total {s.model_seconds_total:.0f} s of worker time; slowest: "
                     + ", ".join(f"{d['key'].split('|')[0]} ({d['seconds']:.0f} s)" for d in s.slowest[:5]))
    if s.stage_seconds:
        total = sum(s.stage_seconds.values()) or 1.0
        lines.append("- where the time goes: " + ", ".join(
            f"{k} {v:.0f} s ({v / total:.0%})" for k, v in s.stage_seconds.items()))
    lines += ["", "## Status per modality", "", "| modality | " + " | ".join(OK_VERDICTS) + " | other |", "|---|---|---|---|"]
    for fam, c in sorted(_family_table(results).items()):
        other = sum(n for v, n in c.items() if v not in OK_VERDICTS)
        lines.append(f"| {fam} | " + " | ".join(str(c.get(v, 0)) for v in OK_VERDICTS) + f" | {other} |")
    lines += ["", f"## Top graph-break clusters (of {len(clusters)})", "",
              "| models | occurrences | break type | id | where | class |", "|---|---|---|---|---|---|"]
    for c in clusters[:top]:
        lines.append(f"| {c.n_models} | {c.occurrences} | {c.gb_type} | {c.registry_id or '-'} | `{where(c)}` | {c.classification} |")
    lines += ["", "## Break types by models affected", "", "| break type | id | models | clusters |", "|---|---|---|---|"]
    for t, i, m, n in by_type(clusters)[:top]:
        lines.append(f"| {t} | {i or '-'} | {m} | {n} |")
    if s.missing_dependency:
        lines += ["", "## Missing optional packages (covered on the GPU machine)", ""]
        lines += [f"- `{pkg}`: {', '.join(models)}" for pkg, models in s.missing_dependency.items()]
    if s.failures:
        lines += ["", f"## Failures ({len(s.failures)})", "", "| run | verdict | stage | error |", "|---|---|---|---|"]
        for f in s.failures:
            lines.append(f"| {f['key']} | {f['verdict']} | {f['stage']} | {f['error'].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def plots(results: list[RunResult], clusters: list[Cluster]) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    fam = _family_table(results)
    names = sorted(fam)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    bottom = [0] * len(names)
    for v in VERDICTS:
        vals = [fam[n].get(v, 0) for n in names]
        if any(vals):
            ax.bar(names, vals, bottom=bottom, label=v)
            bottom = [b + x for b, x in zip(bottom, vals)]
    ax.set_ylabel("runs")
    ax.set_title("status per modality")
    ax.legend(fontsize=7, ncol=2)
    out.append(("Status per modality", _png(fig)))
    plt.close(fig)

    speedups = [r.timing.speedup for r in results if r.ok and r.timing and r.timing.trustworthy]
    if speedups:
        fig, ax = plt.subplots(figsize=(8, 3))
        ax.hist(speedups, bins=30)
        ax.axvline(1.0, color="k", linestyle="--")
        ax.set_xlabel("trustworthy speedups (median eager / median compiled)")
        ax.set_ylabel("runs")
        out.append(("Speedup distribution", _png(fig)))
        plt.close(fig)
    if clusters:
        top = clusters[:12][::-1]
        fig, ax = plt.subplots(figsize=(8, 0.35 * len(top) + 1))
        ax.barh([f"{c.gb_type[:40]} @ {c.location[-40:]}" for c in top], [c.n_models for c in top])
        ax.set_xlabel("models affected")
        ax.tick_params(axis="y", labelsize=7)
        out.append(("Top graph-break clusters", _png(fig)))
        plt.close(fig)
    return out


def _speedup_cell(r: RunResult) -> str:
    t = r.timing
    if not (t and t.speedup):
        return ""
    return f"{t.speedup:.2f}" + ("" if t.trustworthy else f" ({html.escape(' '.join(t.flags) or 'not assessed')})")


def html_report(summary: SweepSummary, clusters: list[Cluster], results: list[RunResult]) -> str:
    imgs = "".join(f"<h2>{html.escape(t)}</h2><img src='data:image/png;base64,{b64}'>" for t, b64 in plots(results, clusters))
    rows = "".join(
        f"<tr><td>{html.escape(r.spec.model_id)}</td><td>{r.spec.task}</td><td>{r.spec.mode}</td>"
        f"<td class='{r.verdict}'>{r.verdict}</td><td>{r.stats.graph_breaks if r.stats else ''}</td>"
        f"<td>{accuracy(r)}</td><td>{_speedup_cell(r)}</td>"
        f"<td>{html.escape((r.graph_breaks[0].gb_type if r.graph_breaks else '') or (r.error.type if r.error else ''))}</td></tr>"
        for r in sorted(results, key=lambda r: r.key))
    md = html.escape(markdown(summary, clusters, results, top=25))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>enablebot sweep</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:auto}} td,th{{padding:2px 8px;font-size:13px}}
.full_graph{{color:green}} .graph_break{{color:#b58900}} .create_error,.eager_error,.crash,.timeout,.compile_error{{color:#c00}}
pre{{white-space:pre-wrap;font-size:12px;background:#f6f6f6;padding:8px}}</style></head><body>
<h1>enablebot sweep</h1><p>{summary.total} runs; built and ran eager {summary.coverage:.1%};
full graph {summary.full_graph_rate:.1%}; {html.escape('; '.join(summary.versions))}</p>
{imgs}<h2>Summary</h2><pre>{md}</pre>
<h2>All runs</h2><table><tr><th>model</th><th>task</th><th>mode</th><th>verdict</th><th>breaks</th><th>accuracy</th><th>speedup</th><th>first break / error</th></tr>{rows}</table>
</body></html>"""


def with_registry_modality(results: list[RunResult], modality_of: dict[str, str]) -> list[RunResult]:
    """Results that never built (create errors, timeouts) carry no modality: take the registry's."""
    for r in results:
        if not r.modality:
            r.modality = modality_of.get(r.model_type or r.spec.model_id, "")
    return results


def write_reports(out_dir: Path, modality_of: dict[str, str] | None = None) -> list[Path]:
    out_dir = Path(out_dir)
    results = with_registry_modality(list(load_results(out_dir / RESULTS_FILE).values()), modality_of or {})
    summary = summarize(results)
    clusters = cluster_breaks(results)
    paths = [out_dir / n for n in ("summary.json", "triage.json", "results.csv", "report.md", "report.html")]
    atomic_write_text(paths[0], json.dumps(summary.to_dict(), indent=1) + "\n")
    atomic_write_text(paths[1], json.dumps([c.to_dict() for c in clusters], indent=1) + "\n")
    write_csv(paths[2], results)
    atomic_write_text(paths[3], markdown(summary, clusters, results))
    atomic_write_text(paths[4], html_report(summary, clusters, results))
    return paths
