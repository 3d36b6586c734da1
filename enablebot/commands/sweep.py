"""`enablebot sweep` and `enablebot merge`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..choices import DEFAULT_SWEEP_OUT, Device, Dtype, Mode, Pass, Size, TaskKind, require_device


def register(app: typer.Typer) -> None:
    @app.command("sweep")
    def sweep(
        out: Path = typer.Option(DEFAULT_SWEEP_OUT, help="output directory (results.jsonl checkpoint, logs, reports); "
                                 "the default is under .enablebot/, which git ignores"),
        pass_: Pass = typer.Option(Pass.dynamo, "--pass", help="dynamo: graph breaks over everything (cheap); inductor: numerics + speedup"),
        device: Device = typer.Option(Device.cpu),
        mode: List[Mode] = typer.Option([Mode.eval, Mode.train], help="repeatable"),
        task: List[TaskKind] = typer.Option([TaskKind.base, TaskKind.head], help="repeatable; main = the head where there is one, else the base"),
        model: List[str] = typer.Option([], "--model", "-m", help="only these model types (repeatable; default: all)"),
        models_file: Optional[Path] = typer.Option(None, help="only the model types listed in this file, one per line"),
        shard: Optional[str] = typer.Option(None, help="i/n: run shard i of n (GitHub Actions matrix)"),
        jobs: Optional[int] = typer.Option(None, min=1, help="parallel isolated workers (default: 2; 1 for the "
                                           "inductor pass on cpu, whose speedups other workers would disturb)"),
        timeout: float = typer.Option(300.0, help="per-model timeout, seconds"),
        dtype: Dtype = typer.Option(Dtype.float32),
        size: Size = typer.Option(Size.tiny),
        batch_size: int = typer.Option(2, min=2),
        seq_len: int = typer.Option(32, min=2),
        repeats: int = typer.Option(10, min=1, help="timed repeats (inductor pass)"),
        registry: Optional[Path] = typer.Option(None, help="model_registry.yaml (default: the repo's)"),
        report: bool = typer.Option(True, help="write reports (Markdown, HTML, CSV, triage) when done"),
        max_minutes: Optional[float] = typer.Option(None, help="start no new model after this long; rerun to resume"),
        fullgraph_check: bool = typer.Option(False, help="dynamo pass: also try fullgraph=True on breaking models"),
        progress_every: Optional[int] = typer.Option(None, min=1, help="without a terminal: a counts + ETA line "
                                                     "every N finished items (default: about every 10%)"),
    ) -> None:
        """Run every architecture (or a shard of them); resumable: finished models are not redone."""
        from ..registry import Registry
        from ..sweep import PASSES, SweepOptions, default_jobs, parse_shard, plan, run_sweep

        err = Console(stderr=True, soft_wrap=True)
        if pass_.value not in PASSES:
            err.print(f"[red]error:[/red] --pass {pass_.value}: this sweep runs only {', '.join(PASSES)}")
            raise typer.Exit(2)
        dev = require_device(device)
        if jobs is None:
            jobs = default_jobs(pass_.value, dev)
        elif pass_ == Pass.inductor and dev == "cpu" and jobs > 1:
            err.print(f"note: {jobs} workers share the CPU: speedups are flagged parallel_workers (not comparable, "
                      "left out of geomeans); --jobs 1 times one model at a time")
        try:
            sh = parse_shard(shard)
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--shard")
        reg = Registry.load(registry)
        wanted = list(model)
        if models_file:
            listed = [ln.strip() for ln in models_file.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
            if not listed:
                # an empty list must not silently widen to the whole zoo
                err.print(f"[red]error:[/red] {models_file} lists no model types (one per line; # starts a comment)")
                raise typer.Exit(2)
            wanted += listed
        unknown = [m for m in wanted if m not in reg]
        if unknown:
            err.print(f"[red]error:[/red] not in the registry: {', '.join(unknown)} (run `enablebot registry seed`)")
            raise typer.Exit(2)
        opts = SweepOptions(pass_=pass_.value, device=dev, modes=tuple(m.value for m in mode),
                            tasks=tuple(t.value for t in task), dtype=dtype.value, size=size.value,
                            batch_size=batch_size, seq_len=seq_len, repeats=repeats, timeout_s=timeout,
                            registry=str(reg.path), fullgraph_check=fullgraph_check)
        items = plan(reg, opts, wanted or None, sh)
        err.print(f"{len(items)} items ({pass_.value} pass, {dev}){f', shard {shard}' if shard else ''} -> {out}")
        from ..checkpoint import Checkpoint
        from ..progress import LineProgress, interactive
        from ..sweep import spec_key, to_spec

        done = Checkpoint(out).done if out.exists() else set()
        todo = sum(1 for it in items if spec_key(to_spec(it, opts)) not in done)
        if not interactive(err):  # CI logs: a line per finished item, counts and ETA every few
            lines = LineProgress(err, todo, every=progress_every)

            def on_line(r):
                lines.item(f"{r.spec.model_id}/{r.spec.task}/{r.spec.mode}", r.verdict, r.duration_s)

            stats = run_sweep(items, opts, out, jobs=jobs, on_result=on_line, max_minutes=max_minutes)
        else:
            with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[last]}"),
                          console=err, transient=False) as progress:
                bar = progress.add_task("sweep", total=todo, last="")

                def on_result(r):
                    progress.update(bar, advance=1, last=f"{r.spec.model_id}/{r.spec.task}/{r.spec.mode}: {r.verdict}")

                stats = run_sweep(items, opts, out, jobs=jobs, on_result=on_result, max_minutes=max_minutes)
                progress.update(bar, completed=todo)
        rate = stats.ran / (stats.wall_s / 60) if stats.wall_s else 0.0
        err.print(f"ran {stats.ran} (skipped {stats.skipped_done} already done) in {stats.wall_s:.0f} s "
                  f"= {rate:.1f} models/min; " + (", ".join(f"{n} {v}" for v, n in sorted(stats.verdicts.items(),
                                                                                key=lambda kv: -kv[1])) or "nothing ran")
                  + (f"; {stats.not_started} not started (time budget): rerun to resume" if stats.not_started else ""))
        if report:
            from ..reports import write_reports

            paths = write_reports(out, _modalities(reg))
            err.print("reports: " + ", ".join(str(p) for p in paths))

    from .report import report_app

    @report_app.command("sweep")
    def report_sweep(results: Path = typer.Argument(..., help="a sweep or merge output directory")) -> None:
        """(Re)write the Markdown, HTML, CSV, summary and triage reports of a sweep directory."""
        from ..checkpoint import RESULTS_FILE
        from ..registry import Registry
        from ..reports import write_reports

        if not (results / RESULTS_FILE).exists():
            Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {results / RESULTS_FILE} does not exist")
            raise typer.Exit(2)
        for p in write_reports(results, _modalities(Registry.load())):
            print(p)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write((results / "report.md").read_text(encoding="utf-8"))

    @app.command("merge")
    def merge(
        shards: List[Path] = typer.Argument(..., help="shard output directories"),
        out: Path = typer.Option(..., help="merged output directory"),
        report: bool = typer.Option(True, help="write reports for the merged results"),
    ) -> None:
        """Combine shard results into one result set (the same as one sweep would give)."""
        from ..checkpoint import RESULTS_FILE, load_results, write_results
        from ..registry import Registry

        merged = {}
        for d in shards:
            f = d / RESULTS_FILE
            if not f.exists():
                Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {f} does not exist (is {d} a sweep output?)")
                raise typer.Exit(2)
            merged.update(load_results(f))
        out.mkdir(parents=True, exist_ok=True)
        write_results(out / RESULTS_FILE, merged.values())
        Console(stderr=True, soft_wrap=True).print(f"{len(merged)} results from {len(shards)} shards -> {out / RESULTS_FILE}")
        if report:
            from ..reports import write_reports

            write_reports(out, _modalities(Registry.load()))


def _modalities(reg) -> dict[str, str]:
    return {mt: e.modality for mt, e in reg.entries.items() if e.modality}
