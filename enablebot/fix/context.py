"""What the agent needs to localise a break: the break (type, registry id, explanation,
hints, reason), the user frame with the source of its enclosing function (read from the
installed file), the user stack, and the place in torch that raises this break type.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..results import RunResult, UserFrame
from .clusters import Cluster
from .overlay import package_root, upstream_path

MAX_FUNCTION_LINES = 120  # beyond this, a window around the line instead of the whole function
WINDOW = 30


@dataclass
class SourceSnippet:
    path: str  # upstream path when known, else the file name
    start: int  # first line number
    end: int
    text: str


@dataclass
class BreakContext:
    model_id: str
    model_type: str | None
    model_class: str | None
    versions: dict[str, str]
    gb_type: str
    registry_id: str | None
    explanation: str
    hints: list[str]
    reason: str
    count: int
    user_frame: UserFrame | None
    user_source: SourceSnippet | None
    stack: list[UserFrame]
    torch_source: SourceSnippet | None
    before: str
    recipes_tried: list[str] = field(default_factory=list)

    def prompt_values(self) -> dict[str, Any]:
        uf, us, ts = self.user_frame, self.user_source, self.torch_source
        return {
            "model_id": self.model_id,
            "model_type": self.model_type or "unknown",
            "model_class": self.model_class or "unknown",
            "torch_version": self.versions.get("torch", ""),
            "transformers_version": self.versions.get("transformers", ""),
            "gb_type": self.gb_type,
            "registry_id": self.registry_id or "none",
            "explanation": self.explanation or "(none)",
            "hints": "; ".join(self.hints) or "(none)",
            "count": self.count,
            "recipes_tried": ", ".join(self.recipes_tried) or "none",
            "reason": self.reason,
            "user_frame_path": (us.path if us else (uf.filename if uf else "unknown")),
            "user_frame_lineno": uf.lineno if uf else "?",
            "user_frame_function": uf.function if uf else "?",
            "user_source": (f"# lines {us.start}-{us.end}\n{us.text}" if us else (uf.source if uf else "(unavailable)")),
            "user_stack": "\n".join(f"{upstream_path(f.filename) or f.filename}:{f.lineno} in {f.function}: {f.source}"
                                    for f in self.stack) or "(unavailable)",
            "torch_location": (f"{ts.path} lines {ts.start}-{ts.end}" if ts else "(not found in the installed torch)"),
            "torch_source": ts.text if ts else "",
            "before": self.before,
        }


def function_source(filename: str, lineno: int) -> SourceSnippet | None:
    """The enclosing function of `lineno` (or a window around it when the function is long)."""
    try:
        text = Path(filename).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    lines = text.splitlines()
    start, end = max(lineno - WINDOW // 2, 1), min(lineno + WINDOW // 2, len(lines))
    try:
        tree = ast.parse(text)
        best = None
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= lineno <= (node.end_lineno or 0):
                if best is None or node.lineno > best.lineno:  # innermost
                    best = node
        if best is not None:
            first = min([d.lineno for d in best.decorator_list] + [best.lineno])
            if (best.end_lineno or first) - first + 1 <= MAX_FUNCTION_LINES:
                start, end = first, best.end_lineno or lineno
    except SyntaxError:
        pass
    return SourceSnippet(path=upstream_path(filename) or Path(filename).name, start=start, end=end,
                         text="\n".join(lines[start - 1:end]))


@lru_cache(maxsize=64)
def torch_raise_site(gb_type: str) -> SourceSnippet | None:
    """Where torch/_dynamo raises breaks of this type: the `gb_type=` literal in its source."""
    if not gb_type:
        return None
    try:
        dynamo = package_root("torch") / "torch" / "_dynamo"
    except ValueError:
        return None
    # gb_type strings are literals, sometimes f-strings: match a distinctive prefix.
    prefix = re.escape(gb_type.split("{")[0][:60])
    pattern = re.compile(r'gb_type\s*=\s*f?["\']' + prefix)
    for path in sorted(dynamo.rglob("*.py")):
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for i, line in enumerate(lines):
            if pattern.search(line):
                return function_source(str(path), i + 1)
    return None


def describe_run(result: RunResult) -> str:
    s = result.stats
    parts = [f"verdict {result.verdict}"]
    if s:
        parts.append(f"{s.graphs} graphs, {s.graph_breaks} graph breaks")
    if result.numerics:
        parts.append(f"numerics {'pass' if result.numerics.passed else 'FAIL'}")
    if result.timing and result.timing.speedup:
        parts.append(f"speedup {result.timing.speedup:.2f}x")
    return "; ".join(parts)


def build_context(result: RunResult, cluster: Cluster, recipes_tried: list[str] | None = None) -> BreakContext:
    gb = cluster.lead
    uf = gb.user_frame
    return BreakContext(
        model_id=result.spec.model_id, model_type=result.model_type, model_class=result.model_class,
        versions={"torch": result.versions.torch, "transformers": result.versions.transformers},
        gb_type=gb.gb_type, registry_id=gb.registry_id, explanation=gb.explanation, hints=list(gb.hints),
        reason=gb.reason, count=cluster.count, user_frame=uf,
        user_source=function_source(uf.filename, uf.lineno) if uf else None,
        stack=list(gb.stack), torch_source=torch_raise_site(gb.gb_type), before=describe_run(result),
        recipes_tried=list(recipes_tried or []),
    )
