"""The one interface between the untrusted drafting side (`fix/draft/`) and the trusted judge
(`fix/judge/`): a drafter hands a `Candidate` (a unified diff and where its idea came from) to a
`Judge` callable it was given, and reads back a `Judgement`. The drafter never sees how the
judge guards, applies or verifies; the judge never trusts anything the drafter says but the diff.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable

from ..results import Serializable


@dataclass
class Candidate(Serializable):
    diff: str  # unified diff with upstream a/ b/ paths, as the guard parses it
    source: str  # where the idea came from: rewrite:<playbook entry> | model | model+idea:<entry>
    note: str = ""


@dataclass
class Judgement(Serializable):
    stage: str  # the stage the candidate reached: guard | apply | verify
    ok: bool = False
    feedback: str = ""  # what failed, in words a drafter can act on
    files: list[str] = field(default_factory=list)
    diff: str | None = None  # the canonical diff, once it applied
    overlay_dir: str | None = None
    # What a drafter may rank candidates by (never the checks themselves).
    graphs: int | None = None
    graph_breaks: int | None = None
    speed_ratio: float | None = None
    duration_s: float = 0.0
    verification: Any = None  # the judge's Verification, for the bundle; opaque to drafters

    def score(self) -> tuple:
        """Higher is better: fewer graphs, then fewer breaks, then faster."""
        return (-(self.graphs or 0), -(self.graph_breaks or 0), self.speed_ratio or 0.0)


Judge = Callable[[Candidate], Judgement]


def patch_key(diff: str) -> str:
    """Identity of a candidate: its diff with line endings and trailing blanks normalised (both
    sides deduplicate with it: the drafter before asking, the judge before verifying)."""
    norm = "\n".join(ln.rstrip() for ln in diff.replace("\r\n", "\n").strip().splitlines())
    return hashlib.sha256(norm.encode("utf-8")).hexdigest()
