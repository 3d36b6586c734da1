"""The fix playbook (enablebot/data/playbook.yaml) and its executable rewrites (codemods).

A small model cannot find or choose a graph-break fix idea (REFERENCE.md, "LLM edit formats
and fix idioms"), so the idea comes from data: a playbook entry is matched on the break's
GB id / type AND on the code at the break site, and entries with a `rewrite` name a codemod
here that turns the installed source into a candidate. The candidate is untrusted like any
LLM patch: the verifier judges it. Keys are code patterns, never model names.

Codemods locate with `ast` and edit the source of the enclosing function only (whole lines, or
the exact spans of the nodes they change), so the rest of the file stays byte-for-byte; each
result must parse and differ only inside that function.
Pure functions: the caller reads the files (a `Site` carries the installed text).
"""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

import yaml

from ...shipped import package_data

DEFAULT_PLAYBOOK = package_data("data", "playbook.yaml")


@dataclass(frozen=True)
class Site:
    """One frame of the break's user stack at the installed versions."""
    path: str  # upstream path, e.g. src/transformers/models/x/modeling_x.py
    text: str  # that installed file's full text
    lineno: int
    function: str


@dataclass
class Rewrite:
    entry: str  # playbook entry id
    path: str  # upstream path of the rewritten file
    new_text: str  # the whole rewritten file
    function: str  # qualname of the rewritten function
    note: str  # what changed, one line


@dataclass(frozen=True)
class PlaybookEntry:
    id: str
    pattern: str
    idea: str
    source: str
    gb_ids: tuple[str, ...] = ()
    gb_types: tuple[str, ...] = ()  # gb_type prefixes (breaks without a registry id, hint classes)
    before: str = ""
    after: str = ""
    rewrite: str | None = None
    site_regex: str | None = None  # for idea-only entries: the break statement's text must match
    check: str | None = None  # for idea-only entries: a predicate in CHECKS the innermost site must pass too
    caveat: str = ""

    def prompt_text(self) -> str:
        """The entry as the agent's prompt shows it: the idea with its generic example."""
        parts = [f"Fix idea `{self.id}`: {self.idea}"]
        if self.caveat:
            parts.append(f"Caveat: {self.caveat}")
        if self.before and self.after:
            parts.append(f"Before:\n{self.before.rstrip()}\nAfter:\n{self.after.rstrip()}")
        return "\n".join(parts)

    def keyed_on(self, gb_type: str, registry_id: str | None) -> bool:
        if registry_id and registry_id in self.gb_ids:
            return True
        return any(gb_type.startswith(t) for t in self.gb_types if gb_type)


class PlaybookError(ValueError):
    """playbook.yaml is malformed."""


def load_playbook(path: str | Path | None = None) -> list[PlaybookEntry]:
    raw = yaml.safe_load(Path(path or DEFAULT_PLAYBOOK).read_text(encoding="utf-8")) or {}
    out: list[PlaybookEntry] = []
    for item in raw.get("entries") or []:
        missing = {"id", "pattern", "idea", "source"} - {k for k, v in item.items() if v}
        if missing:
            raise PlaybookError(f"playbook entry {item.get('id')!r} lacks {sorted(missing)}")
        e = PlaybookEntry(id=str(item["id"]), pattern=_text(item["pattern"]), idea=_text(item["idea"]),
                          source=_text(item["source"]), gb_ids=tuple(str(g) for g in item.get("gb_ids") or ()),
                          gb_types=tuple(str(g) for g in item.get("gb_types") or ()),
                          before=str(item.get("before") or ""), after=str(item.get("after") or ""),
                          rewrite=item.get("rewrite"), site_regex=item.get("site_regex"), check=item.get("check"),
                          caveat=_text(item.get("caveat") or ""))
        if not (e.gb_ids or e.gb_types):
            raise PlaybookError(f"playbook entry {e.id!r} has neither gb_ids nor gb_types")
        if e.rewrite is not None and e.rewrite not in CODEMODS:
            raise PlaybookError(f"playbook entry {e.id!r}: no codemod named {e.rewrite!r} (have {sorted(CODEMODS)})")
        if e.check is not None and e.check not in CHECKS:
            raise PlaybookError(f"playbook entry {e.id!r}: no check named {e.check!r} (have {sorted(CHECKS)})")
        if e.rewrite is None and not e.site_regex:
            raise PlaybookError(f"playbook entry {e.id!r}: an idea-only entry needs a site_regex")
        if any(o.id == e.id for o in out):
            raise PlaybookError(f"playbook entry id {e.id!r} appears twice")
        out.append(e)
    return out


def _text(v: object) -> str:
    return " ".join(str(v).split())


def matching_entries(gb_type: str, registry_id: str | None, sites: list[Site],
                     playbook: list[PlaybookEntry]) -> list[PlaybookEntry]:
    """Entries keyed on this break whose code pattern is at the break (for the prompt): a rewrite
    entry when its codemod matches at some frame, an idea-only entry when its `site_regex`
    matches the statement of the innermost frame. `sites` are outermost first."""
    out = []
    for e in playbook:
        if not e.keyed_on(gb_type, registry_id):
            continue
        if e.rewrite is not None:
            hit = any(CODEMODS[e.rewrite](s) is not None for s in _innermost_first(sites))
        else:
            # An idea names the code at the break itself: the innermost frame, not its callers.
            rx = re.compile(e.site_regex or "", re.S)
            hit = bool(sites) and bool(rx.search(_statement_text(sites[-1])))
            hit = hit and (e.check is None or CHECKS[e.check](sites[-1]))
        if hit:
            out.append(e)
    return out


def propose(gb_type: str, registry_id: str | None, sites: list[Site],
            playbook: list[PlaybookEntry]) -> list[Rewrite]:
    """Rewrites for this break: every rewrite entry keyed on it, at every site it matches,
    innermost frame first; one candidate per distinct rewritten file."""
    out: list[Rewrite] = []
    seen: set[tuple[str, str]] = set()
    for site in _innermost_first(sites):
        for e in playbook:
            if e.rewrite is None or not e.keyed_on(gb_type, registry_id):
                continue
            edit = CODEMODS[e.rewrite](site)
            if edit is None or (site.path, edit.new_text) in seen:
                continue
            seen.add((site.path, edit.new_text))
            out.append(Rewrite(entry=e.id, path=site.path, new_text=edit.new_text, function=edit.function,
                               note=edit.note))
    return out


def rewrite_diff(rewrite: Rewrite, old_text: str) -> str:
    """The rewrite as a unified diff with a/ b/ upstream paths: what patchguard.check_patch and
    overlay.build_overlay take, like an LLM candidate (`old_text` is the site's `text`)."""
    from .edits import to_unified_diff

    return to_unified_diff({rewrite.path: old_text}, {rewrite.path: rewrite.new_text})


def _innermost_first(sites: list[Site]) -> list[Site]:
    return list(reversed(sites))


# --- locating -------------------------------------------------------------------------------

