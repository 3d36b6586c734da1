"""`enablebot check RESULTS --baseline FILE`: fail on regressions against expected results."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import Console
from rich.markdown import Markdown


def register(app: typer.Typer) -> None:
    @app.command("check")
    def check(
        results: Path = typer.Argument(..., help="a sweep or merge output directory (results.jsonl)"),
        baseline: Path = typer.Option(..., help="expected results, one file per torch version and device"),
        update: bool = typer.Option(False, "--update", help="refresh the baseline from these results (keeps flaky marks)"),
        strict: bool = typer.Option(False, help="also fail on improvements (until the baseline is refreshed)"),
    ) -> None:
        """Exit 1 on a regression (full_graph -> break, ran -> error, numerics pass -> fail, more breaks)."""
        from ..baseline import Baseline, baseline_from, compare
        from ..checkpoint import RESULTS_FILE, load_results

        err = Console(stderr=True)
        f = results / RESULTS_FILE
        if not f.exists():
            err.print(f"[red]error:[/red] {f} does not exist: pass a sweep/merge output directory")
            raise typer.Exit(2)
        rs = list(load_results(f).values())
        old = None
        if baseline.exists():
            try:
                old = Baseline.load(baseline)
            except ValueError as e:
                err.print(f"[red]error:[/red] {e}")
                raise typer.Exit(2)
        if update:
            baseline_from(rs, old).save(baseline)
            err.print(f"baseline written: {baseline} ({len(rs)} runs)")
            return
        if old is None:
            err.print(f"[red]error:[/red] {baseline}: no such baseline; create it with --update")
            raise typer.Exit(2)
        rep = compare(rs, old)
        md = rep.markdown()
        Console().print(Markdown(md))
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(md)
        if rep.failed or (strict and rep.improvements):
            raise typer.Exit(1)
