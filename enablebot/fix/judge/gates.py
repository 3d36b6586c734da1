"""Anti-gaming gates: pure functions over the before/after results of a candidate (and its diff).

A break can be "removed" without fixing anything: by not compiling the code (disable, skip
rules, a skipped frame), by capturing much less of it, or by skipping work. The break checks
in `verify` see only break counts; these gates look at what was captured, the way PyTorch's
own `check_graph_breaks.py` gates on calls captured and fallbacks to eager as well:
  ops_captured       the ops summed over explain's graphs may not drop below `min_ratio` of before;
  graphs_nonzero     something that compiled before still compiles;
  frames_skipped     no more frames Dynamo gave up on (they run eagerly) than before;
  escape_hatches     the diff adds no compile escape hatch (disable, skip rules, suppress_errors,
                     Dynamo config writes, set_stance);
  import_effects     a patched module does no work at import time (top-level statements other
                     than definitions, imports and constant assignments);
  state_writes       patched model code stores no new state while running (cached outputs);
  samples_speed      architectures sharing the patched file are not slower (when timed);
  per_step           for multi-step scenarios (decode): every step keeps its graphs, gains no
                     break and keeps its numerics.
Each returns a `Gate`; `evaluate` runs the result-based ones.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any, Sequence

from ...results import RunResult, Serializable, Timing

# A real fix may drop a few ops (a data-dependent index replaced by a dense mask), but not a
# fifth of what was captured: disabling one layer of a tiny model already drops more.
MIN_OPS_RATIO = 0.8
# Samples are timed once (no re-measurement as for the fixed model itself), so the bar is
# looser than verify's own speed check: it is there for patches that slow others a lot.
SAMPLES_SPEED_THRESHOLD = 0.8


@dataclass
class Gate(Serializable):
    name: str
    passed: bool
    detail: str = ""


def ops_captured(before: int | None, after: int | None, min_ratio: float = MIN_OPS_RATIO) -> Gate:
    if before is None or after is None:
        return Gate("ops_captured", True, "ops captured not measured (a result from before the field existed)")
    ok = after >= before * min_ratio
    return Gate("ops_captured", ok, f"ops captured {before} -> {after}" + (
        "" if ok else f" (below {min_ratio:.0%} of before: code that was compiled no longer is)"))


def graphs_nonzero(before: int | None, after: int | None) -> Gate:
    ok = not (before and not after)
    return Gate("graphs_nonzero", ok, f"graphs {before} -> {after}" + ("" if ok else ": nothing is compiled any more"))


def frames_skipped(before: int | None, after: int | None) -> Gate:
    if before is None or after is None:
        return Gate("frames_skipped", True, "frames skipped not measured")
    ok = after <= before
    return Gate("frames_skipped", ok, f"frames Dynamo skipped (run eagerly) {before} -> {after}")


def evaluate(before: RunResult, after: RunResult, min_ops_ratio: float = MIN_OPS_RATIO) -> list[Gate]:
    """The result-based gates for one candidate run against the unpatched run of the same spec."""
    bs, as_ = before.stats, after.stats
    return [ops_captured(before.ops_captured, after.ops_captured, min_ops_ratio),
            graphs_nonzero(bs.graphs if bs else None, as_.graphs if as_ else None),
            frames_skipped(before.frames_skipped, after.frames_skipped)]


# --- the diff -------------------------------------------------------------------------------

_HATCHES = (
    (re.compile(r"\bcompiler\s*\.\s*disable\b"), "torch.compiler.disable"),
    (re.compile(r"\b_dynamo\s*\.\s*disable\b|\b_disable_dynamo\b|\bdisable_dynamo\b"), "torch._dynamo.disable"),
    (re.compile(r"\bsuppress_errors\b"), "suppress_errors"),
    (re.compile(r"\bset_stance\b"), "torch.compiler.set_stance"),
    (re.compile(r"\b(?:_dynamo|compiler)\s*\.\s*config\s*\.\s*\w+\s*=[^=]|\bconfig\s*\.\s*patch\s*\("), "a Dynamo config write"),
    (re.compile(r"\bskipfiles\b|\bSKIP_DIRS\b|\bMOD_SKIPLIST\b|\bLEGACY_MOD_INLINELIST\b|\bskip_code\b|\badd_skip\w*\("),
     "Dynamo skip rules"),
    (re.compile(r"\bSkipFrame\b|\bskip_frame\b"), "skipping the frame"),
    (re.compile(r"\btrace_rules\s*\.\s*add\s*\("), "Dynamo skip rules"),
)


def added_lines(diff: str) -> dict[str, list[str]]:
    """Added lines per upstream file of a unified diff."""
    out: dict[str, list[str]] = {}
    current = None
    for ln in diff.splitlines():
        if ln.startswith("+++ "):
            path = ln[4:].split("\t")[0].strip()
            current = path[2:] if path[:2] in ("a/", "b/") else path
            out.setdefault(current, [])
        elif ln.startswith("+") and current is not None:
            out[current].append(ln[1:])
    return out


def escape_hatches(diff: str) -> Gate:
    found = []
    for path, lines in added_lines(diff).items():
        for ln in lines:
            code = ln.split("#", 1)[0]
            for rx, what in _HATCHES:
                if rx.search(code):
                    found.append(f"{what} in {path}: {ln.strip()[:100]}")
    return Gate("escape_hatches", not found, "; ".join(found[:3]) or "no compile escape hatch added")


def _harmless_top_level(stmt: ast.stmt) -> bool:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom, ast.Pass)):
        return True
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):  # docstring
        return True
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if not all(isinstance(t, ast.Name) for t in targets):
            return False  # an attribute / item write mutates another module's state
        try:
            if stmt.value is not None:
                ast.literal_eval(stmt.value)
            return True
        except ValueError:
            # A name bound to a call at import time: allowed only for the logger idiom.
            v = stmt.value
            return isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "get_logger"
    return False


def import_effects(diff: str) -> Gate:
    """Added top-level statements that run at import time (other than defs, imports, constants)."""
    found = []
    for path, lines in added_lines(diff).items():
        block: list[str] = []
        for ln in lines + [""]:
            if ln[:1] not in ("", " ", "\t", ")", "]", "}") or (block and ln[:1] in (" ", "\t", ")", "]", "}")):
                block.append(ln)
                continue
            if block:
                found.extend(_effects(path, block))
                block = []
    return Gate("import_effects", not found, "; ".join(found[:3]) or "no import-time statement added")


def _effects(path: str, block: list[str]) -> list[str]:
    text = "\n".join(block)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        # A fragment (a decorator whose def line is context, or the added lines of several hunks
        # run together): judge each of its top-level lines on its own.
        return [f"{path}: {ln.strip()[:100]}" for ln in block
                if ln[:1] not in ("", " ", "\t", ")", "]", "}") and not _harmless_line(ln)]
    return [f"{path}: {ast.get_source_segment(text, s) or ''}"[:140] for s in tree.body if not _harmless_top_level(s)]


def _harmless_line(line: str) -> bool:
    """One top-level line of a fragment: a whole statement is judged like any other; the first
    line of a multi-line one (a decorator, `x = (`) by its form. A relative import
    (`from ...integrations import x`) is an import, not an attribute write."""
    try:
        return all(_harmless_top_level(s) for s in ast.parse(line).body)
    except SyntaxError:
        return bool(re.match(r"^(def|class|async def|import|from|@|#|\"\"\"|'''|[A-Za-z_]\w*\s*(:[^=]+)?=\s*[-\w.'\"(\[{])",
                             line)) and not re.match(r"^(?!(?:from|import)\s)[A-Za-z_]\w*\s*\.", line)


_INIT_LIKE = re.compile(r"^(__init__|__post_init__|__setstate__|_init_\w*|init_\w*|reset_\w*|post_init|setup\w*)$")


def _state_writes(text: str) -> set[tuple[str, str]]:
    """(function, target) of writes to module state outside initialisers: `self.x = ...`,
    `setattr(self, ...)`, `global x`."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    out: set[tuple[str, str]] = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or _INIT_LIKE.match(fn.name):
            continue
        for node in ast.walk(fn):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    out.add((fn.name, f"self.{t.attr}"))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                    and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "self":
                out.add((fn.name, "setattr(self, ...)"))
            if isinstance(node, ast.Global):
                out.update((fn.name, f"global {n}") for n in node.names)
    return out