@lru_cache(maxsize=16)
def _parse(text: str) -> ast.Module | None:
    """Parsed once per file text: a stack has many frames in the same file, each tried by every
    codemod (callers never mutate the tree; codemods rebuild what they change)."""
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


@dataclass
class Edit:
    new_text: str
    function: str
    note: str


@dataclass
class _Located:
    tree: ast.Module
    func: ast.FunctionDef | ast.AsyncFunctionDef
    qualname: str
    stmt: ast.stmt | None  # the innermost statement whose lines hold the break line
    lines: list[str] = field(default_factory=list)  # the file's lines, with their endings


def _locate(site: Site) -> _Located | None:
    tree = _parse(site.text)
    if tree is None:
        return None
    best: tuple[ast.AST, str] | None = None

    def walk(node: ast.AST, prefix: str) -> None:
        nonlocal best
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{child.name}" if prefix else child.name
                if isinstance(child, ast.ClassDef):
                    walk(child, name)
                elif child.lineno <= site.lineno <= (child.end_lineno or child.lineno):
                    best = (child, name)
                    walk(child, name + ".<locals>")
            else:
                walk(child, prefix)

    walk(tree, "")
    if best is None:
        return None
    func, qualname = best
    stmt = None
    for node in ast.walk(func):
        if isinstance(node, ast.stmt) and node is not func and node.lineno <= site.lineno <= (node.end_lineno or 0):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if stmt is None or (node.lineno, -(node.end_lineno or 0)) >= (stmt.lineno, -(stmt.end_lineno or 0)):
                stmt = node
    return _Located(tree=tree, func=func, qualname=qualname, stmt=stmt, lines=site.text.splitlines(keepends=True))


def _statement_text(site: Site) -> str:
    loc = _locate(site)
    if loc is None or loc.stmt is None:
        lines = site.text.splitlines()
        return lines[site.lineno - 1] if 0 < site.lineno <= len(lines) else ""
    return "".join(loc.lines[loc.stmt.lineno - 1:_head_end(loc.stmt)])


def _head_end(stmt: ast.stmt) -> int:
    """Last line of a statement's own text (a compound statement's header only)."""
    if isinstance(stmt, (ast.If, ast.While)):
        return stmt.test.end_lineno or stmt.lineno
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return stmt.iter.end_lineno or stmt.lineno
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return stmt.items[-1].context_expr.end_lineno or stmt.lineno
    return stmt.end_lineno or stmt.lineno


def _module_names(tree: ast.Module) -> set[str]:
    """Names bound by module-level imports (`import torch`, `from ...utils import x as y`)."""
    names: set[str] = set()
    todo: list[ast.AST] = list(tree.body)
    while todo:  # module level, inside `if` / `try` blocks too, not inside functions or classes
        node = todo.pop()
        if isinstance(node, (ast.If, ast.Try)):
            todo.extend(node.body + node.orelse + getattr(node, "finalbody", [])
                        + [s for h in getattr(node, "handlers", []) for s in h.body])
        elif isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return names


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _eol(lines: list[str]) -> str:
    return "\r\n" if lines and lines[0].endswith("\r\n") else "\n"


def _splice(loc: _Located, start: int, end: int, new: list[str]) -> str:
    """Replace lines start..end (1-based, inclusive) by `new` (lines without endings)."""
    eol = _eol(loc.lines)
    return "".join(loc.lines[: start - 1] + [ln + eol for ln in new] + loc.lines[end:])


def _checked(loc: _Located, new_text: str, note: str) -> Edit | None:
    """The edit, if the new file parses and differs from the old only inside the function."""
    try:
        new_tree = ast.parse(new_text)
    except SyntaxError:
        return None
    old_lines, new_lines = loc.lines, new_text.splitlines(keepends=True)
    first = min([d.lineno for d in loc.func.decorator_list] + [loc.func.lineno])
    tail = len(old_lines) - (loc.func.end_lineno or first)
    if old_lines[: first - 1] != new_lines[: first - 1] or (tail and old_lines[-tail:] != new_lines[-tail:]):
        return None
    if ast.dump(new_tree) == ast.dump(loc.tree):
        return None
    return Edit(new_text=new_text, function=loc.qualname, note=note)


def _same(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a, include_attributes=False) == ast.dump(b, include_attributes=False)


# --- guard-logging ----------------------------------------------------------------------------

_LOG_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "log", "warning_once",
                "info_once", "warning_advice"}


def _is_logging_call(call: ast.expr) -> bool:
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        return False
    base, attr = call.func.value, call.func.attr
    if not isinstance(base, ast.Name):
        return False
    if base.id == "warnings":
        return attr == "warn"
    return (base.id == "logging" or base.id.lower().endswith("logger")) and attr in _LOG_METHODS


def guard_logging(site: Site) -> Edit | None:
    """`logger.warning_once(...)` at the break -> under `if not <is compiling>():` (logging only)."""
    loc = _locate(site)
    if loc is None or not isinstance(loc.stmt, ast.Expr) or not _is_logging_call(loc.stmt.value):
        return None
    names = _module_names(loc.tree)
    # transformers' own idiom first (qwen2_audio guards its warning with it), else torch's.
    if "is_torchdynamo_compiling" in names:
        guard = "is_torchdynamo_compiling()"
    elif "torch" in names:
        guard = "torch.compiler.is_compiling()"
    else:
        return None
    stmt = loc.stmt
    body = [ln.rstrip("\r\n") for ln in loc.lines[stmt.lineno - 1: stmt.end_lineno]]
    indent = _indent_of(body[0])
    if not body[0].startswith(indent) or len(indent) != stmt.col_offset:
        return None  # the statement shares its line with another one
    new = [f"{indent}if not {guard}:"] + [("    " + ln) if ln.strip() else ln for ln in body]
    text = _splice(loc, stmt.lineno, stmt.end_lineno or stmt.lineno, new)
    # Indenting a multi-line string literal would change the message: the call must be unchanged.
    try:
        inner = _find_stmt_at(ast.parse(text), stmt.lineno + 1)
    except SyntaxError:
        return None
    if inner is None or not _same(inner, stmt):
        return None
    call = stmt.value.func  # type: ignore[union-attr]
    return _checked(loc, text, f"{ast.unparse(call)}(...) runs only when not compiling ({guard})")


def _find_stmt_at(tree: ast.Module, lineno: int) -> ast.stmt | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and node.lineno == lineno:
            return node
    return None


# --- check-not-raise --------------------------------------------------------------------------

_INVERSE = {ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}


