"""CLI commands, one module each (see enablebot/cli.py)."""