def state_writes(files: Sequence[tuple[str, str, str]]) -> Gate:
    """Model code (`src/transformers/...`) that newly stores state while running (outside
    initialisers): the way outputs get cached and replayed, or a decision is made once for the
    inputs first seen. `files`: (upstream path, original text, patched text). Torch files are
    not judged: Dynamo's own methods keep state by design."""
    found = []
    for path, original, patched in files:
        if not path.startswith("src/"):
            continue
        new = sorted(_state_writes(patched) - _state_writes(original))
        found.extend(f"{path.rsplit('/', 1)[-1]}: {fn}() writes {target}" for fn, target in new)
    return Gate("state_writes", not found, "; ".join(found[:3]) or "no new state written while running")


def static(diff: str, files: Sequence[tuple[str, str, str]]) -> list[Gate]:
    """The gates that need no run: over the diff and the (upstream, original, patched) texts."""
    return [escape_hatches(diff), import_effects(diff), state_writes(files)]


# --- other architectures, multi-step scenarios ----------------------------------------------

def speed_ratio(before: Timing | None, after: Timing | None) -> float | None:
    """> 1: faster after. By speedup over eager (timed interleaved in one run, so machine load
    cancels) when both have one; else by compiled time."""
    if not (before and after and before.compiled_ms and after.compiled_ms):
        return None
    if before.speedup and after.speedup:
        return after.speedup / before.speedup
    return before.compiled_ms / after.compiled_ms