def _negated(test: ast.expr) -> ast.expr | None:
    """`not test` without a Python `not` on a tensor (which would break the graph itself)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _INVERSE:
        return ast.Compare(left=test.left, ops=[_INVERSE[type(test.ops[0])]()], comparators=test.comparators)
    if _is_tensor_truth(test):  # x.any() is a tensor: negate it as one
        return ast.parse(f"torch.logical_not({ast.unparse(test)})", mode="eval").body
    return None


def check_not_raise(site: Site) -> Edit | None:
    """`if <cond>: raise E(msg)` breaking at the `if` -> a check Dynamo traces as an assertion."""
    loc = _locate(site)
    if loc is None or not isinstance(loc.stmt, ast.If):
        return None
    stmt = loc.stmt
    if not (stmt.test.lineno <= site.lineno <= (stmt.test.end_lineno or stmt.lineno)) or stmt.orelse:
        return None
    if len(stmt.body) != 1 or not isinstance(stmt.body[0], ast.Raise):
        return None
    exc = stmt.body[0].exc
    if isinstance(exc, ast.Call) and isinstance(exc.func, ast.Name) and len(exc.args) <= 1 and not exc.keywords:
        etype, msg = exc.func.id, (exc.args[0] if exc.args else ast.Constant(""))
    else:
        return None
    cond = _negated(stmt.test)
    if cond is None:
        return None
    indent = _indent_of(loc.lines[stmt.lineno - 1])
    if "torch_compilable_check" in _module_names(loc.tree):
        # transformers.utils.import_utils: torch._check / _check_tensor_all under tracing, the message eagerly.
        call = f"torch_compilable_check({ast.unparse(cond)}, {ast.unparse(msg)}, error_type={etype})"
    elif isinstance(msg, ast.Constant) and "torch" in _module_names(loc.tree):
        # A message closure over tensors cannot be traced; a constant one can.
        call = f"torch._check_tensor_all_with({etype}, torch.as_tensor({ast.unparse(cond)}), lambda: {msg.value!r})"
    else:
        return None
    text = _splice(loc, stmt.lineno, stmt.end_lineno or stmt.lineno, [indent + call])
    return _checked(loc, text, f"`if {ast.unparse(stmt.test)}: raise {etype}` -> a traced check of the negation")


# --- branch-to-where ------------------------------------------------------------------------

_TENSOR_REDUCTIONS = {"any", "all"}


def _is_tensor_truth(expr: ast.expr) -> bool:
    """`x.any()` / `torch.isfinite(x).all()` / `torch.any(x)`, optionally under `not`: the truth
    of a whole-tensor reduction, which Dynamo can only branch on by breaking the graph."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        expr = expr.operand
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)
            and expr.func.attr in _TENSOR_REDUCTIONS):
        return False
    if _is_name(expr.func.value, "torch"):
        return len(expr.args) == 1 and not expr.keywords
    return not expr.args and not expr.keywords


def _bound_before(func: ast.FunctionDef | ast.AsyncFunctionDef, name: str, lineno: int) -> bool:
    a = func.args
    if name in {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs} | {x.arg for x in (a.vararg, a.kwarg) if x}:
        return True
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id == name and node.lineno < lineno:
            return True
    return False


def _read_after(func: ast.FunctionDef | ast.AsyncFunctionDef, name: str, lineno: int) -> bool:
    return any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id == name and n.lineno > lineno
               for n in ast.walk(func))


def _if_at_its_test(site: Site) -> _Located | None:
    """The site when it is an `if` without `else` that breaks in its test."""
    loc = _locate(site)
    if loc is None or not isinstance(loc.stmt, ast.If) or loc.stmt.orelse:
        return None
    test = loc.stmt.test
    return loc if test.lineno <= site.lineno <= (test.end_lineno or test.lineno) else None


def branch_to_where(site: Site) -> Edit | None:
    """`if <tensor>.all()/.any(): x = f(x)` -> compute f(x) and select with torch.where (both
    branches are computed, the result is the one the branch would give)."""
    loc = _if_at_its_test(site)
    if loc is None:
        return None
    stmt, func = loc.stmt, loc.func
    if not _is_tensor_truth(stmt.test):
        return None
    if "torch" not in _module_names(loc.tree):
        return None
    body: list[ast.Assign] = []
    for s in stmt.body:
        if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)):
            return None
        # In-place methods would run on the untaken branch too: refuse them.
        if any(isinstance(n, ast.Attribute) and n.attr.endswith("_") and not n.attr.startswith("_")
               for n in ast.walk(s.value)):
            return None
        body.append(s)
    used = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)}
    flag = next(f"{base}{i or ''}" for base in ("take_branch",) for i in range(100) if f"{base}{i or ''}" not in used)
    test = stmt.test
    cond = (f"torch.logical_not({ast.unparse(test.operand)})" if isinstance(test, ast.UnaryOp) else ast.unparse(test))
    indent = _indent_of(loc.lines[stmt.lineno - 1])
    new = [f"{indent}{flag} = {cond}"]
    selected = []
    for s in body:
        name = s.targets[0].id  # type: ignore[attr-defined]
        if _bound_before(func, name, stmt.lineno):
            if not isinstance(s.value, ast.Call):
                return None  # only a tensor-valued call is selected elementwise; a Python value is not
            new.append(f"{indent}{name} = torch.where({flag}, {ast.unparse(s.value)}, {name})")
            selected.append(name)
        elif _read_after(func, name, stmt.end_lineno or stmt.lineno):
            return None  # defined only on the branch and read later: no value to select on the other side
        else:
            new.append(f"{indent}{name} = {ast.unparse(s.value)}")
    if not selected:
        return None
    text = _splice(loc, stmt.lineno, stmt.end_lineno or stmt.lineno, new)
    return _checked(loc, text, f"the data-dependent `if {ast.unparse(test)}` selects {', '.join(selected)} "
                               "with torch.where instead of branching")


# --- general-path-when-compiling -------------------------------------------------------------

_COMPILING = "torch.compiler.is_compiling()"


def _guard_truths(test: ast.expr, guarded: list[str]) -> ast.expr:
    """Each whole-tensor truth reachable through `and`/`or` only (never under a `not` of a larger
    expression, where False would flip the outcome) -> `(not compiling and <truth>)`."""
    if _is_tensor_truth(test):
        guarded.append(ast.unparse(test))
        return ast.BoolOp(op=ast.And(), values=[ast.parse(f"not {_COMPILING}", mode="eval").body, test])
    if isinstance(test, ast.BoolOp):
        test.values = [_guard_truths(v, guarded) for v in test.values]
    return test


def general_path_when_compiling(site: Site) -> Edit | None:
    """`if ... torch.all(mask == 1) ...: mask = None` (a shortcut that drops an optional tensor when
    it would be a no-op) -> the tensor test is skipped while compiling, so compiled code always keeps
    the tensor and takes the general path; eager keeps the shortcut. Only the dropping of values
    bound before is accepted as a body: anything else is not a shortcut."""
    loc = _if_at_its_test(site)
    if loc is None:
        return None
    stmt, func = loc.stmt, loc.func
    if not _drops_only(stmt, func):
        return None
    if "torch" not in _module_names(loc.tree) or _COMPILING in ast.unparse(stmt.test):
        return None
    if past_tokens_from_mask_length(site) is not None:
        return None  # the same condition also branches on `position[0] > 0`: that codemod rewrites both parts
    guarded: list[str] = []
    test = _guard_truths(copy.deepcopy(stmt.test), guarded)
    if not guarded:
        return None
    indent = _indent_of(loc.lines[stmt.lineno - 1])
    text = _splice(loc, stmt.lineno, stmt.body[0].lineno - 1, [f"{indent}if {ast.unparse(test)}:"])
    dropped = ", ".join(s.targets[0].id for s in stmt.body)  # type: ignore[attr-defined]
    return _checked(loc, text, f"the shortcut `{dropped} = None` on `{'`, `'.join(guarded)}` is skipped while "
                               "compiling: compiled code keeps the general path")


