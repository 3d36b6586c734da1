"""The replay's report: collected from OUT (replay.json and each release's results), written as
JSON, CSV, Markdown and an HTML page with a timeline; `report support --replay` and the site read
the JSON."""

from __future__ import annotations

import csv
import html
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..fileio import atomic_write_text
from ..results import Serializable
from .run import Refresh
from .timeline import ReleaseRow, Totals, TypeRow, release_rows, totals, type_rows

REPORT_FILE = "support.json"


@dataclass
class Cost(Serializable):
    wall_s: float = 0.0
    items_run: int = 0
    items_reused: int = 0
    by_step: dict[str, float] = field(default_factory=dict)  # seconds


@dataclass
class ReplayReport(Serializable):
    torch: str
    date_source: str
    releases: list[ReleaseRow] = field(default_factory=list)
    types: list[TypeRow] = field(default_factory=list)
    totals: Totals | None = None
    not_replayed: dict[str, str] = field(default_factory=dict)  # version -> why
    # releases that do not import over today's pins alone: why, and what their environment added
    off_pins: dict[str, str] = field(default_factory=dict)
    unfinished: list[str] = field(default_factory=list)  # versions with steps still to run
    bot_pending: list[str] = field(default_factory=list)  # replayed versions the bot's fixes have not run on
    cost: Cost = field(default_factory=Cost)
    refreshes: list[Refresh] = field(default_factory=list)  # types redone by a later harness


def collect(out: Path) -> ReplayReport:
    from .run import BotState, ReplayState, standings
    from ..versions import release_key

    state = ReplayState.load(out)
    order = sorted(state.releases, key=release_key)
    replayed = [v for v in order if state.releases[v].env is not None and state.releases[v].env.ok
                and "day0" in state.releases[v].steps]
    rel = [(v, state.releases[v].release.date) for v in replayed]
    new_in = {mt: v for v in replayed for mt in state.releases[v].new_types}
    st = {v: standings(out, v) for v in replayed}
    bot = BotState.load(out)
    rows = type_rows(rel, new_in, st, bot.types)
    envs = {}
    for v in replayed:
        e = state.releases[v].env
        envs[v] = "pinned" if not e.extra_requirements else "extra requirements: " + ", ".join(
            x.split(" (")[0] for x in e.extra_requirements)
    off_pins = {v: f"{state.releases[v].env.pinned_reason or 'did not import'}; added: "
                + ", ".join(state.releases[v].env.extra_requirements)
                for v in order if state.releases[v].env is not None and state.releases[v].env.extra_requirements}
    not_replayed = {}
    for v in order:
        rs = state.releases[v]
        if rs.release is None:
            not_replayed[v] = rs.steps.get("release").note if rs.steps.get("release") else "not fetched yet"
        elif rs.env is not None and not rs.env.ok:
            not_replayed[v] = f"does not import: {rs.env.reason}"
    cost = Cost()
    for v in order:
        for name, s in state.releases[v].steps.items():
            cost.wall_s += s.wall_s
            cost.by_step[name] = round(cost.by_step.get(name, 0.0) + s.wall_s, 1)
            cost.items_run += s.ran if name != "fix" else 0
            cost.items_reused += s.reused
    cost.wall_s = round(cost.wall_s, 1)
    torch_v = ""
    for v in replayed:
        rp = out / "releases" / v / "dynamo" / "results.jsonl"
        if rp.exists():
            line = rp.read_text(encoding="utf-8").split("\n", 1)[0]
            if line.strip():
                torch_v = json.loads(line).get("versions", {}).get("torch", "")
                break
    date_source = next((state.releases[v].release.date_source for v in order if state.releases[v].release), "")
    return ReplayReport(torch=torch_v, date_source=date_source, releases=release_rows(rel, envs, rows), types=rows,
                        totals=totals(rows, len(replayed)), not_replayed=not_replayed, off_pins=off_pins,
                        unfinished=[v for v in order if v not in not_replayed
                                    and not {"day0", "follow", "inductor"} <= set(state.releases[v].steps)],
                        bot_pending=[v for v in replayed if v not in bot.releases_done],
                        cost=cost, refreshes=state.refreshes)


