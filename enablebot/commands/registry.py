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
        from ..registry import Registry
        from ..seed import seed_registry

        reg = Registry.load(registry)
        added = seed_registry(reg)
        changed = reg.save()
        Console(stderr=True).print(
            f"{len(reg)} architectures, {len(added)} added; {'written' if changed else 'unchanged'}: {reg.path}"
        )

    app.add_typer(reg_app, name="registry")
