"""`enablebot sweep` and `enablebot merge`."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from .choices import DEFAULT_SWEEP_OUT, Device, Dtype, Mode, Pass, Scenario, Size, TaskKind, require_device, require_expected_transformers


def _exit_on_sigterm(err: Console, out: Path) -> None:
    """A CI cancel or `timeout` sends SIGTERM: unwind as Ctrl-C does, so the pool kills the workers
    still busy (each in its own session, they would outlive the sweep and keep writing caches)
    and every finished result stays in the checkpoint."""
    def handler(signum, _frame):
        err.print(f"terminated (signal {signum}): finished results are kept in {out}; rerun the same command to resume")
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


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
        scenario: List[Scenario] = typer.Option([], "--scenario", help="call, decode, dynamic (repeatable); default: "
                                           "call, plus decode for generative heads in the dynamo pass"),
        durations_from: List[Path] = typer.Option(
            [], help="a previous results.jsonl (or sweep directory) of this device, this pass else another: "
                "run the longest items first, also in a --max-minutes sweep; repeatable (a sharded pass's shards)"),
        baseline_times: bool = typer.Option(True, help="without --durations-from: run the longest items first by the "
                                            "seconds kept in the committed baseline of this device and pass"),
        baseline_dir: Path = typer.Option(Path("baselines"), help="where the per-device, per-version baselines live"),
        reuse: Optional[Path] = typer.Option(None, help="incremental: reuse results of this earlier sweep directory whose "
                                                        "cache key (torch, transformers, model code, spec) matches; "
                                                        "decisions and reasons go to OUT/incremental.json"),
        strict_versions: bool = typer.Option(False, help="with --reuse: re-run on any transformers version change, "
                                                         "even when the model's code is unchanged"),
        keep_timeouts: bool = typer.Option(False, help="with --reuse: keep a previous timeout whose cache key is "
                                                       "unchanged instead of retrying it (the replay re-measures "
                                                       "unchanged code on one machine)"),
        new_types_first: bool = typer.Option(False, help="day 0: register the installed transformers' model types the "
                                                         "registry lacks, and run the release's new types first"),
        only_new_types: bool = typer.Option(False, help="day 0: as --new-types-first, and run only those types"),
        release_date: str = typer.Option("auto", help="with --new-types-first: the release's date (ISO), 'auto' (ask "
                                                      "PyPI) or 'none' (first_seen = when the bot first saw them)"),
        progress_every: Optional[int] = typer.Option(None, min=1, help="without a terminal: a counts + ETA line "
                                                     "every N finished items (default: about every 10%)"),
    ) -> None:
        """Run every architecture (or a shard of them); resumable: finished models are not redone."""
        from ..model.registry import Registry
        from ..sweep.engine import PASSES, SweepOptions, default_jobs, parse_shard, plan, run_sweep

        err = Console(stderr=True, soft_wrap=True)
        require_expected_transformers()
        if pass_.value not in PASSES:
            err.print(f"[red]error:[/red] --pass {pass_.value}: this sweep runs only {', '.join(PASSES)}")
            raise typer.Exit(2)
        from ..execute.pool import start_fork_server
        from ..sweep.engine import with_inductor_env

        if pass_ == Pass.inductor:  # before the fork server imports Inductor's config (workers inherit it)
            os.environ.update(with_inductor_env(dict(os.environ)))
        # Before anything imports torch here (require_device does, for cuda): the server's own imports
        # then overlap this process's checks and planning instead of following them.
        start_fork_server()
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
        if reuse is not None and not reuse.is_dir():
            err.print(f"[red]error:[/red] --reuse {reuse}: not a directory (give an earlier sweep's --out)")
            raise typer.Exit(2)
        new_types: set[str] = set()
        tf_version = ""
        if new_types_first or only_new_types:
            new_types, tf_version = _register_day0(reg, release_date, err)
            if only_new_types:
                if not new_types:
                    err.print(f"no model types new in transformers {tf_version}: nothing to run")
                    raise typer.Exit(0)
                wanted = sorted(new_types & set(wanted)) if wanted else sorted(new_types)
                if not wanted:  # -m named none of the new types: an empty list must not widen to the zoo
                    err.print(f"none of the named model types is new in transformers {tf_version}: nothing to run")
                    raise typer.Exit(0)
        unknown = [m for m in wanted if m not in reg]
        if unknown:
            err.print(f"[red]error:[/red] not in the registry: {', '.join(unknown)} (run `enablebot registry seed`)")
            raise typer.Exit(2)
        opts = SweepOptions(pass_=pass_.value, device=dev, modes=tuple(m.value for m in mode),
                            tasks=tuple(t.value for t in task), dtype=dtype.value, size=size.value,
                            batch_size=batch_size, seq_len=seq_len, repeats=repeats, timeout_s=timeout,
                            registry=str(reg.path), fullgraph_check=fullgraph_check,
                            scenarios=tuple(sc.value for sc in scenario) or None)
        items = plan(reg, opts, wanted or None, sh)
        durations = None
        if durations_from:
            from ..sweep.schedule import durations_for

            where = ", ".join(map(str, durations_from))
            try:
                durations, source = durations_for(durations_from, pass_name=pass_.value, device=dev)
            except FileNotFoundError as e:
                err.print(f"[red]error:[/red] --durations-from: {e}")
                raise typer.Exit(2)
            if not durations:
                err.print(f"[yellow]warning:[/yellow] no {dev} results in {where}: the plan's order is kept")
            elif source != pass_.value:
                err.print(f"longest first by the {source} pass's {dev} durations in {where} "
                          f"(it holds none of the {pass_.value} pass)")
        elif baseline_times:
            from importlib.metadata import version

            from ..sweep.schedule import baseline_durations

            durations, source_path = baseline_durations(baseline_dir, pass_name=pass_.value, device=dev,
                                                        torch_version=version("torch"))
            if source_path is not None:
                err.print(f"longest first by the item times in {source_path} (--no-baseline-times keeps the plan's order)")
        if new_types:
            from ..sweep.day0 import first

            items = first(items, new_types)
        err.print(f"{len(items)} items ({pass_.value} pass, {dev}){f', shard {shard}' if shard else ''} -> {out}")
        from ..sweep.checkpoint import Checkpoint
        from ..progress import LineProgress, interactive
        from ..sweep.engine import spec_key, to_spec

        done = Checkpoint(out).done if out.exists() else set()
        todo = sum(1 for it in items if spec_key(to_spec(it, opts)) not in done)
        run = dict(jobs=jobs, max_minutes=max_minutes, durations=durations, reuse_from=reuse,
                   strict_versions=strict_versions, keep_timeouts=keep_timeouts)
        _exit_on_sigterm(err, out)
        if not interactive(err):  # CI logs: a line per finished item, counts and ETA every few
            lines = LineProgress(err, todo, every=progress_every)

            def on_line(r):
                lines.item(f"{r.spec.model_id}/{r.spec.task}/{r.spec.mode}/{r.spec.scenario}", r.verdict, r.duration_s)

            stats = run_sweep(items, opts, out, on_result=on_line, **run)
        else:
            with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[last]}"),
                          console=err, transient=False) as progress:
                bar = progress.add_task("sweep", total=todo, last="")

                def on_result(r):
                    progress.update(bar, advance=1,
                                    last=f"{r.spec.model_id}/{r.spec.task}/{r.spec.mode}/{r.spec.scenario}: {r.verdict}")

                stats = run_sweep(items, opts, out, on_result=on_result, **run)
                progress.update(bar, completed=todo)
        if reuse is not None:
            import json

            from ..sweep.incremental import DECISIONS_FILE

            inc = json.loads((out / DECISIONS_FILE).read_text(encoding="utf-8"))
            err.print(f"incremental: reused {stats.reused}, re-ran {stats.ran}; "
                      + "; ".join(f"{k} x{v}" for k, v in inc["reasons"].items()))
        rate = stats.ran / (stats.wall_s / 60) if stats.wall_s else 0.0
        err.print(f"ran {stats.ran} (skipped {stats.skipped_done} already done, reused {stats.reused}) in "
                  f"{stats.wall_s:.0f} s = {rate:.1f} models/min; "
                  + (", ".join(f"{n} {v}" for v, n in sorted(stats.verdicts.items(), key=lambda kv: -kv[1]))
                     or "nothing ran")
                  + (f"; {stats.not_started} not started (time budget): rerun to resume" if stats.not_started else ""))
        if report:
            from ..sweep.reports import write_reports

            paths = write_reports(out, _modalities(reg))
            err.print("reports: " + ", ".join(str(p) for p in paths))
        if new_types:
            _write_day0(reg, out, tf_version, err)

    from .report import report_app

    @report_app.command("sweep")
    def report_sweep(results: Path = typer.Argument(..., help="a sweep or merge output directory")) -> None:
        """(Re)write the Markdown, HTML, CSV, summary and triage reports of a sweep directory."""
        from ..sweep.checkpoint import RESULTS_FILE
        from ..model.registry import Registry
        from ..sweep.reports import write_reports

        if not (results / RESULTS_FILE).exists():
            Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {results / RESULTS_FILE} does not exist")
            raise typer.Exit(2)
        for p in write_reports(results, _modalities(Registry.load())):
            print(p)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            from ..fileio import append_text

            append_text(summary, (results / "report.md").read_text(encoding="utf-8"))

    @app.command("merge")
    def merge(
        shards: List[Path] = typer.Argument(..., help="shard output directories"),
        out: Path = typer.Option(..., help="merged output directory"),
        report: bool = typer.Option(True, help="write reports for the merged results"),
    ) -> None:
        """Combine shard results into one result set (the same as one sweep would give)."""
        from ..sweep.checkpoint import RESULTS_FILE, load_results, write_results
        from ..model.registry import Registry

        merged = {}
        for d in shards:
            f = d / RESULTS_FILE
            if not f.exists():
                Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {f} does not exist (is {d} a sweep output?)")
                raise typer.Exit(2)
            merged.update(load_results(f))
        out.mkdir(parents=True, exist_ok=True)
        write_results(out / RESULTS_FILE, merged.values())
        # Each shard's invocations, so `benchmarks/sweep_speed.py --results OUT` sums the walls of
        # shards run one after another (device calls); a parallel matrix's wall is its longest shard.
        import json

        from ..fileio import atomic_write_text
        from ..sweep.engine import RUNS_FILE, load_runs

        # Tagged with their shard, so the planned items add up across shards (engine.planned_of).
        runs = [{**r, "from": r.get("from", str(d))} for d in shards if (d / RUNS_FILE).exists() for r in load_runs(d)]
        if runs:
            atomic_write_text(out / RUNS_FILE, "".join(json.dumps(r) + "\n" for r in runs))
        Console(stderr=True, soft_wrap=True).print(f"{len(merged)} results from {len(shards)} shards -> {out / RESULTS_FILE}")
        if report:
            from ..sweep.reports import write_reports

            write_reports(out, _modalities(Registry.load()))


def _modalities(reg) -> dict[str, str]:
    return {mt: e.modality for mt, e in reg.entries.items() if e.modality}


def _register_day0(reg, release_date: str, err: Console) -> tuple[set[str], str]:
    """Register the installed transformers' types the registry lacks; the release's new types."""
    from importlib.metadata import version

    from ..model.catalog import known_architectures
    from ..sweep.day0 import iso_date, missing_types, new_in_release, pypi_release_date, register_new_types

    tf_version = version("transformers")
    if missing_types(reg, known_architectures()):
        if release_date == "auto":
            date = pypi_release_date("transformers", tf_version)
        elif release_date == "none":
            date = None
        else:
            try:
                date = iso_date(release_date if "T" in release_date else release_date + "T00:00:00+00:00")
            except ValueError:
                raise typer.BadParameter(f"{release_date!r}: give an ISO date (2026-11-30), 'auto' or 'none'",
                                         param_hint="--release-date")
        added = register_new_types(reg, transformers_version=tf_version, release_date=date)
        reg.save()
        err.print(f"day 0: registered {len(added)} model types new in transformers {tf_version} "
                  f"(first_seen from {'the release date ' + date if date else 'now: release date unknown'}): "
                  + ", ".join(a.model_type for a in added))
    return set(new_in_release(reg, tf_version)), tf_version


def _write_day0(reg, out: Path, tf_version: str, err: Console) -> None:
    import json

    from ..sweep.checkpoint import RESULTS_FILE, load_results
    from ..sweep.day0 import day0_report
    from ..fileio import atomic_write_text

    rep = day0_report(reg, load_results(out / RESULTS_FILE).values(), tf_version)
    atomic_write_text(out / "new_types.md", rep.markdown())
    atomic_write_text(out / "new_types.json", json.dumps(rep.to_dict(), indent=1) + "\n")
    err.print(f"new in transformers {tf_version}: {rep.built_and_ran}/{rep.items} items built and ran -> "
              f"{out / 'new_types.md'}")
