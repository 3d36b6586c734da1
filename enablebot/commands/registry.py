"""`enablebot registry seed`: (re)seed model_registry.yaml from the installed transformers."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console


def register(app: typer.Typer) -> None:
    reg_app = typer.Typer(help="Maintain model_registry.yaml.", no_args_is_help=True)

    @reg_app.command("seed")
    def seed(registry: Path = typer.Option(None, "--registry", help="Registry file (default: the repo's model_registry.yaml)")) -> None:
        """Add every architecture the installed transformers knows; keep hand-written knowledge."""
        from ..model.registry import Registry
        from ..model.seed import seed_registry

        reg = Registry.load(registry)
        added = seed_registry(reg)
        changed = reg.save()
        Console(stderr=True, soft_wrap=True).print(
            f"{len(reg)} architectures, {len(added)} added; {'written' if changed else 'unchanged'}: {reg.path}"
        )

    @reg_app.command("record")
    def record(
        results: Path = typer.Argument(..., help="a sweep or merge output directory (results.jsonl)"),
        registry: Path = typer.Option(None, "--registry", help="Registry file (default: the repo's model_registry.yaml)"),
        task: str = typer.Option("head", help="whose result stands for the architecture: head or base"),
    ) -> None:
        """Record each architecture's latest verdict per device/mode in the registry (for the
        dashboard and time-to-support; `supported_at` is set once and never moved)."""
        from ..sweep.checkpoint import RESULTS_FILE, load_results
        from ..model.registry import Registry
        from ..watch.support import record_status

        f = results / RESULTS_FILE
        if not f.exists():
            Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {f} does not exist")
            raise typer.Exit(2)
        reg = Registry.load(registry)
        n = 0
        for r in sorted(load_results(f).values(), key=lambda r: r.started_at):
            entry = reg.get(r.spec.model_id)
            if entry is not None and (r.spec.task or "head") == task:
                record_status(entry, r)
                n += 1
        changed = reg.save()
        Console(stderr=True, soft_wrap=True).print(f"{n} statuses recorded; {'written' if changed else 'unchanged'}: {reg.path}")

    app.add_typer(reg_app, name="registry")