def _drops_only(stmt: ast.If, func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """The `if`'s body only sets names bound before it to None (a shortcut that drops a value)."""
    return bool(stmt.body) and all(
        isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
        and isinstance(s.value, ast.Constant) and s.value.value is None
        and _bound_before(func, s.targets[0].id, stmt.lineno) for s in stmt.body)


# --- past-tokens-from-mask-length ------------------------------------------------------------

def _params(func: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    a = func.args
    return {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}


def _stores_before(func: ast.AST, name: str, lineno: int) -> list[ast.AST]:
    """The statements that bind `name` before line `lineno` (assignments, loop targets, ...)."""
    out = []
    for node in ast.walk(func):
        if isinstance(node, ast.stmt) and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                ast.ClassDef)) and node.lineno < lineno:
            targets = (node.targets if isinstance(node, ast.Assign) else
                       [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)) else
                       [i.optional_vars for i in node.items if i.optional_vars] if isinstance(node, (ast.With, ast.AsyncWith))
                       else [])
            if any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t)):
                out.append(node)
        elif isinstance(node, ast.NamedExpr) and node.target.id == name and node.lineno < lineno:
            out.append(node)
    return out


def _is_past_test(node: ast.AST, params: set[str]) -> str | None:
    """`P[0] > 0` (or `0 < P[0]`) on a parameter P: "the first position of this forward is past 0", i.e. there
    are cached tokens before it. A Python `if` on it is a data-dependent branch. Returns P."""
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1):
        return None
    left, op, right = node.left, node.ops[0], node.comparators[0]
    if isinstance(op, ast.Lt):
        left, right, op = right, left, ast.Gt()
    if not (isinstance(op, ast.Gt) and isinstance(right, ast.Constant) and right.value == 0
            and not isinstance(right.value, bool)):
        return None
    if (isinstance(left, ast.Subscript) and isinstance(left.value, ast.Name) and left.value.id in params
            and isinstance(left.slice, ast.Constant) and left.slice.value == 0 and not isinstance(left.slice.value, bool)):
        return left.value.id
    return None


class _PastToShapes(ast.NodeTransformer):
    """`P[0] > 0` -> `(M is not None and M.shape[-1] > P.shape[0])`: the 2-D padding mask spans the cached
    and the current tokens, P the current ones, so the mask is longer exactly when tokens are cached."""

    def __init__(self, params: set[str], mask: str):
        self.params, self.mask, self.positions, self.seen = params, mask, set(), []

    def visit_Compare(self, node: ast.Compare):
        p = _is_past_test(node, self.params)
        if p is None:
            return self.generic_visit(node)
        self.positions.add(p)
        self.seen.append(ast.unparse(node))
        src = f"({self.mask} is not None and {self.mask}.shape[-1] > {p}.shape[0])"
        return ast.copy_location(ast.parse(src, mode="eval").body, node)


def past_tokens_from_mask_length(site: Site) -> Edit | None:
    """`m = mask; if pos[0] > 0 or (mask is not None and torch.all(mask == 1)): m = None` (a recurrent layer's
    padding-mask helper: no mask when decoding from a cache, none when nothing is padded) -> the "tokens
    are cached" test read from shapes (`mask.shape[-1] > pos.shape[0]`: the 2-D mask covers the cached and
    the current tokens, `pos` the current ones), and the all-ones shortcut skipped while compiling
    (compiled code keeps an all-ones mask, which multiplies by one). Only when every name the body drops
    is bound to that mask parameter just before: then a missing mask (None) takes the branch to no effect
    either way, so the rewritten test may differ from the original only where nothing changes."""
    loc = _if_at_its_test(site)
    if loc is None:
        return None
    stmt, func = loc.stmt, loc.func
    if not _drops_only(stmt, func) or "torch" not in _module_names(loc.tree):
        return None
    params = _params(func)
    mask: str | None = None
    for s in stmt.body:
        name = s.targets[0].id  # type: ignore[attr-defined]
        stores = _stores_before(func, name, stmt.lineno)
        if name in params or len(stores) != 1:
            return None
        bind = stores[0]
        if not (isinstance(bind, ast.Assign) and len(bind.targets) == 1 and isinstance(bind.value, ast.Name)
                and bind.value.id in params and _parent_body(func, bind) is func.body):
            return None  # bound once, at the function's top level, to a parameter (the mask as given)
        if mask not in (None, bind.value.id):
            return None
        mask = bind.value.id
    if mask is None or _stores_before(func, mask, stmt.lineno):
        return None  # the mask parameter is rebound before the test
    if any(_is_past_test(n, params) == mask for n in ast.walk(stmt.test)):
        return None  # the mask's own first value, not a position
    swap = _PastToShapes(params, mask)
    test = swap.visit(copy.deepcopy(stmt.test))
    if not swap.seen or any(_stores_before(func, p, stmt.lineno) for p in swap.positions):
        return None
    guarded: list[str] = []
    if _COMPILING not in ast.unparse(test):
        test = _guard_truths(test, guarded)
    indent = _indent_of(loc.lines[stmt.lineno - 1])
    text = _splice(loc, stmt.lineno, stmt.body[0].lineno - 1, [f"{indent}if {ast.unparse(test)}:"])
    note = (f"`{'`, `'.join(swap.seen)}` (cached tokens?) read from shapes: `{mask}.shape[-1] > "
            f"{'/'.join(sorted(swap.positions))}.shape[0]`")
    if guarded:
        note += f"; the all-ones shortcut on `{'`, `'.join(guarded)}` is skipped while compiling"
    return _checked(loc, text, note)


# --- dense-segment-loop ----------------------------------------------------------------------

def _is_call(node: ast.AST, dotted_name: str) -> bool:
    return isinstance(node, ast.Call) and ast.unparse(node.func) == dotted_name


def _tolist_of(node: ast.AST) -> str | None:
    """`name.tolist()` -> name"""
    if (isinstance(node, ast.Call) and not node.args and not node.keywords and isinstance(node.func, ast.Attribute)
            and node.func.attr == "tolist" and isinstance(node.func.value, ast.Name)):
        return node.func.value.id
    return None


def _is_slice(node: ast.AST, lo: str, hi: str) -> bool:
    """`<x>[lo:hi]`"""
    return (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice) and node.slice.step is None
            and _is_name(node.slice.lower, lo) and _is_name(node.slice.upper, hi))


