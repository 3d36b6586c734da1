"""`enablebot watch`: find new architectures on the Hub and record them in the registry."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from .choices import Device, Mode

_AGE = re.compile(r"^(\d+)\s*([dhm])$")
_KIND_STYLE = {"new": "green", "needs_newer_transformers": "yellow", "remote_code": "magenta",
               "registered": "dim", "ignored": "dim", "skipped": "red"}


def parse_since(value: str | None, *, now: datetime | None = None) -> datetime | None:
    """An ISO date/time (UTC when no zone) or an age: 7d, 12h, 30m."""
    if not value:
        return None
    m = _AGE.match(value.strip())
    if m:
        n, unit = int(m.group(1)), m.group(2)
        delta = {"d": timedelta(days=n), "h": timedelta(hours=n), "m": timedelta(minutes=n)}[unit]
        return (now or datetime.now(timezone.utc)) - delta
    from ..model.hub import parse_iso

    try:
        return parse_iso(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r}: use an ISO date/time (2026-11-20, 2026-11-20T08:00Z) "
                                 "or an age (7d, 12h, 30m)", param_hint="--since") from None


def register(app: typer.Typer) -> None:
    @app.command("watch")
    def watch(
        limit: int = typer.Option(100, min=1, help="most listing entries to examine (newest first)"),
        since: Optional[str] = typer.Option(None, help="look back to this ISO time or age (7d, 12h) instead "
                                                       "of the saved cursor (a rescan: nothing is registered twice)"),
        endpoint: Optional[str] = typer.Option(None, envvar="HF_ENDPOINT", help="Hub URL (default https://huggingface.co)"),
        registry: Optional[Path] = typer.Option(None, "--registry", help="model_registry.yaml (default: the repo's)"),
        run: bool = typer.Option(False, "--run", help="run each discovered architecture and record its status"),
        device: Device = typer.Option(Device.cpu, help="device for --run"),
        mode: Mode = typer.Option(Mode.eval, help="mode for --run"),
        allow_remote_code: list[str] = typer.Option([], "--allow-remote-code", metavar="REPO",
                                                    help="repo whose remote code --run may execute (repeatable)"),
        json_path: Optional[Path] = typer.Option(None, "--json", help="write the poll report as JSON here (- for stdout)"),
        show_all: bool = typer.Option(False, "--show-all", help="list registered and ignored models too"),
        timeout: float = typer.Option(10.0, min=0.1, help="seconds per Hub request"),
        retries: int = typer.Option(3, min=0, help="retries per Hub request on 429/5xx/timeouts (waits honour "
                                                   "Retry-After/RateLimit, at most --max-wait each)"),
        max_wait: float = typer.Option(60.0, min=0, help="longest wait accepted before a retry, seconds"),
    ) -> None:
        """Poll the Hub (HF_ENDPOINT, HF_TOKEN) for newly created models; register new architectures.

        Reads configs only (the listing's config field or config.json), never weights, and never
        executes remote code unless the repo is allow-listed. Exit 2 when the Hub fails."""
        from ..model.hub import HubClient, HubError, RetryPolicy
        from ..model.registry import RegistryError
        from ..results import RunResult, RunSpec
        from ..watch.watcher import KINDS, watch_once

        err = Console(stderr=True, soft_wrap=True)
        from .choices import require_device

        dev = require_device(device) if run else device.value
        since_dt = parse_since(since)
        client = HubClient(endpoint, policy=RetryPolicy(attempts=retries + 1, max_wait_s=max_wait, timeout_s=timeout))
        try:
            with err.status(f"listing models on {client.endpoint}") as status:
                def runner(spec: RunSpec) -> RunResult:
                    from ..execute.isolation import run_in_child

                    status.update(f"[bold]{spec.model_id}[/bold] ({spec.device}/{spec.mode}): starting")
                    return run_in_child(spec, progress=lambda msg: status.update(
                        f"[bold]{spec.model_id}[/bold] ({spec.device}/{spec.mode}): {msg}"))

                report = watch_once(registry, client, limit=limit, since=since_dt, run=run, runner=runner,
                                    device=dev, mode=mode.value, allow_remote_code=allow_remote_code)
        except HubError as e:
            err.print(f"[red]error:[/red] {e}")
            raise typer.Exit(2)
        except RegistryError as e:
            err.print(f"[red]error:[/red] {e}")
            raise typer.Exit(2)

        from ..measure.render import out_console

        from ..outputs import to_stdout, write_json

        out = out_console(stderr=to_stdout(json_path))
        counts = {k: len(report.by_kind(k)) for k in KINDS if report.by_kind(k)}
        shown = [d for d in report.decisions if show_all or d.kind not in ("registered", "ignored")]
        table = Table(title=f"{len(report.decisions)} listing entries on {report.endpoint}: "
                      + ", ".join(f"{n} {k}" for k, n in counts.items()), title_justify="left", expand=True)
        for col in ("created", "repo", "model_type", "decision"):
            table.add_column(col, no_wrap=True)
        table.add_column("reason", ratio=1, overflow="fold")  # takes the rest of the width
        for d in shown:
            style = _KIND_STYLE.get(d.kind, "")
            kind = d.kind.replace("_", " ") + (" *" if d.changed else "")
            table.add_row((d.created_at or "?")[:16].replace("T", " "), d.repo_id, d.model_type or "-",
                          f"[{style}]{kind}[/{style}]" if style else kind, d.reason)
        if shown:
            out.print(table)
        else:
            out.print(table.title)
        if report.runs:
            runs = Table(title=f"runs ({dev}/{mode.value})", title_justify="left")
            for col in ("model_type", "model_id", "verdict", "numerics", "speedup", "supported_at / note"):
                runs.add_column(col, overflow="fold")
            for r in report.runs:
                runs.add_row(r.model_type, r.model_id or "-", r.verdict or "-",
                             "-" if r.numerics_passed is None else ("pass" if r.numerics_passed else "fail"),
                             f"{r.speedup:.2f}x" if r.speedup else "-", r.supported_at or r.skipped or "-")
            out.print(runs)
        new = report.new_architectures
        out.print(f"new architectures: {', '.join(new) if new else 'none'}  (* = registry entry changed)")
        cur = report.cursor_after
        out.print(f"registry {'updated' if report.saved else 'unchanged'}: {report.registry}; "
                  f"cursor {cur.created_at or 'unset'}" + (f" ({len(cur.repos)} repos at that instant)"
                                                           if len(cur.repos) > 1 else ""))
        if report.truncated:
            err.print(f"[yellow]warning:[/yellow] --limit {limit} was reached before the cursor; models created "
                      "between the cursor and the oldest one examined were not seen (raise --limit or poll more often)")
        if json_path:
            write_json(json_path, report.to_dict())
        if report.stopped:
            err.print(f"[red]error:[/red] the poll stopped early: {report.stopped}\n"
                      "What was handled is saved; the next poll resumes from the cursor.")
            raise typer.Exit(2)
