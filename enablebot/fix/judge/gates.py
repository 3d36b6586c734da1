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
  compile_guards     the patch makes nothing but logging run only in eager behind an
                     is-compiling check (skipping work under compile removes a break by not
                     doing the work);
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
from . import diffparse
from .diffparse import DiffParseError
from .pyspan import dotted, final_name, parents, segment, touched, touches, walk_own
from .sideeffects import registers_own_op

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
    """Added lines per upstream file: the guard's own parse (`diffparse`), never a second one.
    Raises DiffParseError for a diff that does not parse."""
    return diffparse.added_lines(diff)


def _unparsed(name: str, diff: str) -> Gate | None:
    """A failing gate for a diff that does not parse (nothing in it can be judged), else None."""
    try:
        diffparse.parse(diff)
    except DiffParseError as e:
        return Gate(name, False, f"the diff cannot be judged: {e}")
    return None


def escape_hatches(diff: str, files: Sequence[tuple[str, str, str]] = ()) -> Gate:
    """Escape hatches in the added lines and, where the patched texts are given, in each
    statement an added line belongs to (comments dropped): a hatch split over lines
    (`torch.compiler` / `.disable(f)`) is one statement, and an entry added inside an existing
    `SKIP_DIRS = [...]` belongs to that assignment. `files`: (upstream path, original, patched)."""
    try:
        parsed = diffparse.parse(diff)
    except DiffParseError as e:
        return Gate("escape_hatches", False, f"the diff cannot be judged: {e}")
    texts = {path: (original, text) for path, original, text in files}
    found: dict[tuple[str, str], str] = {}
    for fd in parsed:
        units = [ln.split("#", 1)[0] for ln in fd.added_texts]
        if fd.path in texts:
            original, patched = texts[fd.path]
            units += _statements_of(patched, diffparse.added_between(original, patched))
        for code in units:
            for rx, what in _HATCHES:
                if rx.search(code):
                    found.setdefault((what, fd.path), f"{what} in {fd.path}: {' '.join(code.split())[:100]}")
    return Gate("escape_hatches", not found, "; ".join(list(found.values())[:3]) or "no compile escape hatch added")