def dense_segment_loop(site: Site) -> Edit | None:
    """`ids, counts = torch.unique_consecutive(idx, return_counts=True); start = 0;
    for e, n in zip(ids.tolist(), counts.tolist()): end = start + n; out[start:end] = mods[e](x[start:end]);
    start = end` (rows grouped in runs of one module index, each run through its module) -> a static loop over
    every module, each applied to all rows, its output selected where `idx == e`. Every row of a run has
    `idx == e`, so the selection equals the runs whatever their order; row-wise modules (an expert MLP) give
    the same rows on all rows as on the run. The verifier's numerics decide the rest."""
    loc = _locate(site)
    if loc is None or "torch" not in _module_names(loc.tree):
        return None
    func = loc.func
    for node in ast.walk(func):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for i in range(len(body) - 2):
            edit = _segment_loop_at(loc, body, i, site.lineno)
            if edit is not None:
                return edit
    return None


def _is_dotted(node: ast.AST) -> bool:
    """`self` / `self.experts`: a name or an attribute chain on one."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _segment_loop_at(loc: _Located, body: list[ast.stmt], i: int, lineno: int) -> Edit | None:
    uq, st, loop = body[i], body[i + 1], body[i + 2]
    if not (uq.lineno <= lineno <= (loop.end_lineno or 0)):
        return None
    # ids, counts = torch.unique_consecutive(idx, return_counts=True)
    if not (isinstance(uq, ast.Assign) and len(uq.targets) == 1 and isinstance(uq.targets[0], ast.Tuple)
            and len(uq.targets[0].elts) == 2 and all(isinstance(t, ast.Name) for t in uq.targets[0].elts)
            and _is_call(uq.value, "torch.unique_consecutive") and len(uq.value.args) == 1
            and isinstance(uq.value.args[0], ast.Name)
            and [(k.arg, getattr(k.value, "value", None)) for k in uq.value.keywords] == [("return_counts", True)]):
        return None
    ids, counts = (t.id for t in uq.targets[0].elts)  # type: ignore[attr-defined]
    idx = uq.value.args[0].id
    # start = 0
    if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
            and isinstance(st.value, ast.Constant) and st.value.value == 0 and not isinstance(st.value.value, bool)):
        return None
    start = st.targets[0].id
    # for e, n in zip(ids.tolist(), counts.tolist()):
    if not (isinstance(loop, ast.For) and not loop.orelse and isinstance(loop.target, ast.Tuple)
            and len(loop.target.elts) == 2 and all(isinstance(t, ast.Name) for t in loop.target.elts)
            and _is_call(loop.iter, "zip") and len(loop.iter.args) == 2 and not loop.iter.keywords
            and [_tolist_of(a) for a in loop.iter.args] == [ids, counts]):
        return None
    e, n = (t.id for t in loop.target.elts)  # type: ignore[attr-defined]
    stmts = list(loop.body)
    # optional: if n == 0: continue
    if (stmts and isinstance(stmts[0], ast.If) and not stmts[0].orelse and len(stmts[0].body) == 1
            and isinstance(stmts[0].body[0], ast.Continue) and _same(stmts[0].test, ast.parse(f"{n} == 0", mode="eval").body)):
        stmts = stmts[1:]
    end = None
    local: dict[str, ast.expr] = {}  # names bound in the body to a slice of the rows
    call: ast.Call | None = None
    out = mods = x = y = None
    for k, s in enumerate(stmts):
        if k == 0:  # end = start + n
            if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                    and _same(s.value, ast.parse(f"{start} + {n}", mode="eval").body)):
                return None
            end = s.targets[0].id
        elif k == len(stmts) - 1:  # start = end
            if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and _is_name(s.targets[0], start)
                    and _is_name(s.value, end)):
                return None
        elif (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Subscript)
              and _is_slice(s.targets[0], start, end) and isinstance(s.targets[0].value, ast.Name) and out is None):
            out = s.targets[0].value.id  # out[start:end] = y
            if not isinstance(s.value, ast.Name) or s.value.id != y:
                return None
        elif isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            v, name = s.value, s.targets[0].id
            if _is_slice(v, start, end) and isinstance(v.value, ast.Name) and x is None:  # xs = x[start:end]
                local[name], x = v, v.value.id
            elif (isinstance(v, ast.Call) and call is None and len(v.args) == 1 and not v.keywords
                  and isinstance(v.func, ast.Subscript) and _is_name(v.func.slice, e)
                  and _is_dotted(v.func.value)):
                arg = v.args[0]  # y = mods[e](xs) or mods[e](x[start:end])
                if isinstance(arg, ast.Name) and arg.id in local:
                    pass
                elif _is_slice(arg, start, end) and isinstance(arg.value, ast.Name) and x is None:
                    x = arg.value.id
                else:
                    return None
                call, mods, y = v, ast.unparse(v.func.value), name
            else:
                return None
        else:
            return None
    if None in (end, out, mods, x, y, call):
        return None
    func = loc.func
    after = loop.end_lineno or loop.lineno
    # The loop's own names are not read after it; nothing it reads is rebound in it.
    for name in {ids, counts, start, end, e, n, y, *local}:
        if _read_after(func, name, after):
            return None
    for name in (idx, x, out):
        if any(isinstance(t, ast.Name) and t.id == name and isinstance(t.ctx, ast.Store)
               for t in ast.walk(loop)):
            return None
    indent = _indent_of(loc.lines[uq.lineno - 1])
    inner = indent + "    "
    new = [f"{indent}for {e} in range(len({mods})):",
           f"{inner}{y} = {mods}[{e}]({x})",
           f"{inner}{out} = torch.where(({idx} == {e}).reshape((-1,) + (1,) * ({out}.dim() - 1)), "
           f"{y}.to({out}.dtype), {out})"]
    text = _splice(loc, uq.lineno, after, new)
    return _checked(loc, text, f"a static loop over every module of `{mods}`, each on all rows, selected where "
                               f"`{idx} == {e}`, instead of the runs of `torch.unique_consecutive({idx})`")


# --- dense-experts ----------------------------------------------------------------------------

def _calls_nonzero(expr: ast.expr) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "nonzero"
               for n in ast.walk(expr))


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _is_index0(node: ast.AST, name: str) -> bool:
    """`name[0]`"""
    return (isinstance(node, ast.Subscript) and _is_name(node.value, name) and isinstance(node.slice, ast.Constant)
            and node.slice.value == 0)


class _Dense(ast.NodeTransformer):
    """The loop body over hit experts -> the body for one expert applied to every token."""

    def __init__(self, loop_var: str):
        self.e = loop_var
        self.scalar = False  # after `e = e[0]` the loop variable is a scalar index
        self.mask: str | None = None
        self.pos: str | None = None  # the top-k position variable of torch.where
        self.tok: str | None = None  # the token index variable of torch.where
        self.weighted = 0
        self.fail = ""
        self.edits: list[tuple[str, ast.AST, str]] = []  # (replace | delete, original node, new source)

    def _mask_of(self, arg: ast.expr) -> str | None:
        # expert_mask[e] (scalar e) or expert_mask[e].squeeze(0) (one-element e)
        if (not self.scalar and isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute)
                and arg.func.attr == "squeeze" and len(arg.args) == 1 and isinstance(arg.args[0], ast.Constant)
                and arg.args[0].value == 0 and not arg.keywords):
            arg = arg.func.value
        elif not self.scalar:
            return None
        if isinstance(arg, ast.Subscript) and isinstance(arg.value, ast.Name) and _is_name(arg.slice, self.e):
            return arg.value.id
        return None

    def visit_Assign(self, node: ast.Assign):
        if len(node.targets) == 1 and _is_name(node.targets[0], self.e) and _is_index0(node.value, self.e):
            if self.scalar:
                self.fail = "the loop variable is indexed twice"
            self.scalar = True
            self.edits.append(("delete", node, ""))
            return None  # `e = e[0]`: the loop now yields the index itself
        v = node.value
        if (self.mask is None and len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple)
                and len(node.targets[0].elts) == 2 and all(isinstance(t, ast.Name) for t in node.targets[0].elts)
                and isinstance(v, ast.Call) and ast.unparse(v.func) == "torch.where" and len(v.args) == 1
                and not v.keywords):
            mask = self._mask_of(v.args[0])
            if mask is not None:
                self.mask, self.pos, self.tok = mask, node.targets[0].elts[0].id, node.targets[0].elts[1].id
                src = f"{self.tok} = torch.arange({mask}.shape[-1], device={mask}.device)"
                self.edits.append(("replace", node, src))
                return ast.copy_location(ast.parse(src).body[0], node)
        return self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript):
        if _is_index0(node, self.e):
            if self.scalar:
                self.fail = "the scalar loop variable is indexed"
            self.edits.append(("replace", node, self.e))
            return ast.copy_location(ast.Name(id=self.e, ctx=ast.Load()), node)
        sl = node.slice
        if (self.tok and isinstance(sl, ast.Tuple) and len(sl.elts) in (2, 3) and _is_name(sl.elts[0], self.tok)
                and _is_name(sl.elts[1], self.pos)
                and (len(sl.elts) == 2 or (isinstance(sl.elts[2], ast.Constant) and sl.elts[2].value is None))):
            w = ast.unparse(node.value)
            # Dense per-token weight of this expert: sum over the top-k slots that chose it.
            dense = f"({w} * {self.mask}[{self.e}].transpose(0, 1).to({w}.dtype)).sum(dim=-1)"
            if len(sl.elts) == 3:
                dense += "[:, None]"
            self.weighted += 1
            self.edits.append(("replace", node, dense))
            return ast.copy_location(ast.parse(dense, mode="eval").body, node)
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call):
        # expert_mask[e].squeeze(0) outside torch.where (one-element e): the squeeze goes with the index.
        if (not self.scalar and isinstance(node.func, ast.Attribute) and node.func.attr == "squeeze"
                and self._mask_of(node) is not None):
            self.fail = "the mask is squeezed outside torch.where"
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name):
        if node.id == self.pos and isinstance(node.ctx, ast.Load):
            self.fail = f"the top-k position {self.pos!r} is used outside the routing-weight index"
        elif node.id == self.e and isinstance(node.ctx, ast.Load) and not self.scalar:
            self.fail = f"the one-element loop variable {self.e!r} is used as a tensor"
        return node


def dense_experts(site: Site) -> Edit | None:
    """`for e in <mask>.nonzero(): torch.where(mask[e]) ... index_add_` -> a static loop over
    every expert, each applied to all tokens with its dense routing weight (zero where unrouted)."""
    loc = _locate(site)
    if loc is None:
        return None
    func = loc.func
    hits = {}
    for node in ast.walk(func):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and _calls_nonzero(node.value)):
            hits[node.targets[0].id] = node
    loop = next((n for n in ast.walk(func) if isinstance(n, ast.For) and isinstance(n.iter, ast.Name)
                 and n.iter.id in hits and isinstance(n.target, ast.Name) and not n.orelse), None)
    if loop is None:
        return None
    hit = hits[loop.iter.id]  # type: ignore[union-attr]
    in_loop = loop.lineno <= site.lineno <= (loop.end_lineno or 0)
    if not (in_loop or hit.lineno <= site.lineno <= (hit.end_lineno or hit.lineno)):
        return None
    if any(_is_name(n, loop.iter.id) for n in ast.walk(func)  # type: ignore[union-attr]
           if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n is not loop.iter):
        return None  # the hit list is used elsewhere
    dense = _Dense(loop.target.id)  # type: ignore[union-attr]
    copied = copy.deepcopy(loop)  # the cached tree is never mutated; positions are kept
    new_body = [s for s in (dense.visit(s) for s in copied.body) if s is not None]
    if dense.fail or dense.mask is None or dense.weighted == 0 or not new_body:
        return None
    mask = dense.mask
    bound = f"range({_num_experts(func, mask)})"
    new_loop = ast.For(target=ast.Name(id=dense.e, ctx=ast.Store()), iter=ast.parse(bound, mode="eval").body,
                       body=new_body, orelse=[])
    ast.fix_missing_locations(new_loop)
    parent_body = _parent_body(func, hit)
    sole = parent_body is not None and len(parent_body) == 1
    edits = dense.edits + [("replace", loop.iter, bound), ("pass" if sole else "delete", hit, "")]
    text = _apply_spans(loc.lines, edits)
    if text is None:
        return None
    edit = _checked(loc, text, f"static loop over all experts ({bound}) with dense routing weights "
                               f"instead of `{ast.unparse(hit.value)}`")
    if edit is None:
        return None
    # The loop as written must be the loop as built: the span edits changed exactly what the
    # AST transformation did (comments and untouched lines stay as they were).
    new_tree = ast.parse(text)
    if not any(isinstance(n, ast.For) and _same(n, new_loop) for n in ast.walk(new_tree)):
        return None
    return edit


def _apply_spans(lines: list[str], edits: list[tuple[str, ast.AST, str]]) -> str | None:
    """Apply (replace | delete | pass, node, source) edits at the nodes' exact source spans.
    `delete` removes a statement's whole lines and the comment lines right above it (they
    describe it); `pass` replaces a statement that is alone in its block. Works on UTF-8 bytes,
    the unit of ast's column offsets. None when edits overlap or a statement shares its lines."""
    raw = [ln.encode("utf-8") for ln in lines]
    starts = [0]
    for ln in raw:
        starts.append(starts[-1] + len(ln))
    data = b"".join(raw)
    spans: list[tuple[int, int, bytes]] = []
    for kind, node, src in edits:
        lo = starts[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]
        hi = starts[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]
        if kind == "replace":
            spans.append((lo, hi, src.encode("utf-8")))
            continue
        first, last = node.lineno - 1, node.end_lineno - 1  # type: ignore[attr-defined]
        if raw[first][: node.col_offset].strip() or raw[last][node.end_col_offset:].split(b"#")[0].strip():  # type: ignore[attr-defined]
            return None  # another statement on the same line
        if kind == "pass":
            spans.append((lo, hi, b"pass"))
            continue
        while first > 0 and raw[first - 1].strip().startswith(b"#"):
            first -= 1
        spans.append((starts[first], starts[last + 1], b""))
    spans.sort()
    for (_, hi, _), (lo, _, _) in zip(spans, spans[1:]):
        if lo < hi:
            return None
    for lo, hi, new in reversed(spans):
        data = data[:lo] + new + data[hi:]
    return data.decode("utf-8")


