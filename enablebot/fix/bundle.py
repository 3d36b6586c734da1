"""A fix bundle: everything `fix` produced for one model / graph-break cluster.

This is the contract between `fix` (writes it), `verify` (re-checks it) and `pr`
(turns it into a pull request). Layout of a bundle directory:

    bundle.json         FixBundle below (metadata, before/after summary)
    patch.diff          unified diff in upstream repo layout (absent for recipe-only fixes):
                        torch/_dynamo/... / torch/_inductor/... for pytorch,
                        src/transformers/... for transformers
    report.md           human-readable before/after report with the reproduction command
    verification.json   the verifier's checks (enablebot.fix.judge.verify)
    transcript.jsonl    prompt/response transcript of the LLM agent (tokens never included)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..fileio import atomic_write_text
from ..results import Serializable
from ..validate import read_json

TARGETS = ("dynamo", "inductor", "model-code", "config")


@dataclass
class ClusterRef(Serializable):
    """Which graph break this fix addresses."""

    gb_type: str
    registry_id: str | None = None
    filename: str | None = None  # user frame file (basename or repo path)
    function: str | None = None
    lineno: int | None = None
    # graph_break, or compile_error: the trace-stage error that stopped the compile (a fake-tensor
    # call that fails, ...), keyed like a break on its type and the frame that calls the op
    kind: str = "graph_break"


@dataclass
class Snapshot(Serializable):
    """Before/after figures of the model the fix was made for."""

    verdict: str | None = None
    graphs: int | None = None
    graph_breaks: int | None = None
    cluster_breaks: int | None = None  # breaks of the targeted cluster
    numerics_passed: bool | None = None
    speedup: float | None = None
    compiled_ms: float | None = None


@dataclass
class FixBundle(Serializable):
    fix_key: str  # stable id: one PR per key, updated in place
    model_id: str
    cluster: ClusterRef
    target: str  # one of TARGETS
    kind: str = "patch"  # patch | recipe
    recipe: dict[str, Any] | None = None  # torch._dynamo.config settings, for kind == recipe
    files: list[str] = field(default_factory=list)  # upstream paths the patch touches
    llm_model: str | None = None
    attempts: int = 0  # candidates drafted (rewrites and model samples)
    # Where the verified fix's idea came from: recipe | rewrite:<playbook entry> | model | model+idea:<entries>
    fix_source: str | None = None
    verified: bool = False
    versions: dict[str, str] = field(default_factory=dict)  # torch, transformers
    before: Snapshot = field(default_factory=Snapshot)
    after: Snapshot = field(default_factory=Snapshot)
    repro: str = ""  # command that reproduces the break
    created_at: str = ""

    @staticmethod
    def load(directory: str | Path) -> "FixBundle":
        d = Path(directory)
        meta = d / "bundle.json"
        if not meta.is_file():
            raise FileNotFoundError(f"{d} is not a fix bundle (no bundle.json); run `enablebot fix` first")
        return FixBundle.from_dict(read_json(meta), where=str(meta))

    def save(self, directory: str | Path) -> None:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        atomic_write_text(d / "bundle.json", json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")


def read_patch(directory: str | Path) -> str | None:
    p = Path(directory) / "patch.diff"
    return p.read_text(encoding="utf-8") if p.is_file() else None


def find_bundles(root: str | Path) -> list[Path]:
    """Bundle directories under `root`: `root` itself, `root/<cluster>` or, as `fix --out`
    writes them, `root/<model>/<cluster>`."""
    r = Path(root)
    if (r / "bundle.json").is_file():
        return [r]
    if not r.is_dir():
        return []
    return sorted({p.parent for pat in ("*/bundle.json", "*/*/bundle.json") for p in r.glob(pat)})
