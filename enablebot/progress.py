"""Progress that shows in CI logs as well as in a terminal.

A terminal gets rich's live spinner and bar. Without one (a pipe, a file, CI: rich's
live displays then print nothing until the end), long work prints plain lines instead:
one per stage for `run` and `fix`, one per finished item for `sweep`, with counts and an
ETA every `every` items, so a log shows life and a hung model is visible.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from typing import Callable, Iterator

from rich.console import Console


def interactive(console: Console) -> bool:
    # CI=true (GitHub Actions and most others) may still force colour, but a live display
    # only repaints one line there: log lines instead.
    return console.is_interactive and not os.environ.get("CI")


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


@contextlib.contextmanager
def stages(console: Console, label: str) -> Iterator[Callable[[str], None]]:
    """`say(msg)` for each stage of one long job: a spinner on a terminal, else a line each."""
    if interactive(console):
        with console.status(f"[bold]{label}[/bold]: starting") as status:
            yield lambda msg: status.update(f"[bold]{label}[/bold]: {msg}")
        return
    t0 = time.monotonic()

    def say(msg: str) -> None:
        console.print(f"[{_clock(time.monotonic() - t0)}] {label}: {msg}", markup=False, highlight=False,
                      soft_wrap=True)

    say("starting")
    yield say


class LineProgress:
    """Sweep progress without a TTY: one line per finished item, counts and ETA every `every`."""

    def __init__(self, console: Console, total: int, every: int | None = None):
        self.console, self.total = console, total
        self.every = every or max(1, min(25, total // 10 or 1))
        self.done = 0
        self.verdicts: Counter = Counter()
        self.t0 = time.monotonic()

    def eta(self) -> float | None:
        if not self.done:
            return None
        return (time.monotonic() - self.t0) / self.done * (self.total - self.done)

    def item(self, name: str, verdict: str, seconds: float | None = None) -> None:
        self.done += 1
        self.verdicts[verdict] += 1
        took = f" ({seconds:.0f} s)" if seconds is not None else ""
        self.console.print(f"[{self.done}/{self.total}] {name}: {verdict}{took}", markup=False, highlight=False,
                           soft_wrap=True)
        if self.done % self.every == 0 or self.done == self.total:
            self.console.print(self.counts_line(), markup=False, highlight=False, soft_wrap=True)

    def counts_line(self) -> str:
        eta = self.eta()
        counts = ", ".join(f"{n} {v}" for v, n in self.verdicts.most_common())
        return (f"progress: {self.done}/{self.total} done ({counts}); elapsed {_clock(time.monotonic() - self.t0)}"
                + (f", ETA {_clock(eta)}" if eta is not None and self.done < self.total else ""))