def _num_experts(func: ast.AST, mask: str) -> str:
    """How many experts the static loop visits. A mask built by `one_hot(..., num_classes=N + 1)`
    has a last, sentinel class for tokens routed nowhere (expert parallelism); the hit loop never
    saw it unless a token used it, the static loop must not visit it (N has no weights there)."""
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("one_hot"):
            for kw in node.keywords:
                v = kw.value
                if (kw.arg == "num_classes" and isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add)
                        and isinstance(v.right, ast.Constant) and v.right.value == 1):
                    return ast.unparse(v.left)
    return f"{mask}.shape[0]"


def _parent_body(func: ast.AST, child: ast.stmt) -> list[ast.stmt] | None:
    for node in ast.walk(func):
        for attr in ("body", "orelse", "finalbody"):
            body = getattr(node, attr, None)
            if isinstance(body, list) and child in body:
                return body
    return None


# --- checks for idea-only entries ---------------------------------------------------------------

def _enclosing_class(tree: ast.Module, func: ast.AST) -> ast.ClassDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and func in node.body:
            return node
    return None


def experts_layout_without_decorator(site: Site) -> bool:
    """The break's class stores its experts as 3-D `gate_up_proj` / `down_proj` parameters (the
    layout `@use_experts_implementation` serves) and lacks that decorator."""
    loc = _locate(site)
    cls = _enclosing_class(loc.tree, loc.func) if loc else None
    if cls is None:
        return False
    if any("use_experts_implementation" in ast.unparse(d) for d in cls.decorator_list):
        return False
    params = set()
    for node in ast.walk(cls):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute)
                and _is_name(node.targets[0].value, "self") and isinstance(node.value, ast.Call)
                and ast.unparse(node.value.func).endswith("Parameter")):
            params.add(node.targets[0].attr)
    return {"gate_up_proj", "down_proj"} <= params or {"up_proj", "down_proj"} <= params


