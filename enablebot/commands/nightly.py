"""`enablebot nightly --config FILE [--step NAME ...]`: the whole nightly loop, or some steps of it
(the workflow runs one step per job, so secrets stay with the steps that need them)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape

from ..fileio import write_text as write_redacted


def register(app: typer.Typer) -> None:
    @app.command("nightly")
    def nightly(
        config: Path = typer.Option(..., "--config", help="nightly config (YAML; see enablebot/nightly.py)"),
        step: List[str] = typer.Option([], "--step", help="run only these steps, in the loop's order (repeatable)"),
        shard: Optional[str] = typer.Option(None, help="sweep step: run shard i/n only (GitHub Actions matrix)"),
        json_out: Optional[Path] = typer.Option(None, "--json", help="write the step log as JSON here"),
        unsafe_no_sandbox: bool = typer.Option(False, "--unsafe-no-sandbox",
                                               help="DANGEROUS: run LLM-written code without a sandbox "
                                                    "(only on a throwaway machine without bubblewrap)"),
    ) -> None:
        """watch -> register -> sweep -> merge -> check -> report -> registry record -> fix -> pr -> dashboard."""
        from .nightly_steps import STEPS, ConfigError, NightlyConfig, run_nightly
        from ..execute.sandbox import UNSAFE_ENV, SandboxUnavailable

        err = Console(stderr=True, soft_wrap=True)
        bad = [s for s in step if s not in STEPS]
        if bad:
            err.print(f"[red]error:[/red] unknown step(s) {bad}; steps are {', '.join(STEPS)}")
            raise typer.Exit(2)
        try:
            cfg = NightlyConfig.load(config)
        except ConfigError as e:
            err.print(f"[red]error:[/red] {escape(str(e))}")  # the message may hold [brackets]: not markup
            raise typer.Exit(2)
        if unsafe_no_sandbox:
            os.environ[UNSAFE_ENV] = "1"
        steps = tuple(s for s in STEPS if s in step) if step else STEPS
        try:
            logs = run_nightly(cfg, steps, say=lambda m: err.print(m, highlight=False, markup=False), shard=shard)
        except SandboxUnavailable as e:
            err.print(f"[red]error:[/red] {e}")
            raise typer.Exit(2)
        if json_out:
            write_redacted(json_out, json.dumps([vars(x) for x in logs], indent=2, default=str) + "\n")
        failed = [x.step for x in logs if not x.ok]
        if failed:
            err.print(f"failed steps: {', '.join(failed)}")
            raise typer.Exit(1)
