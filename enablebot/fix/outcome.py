"""What `enablebot fix` reports per cluster: the recipes tried and the agent's search. Typed
results only: the loop fills them, the report renders them, neither knows the other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..results import Serializable
from .draft.search import SearchResult
from .judge.verify import Verification


@dataclass
class RecipeTrial(Serializable):
    id: str
    settings: dict[str, Any]
    note: str = ""
    passed: bool = False
    feedback: str = ""
    verification: Verification | None = None


@dataclass
class FixOutcome(Serializable):
    model_id: str
    cluster: str  # cluster key
    status: str  # fixed | not_fixed | not_reproduced | error
    kind: str | None = None  # recipe | patch
    source: str | None = None  # where the verified fix's idea came from (FixBundle.fix_source)
    bundle_dir: str | None = None
    message: str = ""
    whole_model: bool = False  # the verified fix leaves the model one graph: every other cluster goes with it
    recipes: list[RecipeTrial] = field(default_factory=list)
    agent: SearchResult | None = None