# --- opaque-grouped-mm --------------------------------------------------------------------------

# Grouped matmuls whose fake (meta) kernel is narrower than the eager one: torch's meta kernel for
# `_grouped_mm` takes bfloat16 only (it mirrors the CUDA kernel's checks), the CPU kernel runs
# float32 too, so tracing a float32 model fails at the call although eager runs.
_GROUPED_MM = frozenset(("torch._grouped_mm", "torch.nn.functional.grouped_mm", "nn.functional.grouped_mm",
                         "F.grouped_mm", "functional.grouped_mm"))
_GMM_OP = "transformers::grouped_mm_fallback"
_GMM_WRAPPER = "_compilable_grouped_mm"
_GMM_NAMES = (_GMM_WRAPPER, "_grouped_mm_fallback", "_grouped_mm_fallback_fake", "_grouped_mm_fallback_setup_context",
              "_grouped_mm_fallback_backward", "_grouped_mm_fallback_grads", "_grouped_mm_fallback_grads_fake")
_GMM_PRELUDE = '''\
@torch.library.custom_op("transformers::grouped_mm_fallback", mutates_args=())
def _grouped_mm_fallback(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """Grouped matmul as an opaque op: rows start..end of `input` (sorted by group, `offs` the
    cumulative ends) times `weight[group]`. The compiler sees only its fake below."""
    output = input.new_zeros(input.size(0), weight.size(-1))
    start = 0
    for i, end in enumerate(offs.tolist()):
        if end > start:
            output[start:end] = input[start:end] @ weight[i]
        start = end
    return output


@_grouped_mm_fallback.register_fake
def _grouped_mm_fallback_fake(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    return input.new_empty(input.size(0), weight.size(-1))


def _grouped_mm_fallback_setup_context(ctx, inputs, output):
    input, weight, offs = inputs
    ctx.save_for_backward(input, weight, offs)


@torch.library.custom_op("transformers::grouped_mm_fallback_backward", mutates_args=())
def _grouped_mm_fallback_grads(
    grad_output: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of `_grouped_mm_fallback` for `input` and `weight`, opaque like it."""
    grad_input = torch.zeros_like(input)
    grad_weight = torch.zeros_like(weight)
    start = 0
    for i, end in enumerate(offs.tolist()):
        if end > start:
            grad_input[start:end] = grad_output[start:end] @ weight[i].transpose(-2, -1)
            grad_weight[i] = input[start:end].transpose(-2, -1) @ grad_output[start:end]
        start = end
    return grad_input, grad_weight


@_grouped_mm_fallback_grads.register_fake
def _grouped_mm_fallback_grads_fake(grad_output, input, weight, offs):
    return torch.empty_like(input), torch.empty_like(weight)


def _grouped_mm_fallback_backward(ctx, grad_output):
    input, weight, offs = ctx.saved_tensors
    grad_input, grad_weight = torch.ops.transformers.grouped_mm_fallback_backward(grad_output, input, weight, offs)
    return grad_input, grad_weight, None


torch.library.register_autograd(
    "transformers::grouped_mm_fallback", _grouped_mm_fallback_backward, setup_context=_grouped_mm_fallback_setup_context
)


def _compilable_grouped_mm(grouped_mm, input, weight, offs=None, **kwargs):
    """`grouped_mm(input, weight, offs=offs, ...)`; for inputs other than bfloat16, the same
    product through the opaque op above: torch's fake kernel of grouped_mm takes bfloat16 only,
    so a float32 model that runs in eager cannot be traced through it."""
    if offs is not None and not kwargs and (input.dtype != torch.bfloat16 or weight.dtype != torch.bfloat16):
        return torch.ops.transformers.grouped_mm_fallback(input.to(weight.dtype), weight, offs)
    return grouped_mm(input, weight, offs=offs, **kwargs)


'''


def _grouped_mm_calls(node: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call) and ast.unparse(n.func) in _GROUPED_MM
            and len(n.args) >= 2 and not any(isinstance(a, ast.Starred) for a in n.args)
            and all(k.arg is not None for k in n.keywords)]


def _top_level_of(tree: ast.Module, node: ast.AST) -> ast.stmt | None:
    for stmt in tree.body:
        if stmt.lineno <= node.lineno <= (stmt.end_lineno or stmt.lineno):
            return stmt
    return None


