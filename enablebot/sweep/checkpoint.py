"""Append-only JSONL checkpoint of sweep results.

Each result is one line, written and fsynced as it arrives, so a sweep killed at
any moment loses at most the line being written; a torn last line is ignored on
load (that model simply runs again). The newest line for a key wins.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

from ..results import RunResult

RESULTS_FILE = "results.jsonl"


def load_results(path: Path) -> dict[str, RunResult]:
    out: dict[str, RunResult] = {}
    if not path.exists():
        return out
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                data = json.loads(line)
            except ValueError:
                continue  # a line torn by a kill: the model reruns
            # A whole line of the wrong shape is no torn write: DataError says where (one line).
            r = RunResult.from_dict(data, where=f"{path}: line {n}")
            out[r.key] = r
    return out


class Checkpoint:
    def __init__(self, out_dir: Path):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.out_dir / RESULTS_FILE
        self._repair_torn_tail()
        self.done = load_results(self.path)

    def _repair_torn_tail(self) -> None:
        # A kill mid-write leaves a last line without "\n"; end it so the next append starts clean.
        if self.path.exists() and self.path.stat().st_size:
            with open(self.path, "rb+") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.write(b"\n")

    def append(self, result: RunResult) -> None:
        from ..redact import redact

        line = redact(json.dumps(result.to_dict(), separators=(",", ":"))) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self.done[result.key] = result


def write_results(path: Path, results: Iterable[RunResult]) -> None:
    from ..fileio import atomic_write_text

    text = "".join(json.dumps(r.to_dict(), separators=(",", ":")) + "\n" for r in sorted(results, key=lambda r: r.key))
    atomic_write_text(path, text)
