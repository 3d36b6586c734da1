"""Graph-break clusters across models: the fix agent's work queue.

A cluster is one break type at one place in user code (file and function), ranked
by how many models it affects. Classification rules are data (data/triage.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable

import yaml

from ..results import GraphBreak, RunResult, Serializable
from ..shipped import package_data

_RULES = package_data("data", "triage.yaml")


@lru_cache(maxsize=1)
def rules() -> dict:
    return yaml.safe_load(_RULES.read_text(encoding="utf-8"))


def classify(b: GraphBreak) -> str:
    r = rules()
    if b.registry_id and b.registry_id in (r.get("by_id") or {}):
        return r["by_id"][b.registry_id]
    hints = " ".join(b.hints)
    if "torch._dynamo.config." in hints or "TORCHDYNAMO_" in hints:
        return "config"
    if b.gb_type in (r.get("model_code_types") or []):
        return "model-code"
    return r.get("default", "dynamo")


def location(b: GraphBreak) -> str:
    uf = b.user_frame
    if uf is None:
        return "?"
    parts = uf.filename.replace("\\", "/").split("/")
    # transformers/models/<type>/modeling_<type>.py -> models/<type>/modeling_<type>.py
    tail = "/".join(parts[-3:]) if "models" in parts[-3:-1] else "/".join(parts[-2:])
    return f"{tail}:{uf.function}"


@dataclass
class Cluster(Serializable):
    gb_type: str
    registry_id: str | None
    location: str
    classification: str
    n_models: int = 0
    occurrences: int = 0
    models: list[str] = field(default_factory=list)
    example: GraphBreak | None = None  # one break of the cluster, with hints and source line


def cluster_breaks(results: Iterable[RunResult]) -> list[Cluster]:
    clusters: dict[tuple, Cluster] = {}
    for r in results:
        for b in r.graph_breaks:
            key = (b.gb_type, b.registry_id, location(b))
            c = clusters.get(key)
            if c is None:
                c = clusters[key] = Cluster(gb_type=b.gb_type, registry_id=b.registry_id, location=key[2],
                                            classification=classify(b), example=b)
            model = r.spec.model_id
            if model not in c.models:
                c.models.append(model)
            c.occurrences += b.count
    for c in clusters.values():
        c.models.sort()
        c.n_models = len(c.models)
    return sorted(clusters.values(), key=lambda c: (-c.n_models, -c.occurrences, c.gb_type, c.location))


def by_type(clusters: list[Cluster]) -> list[tuple[str, str | None, int, int]]:
    """(gb_type, id, models affected, clusters) ranked: the break types that matter most."""
    agg: dict[tuple[str, str | None], tuple[set, int]] = {}
    for c in clusters:
        models, n = agg.get((c.gb_type, c.registry_id), (set(), 0))
        agg[(c.gb_type, c.registry_id)] = (models | set(c.models), n + 1)
    rows = [(t, i, len(m), n) for (t, i), (m, n) in agg.items()]
    return sorted(rows, key=lambda r: (-r[2], r[0]))
