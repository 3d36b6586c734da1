"""`enablebot fix MODEL_ID`: turn logged graph breaks into verified recipes or patches.
`enablebot verify BUNDLE_DIR...`: re-verify fix bundles here (CI on a bot PR)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from .choices import DEFAULT_FIX_OUT, TASK_HELP, Device, Mode, Scenario, parse_task, require_device, require_expected_transformers


def _split(values: Optional[list[str]]) -> Optional[list[str]]:
    if values is None:
        return None
    out = [v.strip() for item in values for v in item.split(",") if v.strip()]
    return out


def _require_sandbox(err: Console, unsafe: bool) -> None:
    """LLM-written code runs only in the sandbox, or under the loudly named opt-out."""
    from ..execute.sandbox import UNSAFE_ENV, SandboxUnavailable, require

    if unsafe:
        os.environ[UNSAFE_ENV] = "1"
    try:
        require()
    except SandboxUnavailable as e:
        err.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    @app.command("fix")
    def fix(
        model_id: str = typer.Argument(..., help="model_type, class name, Hub repo or config.json path"),
        out: Path = typer.Option(DEFAULT_FIX_OUT, "--out", help="bundle directory root (one bundle per model/cluster); "
                                 "the default is under .enablebot/, which git ignores"),
        cluster: Optional[str] = typer.Option(None, help="only this cluster: key, registry id (GB0033) or type substring"),
        from_triage: Optional[Path] = typer.Option(None, "--from-triage", help="triage / run JSON naming the breaks to fix"),
        attempts: int = typer.Option(2, min=1, max=20, help="LLM rounds per cluster (each samples --samples candidates; "
                                                            "with --registry-entry: attempts)"),
        samples: int = typer.Option(3, min=1, max=16, help="LLM samples per round (the first greedy, the rest at a "
                                                           "temperature with distinct seeds); the verifier picks"),
        llm_model: Optional[str] = typer.Option(None, "--llm-model", envvar="ENABLEBOT_LLM_MODEL",
                                                help="model name at OPENAI_BASE_URL; without it: recipes only"),
        max_tokens: int = typer.Option(4096, "--max-tokens", min=256, help="completion tokens per LLM call"),
        max_total_tokens: Optional[int] = typer.Option(200_000, "--max-total-tokens", help="token budget per cluster"),
        budget_usd: Optional[float] = typer.Option(None, "--budget-usd", help="cost budget per cluster (needs prices)"),
        usd_per_mtok_in: float = typer.Option(0.0, "--usd-per-mtok-in", help="price of 1M prompt tokens"),
        usd_per_mtok_out: float = typer.Option(0.0, "--usd-per-mtok-out", help="price of 1M completion tokens"),
        device: Device = typer.Option(Device.cpu),
        mode: Mode = typer.Option(Mode.eval, help="the item to fix: eval, or train (a break only training hits)"),
        scenario: Scenario = typer.Option(Scenario.call, help="the item to fix: call, decode, ... (as `run --scenario`)"),
        backend: str = typer.Option("inductor", help="torch.compile backend for the checks"),
        batch_size: int = typer.Option(2, min=2),
        seq_len: int = typer.Option(32, min=2),
        task: Optional[str] = typer.Option(None, callback=parse_task, help=TASK_HELP + " (default: main)"),
        repeats: int = typer.Option(20, min=1, help="timed repeats (median)"),
        timeout: float = typer.Option(900.0, help="wall-clock limit per model process, seconds"),
        max_clusters: int = typer.Option(3, min=1, help="clusters to work on (most frequent first)"),
        speed_threshold: float = typer.Option(0.95, help="min before/after compiled-time ratio"),
        sample_models: Optional[list[str]] = typer.Option(None, "--sample-models",
                                                          help="other architectures to re-check (comma-separated)"),
        no_recipes: bool = typer.Option(False, "--no-recipes", help="skip Dynamo config recipes"),
        no_rewrites: bool = typer.Option(False, "--no-rewrites", help="skip the playbook's rewrites (enablebot/data/playbook.yaml)"),
        history: Optional[list[Path]] = typer.Option(None, "--history",
                                                     help="folders of verified bundles to retrieve similar fixes from "
                                                          "(default: --out)"),
        always_agent: bool = typer.Option(False, "--always-agent", help="ask the LLM even when a recipe verified"),
        registry_entry: bool = typer.Option(False, "--registry-entry",
                                            help="for a model type that fails to build or run eager: ask the LLM for "
                                                 "a registry entry (config overrides / input recipe, data only), "
                                                 "validate, verify (build + eager + Dynamo) and bundle it"),
        unsafe_no_sandbox: bool = typer.Option(False, "--unsafe-no-sandbox",
                                               help="DANGEROUS: run LLM-written code without the bubblewrap sandbox "
                                                    "(it can then read your keys and write anywhere)"),
        registry: Optional[Path] = typer.Option(None, "--registry", help="model_registry.yaml to build the model "
                                                "from (default: the repo's)"),
        json_path: Optional[Path] = typer.Option(None, "--json", help="also write each cluster's outcome as JSON here "
                                                 "(- for stdout)"),
    ) -> None:
        """Reproduce MODEL_ID's graph breaks, try Dynamo config recipes, ask an LLM for a patch
        (applied in an overlay, never to site-packages), verify, and write a bundle per cluster."""
        from ..fix.draft.llm import Budget, LLMClient
        from ..fix.loop import FixOptions, fix_model
        from ..fix.judge.verify import VerifyOptions
        from ..model.resolve import UsageError, resolve

        err = Console(stderr=True, soft_wrap=True)
        require_expected_transformers()
        dev = require_device(device)
        if from_triage and not from_triage.is_file():
            err.print(f"[red]error:[/red] {from_triage}: no such file (write one with `enablebot triage` or `run --json`)")
            raise typer.Exit(2)
        try:
            resolve(model_id)
        except UsageError as e:
            err.print(f"[red]error:[/red] {e}")
            raise typer.Exit(2)
        budget = Budget(max_total_tokens=max_total_tokens, max_usd=budget_usd, usd_per_mtok_in=usd_per_mtok_in,
                        usd_per_mtok_out=usd_per_mtok_out)
        if budget_usd is not None and not (usd_per_mtok_in or usd_per_mtok_out):
            err.print("[red]error:[/red] --budget-usd needs --usd-per-mtok-in / --usd-per-mtok-out to count cost")
            raise typer.Exit(2)
        llm = LLMClient.from_env(llm_model, max_tokens=max_tokens, budget=budget)
        if llm is not None:
            _require_sandbox(err, unsafe_no_sandbox)  # before any LLM call is paid for
        if llm is None:
            err.print("[yellow]no LLM configured[/yellow] (set OPENAI_BASE_URL or OPENAI_API_KEY, and --llm-model): "
                      "trying Dynamo config recipes and playbook rewrites only")
        if registry_entry:
            from ..fix.draft.entry import draft_entry
            from ..model.registry import Registry

            reg = Registry.load(registry)
            if model_id not in reg:
                err.print(f"[red]error:[/red] --registry-entry needs a registered model_type; {model_id} is not one "
                          "(run `enablebot registry seed`)")
                raise typer.Exit(2)
            with err.status(f"[bold]{model_id}[/bold]: registry entry") as status:
                res = draft_entry(model_id, reg, llm, out, attempts=attempts, timeout_s=timeout,
                                  say=lambda m: status.update(f"[bold]{model_id}[/bold]: {m}"))
            Console().print(f"{model_id}: {res.status}: {res.message}" + (f" -> {res.bundle_dir}" if res.bundle_dir else ""))
            return
        opts = FixOptions(out_dir=out, cluster=cluster, from_triage=from_triage, attempts=attempts, samples=samples,
                          rewrites=not no_rewrites, history=list(history or []),
                          spec={"device": dev, "mode": mode.value, "scenario": scenario.value, "backend": backend,
                                "batch_size": batch_size, "seq_len": seq_len,
                                "task": task, "repeats": repeats, "timeout_s": timeout,
                                **({"registry": str(registry.resolve())} if registry else {})},
                          max_clusters=max_clusters, recipes=not no_recipes, always_agent=always_agent,
                          verify=VerifyOptions(speed_threshold=speed_threshold, sample_models=_split(sample_models)))
        from ..progress import stages

        with stages(err, f"fix {model_id}") as say:
            outcomes = fix_model(model_id, opts, llm=llm, say=say)
        table = Table(title=f"enablebot fix {model_id}")
        for col in ("cluster", "status", "kind", "bundle", "note"):
            table.add_column(col, overflow="fold")
        for o in outcomes:
            table.add_row(o.cluster, o.status, o.kind or "–", o.bundle_dir or "–", o.message)
        from ..measure.render import out_console

        out_console().print(table)
        if json_path:
            from ..outputs import write_json

            write_json(json_path, [o.to_dict() for o in outcomes])
        if any(o.status == "error" for o in outcomes):
            raise typer.Exit(1)

    @app.command("verify")
    def verify(
        bundles: list[Path] = typer.Argument(..., help="fix bundle directories (with bundle.json)"),
        device: Device = typer.Option(Device.cpu),
        speed_threshold: float = typer.Option(0.95, help="min unpatched/patched compiled-time ratio"),
        unsafe_no_sandbox: bool = typer.Option(False, "--unsafe-no-sandbox",
                                               help="DANGEROUS: run LLM-written code without the bubblewrap sandbox "
                                                    "(it can then read your keys and write anywhere)"),
        sample_models: Optional[list[str]] = typer.Option(None, "--sample-models",
                                                          help="other architectures to re-check (comma-separated)"),
        backend: Optional[str] = typer.Option(None, help="override the bundle's torch.compile backend"),
        summary: Optional[Path] = typer.Option(None, help="also write the Markdown summary here"),
        json_path: Optional[Path] = typer.Option(None, "--json", help="write the verifications as JSON here (- for stdout)"),
        together: bool = typer.Option(False, help="judge the bundles applied together on one item (--mode, --scenario, "
                                      "--task): one graph, numerics, gates; the bot's check that a type is supported"),
        mode: Optional[Mode] = typer.Option(None, help="with --together: the item's mode (default: the bundle's)"),
        scenario: Optional[Scenario] = typer.Option(None, help="with --together: the item's scenario"),
        task: Optional[str] = typer.Option(None, callback=parse_task, help="with --together: the item's task"),
    ) -> None:
        """Re-run each bundle's model unpatched and with the bundle's patch (overlay) or recipe:
        same checks as `fix`. Writes a Markdown summary (to GITHUB_STEP_SUMMARY when set);
        exits 1 when any bundle fails. With --together: one item judged with all the bundles."""
        from ..fix.bundle import FixBundle
        from ..fix.judge.overlay import PatchApplyError
        from ..fix.judge.patchguard import PatchRejected
        from ..fix.report import verify_summary
        from ..fix.judge.verify import verify_bundle

        err = Console(stderr=True, soft_wrap=True)
        dev = require_device(device)
        for b in bundles:
            try:
                FixBundle.load(b)
            except (FileNotFoundError, ValueError) as e:
                err.print(f"[red]error:[/red] {e}")
                raise typer.Exit(2)
        _require_sandbox(err, unsafe_no_sandbox)
        if together:
            _verify_together(err, bundles, dev, mode, scenario, task, json_path)
            return
        results = []
        cache: dict = {}  # unpatched runs shared by bundles of the same model
        for b in bundles:
            from ..progress import stages

            with stages(err, f"verify {b}") as say:
                say("re-running the model unpatched and with the bundle")
                try:
                    ver = verify_bundle(b, device=dev, speed_threshold=speed_threshold,
                                        sample_models=_split(sample_models), backend=backend, cache=cache)
                    results.append((str(b), ver, ""))
                except (PatchRejected, PatchApplyError, ValueError) as e:
                    results.append((str(b), None, f"{type(e).__name__}: {e}"))
        text = verify_summary(results)
        from ..outputs import to_stdout, write_json

        Console(stderr=to_stdout(json_path)).print(text, markup=False, highlight=False)
        targets = [p for p in (summary, Path(os.environ["GITHUB_STEP_SUMMARY"]) if os.environ.get("GITHUB_STEP_SUMMARY") else None) if p]
        for t in targets:
            from ..fileio import append_text

            append_text(t, text)
        if json_path:
            write_json(json_path, [{"bundle": n, "error": e, "verification": v.to_dict() if v else None}
                                   for n, v, e in results])
        if not all(v is not None and v.passed for _, v, _ in results):
            raise typer.Exit(1)


def _verify_together(err: Console, bundles: list[Path], device: str, mode, scenario, task, json_path) -> None:
    from ..fix.judge.overlay import PatchApplyError
    from ..fix.judge.patchguard import PatchRejected
    from ..fix.judge.together import TogetherError, judge_item
    from ..outputs import to_stdout, write_json
    from ..progress import stages

    with stages(err, f"verify {len(bundles)} bundle(s) together") as say:
        say("re-running the item unpatched and with every bundle applied")
        try:
            res = judge_item(bundles, mode=mode.value if mode else None, scenario=scenario.value if scenario else None,
                             task=task, device=device)
        except (TogetherError, PatchRejected, PatchApplyError) as e:
            err.print(f"[red]error:[/red] {e}")
            raise typer.Exit(2)
    lines = [f"{res.model_id} {res.item}: {'PASS' if res.passed else 'FAIL'}"]
    lines += [f"  {c.name}: {'pass' if c.passed else 'FAIL'}  {c.detail[:300]}" for c in res.checks]
    Console(stderr=to_stdout(json_path)).print("\n".join(lines), markup=False, highlight=False)
    if json_path:
        write_json(json_path, res.to_dict())
    if not res.passed:
        raise typer.Exit(1)
