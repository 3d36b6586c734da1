"""Write the site: pages, the vendored assets and a machine-readable summary (site.json)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

from . import pages
from .build import SiteData
from .links import cluster_page, model_page

ASSETS = Path(__file__).resolve().parent / "assets"


def summary(data: SiteData) -> dict:
    return {
        "generated_at": data.generated_at,
        "sets": [{"label": s.label, "source": s.source, "kind": s.kind, "started_at": s.started_at,
                  "devices": s.devices, "pass": s.pass_, "torch": s.torch, "transformers": s.transformers,
                  "runs": len(s.rows)} for s in data.sets],
        "shares": [{"set": x.set_label, "device": x.device, "scenario": x.scenario, "full_graph": x.full_graph,
                    "compiled": x.compiled, "runs": x.total, "share": round(x.rate, 4) if x.rate is not None else None}
                   for x in data.shares],
        "trends": [{"line": t.name({s.label: i + 1 for i, s in enumerate(data.sets)}), "series": t.series,
                    "device": t.device, "scenario": t.scenario, "runs": t.runs, "subset_of": t.subset_of,
                    "points": [{"set": p.set_label, "full_graph": p.full_graph, "compiled": p.compiled,
                                "set_runs": p.set_runs} for p in t.points]} for t in data.trends],
        "version_changes": [{"before": v.before.label, "after": v.after.label, "common": v.common,
                             "before_full_graph": v.before_full_graph, "after_full_graph": v.after_full_graph,
                             "compiled_both": v.compiled_both,
                             "before_full_graph_compiled": v.before_full_graph_compiled,
                             "after_full_graph_compiled": v.after_full_graph_compiled,
                             "changed": [list(c) for c in v.changed]} for v in data.version_changes],
        "new_breaks": [{"key": n.key, "series": n.series, "before": n.before_set, "after": n.after_set, "what": n.what}
                       for n in data.new_breaks],
        "new_architectures": [{"model": a.model, "why": a.why, "first_seen": a.first_seen,
                               "supported_at": a.supported_at, "seconds": a.seconds} for a in data.new_archs],
        "clusters": len(data.clusters),
        "bundles": len(data.bundles),
        "notes": data.notes,
    }


def write_site(data: SiteData, out: Path, progress: Callable[[int, int], None] | None = None) -> list[Path]:
    """Every page under out/; stale model and cluster pages from an earlier build are removed."""
    out = Path(out)
    for sub in ("models", "clusters"):
        if (out / sub).is_dir():
            shutil.rmtree(out / sub)
    (out / "assets").mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for f in sorted(ASSETS.iterdir()):
        if f.is_file():
            shutil.copyfile(f, out / "assets" / f.name)
            written.append(out / "assets" / f.name)

    def put(rel: str, text: str) -> None:
        p = out / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")  # plain write: umask permissions, readable when published
        written.append(p)

    put("index.html", pages.overview(data))
    put("models.html", pages.models_table(data))
    put("clusters.html", pages.clusters_index(data))
    if data.compare is not None:
        put("compare.html", pages.compare_page(data))
    from ..replay.report import html_body

    # Always written, so the navigation's link holds: without --replay it says how to get the page.
    body = (html_body(data.replay) if data.replay is not None else
            "<p>No replay was given. <code>enablebot replay --out DIR</code> replays transformers releases (day-0 "
            "pass, the bot's fixes, each type followed to the release that supports it); "
            "<code>enablebot site ... --replay DIR</code> puts its tables and timeline here.</p>")
    put("support.html", pages.page("Time to support, replayed", body, active="support",
                                   description="transformers releases replayed: the bot against the human process"))
    by_model = data.by_model()
    total = len(by_model) + len(data.clusters)
    for i, (model, rows) in enumerate(by_model.items(), 1):
        put(model_page(model), pages.model_page_html(model, rows, data))
        if progress:
            progress(i, total)
    for j, c in enumerate(data.clusters, len(by_model) + 1):
        put(cluster_page(c.key), pages.cluster_page_html(c, data))
        if progress:
            progress(j, total)
    put("site.json", json.dumps(summary(data), indent=1) + "\n")
    return written
