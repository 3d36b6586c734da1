"""What the drafter shows a model: the break (type, registry id, explanation, hints, reason),
the whole function around every break frame in the model's call path (installed versions, with
line numbers), the matching playbook ideas, verified fixes of other clusters with the same GB id,
and the place in torch that raises the break, all inside a prompt budget a small model can read.

What the budget cuts first (README, "The fix agent"): retrieved fixes, then the torch source,
then the outer frames' functions; the break site's own function and the matching ideas stay.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ...results import RunResult, UserFrame
from ..clusters import Cluster
from ..sources import SourceNotFound, locate, package_root, upstream_path
from . import prompts

MAX_FUNCTION_LINES = 120  # beyond this, a window around the line instead of the whole function
WINDOW = 30
# ~2,500 tokens of context: a 1.5B model on 2 cores reads ~4-10 tokens/s (README, "The fix agent").
PROMPT_BUDGET_CHARS = 8_000


@dataclass
class SourceSnippet:
    path: str  # upstream path when known, else the file name
    start: int  # first line number
    end: int
    text: str
    function: str = ""  # qualified name of the enclosing function, when found
    lineno: int | None = None  # the frame's own line (the break, or the call on the way to it)


@dataclass
class Idea:
    """A playbook entry shown to the model (draft.rewrites.PlaybookEntry, as text)."""

    id: str
    idea: str
    before: str = ""
    after: str = ""


@dataclass
class Example:
    """A verified fix of another cluster with the same GB id (draft.retrieval)."""

    label: str
    diff: str


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
    sites: list[SourceSnippet]  # innermost break frame first
    stack: list[UserFrame]
    torch_source: SourceSnippet | None
    before: str
    recipes_tried: list[str] = field(default_factory=list)
    ideas: list[Idea] = field(default_factory=list)
    examples: list[Example] = field(default_factory=list)
    budget_chars: int = PROMPT_BUDGET_CHARS
    cut: list[str] = field(default_factory=list)  # filled by prompt(): what the budget left out

    @property
    def idea_ids(self) -> list[str]:
        return [i.id for i in self.ideas]

    @property
    def default_path(self) -> str | None:
        """The file a whole function without a path goes to: the break site's."""
        return self.sites[0].path if self.sites else None

    @property
    def anchor(self) -> tuple[str, int] | None:
        """(upstream path, line) of the break: picks among same-named functions."""
        return (self.sites[0].path, self.sites[0].lineno) if self.sites and self.sites[0].lineno else None

    def values(self) -> dict[str, Any]:
        site = self.sites[0] if self.sites else None
        return {
            "model_id": self.model_id, "model_type": self.model_type or "unknown",
            "model_class": self.model_class or "unknown",
            "torch_version": self.versions.get("torch", ""), "transformers_version": self.versions.get("transformers", ""),
            "gb_type": self.gb_type, "registry_id": self.registry_id or "no registry id",
            "explanation": self.explanation or "(none)", "hints": "; ".join(self.hints) or "(none)",
            "count": self.count, "recipes_tried": ", ".join(self.recipes_tried) or "none",
            "reason": self.reason, "before": self.before,
            "target_function": (site.function or (self.user_frame.function if self.user_frame else "?")) if site else "?",
        }

    def sections(self) -> list[tuple[str, str, int]]:
        """(name, text, cut order) of every optional part; a higher cut order goes first."""
        out: list[tuple[str, str, int]] = []
        for i, s in enumerate(self.sites):
            where = "where the break happens" if i == 0 else "a caller on the break's stack"
            line = ""
            if s.lineno and s.start <= s.lineno <= s.end:
                at = s.text.splitlines()[s.lineno - s.start].strip()
                line = f"\nThe {'break' if i == 0 else 'call on the way to it'} is at line {s.lineno}: `{at}`"
            # Plain source, no line numbers: a small model copies numbered lines back verbatim.
            out.append((f"frame {s.path}:{s.function}",
                        f"## {s.path}, `{s.function}` (lines {s.start}-{s.end}): {where}{line}\n"
                        f"```python\n{s.text}\n```", 0 if i == 0 else 2))
        if self.ideas:
            parts = ["## How breaks like this are fixed upstream (playbook)"]
            for k in self.ideas:
                parts.append(f"### {k.id}\n{k.idea.strip()}")
                if k.before and k.after:
                    parts.append(f"Before:\n```python\n{k.before.strip()}\n```\nAfter:\n```python\n{k.after.strip()}\n```")
            out.append(("playbook ideas", "\n".join(parts), 0))
        for e in self.examples:
            out.append((f"retrieved fix {e.label}",
                        f"## A verified fix of another model with the same break ({e.label})\n```diff\n{e.diff.strip()}\n```", 4))
        if self.torch_source:
            t = self.torch_source
            out.append(("torch source", f"## Where torch raises it: {t.path} lines {t.start}-{t.end}\n```python\n{t.text}\n```", 3))
        return out

    def prompt(self) -> str:
        """The user prompt inside `budget_chars`: optional parts are dropped, highest cut order
        first (then the later one), until it fits; what was dropped is listed in `cut`."""
        parts = self.sections()
        keep = list(range(len(parts)))
        self.cut = []

        def render() -> str:
            return prompts.render("fix_user", sections="\n\n".join(parts[i][1] for i in keep), **self.values())

        text = render()
        for i in sorted(range(len(parts)), key=lambda i: (-parts[i][2], -i)):
            if len(text) <= self.budget_chars or parts[i][2] == 0:
                continue
            keep.remove(i)
            self.cut.append(parts[i][0])
            text = render()
        return text


