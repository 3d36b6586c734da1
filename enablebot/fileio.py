"""Writing the files the bot produces: atomically (a reader sees the old or the new file, never
a torn one), world-readable (0644, like any file a tool writes: mkstemp's 0600 would hide
reports from other users and CI steps), and with secrets redacted (enablebot.redact)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .redact import redact

FILE_MODE = 0o644


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` atomically, redacted, mode 0644."""
    text = redact(text)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    """Atomic, redacted write of a file the bot produces (the name callers outside use)."""
    atomic_write_text(path, text)


def append_text(path: str | os.PathLike, text: str) -> None:
    """Redacted append (step summaries, JSONL checkpoints)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(redact(text))
