"""`enablebot report ...`: reports over the registry. Other modules may add commands to
`report_app` (import it and decorate with `@report_app.command(...)`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

report_app = typer.Typer(help="Reports over model_registry.yaml.", no_args_is_help=True)


@report_app.callback()
def _report() -> None:
    """Reports over model_registry.yaml."""


@report_app.command("support")
def support(
    registry: Optional[Path] = typer.Option(None, "--registry", help="model_registry.yaml (default: the repo's)"),
    key: Optional[str] = typer.Option(None, "--key", help="only this device/mode, e.g. cpu/eval"),
    discovered_only: bool = typer.Option(False, "--discovered-only",
                                         help="only architectures the watcher found on the Hub"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="write the report as JSON here (- for stdout)"),
    fixes: Optional[list[Path]] = typer.Option(None, "--fixes", help="fix bundle directories (or roots of them): "
                                               "adds the time to the first verified fix bundle"),
    new_in: Optional[str] = typer.Option(None, "--new-in", help="only types new in this release, e.g. 'transformers 5.25.0'"),
    replay: Optional[Path] = typer.Option(None, "--replay", help="a replay's --out (`enablebot replay`): its tables per "
                                          "release and per type, the bot against the human process"),
) -> None:
    """Time to support per architecture and device, and the median.

    From first_seen to the first run that is full_graph with numerics passing."""
    if replay is not None:
        from ..replay import report as rep_mod

        if not (replay / rep_mod.REPORT_FILE).exists():
            Console(stderr=True, soft_wrap=True).print(
                f"[red]error:[/red] {replay / rep_mod.REPORT_FILE} does not exist: run `enablebot replay --out {replay}`")
            raise typer.Exit(2)
        print(rep_mod.markdown(rep_mod.load(replay)))
        return
    from ..model.registry import Registry, RegistryError
    from ..watch.support import human_duration, time_to_support

    try:
        reg = Registry.load(registry)
    except RegistryError as e:
        Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {e}")
        raise typer.Exit(2)
    from ..outputs import to_stdout, write_json
    from ..measure.render import out_console
    from ..watch.support import first_fixes

    rep = time_to_support(reg, discovered_only=discovered_only, key=key, fixes=first_fixes(fixes), new_in=new_in)
    out = out_console(stderr=to_stdout(json_path))
    if not rep.rows:
        filt = " and ".join(x for x in (f"--key {key}" if key else "", "--discovered-only" if discovered_only else "",
                                        f"--new-in {new_in!r}" if new_in else "") if x)
        Console(stderr=True, soft_wrap=True).print(
            f"no architectures to report{' with ' + filt if filt else ''} in {reg.path}. Statuses come from "
            "`enablebot registry record RESULTS_DIR` (after a sweep) or `enablebot watch --run`"
            + ("; drop the filter to see all" if filt else "") + ".", markup=False, highlight=False)
    else:
        rows = Table(title="time to support (full_graph + numerics passing)", title_justify="left")
        for col in ("architecture", "device/mode", "first seen", "source", "supported at", "time to support",
                    "time to fix", "latest verdict"):
            rows.add_column(col, overflow="fold")
        for r in rep.rows:
            took = human_duration(r.seconds) if r.seconds is not None else f"open {human_duration(r.open_seconds)}"
            rows.add_row(r.model_type, r.key or "not run", r.first_seen[:16], r.first_seen_source or "-",
                         (r.supported_at or "-")[:16], took, human_duration(r.fix_seconds), r.verdict or "-")
        out.print(rows)
        summary = Table(title="median per device/mode", title_justify="left")
        for col in ("device/mode", "supported", "median time to support"):
            summary.add_column(col, overflow="fold")
        for s in rep.summaries:
            summary.add_row(s.key, f"{s.supported}/{s.architectures}", human_duration(s.median_seconds))
        out.print(summary)
    if json_path:
        write_json(json_path, rep.to_dict())


def register(app: typer.Typer) -> None:
    app.add_typer(report_app, name="report")
