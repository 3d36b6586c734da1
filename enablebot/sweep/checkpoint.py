"""Append-only JSONL checkpoint of sweep results.

Each result is one line, written and fsynced as it arrives (enablebot.jsonl), so a sweep killed
at any moment loses at most the line being written; a torn last line is dropped on load (that
model simply runs again) and truncated before the next append. The newest line for a key wins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from .. import jsonl
from ..results import RunResult

RESULTS_FILE = "results.jsonl"


def read_result_rows(path: Path) -> list[tuple[RunResult, dict[str, Any]]]:
    """Each line of a results file as (RunResult, the raw dict: readers want fields RunResult may
    not carry), oldest first. A torn last line is dropped; any other line that is not a result
    raises jsonl.JsonlError naming file:line."""
    rows = []
    for no, d in jsonl.read(path).records:
        if not isinstance(d, dict):
            raise jsonl.JsonlError(path, no, f"not a result record (a JSON {type(d).__name__}, not an object)")
        # A whole line of the wrong shape is no torn write: DataError names file, line, entry and field.
        rows.append((RunResult.from_dict(d, where=f"{path}: line {no}"), d))
    return rows


def load_results(path: Path) -> dict[str, RunResult]:
    return {r.key: r for r, _ in read_result_rows(path)}


class Checkpoint:
    def __init__(self, out_dir: Path):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.out_dir / RESULTS_FILE
        jsonl.mend(self.path)  # a kill mid-write: drop the torn line now, so the resumed sweep appends cleanly
        self.done = load_results(self.path)

    def append(self, result: RunResult) -> None:
        jsonl.append(self.path, result.to_dict())
        self.done[result.key] = result


def write_results(path: Path, results: Iterable[RunResult]) -> None:
    from ..fileio import atomic_write_text

    text = "".join(jsonl.dumps(r.to_dict()) + "\n" for r in sorted(results, key=lambda r: r.key))
    atomic_write_text(path, text)
