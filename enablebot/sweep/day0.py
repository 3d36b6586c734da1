"""Day-0 support from a transformers release: find the model types the installed transformers
knows and the registry lacks, register them (no hand-written knowledge: the generic shrink
and input rules apply), and put them first in a sweep.

`first_seen` is the release's date when it is known (PyPI's upload time of the release), else
the moment the bot first saw the type; `first_seen_source` says which (`release` | `bot`).
`new_in` names the release ("transformers 5.25.0") so later jobs, and reports, can tell the
release's new types apart after they were registered.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..model.registry import Registry
from ..results import RunResult, Serializable


@dataclass
class NewType(Serializable):
    model_type: str
    new_in: str
    first_seen: str
    first_seen_source: str  # release | bot


@dataclass
class Day0Row(Serializable):
    model_type: str
    first_seen: str
    first_seen_source: str
    items: int = 0
    built_and_ran: int = 0  # full_graph or graph_break
    full_graph: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)
    breaks: list[str] = field(default_factory=list)  # GBxxxx x count
    errors: list[str] = field(default_factory=list)  # "task/mode: stage: Type: message"


@dataclass
class Day0Report(Serializable):
    release: str
    rows: list[Day0Row] = field(default_factory=list)

    @property
    def items(self) -> int:
        return sum(r.items for r in self.rows)

    @property
    def built_and_ran(self) -> int:
        return sum(r.built_and_ran for r in self.rows)

    def markdown(self) -> str:
        lines = [f"## New in {self.release} ({len(self.rows)} model types)", ""]
        if not self.rows:
            return "\n".join(lines + ["No new model types.", ""])
        pct = 100.0 * self.built_and_ran / self.items if self.items else 0.0
        lines += [f"{self.built_and_ran} of {self.items} items built and ran ({pct:.1f}%), with no hand-written "
                  "registry knowledge.", "",
                  "| model type | first seen | source | built+ran | full_graph | breaks | errors |",
                  "|---|---|---|---|---|---|---|"]
        for r in self.rows:
            lines.append(f"| {r.model_type} | {r.first_seen[:10]} | {r.first_seen_source} | {r.built_and_ran}/{r.items} "
                         f"| {r.full_graph} | {', '.join(r.breaks) or '-'} | {'; '.join(r.errors)[:160] or '-'} |")
        return "\n".join(lines) + "\n"


def release_label(version: str) -> str:
    return f"transformers {version}"


def missing_types(registry: Registry, known: Iterable[str]) -> list[str]:
    return sorted(mt for mt in known if mt not in registry)


def pypi_release_date(package: str, version: str, *, timeout: float = 5.0) -> str | None:
    """The release's upload time on PyPI (ISO, UTC), or None when it cannot be read (offline)."""
    import urllib.request

    url = f"https://pypi.org/pypi/{package}/{version}/json"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - a fixed https URL
            data = json.loads(resp.read().decode("utf-8"))
        times = sorted(u["upload_time_iso_8601"] for u in data.get("urls", []) if u.get("upload_time_iso_8601"))
        return iso_date(times[0]) if times else None
    except Exception:  # noqa: BLE001 - no network, a mirror without the JSON API: fall back to first seen
        return None


def iso_date(text: str) -> str:
    t = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t.astimezone(_dt.timezone.utc).replace(microsecond=0).isoformat()


def register_new_types(registry: Registry, *, transformers_version: str, release_date: str | None = None,
                       now: str | None = None) -> list[NewType]:
    """Add the installed transformers' types the registry lacks, marked as new in this release."""
    from ..model.seed import seed_registry

    now = now or _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    added = seed_registry(registry, now=now)
    label = release_label(transformers_version)
    out = []
    for mt in added:
        e = registry.entries[mt]
        e.first_seen = release_date or now
        e.first_seen_source = "release" if release_date else "bot"
        e.new_in = label
        out.append(NewType(mt, label, e.first_seen, e.first_seen_source))
    return out


def new_in_release(registry: Registry, transformers_version: str) -> list[str]:
    label = release_label(transformers_version)
    return sorted(mt for mt, e in registry.entries.items() if e.new_in == label)


def first(items: list, types: set[str], key: Callable[[object], str] = lambda it: it.model_id) -> list:
    """`items` with those of `types` moved to the front, each group keeping its order."""
    return [it for it in items if key(it) in types] + [it for it in items if key(it) not in types]


def day0_report(registry: Registry, results: Iterable[RunResult], transformers_version: str) -> Day0Report:
    from .compare import breaks_by_type

    new = set(new_in_release(registry, transformers_version))
    rows: dict[str, Day0Row] = {}
    for mt in sorted(new):
        e = registry.entries[mt]
        rows[mt] = Day0Row(mt, e.first_seen or "", e.first_seen_source or "bot")
    for r in results:
        row = rows.get(r.spec.model_id)
        if row is None:
            continue
        row.items += 1
        row.verdicts[r.verdict] = row.verdicts.get(r.verdict, 0) + 1
        row.built_and_ran += r.verdict.ok
        row.full_graph += r.verdict == "full_graph"
        for gb, n in sorted(breaks_by_type(r).items()):
            row.breaks.append(f"{gb} x{n} ({r.spec.task}/{r.spec.mode})")
        if r.error is not None and not r.verdict.ok:
            row.errors.append(f"{r.spec.task}/{r.spec.mode}: {r.error.stage}: {r.error.type}: {r.error.message[:80]}")
    return Day0Report(release=release_label(transformers_version), rows=list(rows.values()))
