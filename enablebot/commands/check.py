"""`enablebot check RESULTS`: fail on regressions against expected results."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import typer
from rich.console import Console
from rich.markdown import Markdown


def register(app: typer.Typer) -> None:
    @app.command("check")
    def check(
        results: Path = typer.Argument(..., help="a sweep or merge output directory (results.jsonl)"),
        baseline: Path = typer.Option(None, help="expected results file (default: one per device and torch "
                                                 "version, BASELINE_DIR/<device>-torch-<version>.json)"),
        baseline_dir: Path = typer.Option(Path("baselines"), help="where the per-device, per-version baselines live"),
        update: bool = typer.Option(False, "--update", help="write/refresh the baseline(s) from these results (keeps flaky marks)"),
        strict: bool = typer.Option(False, help="also fail on improvements (until the baseline is refreshed)"),
    ) -> None:
        """Exit 1 on a regression (full_graph -> break, ran -> error, numerics pass -> fail, more breaks)."""
        from ..sweep.baseline import Baseline, baseline_from, baseline_name, compare, incomparable
        from ..sweep.checkpoint import RESULTS_FILE, load_results
        from ..measure.render import out_console

        err = Console(stderr=True, soft_wrap=True)
        f = results / RESULTS_FILE
        if not f.exists():
            err.print(f"[red]error:[/red] {f} does not exist: pass a sweep/merge output directory")
            raise typer.Exit(2)
        groups: dict[Path, list] = defaultdict(list)
        for r in load_results(f).values():
            groups[baseline or baseline_dir / baseline_name(r)].append(r)
        if not groups:
            err.print(f"[red]error:[/red] {f} holds no results")
            raise typer.Exit(2)
        failed = False
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        for path, rs in sorted(groups.items()):
            try:
                old = Baseline.load(path) if path.exists() else None
            except ValueError as e:
                err.print(f"[red]error:[/red] {e}")
                raise typer.Exit(2)
            why = incomparable(rs, old, path, updating=update)
            if why:
                err.print(f"[red]error:[/red] {why}")
                raise typer.Exit(2)
            if update:
                baseline_from(rs, old).save(path)
                err.print(f"baseline written: {path} ({len(rs)} runs)")
                continue
            if old is None:
                err.print(f"[red]error:[/red] {path}: no such baseline; create it with `enablebot check {results} --update`")
                raise typer.Exit(2)
            rep = compare(rs, old)
            md = f"### {path.name}\n\n" + rep.markdown()
            out_console().print(Markdown(md))
            if summary:
                from ..fileio import append_text

                append_text(summary, md)
            failed |= rep.failed or (strict and bool(rep.improvements))
        if failed:
            raise typer.Exit(1)
