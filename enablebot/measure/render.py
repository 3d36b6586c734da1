"""Human-readable view of a RunResult: a rich panel for the terminal."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..results import RunResult
from ..verdict import Verdict



def fmt(x: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "-" if x is None else f"{x:{spec}}{suffix}"


def numerics_text(r: RunResult) -> str:
    n = r.numerics
    if n is None:
        return "-"
    if n.status == "inconclusive":  # never "pass": eager disagrees with itself beyond the tolerance
        return (f"INCONCLUSIVE (eager is not deterministic beyond tol {n.tol:g}: "
                f"rmse(eager, eager) {fmt(n.eager_self_error, '.2e')})")
    verdict = "pass" if n.status == "pass" else "FAIL"
    worst = f", worst {n.worst_output} rmse {fmt(n.worst_error, '.2e')}" if n.worst_output and n.worst_error else ""
    det = "" if n.eager_deterministic else " (eager runs differ, within tolerance)"
    return f"{verdict} ({n.method}, tol {n.tol:g}{worst}){det}"


def break_counts(r: RunResult) -> tuple[int | None, int | None]:
    """(explain-based, counter-based) break counts. Explain: breaks in one Dynamo trace of the
    forward, the rows of the breaks table (their # column summed). Counters: every break event
    torch.compile's counters saw in the real compile (each resumed frame, recompile, the backward)."""
    shown = [b for b in r.graph_breaks if b.source == "explain"]
    explain = sum(b.count for b in shown) if shown or r.explain_breaks is not None else None
    counters = r.stats.graph_breaks if r.stats and not r.spec.fast else None  # the Dynamo pass has explain only
    return explain, counters


def break_count_text(r: RunResult) -> str:
    """One break count; the counter-based one labelled beside it only where the two differ."""
    explain, counters = break_counts(r)
    if explain is None and counters is None:
        return ""
    if explain is None:
        return f"{counters} (torch.compile counters; explain did not run)"
    sites = len([b for b in r.graph_breaks if b.source == "explain"])
    text = f"{explain} at {sites} site{'s' if sites != 1 else ''} (explain, the table below)"
    if counters is not None and counters != explain:
        n = r.stats.unique_graph_breaks if r.stats else 0
        uniq = f", {n} distinct reason{'s' if n != 1 else ''}" if r.stats else ""
        text += (f"; torch.compile counters: {counters} break events{uniq} (they count every event of the real "
                 "compile: resumed frames, recompiles, the backward; explain counts one trace)")
    return text


def _rel(iqr: float | None, median: float | None) -> str:
    return "-" if iqr is None or not median else f"{iqr / median:.0%}"


def noise_text(t) -> str:
    """The noise verdict: whether this speedup can be trusted, and if not, why."""
    if not t.noise:
        return "not assessed (older result): do not compare"
    if t.noise == "ok":
        return "ok (low spread, no contention seen)"
    return "NOISY, not comparable: " + ", ".join(t.flags)


def summary_rows(r: RunResult) -> list[tuple[str, str]]:
    s, t, v = r.stats, r.timing, r.versions
    rows = [
        ("model", f"{r.spec.model_id} -> {r.model_class or '?'} ({r.modality or '?'}, {fmt(r.n_params and r.n_params / 1e6, '.2f', 'M')} params)"),
        ("run", f"{r.spec.device} {r.spec.mode} {r.spec.dtype} backend={r.spec.backend}"
                f"{' dynamic' if r.spec.dynamic else ''} size={r.spec.size} batch={r.spec.batch_size} seq={r.spec.seq_len}"),
        ("versions", f"torch {v.torch}, transformers {v.transformers}" + (f", triton {v.triton}" if v.triton else "")),
        ("verdict", r.verdict),
    ]
    breaks = break_count_text(r)
    if breaks:
        rows.append(("graph breaks", breaks))
    if s:
        rows.append(("graphs", f"{s.graphs} graphs, {s.recompiles} recompiles, "
                               f"{s.fallbacks_to_eager} frames fell back to eager"))
    if r.fullgraph_ok is not None:
        fg = "ok" if r.fullgraph_ok else f"fails: {r.fullgraph_error.gb_type if r.fullgraph_error else '?'}"
        note = "  (explain and fullgraph disagree)" if r.explain_fullgraph_disagree else ""
        rows.append(("fullgraph=True", fg + note))
    if r.numerics:
        rows.append(("numerics", numerics_text(r)))
    if t and t.eager_ms is not None:
        rows.append(("speed", f"eager {fmt(t.eager_ms)} ms, compiled {fmt(t.compiled_ms)} ms, "
                              f"speedup {fmt(t.speedup, '.2f', 'x')} (median of {t.repeats})"))
        if t.eager_p10_ms is not None:
            rows.append(("spread", f"p10/p50/p90 eager {fmt(t.eager_p10_ms)}/{fmt(t.eager_ms)}/{fmt(t.eager_p90_ms)} ms, "
                                   f"compiled {fmt(t.compiled_p10_ms)}/{fmt(t.compiled_ms)}/{fmt(t.compiled_p90_ms)} ms; "
                                   f"IQR/median {_rel(t.eager_iqr_ms, t.eager_ms)} / {_rel(t.compiled_iqr_ms, t.compiled_ms)}"))
        rows.append(("noise", noise_text(t)))
    if t and t.compile_s is not None:
        cache = {"warm": " (warm Inductor cache: not a cold-start time)", "cold": " (cold Inductor cache)",
                 "partial": " (Inductor cache partly warm)"}.get(t.compile_cache or "", "")
        rows.append(("compile", f"{fmt(t.compile_s)} s first call{cache}"
                                + (f"; peak {fmt(t.eager_peak_mb, '.0f')} / {fmt(t.compiled_peak_mb, '.0f')} MB"
                                   if t.eager_peak_mb else "")))
    if r.error:
        rows.append(("error", f"[{r.error.stage}] {r.error.type}: {r.error.message.splitlines()[0][:300] if r.error.message else ''}"))
    if r.missing_dependency:
        rows.append(("missing", r.missing_dependency))
    if r.trace_dir:
        rows.append(("trace", f"{r.trace_dir} (render with: tlparse {r.trace_dir})"))
    return rows


def out_console(stderr: bool = False) -> Console:
    """A console for tables: a terminal's own width; without a terminal (CI logs, pipes) a wide
    one (COLUMNS if set, else 200) so that paths are not folded needlessly."""
    import os

    probe = Console(stderr=stderr)
    if probe.is_terminal:
        return probe
    return Console(stderr=stderr, width=int(os.environ.get("COLUMNS") or 0) or 200)


def rich_summary(r: RunResult) -> Group:
    head = Table(show_header=False, box=None, pad_edge=False)
    head.add_column(style="bold cyan", no_wrap=True)
    head.add_column(overflow="fold")
    for k, val in summary_rows(r):
        head.add_row(k, Text(val, style=Verdict.of(val).style if k == "verdict" else ""))
    parts: list = [head]
    if r.graph_breaks:
        bt = Table(title="graph breaks (explain)", title_justify="left")
        for col in ("#", "type", "id", "where (user frame)", "source line"):
            bt.add_column(col, overflow="fold")  # never cut file:line
        for b in r.graph_breaks:
            uf = b.user_frame
            bt.add_row(str(b.count), b.gb_type, b.registry_id or "-", uf.short() if uf else "-",
                       (uf.source if uf else "")[:70])
        parts.append(bt)
    if r.log_tail and not r.ok:
        parts.append(Text("log tail:\n" + r.log_tail[-1500:], style="dim"))
    return Group(*parts)
