"""`enablebot pr`, `enablebot dashboard` and `enablebot pr-bundle`: the bot's GitHub side.

All three talk to GitHub through PyGithub with GITHUB_TOKEN / GITHUB_API_URL. `pr` and
`dashboard` are dry runs unless `--push` is given. GitHub failures (rate limit, missing
permission) print one clear sentence and exit 1; bad input exits 2.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

_REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_WRITE_INTERVAL_HELP = "seconds between write requests (GitHub asks integrations for at least 1)"


def parse_repo_map(values: list[str]) -> dict[str, str]:
    """`owner/name` (every target) or `TARGET=owner/name` -> {target or '*': repo}."""
    out: dict[str, str] = {}
    for v in values:
        target, _, repo = v.rpartition("=")
        if not _REPO_RE.match(repo):
            raise typer.BadParameter(f"{v!r}: expected owner/name or TARGET=owner/name", param_hint="--repo")
        out[target or "*"] = repo
    return out


def _fail(err: Console, message: str, code: int) -> None:
    err.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(code)


def _step_summary(markdown: str) -> None:
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        from ..fileio import append_text

        append_text(path, markdown + "\n")


def register(app: typer.Typer) -> None:
    @app.command("pr")
    def pr(
        bundles: list[Path] = typer.Argument(..., help="fix bundle directories (written by `enablebot fix`)"),
        repo: list[str] = typer.Option(
            ..., "--repo", help="owner/name, or TARGET=owner/name per target (dynamo, inductor, model-code); repeatable"
        ),
        base: Optional[str] = typer.Option(None, help="base branch (default: the repository's default branch)"),
        max_open: int = typer.Option(5, "--max-open", min=0, help="open no new PR while this many bot PRs are open"),
        push: bool = typer.Option(False, "--push/--dry-run", help="act on GitHub (default: print what would be sent)"),
        json_out: Optional[Path] = typer.Option(None, "--json", help="write the outcomes here"),
        write_interval: float = typer.Option(1.0, "--write-interval", min=0.0, hidden=True, help=_WRITE_INTERVAL_HELP),
    ) -> None:
        """Open or update one pull request per verified fix bundle (dry run unless --push)."""
        from ..fix.judge.overlay import PatchApplyError
        from ..pr.github_client import GitHubError, MissingToken, connect, step
        from ..pr.publish import NotPrAble, Publisher, plan_pr, render_plan

        err = Console(stderr=True, soft_wrap=True)  # messages stay whole in CI logs
        repos = parse_repo_map(repo)
        plans = []
        bad_input = False
        from ..fix.bundle import find_bundles

        # A directory of bundles (fixes/ or fixes/<model>/) stands for every bundle under it.
        bundles = [b for d in bundles for b in (find_bundles(d) or [d])]
        for d in bundles:
            try:
                p = plan_pr(d)
            except FileNotFoundError as e:
                err.print(f"[red]error:[/red] {e}", highlight=False)
                bad_input = True
                continue
            except (NotPrAble, PatchApplyError) as e:
                err.print(f"[yellow]skip[/yellow] {d}: {e}", highlight=False)
                continue
            target_repo = repos.get(p.target, repos.get("*"))
            if target_repo is None:
                err.print(f"[yellow]skip[/yellow] {d}: no --repo for target {p.target!r}", highlight=False)
                continue
            plans.append((target_repo, p))
        if bad_input:
            raise typer.Exit(2)

        if not push:
            for target_repo, p in plans:
                typer.echo(render_plan(p, target_repo, base))
                typer.echo("-" * 72)
            err.print(f"dry run: {len(plans)} PR(s) planned, nothing sent to GitHub; pass --push to act")
            return

        try:
            gh = connect(write_interval=write_interval)
        except MissingToken as e:
            _fail(err, str(e), 2)
        publishers: dict[str, Publisher] = {}
        outcomes = []
        failed = False
        try:
            for target_repo, p in plans:
                if target_repo not in publishers:
                    with step("open the repository", target_repo):
                        publishers[target_repo] = Publisher(gh.get_repo(target_repo), base=base, max_open=max_open)
                try:
                    outcomes.append(publishers[target_repo].publish(p))
                except PatchApplyError as e:
                    err.print(f"[red]failed[/red] {p.fix_key}: {e}", highlight=False)
                    failed = True
        except GitHubError as e:
            _report(err, outcomes, json_out)
            _fail(err, str(e), 1)
        _report(err, outcomes, json_out)
        if failed:
            raise typer.Exit(1)

    @app.command("dashboard")
    def dashboard(
        repo: str = typer.Option(..., "--repo", help="owner/name holding the dashboard issue"),
        registry: Optional[Path] = typer.Option(None, help="model_registry.yaml (default: the repo's)"),
        triage: Optional[Path] = typer.Option(None, help="triage.json written by the sweep (clusters)"),
        fixes: list[Path] = typer.Option([], "--fixes", help="fix bundle directories (recipe-only fixes are listed)"),
        pr_repo: list[str] = typer.Option([], "--pr-repo", help="repositories whose bot PRs are listed (default: --repo)"),
        push: bool = typer.Option(False, "--push/--dry-run", help="write the issue (default: print it)"),
        run_url: Optional[str] = typer.Option(None, help="link to the workflow run (default: from GITHUB_* variables)"),
        write_interval: float = typer.Option(1.0, "--write-interval", min=0.0, hidden=True, help=_WRITE_INTERVAL_HELP),
    ) -> None:
        """Render the dashboard issue and update it in place (dry run unless --push)."""
        from ..pr.dashboard import DataError, arch_rows, bot_prs, load_clusters, load_recipes, publish_dashboard
        from ..pr.github_client import GitHubError, MissingToken, connect, step
        from ..pr.body import render_dashboard
        from ..model.registry import Registry, RegistryError

        err = Console(stderr=True, soft_wrap=True)  # messages stay whole in CI logs
        for r in [repo, *pr_repo]:
            parse_repo_map([r])
        if registry is not None and not registry.is_file():
            _fail(err, f"{registry}: no such registry file", 2)
        try:
            reg = Registry.load(registry)
            clusters = load_clusters(triage)
            recipes = load_recipes(fixes)
        except (DataError, RegistryError, FileNotFoundError) as e:
            _fail(err, str(e), 2)
        if run_url is None and os.environ.get("GITHUB_RUN_ID"):
            server = os.environ.get("GITHUB_SERVER_URL", "https://github.com")
            run_url = f"{server}/{os.environ.get('GITHUB_REPOSITORY')}/actions/runs/{os.environ['GITHUB_RUN_ID']}"

        gh = None
        if push or os.environ.get("GITHUB_TOKEN"):
            try:
                gh = connect(write_interval=write_interval)
            except MissingToken as e:
                _fail(err, str(e), 2)
        try:
            prs = None
            if gh is not None:
                prs = []
                for r in pr_repo or [repo]:
                    with step("open the repository", r):
                        prs.extend(bot_prs(gh.get_repo(r)))
            updated = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
            body = render_dashboard(arch_rows(reg), clusters, prs, recipes, updated_at=updated, run_url=run_url)
            if not push:
                typer.echo(body)
                err.print("dry run: nothing written; pass --push to update the dashboard issue")
                return
            with step("open the repository", repo):
                target = gh.get_repo(repo)  # type: ignore[union-attr]
            outcome = publish_dashboard(target, body)
        except GitHubError as e:
            _fail(err, str(e), 1)
        err.print(f"dashboard {outcome.action}: {outcome.url}", highlight=False)

    @app.command("pr-bundle")
    def pr_bundle(
        repo: str = typer.Option(..., "--repo", help="owner/name holding the PR"),
        number: int = typer.Option(..., "--number", help="pull request number"),
        out: Path = typer.Option(..., "--out", help="directory to write the bundle to"),
    ) -> None:
        """Rebuild the fix bundle of one of the bot's PRs (metadata + the branch's diff), for `enablebot verify`."""
        from ..pr.github_client import GitHubError, MissingToken, connect, step
        from ..pr.fetch import NotABotPr, bundle_from_pr

        err = Console(stderr=True, soft_wrap=True)  # messages stay whole in CI logs
        parse_repo_map([repo])
        try:
            gh = connect()
            with step("open the repository", repo):
                target = gh.get_repo(repo)
            bundle = bundle_from_pr(target, number, out)
        except (MissingToken, NotABotPr) as e:
            _fail(err, str(e), 2)
        except GitHubError as e:
            _fail(err, str(e), 1)
        err.print(f"bundle {bundle.fix_key} written to {out} ({', '.join(bundle.files)})", highlight=False)


def _report(err: Console, outcomes: list, json_out: Optional[Path]) -> None:
    # One plain line per outcome: CI logs do not wrap it the way a table wraps.
    md = ["| fix key | repo | action | PR | note |", "|---|---|---|---|---|"]
    for o in outcomes:
        pr = f"#{o.number}" if o.number else ""
        note = o.reason or ("pushed a new commit" if o.pushed else "")
        err.print(f"{o.action:9} {o.repo}{pr} {o.branch}" + (f": {note}" if note else ""), highlight=False)
        md.append(f"| `{o.fix_key}` | {o.repo} | {o.action} | {f'[{pr}]({o.url})' if o.url else ''} | {note} |")
    if outcomes:
        _step_summary("### enablebot pr\n\n" + "\n".join(md))
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        from ..fileio import write_text

        write_text(json_out, json.dumps([o.to_dict() for o in outcomes], indent=2) + "\n")