def function_source(filename: str, lineno: int) -> SourceSnippet | None:
    """The enclosing function of `lineno` (or a window around it when the function is long)."""
    try:
        text = Path(filename).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    lines = text.splitlines()
    start, end = max(lineno - WINDOW // 2, 1), min(lineno + WINDOW // 2, len(lines))
    name = ""
    try:
        tree = ast.parse(text)
        best = None
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= lineno <= (node.end_lineno or 0):
                if best is None or node.lineno > best.lineno:  # innermost
                    best = node
        if best is not None:
            name = _qualname(tree, best)
            first = min([d.lineno for d in best.decorator_list] + [best.lineno])
            if (best.end_lineno or first) - first + 1 <= MAX_FUNCTION_LINES:
                start, end = first, best.end_lineno or lineno
    except SyntaxError:
        pass
    return SourceSnippet(path=upstream_path(filename) or Path(filename).name, start=start, end=end,
                         text="\n".join(lines[start - 1:end]), function=name)


def _qualname(tree: ast.AST, node: ast.AST) -> str:
    """`Class.method` (or `function`) of a function node."""
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and node in cls.body:
            return f"{cls.name}.{node.name}"  # type: ignore[attr-defined]
    return node.name  # type: ignore[attr-defined]


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




def frame_sites(stack: list[UserFrame], user_frame: UserFrame | None, limit: int = 4) -> list[SourceSnippet]:
    """The function around each model-code frame of a break, innermost first, one per function:
    transformers files only (torch's own frames are the torch source's job). The stack runs
    outermost first and ends at the break; the recorded user frame can be a caller (mistral3's is
    pixtral's layer, its break is in output_capturing.py), so it only comes first without a stack."""
    frames = list(reversed(stack)) + ([user_frame] if user_frame and user_frame not in stack else [])
    out: list[SourceSnippet] = []
    for f in frames:
        up = upstream_path(f.filename)
        if not up or not up.startswith("src/transformers/"):
            continue
        try:  # this install's file (the frame may have been recorded in another venv)
            snip = function_source(str(locate(up)[1]), f.lineno)
        except SourceNotFound:
            continue
        if snip and not any(o.path == snip.path and o.start == snip.start for o in out):
            snip.lineno = f.lineno
            out.append(snip)
        if len(out) >= limit:
            break
    return out


def build_context(result: RunResult, cluster: Cluster, recipes_tried: list[str] | None = None, *,
                  ideas: list[Idea] | None = None, examples: list[Example] | None = None,
                  budget_chars: int = PROMPT_BUDGET_CHARS) -> BreakContext:
    gb = cluster.lead
    uf = gb.user_frame
    return BreakContext(
        model_id=result.spec.model_id, model_type=result.model_type, model_class=result.model_class,
        versions={"torch": result.versions.torch, "transformers": result.versions.transformers},
        gb_type=gb.gb_type, registry_id=gb.registry_id, explanation=gb.explanation, hints=list(gb.hints),
        reason=gb.reason, count=cluster.count, user_frame=uf, sites=frame_sites(list(gb.stack), uf),
        stack=list(gb.stack), torch_source=torch_raise_site(gb.gb_type), before=describe_run(result),
        recipes_tried=list(recipes_tried or []), ideas=list(ideas or []), examples=list(examples or []),
        budget_chars=budget_chars,
    )
