"""Where command outputs go: `--json -` means stdout; files are written whole (atomic) and
readable like any file the user creates (umask applied, 0644 by default)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

STDOUT = "-"


def to_stdout(path: Path | str | None) -> bool:
    return path is not None and str(path) == STDOUT


def write_json(path: Path | str, data: Any) -> str:
    """Write `data` as JSON to `path`, or to stdout for `-`; returns where it went."""
    from .redact import redact

    text = redact(json.dumps(data, indent=1) + "\n")
    if to_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return "stdout"
    from .fileio import atomic_write_text

    atomic_write_text(Path(path), text)
    return str(path)
