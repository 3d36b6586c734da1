"""The `enablebot` command line. Thin: each command lives in enablebot/commands/<name>.py
and registers itself on the Typer app; the work happens in the library modules."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="enablebot",
    help="Model-enablement bot for torch.compile: watch the Hub, run and sweep architectures, "
    "triage graph breaks, draft and verify fixes, open PRs. Default outputs (sweep results, fix bundles) "
    "go under ./.enablebot/, which git ignores; --json - writes JSON to stdout.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from . import __version__
        from .versions import current

        # The torch and transformers a run would measure with: graph breaks depend on them, and
        # the package accepts any torch >= 2.11, so the installed one is what a maintainer has.
        v = current()
        typer.echo(f"enablebot {__version__}\ntorch {v.torch}\ntransformers {v.transformers}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="print the enablebot, torch and transformers versions and exit"),
) -> None:
    pass

# One module per command group; each defines `register(app: typer.Typer) -> None`.
COMMAND_MODULES = (
    "enablebot.commands.run",
    "enablebot.commands.fix",
    "enablebot.commands.registry",
    "enablebot.commands.sweep",
    "enablebot.commands.check",
    "enablebot.commands.pr",
    "enablebot.commands.watch",
    "enablebot.commands.report",
    "enablebot.commands.site",
    "enablebot.commands.compare",
    "enablebot.commands.nightly",
    "enablebot.commands.replay",
)


def _register_all() -> None:
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            # e.g. the GPU machine lacks PyGithub: the other commands still work.
            app.info.epilog = (app.info.epilog or "") + f" [{name.rsplit('.', 1)[-1]} unavailable: {e}]"
            continue
        module.register(app)


def main() -> None:
    _register_all()
    try:
        app()
    except ValueError as e:
        from .validate import DataError  # imported here: pydantic is not loaded for --help

        if not isinstance(e, DataError):
            raise
        # A file of the wrong shape (results, baseline, bundle): its one line, not a traceback.
        typer.echo(f"error: {e}", err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
