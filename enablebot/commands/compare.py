"""`enablebot compare A B`: what changed between two result sets, attributed to torch or transformers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console


def register(app: typer.Typer) -> None:
    @app.command("compare")
    def compare(
        a: Path = typer.Argument(..., help="the older result set: a sweep directory (results.jsonl) or a baseline JSON"),
        b: Path = typer.Argument(..., help="the newer result set: a sweep directory or a baseline JSON"),
        out: Optional[Path] = typer.Option(None, help="write compare.md and compare.json into this directory"),
        json_path: Optional[Path] = typer.Option(None, "--json", help="also write the report as JSON here"),
    ) -> None:
        """Per model and scenario: fixed, newly broken, break types/counts changed, errors gained or
        lost; each change attributed to torch or transformers when only one of them differs."""
        from ..sweep.compare import CompareInputError, compare_paths
        from ..fileio import atomic_write_text

        try:
            rep = compare_paths(a, b)
        except CompareInputError as e:
            Console(stderr=True).print(f"[red]error:[/red] {e}")
            raise typer.Exit(2)
        md = rep.markdown()
        data = json.dumps(rep.to_dict(), indent=1) + "\n"
        if out:
            out.mkdir(parents=True, exist_ok=True)
            atomic_write_text(out / "compare.md", md)
            atomic_write_text(out / "compare.json", data)
        if json_path:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(json_path, data)
        print(md, end="")