def write(out: Path, rep: ReplayReport) -> list[Path]:
    paths = [out / REPORT_FILE, out / "support.md", out / "support_types.csv", out / "support.html"]
    atomic_write_text(paths[0], json.dumps(rep.to_dict(), indent=1) + "\n")
    atomic_write_text(paths[1], markdown(rep))
    atomic_write_text(paths[2], types_csv(rep))
    from ..site.pages import page

    atomic_write_text(paths[3], page("Time to support, replayed", html_body(rep),
                                     description="transformers releases replayed: the bot against the human process"))
    return paths


def load(path: Path) -> ReplayReport:
    p = path / REPORT_FILE if path.is_dir() else path
    return ReplayReport.from_dict(json.loads(p.read_text(encoding="utf-8")), str(p))


def _days(d: float | None) -> str:
    return "-" if d is None else f"{d:g}"


def _mins(s: float | None) -> str:
    return "-" if s is None else f"{s / 60:.1f} min"


def markdown(rep: ReplayReport) -> str:
    t = rep.totals
    lines = [f"# Time to support, replayed over {t.releases} transformers releases (torch {rep.torch})", ""]
    if t.new_types:
        lines += [f"- New model types: **{t.new_types}**; built and ran eager at day 0: **{t.built} of "
                  f"{t.new_types - t.missing} ({t.built_share}%)**" + (f", {t.missing} more need an optional package "
                  "this set-up lacks" if t.missing else "") + f"; full graph: {t.full_graph}; supported (full graph "
                  f"+ numerics): {t.supported_day0}.",
                  f"- Breaking at day 0: {t.breaking_day0}. Fixed upstream in a later release: **{t.fixed_later}** "
                  f"(median {t.median_human_releases} releases, {t.median_human_days} days); never fixed: {t.never_fixed}.",
                  f"- The bot at day 0: **{t.bot_fixed}** types fixed (median {_mins(t.median_bot_seconds)}); of the "
                  f"{t.fixed_later} types humans fixed later, the bot fixed **{t.bot_fixed_of_fixed_later}** at day 0."]
    lines += [f"- Release dates: {rep.date_source}.",
              f"- Cost: {rep.cost.wall_s / 60:.1f} min of wall time, {rep.cost.items_run} items run, "
              f"{rep.cost.items_reused} reused (" + ", ".join(f"{k} {v / 60:.1f} min" for k, v in rep.cost.by_step.items()) + ")."]
    for r in rep.refreshes:
        lines += [f"- Redone with harness `{r.harness}` ({r.at[:10]}, `{r.reason}`): {len(r.types)} types' results "
                  "dropped from every release and run again (their day 0, then followed as before)."]
    if rep.not_replayed:
        lines += ["", "Not replayed:", ""] + [f"- {v}: {why}" for v, why in rep.not_replayed.items()]
    if rep.off_pins:
        lines += ["", f"{len(rep.off_pins)} releases do not import over today's pins alone; each was replayed with "
                  "its own unmet requirements added beside it (never in the pinned base):", ""]
        lines += [f"- {v}: {why}" for v, why in rep.off_pins.items()]
    if rep.unfinished:
        lines += ["", f"Unfinished (steps still to run; rerun the command): {', '.join(rep.unfinished)}"]
    if rep.bot_pending:
        lines += ["", f"The bot's day-0 fixes have not run yet on {len(rep.bot_pending)} replayed releases "
                  f"({', '.join(rep.bot_pending)}): their types count as not fixed by the bot "
                  "(`enablebot replay --fix-only` runs them)."]
    lines += ["", "## Per release", "",
              "| release | date | environment | new types | built+eager | full graph | supported day 0 | bot fixed day 0 "
              "| fixed later | median releases / days later | never fixed |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rep.releases:
        lines.append(f"| {r.version} | {r.date[:10]} | {r.env} | {r.new_types} | {r.built} | {r.full_graph} | {r.supported} "
                     f"| {r.bot_fixed} | {r.fixed_later} | {_days(r.median_releases_later)} / {_days(r.median_days_later)} "
                     f"| {r.never_fixed} |")
    lines += ["", "## Per type", "",
              "| type | new in | day 0 | breaks at day 0 | human: supported in | releases / days | bot at day 0 | bot time |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rep.types:
        day0 = ("missing dependency" if r.day0_missing else "supported" if r.day0_supported else "full graph, numerics " + str(r.day0_numerics) if r.day0_full_graph
                else "breaks" if r.day0_built else "not built")
        bot = "-" if r.bot is None else r.bot.status + (f" ({', '.join(r.bot.sources)})" if r.bot.sources else "")
        if r.bot is not None and r.bot.status == "fixed":
            # which items were judged: older results judged the eval call only
            bot += f"; {_items_judged(r.bot.items)}"
        lines.append(f"| {r.model_type} | {r.new_in} | {day0} | {', '.join(r.day0_breaks) or '-'} "
                     f"| {r.human_supported_in or ('never (to ' + r.last_seen_in + ')' if r.day0_built else '-')} "
                     f"| {'-' if r.human_releases is None else r.human_releases} / {_days(r.human_days)} "
                     f"| {bot} | {_mins(r.bot_seconds)} |")
    return "\n".join(lines) + "\n"


def types_csv(rep: ReplayReport) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["model_type", "new_in", "first_seen", "outcome", "day0_items", "day0_built", "day0_full_graph",
                "day0_supported", "day0_numerics", "day0_breaks", "human_supported_in", "human_releases", "human_days",
                "bot_status", "bot_sources", "bot_seconds"])
    for r in rep.types:
        w.writerow([r.model_type, r.new_in, r.first_seen, r.outcome, r.day0_items, r.day0_built, r.day0_full_graph,
                    r.day0_supported, r.day0_numerics or "", " ".join(r.day0_breaks), r.human_supported_in or "",
                    "" if r.human_releases is None else r.human_releases, "" if r.human_days is None else r.human_days,
                    r.bot.status if r.bot else "", " ".join(r.bot.sources) if r.bot else "",
                    "" if r.bot_seconds is None else r.bot_seconds])
    return buf.getvalue()


# Outcome -> colour (Okabe-Ito) and pattern name, so the chart reads without colour too.
_OUTCOMES = (("supported at day 0", "#009E73"), ("bot fixed at day 0", "#0072B2"),
             ("fixed upstream later", "#E69F00"), ("never fixed", "#D55E00"), ("full graph, numerics not passing", "#CC79A7"),
             ("not built at day 0", "#999999"), ("missing dependency", "#DDDDDD"))


def _bucket(r: TypeRow) -> str:
    if r.day0_missing:
        return "missing dependency"
    if r.day0_supported:
        return "supported at day 0"
    if r.bot is not None and r.bot.status == "fixed":
        return "bot fixed at day 0"
    if r.human_supported_in:
        return "fixed upstream later"
    if not r.day0_built:
        return "not built at day 0"
    if r.day0_full_graph:
        return "full graph, numerics not passing"
    return "never fixed"


def timeline_svg(rep: ReplayReport) -> str:
    """One stacked column per release (its new types by what became of them), on a date axis."""
    from datetime import datetime

    rels = [r for r in rep.releases if r.new_types]
    if not rels:
        return "<p>No release with new types was replayed.</p>"
    counts = {r.version: {name: 0 for name, _ in _OUTCOMES} for r in rels}
    for t in rep.types:
        if t.new_in in counts:
            counts[t.new_in][_bucket(t)] += 1
    dates = [datetime.fromisoformat(r.date) for r in rels]
    d0, d1 = min(dates), max(dates)
    span = max((d1 - d0).total_seconds(), 1.0)
    w, left, right, top, ph = 1000, 50, 30, 20, 260
    pw = w - left - right
    ymax = max(r.new_types for r in rels)
    h = top + ph + 70 + 20 * len(_OUTCOMES)
    e = html.escape
    out = [f'<svg class="chart" viewBox="0 0 {w} {h}" role="img" aria-labelledby="tl-title tl-desc" '
           'xmlns="http://www.w3.org/2000/svg"><title id="tl-title">New model types per release, by outcome</title>'
           '<desc id="tl-desc">One column per transformers release at its date; each column stacks its new types by '
           'what became of them: supported at day 0, fixed by the bot at day 0, fixed upstream later, never fixed.</desc>']
    for k in range(0, ymax + 1, max(1, ymax // 5)):
        y = top + ph * (1 - k / ymax)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                   f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{k}</text>')
    bw = max(6.0, min(24.0, pw / (len(rels) * 1.6)))
    for r, d in zip(rels, dates):
        x = left + pw * (d - d0).total_seconds() / span - bw / 2
        y = top + ph
        tip = f"{r.version} ({r.date[:10]}): " + ", ".join(f"{n} {c}" for c, n in counts[r.version].items() if n)
        out.append(f"<g><title>{e(tip)}</title>")
        for name, colour in _OUTCOMES:
            n = counts[r.version][name]
            if n:
                hh = ph * n / ymax
                y -= hh
                out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bw:.1f}" height="{hh:.1f}" fill="{colour}" '
                           'stroke="#fff" stroke-width="0.5"/>')
        out.append("</g>")
        out.append(f'<text x="{x + bw / 2:.1f}" y="{top + ph + 12}" font-size="9" text-anchor="end" '
                   f'transform="rotate(-50 {x + bw / 2:.1f} {top + ph + 12})">{e(r.version)}</text>')
    ly = top + ph + 62
    for i, (name, colour) in enumerate(_OUTCOMES):
        total = sum(c[name] for c in counts.values())
        out.append(f'<rect x="{left}" y="{ly + 20 * i - 10}" width="12" height="12" fill="{colour}"/>'
                   f'<text x="{left + 18}" y="{ly + 20 * i}" font-size="12">{e(name)}: {total}</text>')
    out.append("</svg>")
    return "".join(out)


def html_body(rep: ReplayReport) -> str:
    from ..site.pages import table

    e = html.escape
    md = markdown(rep).split("## Per release")[0]
    intro = "".join(f"<p>{e(ln[2:])}</p>" for ln in md.splitlines() if ln.startswith("- "))
    rel_rows = [f"<tr><td>{e(r.version)}</td><td>{e(r.date[:10])}</td><td>{e(r.env)}</td><td>{r.new_types}</td>"
                f"<td>{r.built}</td><td>{r.full_graph}</td><td>{r.supported}</td><td>{r.bot_fixed}</td>"
                f"<td>{r.fixed_later}</td><td>{_days(r.median_releases_later)} / {_days(r.median_days_later)}</td>"
                f"<td>{r.never_fixed}</td></tr>" for r in rep.releases]
    type_rows_ = [f"<tr><td>{e(r.model_type)}</td><td>{e(r.new_in)}</td><td>{e(_bucket(r))}</td>"
                  f"<td>{e(', '.join(r.day0_breaks) or '-')}</td><td>{e(r.human_supported_in or '-')}</td>"
                  f"<td>{'-' if r.human_releases is None else r.human_releases} / {_days(r.human_days)}</td>"
                  f"<td>{e(r.bot.status if r.bot else '-')}</td><td>{e(_mins(r.bot_seconds))}</td></tr>" for r in rep.types]
    return (intro + timeline_svg(rep)
            + table([("release", "text"), ("date", "text"), ("environment", "text"), ("new types", "num"),
                     ("built+eager", "num"), ("full graph", "num"), ("supported day 0", "num"), ("bot fixed day 0", "num"),
                     ("fixed later", "num"), ("releases / days later", "text"), ("never fixed", "num")],
                    rel_rows, caption="Per release")
            + table([("type", "text"), ("new in", "text"), ("outcome", "text"), ("breaks at day 0", "text"),
                     ("human: supported in", "text"), ("releases / days", "text"), ("bot at day 0", "text"),
                     ("bot time", "text")], type_rows_, caption="Per type", sortable=True))


def _items_judged(items: list[dict]) -> str:
    if not items:
        return "the eval call judged"
    together = sum(i.get("by") == "together" for i in items)
    return f"{len(items)} breaking item(s) one graph" + (f", {together} by the bundles together" if together else "")