def opaque_grouped_mm(site: Site) -> Edit | None:
    """`torch._grouped_mm(x, w, offs=o)` (or `F.grouped_mm`) at a failing fake-tensor call in
    transformers code -> `_compilable_grouped_mm(torch._grouped_mm, x, w, offs=o)`, which sends
    inputs the grouped-mm fake kernel rejects (anything but bfloat16) through a custom op
    (`torch.library.custom_op` with a fake and an autograd formula) computing the same per-group
    products. Every such call of the function is routed; the op and the wrapper are added at
    module level, just before the function's top-level statement (the one edit outside it)."""
    if not site.path.startswith("src/transformers/"):
        return None
    loc = _locate(site)
    if loc is None or loc.stmt is None:
        return None
    if not _grouped_mm_calls(loc.stmt):  # the failing call is at the site itself
        return None
    names = _module_names(loc.tree) | {getattr(n, "name", "") for n in loc.tree.body}
    if set(_GMM_NAMES) & names or "torch" not in names or _GMM_OP in site.text:
        return None
    calls = _grouped_mm_calls(loc.func)
    lines = list(loc.lines)
    # Right to left, bottom to top, so earlier offsets stay valid.
    for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset), reverse=True):
        fl, fc, fel, fec = call.func.lineno, call.func.col_offset, call.func.end_lineno, call.func.end_col_offset
        if fl != fel or fec is None:
            return None
        raw = lines[fl - 1].encode("utf-8")
        func_src, rest = raw[fc:fec].decode("utf-8"), raw[fec:].decode("utf-8")
        if not rest.startswith("("):
            return None
        lines[fl - 1] = raw[:fc].decode("utf-8") + f"{_GMM_WRAPPER}({func_src}, " + rest[1:]
    body_edit = _checked(loc, "".join(lines), "")
    top = _top_level_of(loc.tree, loc.func)
    if body_edit is None or top is None:
        return None
    first = min([d.lineno for d in getattr(top, "decorator_list", [])] + [top.lineno])
    eol = _eol(loc.lines)
    new_lines = body_edit.new_text.splitlines(keepends=True)
    prelude = [ln + eol for ln in _GMM_PRELUDE.split("\n")[:-1]]
    new_text = "".join(new_lines[: first - 1] + prelude + new_lines[first - 1:])
    try:
        ast.parse(new_text)
    except SyntaxError:
        return None
    return Edit(new_text=new_text, function=loc.qualname,
                note=f"{len(calls)} grouped-mm call(s) in {loc.qualname} routed through an opaque custom op "
                     "for inputs the grouped-mm fake kernel rejects (not bfloat16)")


# --- draw-only-when-enabled --------------------------------------------------------------------

_DRAWS = ("torch.rand", "torch.rand_like")


def _is_draw(node: ast.AST) -> bool:
    """`torch.rand([])` / `torch.rand(())` / `torch.rand(1)`: one uniform draw as a tensor."""
    return isinstance(node, ast.Call) and ast.unparse(node.func) in _DRAWS


def _is_training(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "training" and _is_dotted(node)


def _draw_names(func: ast.AST) -> set[str]:
    """Names bound (only) to a uniform draw in the function: `p = torch.rand([])`."""
    bound: dict[str, list[ast.expr]] = {}
    for n in ast.walk(func):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    bound.setdefault(t.id, []).append(n.value)
    return {k for k, vs in bound.items() if vs and all(_is_draw(v) for v in vs)}


def _draw_threshold(cmp: ast.AST, draws: set[str]) -> ast.expr | None:
    """The probability `p` of a `<draw> < p` comparison, `p` an attribute chain (`self.layerdrop`,
    `self.config.layerdrop`): a Python number on the module, not a tensor."""
    if not (isinstance(cmp, ast.Compare) and len(cmp.ops) == 1 and isinstance(cmp.ops[0], ast.Lt)):
        return None
    left, right = cmp.left, cmp.comparators[0]
    if not (_is_draw(left) or (isinstance(left, ast.Name) and left.id in draws)):
        return None
    return right if isinstance(right, ast.Attribute) and _is_dotted(right) else None


def draw_only_when_enabled(site: Site) -> Edit | None:
    """A stochastic layer skip drawn as a tensor: `if self.training:` / `dropout_probability =
    torch.rand([])` / `if dropout_probability < self.layerdrop:` (or `self.training and torch.rand([])
    < p` in one expression). The tensor comparison is a data-dependent branch on every layer, even
    at the default probability 0. The training test becomes `self.training and p > 0.0`: with
    p = 0 (a Python number) nothing is drawn and no layer is ever skipped, as before; with p > 0 the
    draw and its branch are unchanged. Every such training test of the function is edited (one per
    layer loop); only when the break is at one of the draws' comparisons or at a test that reads
    the flag one of them sets."""
    loc = _locate(site)
    if loc is None or loc.stmt is None:
        return None
    func = loc.func
    parents = {c: n for n in ast.walk(func) for c in ast.iter_child_nodes(n)}  # child -> parent
    draws = _draw_names(func)
    inserts: dict[tuple[int, int], str] = {}  # (line, column after `self.training`) -> text to insert
    flag_stmts: list[ast.stmt] = []
    for cmp in ast.walk(func):
        p = _draw_threshold(cmp, draws)
        if p is None:
            continue
        guard: ast.AST | None = None
        node: ast.AST = cmp
        while node in parents and guard is None:
            up = parents[node]
            if isinstance(up, ast.BoolOp) and isinstance(up.op, ast.And):
                guard = next((v for v in up.values[: up.values.index(node)] if _is_training(v)), None)
            elif isinstance(up, ast.If) and node is not up.test and _is_training(up.test):
                guard = up.test
            elif isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef)):
                break
            node = up
        if guard is None or guard.end_lineno != guard.lineno:
            continue
        stmt = cmp
        while stmt in parents and not isinstance(stmt, ast.stmt):
            stmt = parents[stmt]
        flag_stmts.append(stmt)  # type: ignore[arg-type]
        inserts[(guard.end_lineno, guard.end_col_offset)] = f" and {ast.unparse(p)} > 0.0"
    if not inserts:
        return None
    # The break is one of these comparisons, or a test reading a flag they set (`if not drop:`).
    at_site = any(s.lineno <= site.lineno <= (s.end_lineno or s.lineno) for s in flag_stmts)
    flags = {t.id for s in flag_stmts if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}
    reads = loc.stmt is not None and any(isinstance(n, ast.Name) and n.id in flags
                                         for n in ast.walk(loc.stmt.test if isinstance(loc.stmt, ast.If) else loc.stmt))
    if not (at_site or reads):
        return None
    lines = list(loc.lines)
    for (ln, col), text in sorted(inserts.items(), reverse=True):
        raw = lines[ln - 1]
        # col_offset counts UTF-8 bytes
        b = raw.encode("utf-8")
        lines[ln - 1] = (b[:col] + text.encode("utf-8") + b[col:]).decode("utf-8")
    note = (f"{len(inserts)} stochastic layer skip(s) in {loc.qualname} drawn only when enabled: "
            + ", ".join(sorted(set(inserts.values()))).replace(" and ", "").strip())
    return _checked(loc, "".join(lines), note)


CHECKS: dict[str, Callable[[Site], bool]] = {
    "experts-layout-without-decorator": experts_layout_without_decorator,
}


CODEMODS: dict[str, Callable[[Site], Edit | None]] = {
    "guard-logging": guard_logging,
    "dense-experts": dense_experts,
    "check-not-raise": check_not_raise,
    "branch-to-where": branch_to_where,
    "general-path-when-compiling": general_path_when_compiling,
    "past-tokens-from-mask-length": past_tokens_from_mask_length,
    "dense-segment-loop": dense_segment_loop,
    "opaque-grouped-mm": opaque_grouped_mm,
    "draw-only-when-enabled": draw_only_when_enabled,
}
