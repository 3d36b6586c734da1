"""`enablebot replay` and `enablebot report support --replay`: time to support over past releases."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from .choices import OUTPUT_ROOT


def register(app: typer.Typer) -> None:
    @app.command("replay")
    def replay_cmd(
        first: str = typer.Option("5.0.0", "--from", help="first transformers release to replay"),
        last: Optional[str] = typer.Option(None, "--to", help="last release (default: the newest the registry offers)"),
        releases: List[str] = typer.Option([], "--release", help="replay exactly these releases (repeatable), "
                                           "instead of --from/--to"),
        previous: Optional[str] = typer.Option(None, help="the release before the first: its types start the registry "
                                               "(default: the one before --from in the package registry)"),
        minor_only: bool = typer.Option(False, help="only the newest patch release of each minor series"),
        out: Path = typer.Option(Path("results/replay"), help="results: replay.json (resumable state), "
                                 "releases/<version>/..., support.{json,md,html}, support_types.csv"),
        cache: Path = typer.Option(OUTPUT_ROOT / "replay", help="wheels and one environment per release"),
        jobs: int = typer.Option(2, min=1, help="parallel workers per sweep"),
        timeout: float = typer.Option(300.0, help="per-model timeout, seconds"),
        max_minutes: Optional[float] = typer.Option(None, help="start nothing new after this long; rerun to resume"),
        inductor: bool = typer.Option(True, help="run the Inductor pass (numerics) on full-graph types"),
        fix: bool = typer.Option(True, help="run `enablebot fix` on each type that breaks at day 0"),
        fix_minutes: float = typer.Option(15.0, help="time cap of one type's fix, minutes"),
        fix_attempts: int = typer.Option(1, min=1, help="LLM rounds per cluster (fix --attempts)"),
        fix_samples: int = typer.Option(2, min=1, help="LLM samples per round (fix --samples)"),
        fix_max_tokens: int = typer.Option(800, min=256, help="completion tokens per LLM call (fix --max-tokens)"),
        llm_model: Optional[str] = typer.Option(None, "--llm-model", envvar="ENABLEBOT_LLM_MODEL",
                                                help="the fix agent's model (OPENAI_BASE_URL points at its server)"),
        only: List[str] = typer.Option([], "--type", help="only these model types (repeatable): one type's history; with --fix-only, the bot "
                                 "tries these types (again, where it has tried them before)"),
        fix_only: bool = typer.Option(False, help="only the bot's day-0 fixes, on the releases OUT has replayed so far "
                                      "(safe beside a running replay: writes OUT/bot.json and the fix folders)"),
        report_only: bool = typer.Option(False, help="only (re)write the report from what OUT holds"),
        refresh: List[str] = typer.Option([], "--refresh", help="redo this type (repeatable) with today's harness: its "
                                          "results are dropped from every release and re-run (after a harness fix)"),
        refresh_unbuilt: bool = typer.Option(False, help="redo every new type that did not build and run eager at "
                                             "day 0 (a missing optional package excepted) with today's harness"),
    ) -> None:
        """Replay transformers releases in order as the nightly would have: day-0 registration and
        Dynamo pass of each release's new types, the bot's fixes, and every type followed across later
        releases to the one that supports it. Resumable and incremental."""
        from ..replay import report as rep_mod
        from ..replay.releases import ReleaseError, available_versions, select_versions
        from ..replay.run import ReplayAborted, ReplayOptions, UnknownRefresh, replay
        from ..versions import release_key

        err = Console(stderr=True, soft_wrap=True)
        if fix_only:
            from ..replay.run import ReplayOptions, fix_pass

            if not (out / "replay.json").exists():
                err.print(f"[red]error:[/red] {out / 'replay.json'} does not exist: run `enablebot replay --out {out}` first")
                raise typer.Exit(2)
            opts = ReplayOptions(out=out, versions=[], previous="", wheels=cache / "wheels", envs=cache / "envs",
                                 jobs=jobs, timeout_s=timeout, max_minutes=max_minutes, fix_minutes=fix_minutes,
                                 fix_attempts=fix_attempts, fix_samples=fix_samples, fix_max_tokens=fix_max_tokens,
                                 llm_model=llm_model, only=tuple(only))
            try:
                fix_pass(opts, say=lambda m: err.print(m, markup=False, highlight=False))
            except ReplayAborted as e:
                err.print(f"[red]error:[/red] {e}")
                raise typer.Exit(2)
        elif not report_only:
            try:
                avail = available_versions() if (not releases or previous is None) else []
            except ReleaseError as e:
                err.print(f"[red]error:[/red] {e}")
                raise typer.Exit(2)
            versions = (sorted(set(releases), key=release_key) if releases
                        else select_versions(avail, first, last or max(avail, key=release_key), minor_only=minor_only))
            if not versions:
                err.print(f"[red]error:[/red] no release between {first} and {last or 'the newest'}")
                raise typer.Exit(2)
            if previous is None:
                older = [v for v in select_versions(avail, "0", versions[0]) if release_key(v) < release_key(versions[0])]
                if not older:
                    err.print(f"[red]error:[/red] no release before {versions[0]}: give --previous")
                    raise typer.Exit(2)
                previous = older[-1]
            err.print(f"replaying {len(versions)} releases ({versions[0]} .. {versions[-1]}; starting registry: "
                      f"the types of {previous}) -> {out}")
            opts = ReplayOptions(out=out, versions=versions, previous=previous, wheels=cache / "wheels",
                                 envs=cache / "envs", jobs=jobs, timeout_s=timeout, max_minutes=max_minutes,
                                 inductor=inductor, fix=fix, fix_minutes=fix_minutes, fix_attempts=fix_attempts,
                                 fix_samples=fix_samples, fix_max_tokens=fix_max_tokens, llm_model=llm_model, only=tuple(only),
                                 refresh=tuple(refresh), refresh_unbuilt=refresh_unbuilt)
            try:
                replay(opts, say=lambda m: err.print(m, markup=False, highlight=False))
            except UnknownRefresh as e:
                err.print(f"[red]error:[/red] --refresh: {e}")
                raise typer.Exit(2)
            except ReplayAborted as e:
                err.print(f"[red]error:[/red] {e}; the state up to the last finished step is saved")
                raise typer.Exit(2)
        if not (out / "replay.json").exists():
            err.print(f"[red]error:[/red] {out / 'replay.json'} does not exist: run `enablebot replay --out {out}` first")
            raise typer.Exit(2)
        rep = rep_mod.collect(out)
        paths = rep_mod.write(out, rep)
        print(rep_mod.markdown(rep).split("## Per type")[0].rstrip())
        err.print("report: " + ", ".join(map(str, paths)))