def samples_speed(pairs: Sequence[tuple[str, Timing | None, Timing | None]], threshold: float = SAMPLES_SPEED_THRESHOLD) -> Gate:
    """Other architectures importing the patched file: compiled speedup not worse than `threshold`."""
    parts, bad = [], []
    for model_id, b, a in pairs:
        r = speed_ratio(b, a)
        parts.append(f"{model_id}: {'not timed' if r is None else f'{r:.2f}'}")
        if r is not None and r < threshold:
            bad.append(model_id)
    detail = "speedup ratio " + ", ".join(parts) + (f"; slower: {', '.join(bad)}" if bad else "")
    return Gate("samples_speed", not bad, detail)


@dataclass
class StepStats(Serializable):
    """One step of a multi-step scenario (a decode step, a training step)."""
    graphs: int = 0
    graph_breaks: int = 0
    numerics_passed: bool | None = None
    recompiles: int = 0


def per_step(before: Sequence[StepStats], after: Sequence[StepStats]) -> Gate:
    """Each step on its own: a fix for step 0 that breaks (or stops compiling) step 5 fails."""
    if len(before) != len(after):
        return Gate("per_step", False, f"{len(before)} steps before, {len(after)} after")
    bad = []
    for i, (b, a) in enumerate(zip(before, after)):
        why = []
        if a.graph_breaks > b.graph_breaks:
            why.append(f"breaks {b.graph_breaks} -> {a.graph_breaks}")
        if b.graphs and not a.graphs:
            why.append("nothing compiled")
        if b.numerics_passed and a.numerics_passed is False:
            why.append("numerics now fail")
        if a.recompiles > b.recompiles:
            why.append(f"recompiles {b.recompiles} -> {a.recompiles}")
        if why:
            bad.append(f"step {i}: " + ", ".join(why))
    return Gate("per_step", not bad, "; ".join(bad) or f"{len(after)} steps, none worse")


def as_dicts(gates: list[Gate]) -> list[dict[str, Any]]:
    return [g.to_dict() for g in gates]
