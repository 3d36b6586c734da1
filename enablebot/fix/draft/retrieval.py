"""Retrieval from the fix history: verified fixes of *other* clusters with the same GB id, shown
to the model as fixed code to adapt. The history is a set of fix bundles (`bundle.json` +
`patch.diff`, verified) or any list of `Fix` items (the fix benchmark passes its cases).

Leave-one-out: the caller names what a case must not see (its own model, its own answer), and
`retrieve` drops every fix with that model or that patch, whatever its label.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .context import Example

MAX_EXAMPLE_LINES = 60  # a longer fix is cut: the model needs the shape of the change, not all of it


@dataclass(frozen=True)
class Fix:
    registry_id: str | None
    gb_type: str
    model: str
    label: str
    diff: str

    @property
    def key(self) -> str:
        return patch_identity(self.diff)


def patch_identity(diff: str) -> str:
    """The same change whatever the hunk offsets: only the added and removed lines count."""
    body = [ln.rstrip() for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    return hashlib.sha256("\n".join(body).encode("utf-8")).hexdigest()


def from_bundles(roots: Iterable[str | Path]) -> list[Fix]:
    """Verified patch bundles under `roots` (any depth)."""
    out: list[Fix] = []
    for root in roots:
        for bj in sorted(Path(root).glob("**/bundle.json")):
            try:
                b = json.loads(bj.read_text(encoding="utf-8"))
                diff = (bj.parent / "patch.diff").read_text(encoding="utf-8")
            except (OSError, ValueError):
                continue
            c = b.get("cluster") or {}
            if b.get("verified") is True and b.get("kind") == "patch" and diff.strip():
                out.append(Fix(registry_id=c.get("registry_id"), gb_type=str(c.get("gb_type") or ""),
                               model=str(b.get("model_id") or ""), label=str(b.get("fix_key") or bj.parent.name),
                               diff=diff))
    return out


def retrieve(history: Iterable[Fix], registry_id: str | None, gb_type: str, *, exclude_models: Iterable[str] = (),
             exclude_patches: Iterable[str] = (), limit: int = 2) -> list[Example]:
    """Up to `limit` fixes of the same break kind (registry id, else gb_type), none from an
    excluded model or equal to an excluded patch (diff text or identity), one per distinct change."""
    models = set(exclude_models)
    banned = {patch_identity(p) if "\n" in p else p for p in exclude_patches}
    out: list[Example] = []
    seen: set[str] = set()
    for f in history:
        same = (f.registry_id == registry_id) if (f.registry_id and registry_id) else f.gb_type == gb_type
        if not same or f.model in models or f.key in banned or f.key in seen:
            continue
        seen.add(f.key)
        lines = f.diff.strip().splitlines()
        text = "\n".join(lines[:MAX_EXAMPLE_LINES] + ([f"... ({len(lines) - MAX_EXAMPLE_LINES} more lines)"]
                                                      if len(lines) > MAX_EXAMPLE_LINES else []))
        out.append(Example(label=f"{f.model}: {f.label}", diff=text))
        if len(out) >= limit:
            break
    return out
