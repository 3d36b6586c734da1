"""Graph-break clusters: the breaks of one type raised from one function of model code.

A cluster is what one fix addresses. Its identity survives a patch that moves lines
(registry id or type, file name, function), so the verifier can tell whether the
patched run still has it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from ..measure.graph_breaks import from_error_text
from ..results import GraphBreak, RunResult
from .bundle import ClusterRef

COMPILE_ERROR = "compile_error"


def _base(filename: str | None) -> str | None:
    return PurePosixPath(filename.replace("\\", "/")).name if filename else None


def ref_of(gb: GraphBreak) -> ClusterRef:
    uf = gb.user_frame
    return ClusterRef(gb_type=gb.gb_type, registry_id=gb.registry_id, filename=_base(uf.filename) if uf else None,
                      function=uf.function if uf else None, lineno=uf.lineno if uf else None,
                      kind=COMPILE_ERROR if gb.source == COMPILE_ERROR else "graph_break")


def error_break(result: RunResult) -> GraphBreak | None:
    """The error that stopped a run's compile, as a break-like record a fix can address (the
    `compile_error` verdict only: an eager or build failure is not the compiler's), else None."""
    if result.verdict != COMPILE_ERROR or result.error is None:
        return None
    return from_error_text(result.error.message, source=COMPILE_ERROR)


def breaks_of(result: RunResult) -> list[GraphBreak]:
    """What a fix may address in a run: its graph breaks, and the compile error when there is one.
    Where the explain pass recorded no break but `fullgraph=True` failed on one (a break whose
    graph Dynamo never handed to the backend, e.g. layerdrop's `torch.rand([]) < p` in training),
    that failure is the break: the run's verdict rests on it, so a fix must be able to address it."""
    eb = error_break(result)
    found = list(result.graph_breaks)
    fg = result.fullgraph_error
    if not found and result.fullgraph_ok is False and fg is not None and fg.user_frame is not None:
        found.append(fg)
    return [*found, *([eb] if eb is not None else [])]


def key_of(ref: ClusterRef) -> str:
    where = f"{ref.filename}:{ref.function}" if ref.filename else "unknown"
    return f"{ref.registry_id or ref.gb_type}@{where}"


def slug(ref: ClusterRef) -> str:
    """A file-system-safe name for a cluster's bundle directory."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", key_of(ref).replace("@", "-")).strip("-")[:100]


def matches(gb: GraphBreak, ref: ClusterRef) -> bool:
    if (gb.source == COMPILE_ERROR) != (ref.kind == COMPILE_ERROR):
        return False
    same_type = (gb.registry_id == ref.registry_id) if (gb.registry_id and ref.registry_id) else gb.gb_type == ref.gb_type
    if not same_type:
        return False
    if ref.filename is None:
        return True
    uf = gb.user_frame
    return bool(uf) and _base(uf.filename) == ref.filename and (ref.function is None or uf.function == ref.function)


@dataclass
class Cluster:
    ref: ClusterRef
    breaks: list[GraphBreak]

    @property
    def key(self) -> str:
        return key_of(self.ref)

    @property
    def count(self) -> int:
        return sum(b.count for b in self.breaks)

    @property
    def lead(self) -> GraphBreak:
        """The most frequent break of the cluster (its frame and reason go into the prompt)."""
        return max(self.breaks, key=lambda b: b.count)


def clusters_of(breaks: list[GraphBreak]) -> list[Cluster]:
    """Group breaks into clusters, most frequent first."""
    groups: dict[str, Cluster] = {}
    for gb in breaks:
        ref = ref_of(gb)
        k = key_of(ref)
        if k in groups:
            groups[k].breaks.append(gb)
        else:
            groups[k] = Cluster(ref=ref, breaks=[gb])
    return sorted(groups.values(), key=lambda c: (-c.count, c.key))


def count_in(breaks: list[GraphBreak], ref: ClusterRef) -> int:
    return sum(b.count for b in breaks if matches(b, ref))


def select(clusters: list[Cluster], selector: str | None) -> list[Cluster]:
    """Clusters matching `--cluster`: a cluster key, a registry id (GB0033), or a substring of
    the break type or key. None selects all."""
    if not selector:
        return clusters
    s = selector.strip()
    exact = [c for c in clusters if c.key == s or (c.ref.registry_id or "").upper() == s.upper()]
    if exact:
        return exact
    low = s.lower()
    return [c for c in clusters if low in c.key.lower() or low in c.ref.gb_type.lower()]