def _statements_of(text: str, added: frozenset[int]) -> list[str]:
    """The source (unparsed: no comments) of the innermost statement holding each added line;
    of a compound statement (`if`, `def`, ...) only its header, not the body it holds."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    stmts = [n for n in ast.walk(tree) if isinstance(n, ast.stmt)]
    out: dict[int, str] = {}
    for n in sorted(added):
        holders = [st for st in stmts if _start(st) <= n <= (st.end_lineno or st.lineno)]
        if not holders:
            continue
        st = min(holders, key=lambda x: (x.end_lineno or x.lineno) - _start(x))
        if id(st) not in out:
            out[id(st)] = ast.unparse(_header_only(st))
    return list(out.values())


def _start(stmt: ast.stmt) -> int:
    return min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])


def _header_only(stmt: ast.stmt) -> ast.stmt:
    """A copy of a compound statement with its blocks emptied (`pass`)."""
    import copy

    if not hasattr(stmt, "body"):
        return stmt
    head = copy.copy(stmt)
    head.body = [ast.Pass()]
    for field in ("orelse", "finalbody", "handlers"):
        if getattr(head, field, None):
            setattr(head, field, [] if field != "handlers" else [ast.ExceptHandler(type=None, name=None, body=[ast.Pass()])])
    return head


def _harmless_top_level(stmt: ast.stmt) -> bool:
    if registers_own_op(stmt):
        return True
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
    if (bad := _unparsed("import_effects", diff)) is not None:
        return bad
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


# --- is-compiling guards ------------------------------------------------------------------

# Calls that are true while Dynamo traces (and false in eager).
COMPILE_CHECKS = frozenset(("is_compiling", "is_dynamo_compiling", "is_torchdynamo_compiling"))
# What an is-compiling guard may skip: logging, the upstream pattern (`if not
# is_torchdynamo_compiling(): logger.warning_once(...)`): it cannot change what a run returns.
LOG_ROOTS = frozenset(("logger", "logging"))
LOG_METHODS = frozenset(("debug", "info", "info_once", "warning", "warning_once", "warning_advice", "warn", "error",
                         "exception", "critical", "fatal", "log"))
WARN_CALLS = frozenset(("warnings.warn", "warnings.warn_explicit"))
_EXITS = (ast.Return, ast.Continue, ast.Break)


def compile_guards(diff: str, files: Sequence[tuple[str, str, str]]) -> Gate:
    """Code the patch makes run only in eager, behind an is-compiling check: the branch an
    `if torch.compiler.is_compiling()` / `if not is_torchdynamo_compiling()` keeps from the
    compiled run, and the rest of the function after a compile-only `return`. Only logging
    (`logger.*`, `logging.*`, `warnings.warn`), `pass` and `raise` may be skipped: logging
    changes no value; a `raise` in eager only (data-dependent input validation, as upstream
    does) ends a bad run and changes no value a good run returns. Anything else (an
    assignment, a tensor op, a `return` of a value) is computation the compiled model skips:
    the break is gone because the work is. A new guard is judged whole; in an existing one,
    only what the patch adds. `files`: (upstream path, original, patched)."""
    if (bad := _unparsed("compile_guards", diff)) is not None:
        return bad
    found: list[str] = []
    for path, original, patched in files:
        # The added lines from the texts themselves, not from hunk headers.
        added = diffparse.added_between(original, patched)
        if added:
            found.extend(_guard_findings(path, patched, added))
    return Gate("compile_guards", not found, "; ".join(found[:3]) or "no computation skipped under compile")


def _guard_findings(path: str, text: str, added: frozenset[int]) -> list[str]:
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        return [f"{path}: the patched file does not parse ({e.msg} at line {e.lineno})"]
    parent = parents(tree)
    name = path.rsplit("/", 1)[-1]
    model_code = path.startswith("src/")
    out: list[str] = []

    def skipped(guard: ast.AST, what: ast.AST) -> None:
        out.append(f"{name}:{what.lineno}: `{segment(text, guard, 60)}` keeps `{segment(text, what, 80)}` from the "
                   "compiled run (an is-compiling guard may skip only logging, `pass` or `raise`)")

    for node in touched(tree, added):  # a guard that matters holds an added line
        if isinstance(node, (ast.If, ast.While, ast.IfExp)) and _has_check(node.test):
            new = touches(node.test, added)
            body_mode, else_mode = _polarity(node.test)
            if isinstance(node, ast.IfExp):
                for expr, mode in ((node.body, body_mode), (node.orelse, else_mode)):
                    if mode in ("eager", "unknown") and (new or touches(expr, added)) and not _plain_value(expr):
                        skipped(node, expr)
                continue
            for block, mode in ((node.body, body_mode), (node.orelse, else_mode)):
                if mode in ("eager", "unknown"):
                    for stmt in _not_logging(block, None if new else added):
                        skipped(node.test, stmt)
                if mode in ("compile", "unknown"):
                    exits = [n for st in block for n in (st, *walk_own(st)) if isinstance(n, _EXITS)]
                    if exits and (new or any(touches(x, added) for x in exits)):
                        for stmt in _not_logging(_after(node, parent), None):
                            skipped(node.test, stmt)
        elif model_code and isinstance(node, (ast.Name, ast.Attribute)) and final_name(node) in COMPILE_CHECKS \
                and touches(node, added) and not _in_test(node, parent):
            # (model code only: Dynamo's own files name these functions in its tables)
            out.append(f"{name}:{node.lineno}: `{segment(text, node, 60)}` is used outside an `if` test; call it in "
                       "the test itself so the verifier can see which branch runs only in eager")
    return out


def _is_check(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and final_name(node.func) in COMPILE_CHECKS


def _has_check(test: ast.AST) -> bool:
    return any(_is_check(n) for n in ast.walk(test))


_SWAP = {"compile": "eager", "eager": "compile", "both": "both", "unknown": "unknown"}


def _polarity(test: ast.AST) -> tuple[str, str]:
    """(when the body runs, when the else runs): "compile" (only while compiling), "eager"
    (only in eager), "both", or "unknown" (a check the gate cannot read: treated as eager)."""
    if _is_check(test):
        return "compile", "eager"
    if not _has_check(test):
        return "both", "both"
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        body, other = _polarity(test.operand)
        return _SWAP[body], _SWAP[other]
    if isinstance(test, ast.BoolOp):
        pols = [_polarity(v) for v in test.values]
        # `and`: the body needs every operand true; `or`: the else needs every operand false.
        sure = [p[0] for p in pols] if isinstance(test.op, ast.And) else [p[1] for p in pols]
        rest = [p[1] for p in pols] if isinstance(test.op, ast.And) else [p[0] for p in pols]
        one = "eager" if "eager" in sure else "compile" if "compile" in sure else \
            "unknown" if "unknown" in sure else "both"
        other = "unknown" if "unknown" in rest else "both"
        return (one, other) if isinstance(test.op, ast.And) else (other, one)
    return "unknown", "unknown"


def _not_logging(stmts: Sequence[ast.stmt], only: frozenset[int] | None) -> list[ast.stmt]:
    """The statements of an eager-only block other than logging, `pass`, `raise` and an `if`
    around those (all of them, or only those touching the lines `only`)."""
    out: list[ast.stmt] = []
    for stmt in stmts:
        if only is not None and not touches(stmt, only):
            continue
        if isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and _is_logging(stmt.value) \
                and _pure(stmt.value):
            continue
        if isinstance(stmt, ast.Raise) and _pure(stmt):
            continue
        if isinstance(stmt, ast.If) and _pure(stmt.test):
            out.extend(_not_logging(stmt.body + stmt.orelse, only))
            continue
        out.append(stmt)
    return out


def _is_logging(call: ast.Call) -> bool:
    name = dotted(call.func) or ""
    root, _, method = name.partition(".")
    return (root in LOG_ROOTS and method in LOG_METHODS) or name in WARN_CALLS


def _pure(node: ast.AST) -> bool:
    """No assignment expression, no in-place method (`x.add_(1)`), no generator step: what a
    logging call's arguments or a `raise` evaluate cannot change a value the run returns."""
    for n in ast.walk(node):
        if isinstance(n, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)):
            return False
        if isinstance(n, ast.Call):
            fn = final_name(n.func) or ""
            if (fn.endswith("_") and not fn.endswith("__")) or fn in ("setattr", "delattr", "exec", "eval"):
                return False
    return True


