"""The `enablebot` command line. Thin: each command lives in enablebot/commands/<name>.py
and registers itself on the Typer app; the work happens in the library modules."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="enablebot",
    help="Model-enablement bot for torch.compile: watch the Hub, run and sweep architectures, "
    "triage graph breaks, draft and verify fixes, open PRs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

# One module per command group; each defines `register(app: typer.Typer) -> None`.
COMMAND_MODULES = (
    "enablebot.commands.run",
    "enablebot.commands.registry",
    "enablebot.commands.pr",
    "enablebot.commands.watch",
    "enablebot.commands.report",
)


def _register_all() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)


def main() -> None:
    _register_all()
    app()


if __name__ == "__main__":
    main()
