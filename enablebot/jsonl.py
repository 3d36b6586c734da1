"""Append-only JSONL files (results.jsonl, sweep_runs.jsonl, cache_keys.jsonl, transcripts):
the one reader and the one appender, so every such file has the same crash semantics.

A writer killed mid-append leaves at most a *torn tail*: a last line without its newline.
- Reading: a torn tail that does not parse is dropped (logged, and returned in `JsonlRead.torn`);
  one that parses is a whole record whose newline was lost and is kept. Reading never changes the
  file: a reader may be looking at a file a live sweep is appending to.
- Appending: a torn tail is first truncated (or, when it parses, ended with its newline), so the
  new line never glues onto garbage; the write is flushed and fsynced before `append` returns
  (and the directory too when the append created the file), so a line that was appended survives
  a kill or a power cut.
- A malformed line anywhere else is not a crash artefact but damage: `JsonlError` names file:line.

Kept apart from fileio.py on purpose: fileio writes whole files atomically (replace), this module
owns a different contract (line records, append in place, tail repair) that readers depend on too.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .redact import redact

log = logging.getLogger(__name__)

_CHUNK = 1 << 16


class JsonlError(ValueError):
    """A malformed line that is not the torn tail: the file is damaged. The message names file:line."""

    def __init__(self, path: str | os.PathLike, line: int, why: str):
        super().__init__(f"{path}:{line}: {why}; a killed writer only ever tears the last line, so this file "
                         "was edited or damaged: fix or delete that line")
        self.path = Path(path)
        self.line = line


@dataclass
class JsonlRead:
    """The records of a file, each with its 1-based line number, and the torn tail dropped (if any)."""

    path: Path
    records: list[tuple[int, Any]] = field(default_factory=list)
    torn: bytes | None = None

    def values(self) -> list[Any]:
        return [r for _, r in self.records]


def _parse(raw: bytes) -> Any:
    """One line's record; ValueError (UnicodeDecodeError and JSONDecodeError are both) when it is not one."""
    return json.loads(raw.decode("utf-8"))


def read(path: str | os.PathLike) -> JsonlRead:
    """All records of `path` in order; a missing file has none. Raises JsonlError on a malformed
    line that is not the torn tail."""
    path = Path(path)
    out = JsonlRead(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return out
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline (or is empty)
    for no, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            out.records.append((no, _parse(raw)))
        except ValueError as e:
            raise JsonlError(path, no, f"not a JSON line ({e})") from None
    if tail.strip():
        try:
            out.records.append((len(lines) + 1, _parse(tail)))
        except ValueError:
            out.torn = tail
            log.warning("%s:%d: dropped a torn last line (%d bytes without a newline; a writer was killed "
                        "mid-append)", path, len(lines) + 1, len(tail))
    return out


def read_values(path: str | os.PathLike) -> list[Any]:
    """`read(path).values()`: the records, oldest first."""
    return read(path).values()


def _last_line_start(f: Any, size: int) -> int:
    """Offset just after the last newline before `size` (0 when there is none)."""
    pos = size
    while pos > 0:
        step = min(_CHUNK, pos)
        f.seek(pos - step)
        chunk = f.read(step)
        i = chunk.rfind(b"\n")
        if i >= 0:
            return pos - step + i + 1
        pos -= step
    return 0


def mend(path: str | os.PathLike) -> None:
    """Make `path` end with a newline (see _mend_tail); for a writer resuming its file. No file: nothing."""
    try:
        with open(path, "r+b") as f:
            _mend_tail(f, Path(path))
            f.flush()
            os.fsync(f.fileno())
    except FileNotFoundError:
        pass


def _mend_tail(f: Any, path: Path) -> None:
    """Make the file end with a newline: end a whole last record, truncate a torn one."""
    size = f.seek(0, os.SEEK_END)
    if size == 0:
        return
    f.seek(size - 1)
    if f.read(1) == b"\n":
        return
    start = _last_line_start(f, size)
    f.seek(start)
    tail = f.read(size - start)
    try:
        _parse(tail)
    except ValueError:
        log.warning("%s: truncated a torn last line (%d bytes) before appending", path, size - start)
        f.truncate(start)
        return
    f.seek(0, os.SEEK_END)
    f.write(b"\n")


def dumps(record: Any, *, sort_keys: bool = False) -> str:
    """One record as one line of text, without the newline."""
    return json.dumps(record, separators=(",", ":"), sort_keys=sort_keys)


def append(path: str | os.PathLike, records: Iterable[Any] | Any, *, sort_keys: bool = False,
           secrets: Iterable[str] = ()) -> None:
    """Append one record (a dict) or several (any other iterable), redacted, fsynced before returning."""
    path = Path(path)
    items = [records] if isinstance(records, dict) else list(records)
    lines = []
    for r in items:
        line = redact(dumps(r, sort_keys=sort_keys), secrets)
        json.loads(line)  # redaction must leave a record; never append a line no reader could parse
        lines.append(line + "\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    created = not path.exists()
    # "a+b": every write goes to the end whatever the position; reads and truncate work anywhere.
    with open(path, "a+b") as f:
        _mend_tail(f, path)
        f.write("".join(lines).encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())
    if created:
        _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    """Persist a new file's directory entry (the file's own fsync does not cover it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory
    finally:
        os.close(fd)