def _plain_value(expr: ast.AST) -> bool:
    """An eager-only expression that computes nothing: a constant, a name, an attribute."""
    return isinstance(expr, ast.Constant) or dotted(expr) is not None


def _after(node: ast.AST, parent: dict[ast.AST, ast.AST]) -> list[ast.stmt]:
    """The statements that run after `node` up to the end of its function: what a `return`
    inside `node` keeps from running."""
    out: list[ast.stmt] = []
    cur = node
    while cur in parent and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Module)):
        p = parent[cur]
        for field in ("body", "orelse", "finalbody"):
            block = getattr(p, field, None)
            if isinstance(block, list) and cur in block:
                out.extend(block[block.index(cur) + 1:])
        cur = p
    return out


def _in_test(node: ast.AST, parent: dict[ast.AST, ast.AST]) -> bool:
    """Whether a check is the function of a call inside an `if` / `while` / conditional test."""
    call = parent.get(node)
    if not (isinstance(call, ast.Call) and call.func is node):
        return False
    child, p = call, parent.get(call)
    while p is not None and not isinstance(p, ast.stmt):
        if isinstance(p, ast.IfExp) and child is p.test:
            return True
        child, p = p, parent.get(p)
    return isinstance(p, (ast.If, ast.While)) and child is p.test


def static(diff: str, files: Sequence[tuple[str, str, str]]) -> list[Gate]:
    """The gates that need no run: over the diff and the (upstream, original, patched) texts."""
    return [escape_hatches(diff, files), import_effects(diff), state_writes(files), compile_guards(diff, files)]


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
