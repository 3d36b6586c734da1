"""Time-to-support: from an architecture's `first_seen` to its first supported run, and to its
first verified fix bundle.

`first_seen` is the release date of the transformers release that brought the type, or when the
bot (or the Hub watcher) first saw it: `first_seen_source` says which.
"Supported" on a device and mode means a run that is `full_graph` with numerics passing.
"Fixed" means a verified fix bundle (`enablebot fix`: a recipe, a patch or a registry entry)
exists for the type; its `created_at` ends the second clock.
Each registry entry keeps, per "<device>/<mode>", the latest run's status and
`supported_at`: set by the first supported run and never moved afterwards, so a later
regression shows in `verdict` without rewriting history.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..model.hub import iso_utc, parse_iso
from ..model.registry import ArchEntry, Registry
from ..results import RunResult, Serializable
from ..verdict import Verdict


def status_key(device: str, mode: str) -> str:
    return f"{device}/{mode}"


def is_supported(result: RunResult) -> bool:
    return result.verdict == Verdict.FULL_GRAPH and result.numerics is not None and result.numerics.status == "pass"


def record_status(entry: ArchEntry, result: RunResult, *, now: datetime | None = None) -> dict[str, Any]:
    """Store `result` as the entry's status for its device/mode; returns that status."""
    when = iso_utc((now or datetime.now(timezone.utc)).replace(microsecond=0))
    key = status_key(result.spec.device, result.spec.mode)
    previous = entry.status.get(key) or {}
    status = {
        "verdict": result.verdict,
        # inconclusive (eager not deterministic) claims neither pass nor fail
        "numerics_passed": None if result.numerics is None or result.numerics.status == "inconclusive"
        else result.numerics.status == "pass",
        "numerics_status": result.numerics.status if result.numerics is not None else None,
        "speedup": round(result.timing.speedup, 3) if result.timing and result.timing.speedup is not None else None,
        "torch": result.versions.torch or None,
        "transformers": result.versions.transformers or None,
        "checked_at": when,
        "supported_at": previous.get("supported_at") or (when if is_supported(result) else None),
    }
    entry.status[key] = status
    return status


@dataclass
class SupportRow(Serializable):
    model_type: str
    key: str | None  # "<device>/<mode>"; None: never run
    first_seen: str
    supported_at: str | None = None
    seconds: float | None = None  # first_seen -> supported_at (0 when supported before first seen)
    open_seconds: float | None = None  # first_seen -> now, while not supported
    verdict: str | None = None  # the latest run's
    origin: str = "transformers"
    first_seen_source: str | None = None  # release | bot | None (recorded before the field existed)
    new_in: str | None = None
    fixed_at: str | None = None  # the first verified fix bundle for the type
    fix_seconds: float | None = None  # first_seen -> fixed_at


@dataclass
class SupportSummary(Serializable):
    key: str
    architectures: int
    supported: int
    median_seconds: float | None = None


@dataclass
class SupportReport(Serializable):
    generated_at: str
    rows: list[SupportRow] = field(default_factory=list)
    summaries: list[SupportSummary] = field(default_factory=list)


def first_fixes(bundle_dirs: Any) -> dict[str, str]:
    """model_type -> created_at of its first verified fix bundle, from bundle directories (each holding
    bundle.json) or directories of them."""
    import json
    from pathlib import Path

    out: dict[str, str] = {}
    for root in bundle_dirs or ():
        for meta in sorted(Path(root).glob("**/bundle.json")):
            try:
                b = json.loads(meta.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if not b.get("verified") or not b.get("created_at") or not b.get("model_id"):
                continue
            mt = str(b["model_id"])
            if mt not in out or parse_iso(b["created_at"]) < parse_iso(out[mt]):
                out[mt] = str(b["created_at"])
    return out


def time_to_support(registry: Registry, *, now: datetime | None = None, discovered_only: bool = False,
                    key: str | None = None, fixes: dict[str, str] | None = None,
                    new_in: str | None = None) -> SupportReport:
    """Rows for every architecture with `first_seen` that was run, plus watcher-discovered (or
    release-registered) ones not run yet; the median per device/mode is over supported architectures.
    `fixes` (first_fixes) adds the time to the first verified fix bundle; `new_in` keeps only the types
    new in that release ("transformers 5.25.0")."""
    now = now or datetime.now(timezone.utc)
    fixes = fixes or {}
    rows: list[SupportRow] = []
    for mt in sorted(registry.entries):
        e = registry.entries[mt]
        if not e.first_seen or (discovered_only and not e.seen_in) or (new_in and e.new_in != new_in):
            continue
        seen = parse_iso(e.first_seen)
        extra = dict(origin=e.origin, first_seen_source=e.first_seen_source, new_in=e.new_in)
        if mt in fixes:
            extra.update(fixed_at=fixes[mt], fix_seconds=max(0.0, _secs(parse_iso(fixes[mt]) - seen)))
        keys = sorted(k for k in e.status if key is None or k == key)
        if not keys and (e.seen_in or e.new_in) and key is None:
            rows.append(SupportRow(mt, None, e.first_seen, open_seconds=_secs(now - seen), **extra))
        for k in keys:
            st = e.status[k] or {}
            row = SupportRow(mt, k, e.first_seen, verdict=st.get("verdict"), **extra)
            if st.get("supported_at"):
                row.supported_at = str(st["supported_at"])
                row.seconds = max(0.0, _secs(parse_iso(row.supported_at) - seen))
            else:
                row.open_seconds = _secs(now - seen)
            rows.append(row)
    summaries = []
    for k in sorted({r.key for r in rows if r.key}):
        done = [r.seconds for r in rows if r.key == k and r.seconds is not None]
        summaries.append(SupportSummary(k, sum(r.key == k for r in rows), len(done),
                                        statistics.median(done) if done else None))
    return SupportReport(generated_at=iso_utc(now), rows=rows, summaries=summaries)


def human_duration(seconds: float | None) -> str:
    """Compact, e.g. 3d 4h, 5h 12m, 42m, 30s."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    d, rem = divmod(s, 86400)
    h, rem = divmod(rem, 3600)
    m, sec = divmod(rem, 60)
    if d:
        return f"{d}d {h}h"
    if h:
        return f"{h}h {m}m"
    if m:
        return f"{m}m"
    return f"{sec}s"


def _secs(delta: Any) -> float:
    return round(delta.total_seconds(), 3)
