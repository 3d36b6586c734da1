"""`enablebot site RESULTS... --out site/`: the static dashboard site."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console


def register(app: typer.Typer) -> None:
    @app.command("site")
    def site(
        results: List[Path] = typer.Argument(..., help="sweep/merge directories (results.jsonl) and baseline JSON "
                                                       "files (baselines/*.json); two or more give a trend"),
        out: Path = typer.Option(Path("site"), help="output directory (open index.html)"),
        fixes: Optional[Path] = typer.Option(None, help="fix bundles directory (fixes/<model>/<cluster>/bundle.json)"),
        prs: Optional[Path] = typer.Option(None, help="PR outcomes written by `enablebot pr --json`"),
        compare: Optional[Path] = typer.Option(None, help="a compare JSON file to show on its own page"),
        registry: Optional[Path] = typer.Option(None, help="model_registry.yaml (default: the repo's): modality, first_seen"),
        replay: Optional[Path] = typer.Option(None, help="a replay's --out (`enablebot replay`): the time-to-support "
                                              "page, with its timeline per release"),
    ) -> None:
        """Build the dashboard: overview and trend, the model table, a page per model and per break cluster."""
        from ..model.registry import Registry, RegistryError
        from ..site.build import SiteInputError, build
        from ..site.write import write_site

        err = Console(stderr=True)
        try:
            reg = Registry.load(registry)
            data = build(list(results), registry=reg, fixes=fixes, prs=prs, compare=compare, replay=replay)
        except (SiteInputError, RegistryError) as e:
            err.print(f"[red]error:[/red] {e}")
            raise typer.Exit(2)
        for s in data.sets:
            err.print(f"  {s.label}: {len(s.rows)} runs, {s.series}, "
                      f"torch {s.torch} / transformers {s.transformers}")
        step = max(1, (len(data.by_model()) + len(data.clusters)) // 10)

        def progress(i: int, n: int) -> None:
            if i % step == 0 or i == n:
                err.print(f"  pages {i}/{n}")

        written = write_site(data, out, progress)
        err.print(f"site written: {out / 'index.html'} ({len(written)} files)")
