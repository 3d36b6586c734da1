"""The patch guard's side-effect check, over the AST of each patched file.

A graph-break fix rewrites tensor code; it never needs a process, a file, the network, code
execution, dynamic imports or the interpreter's internals. `side_effects(path, patched,
added)` parses the whole patched file and judges the nodes whose line span meets an added
line, so a call split over lines (`(os` / `.system)("id")`) is one call, a string is a string
(never code), and a name is resolved through the file's imports and scopes:
  imports        of a module with process, file, network or import machinery (`_SIDE_MODULES`);
  names          any use of such a module, however reached: `os.system`, `o.system` after
                 `import os as o`, `torch.os.system`, `getattr(os, "system")`;
  builtins       `eval`, `exec`, `compile`, `__import__`, `open`, `breakpoint`, `input`,
                 `globals`, `locals`, `vars` (only the builtins: a parameter named `input` is not);
  reflection     interpreter internals (`__builtins__`, `__globals__`, `__subclasses__`, ...) by
                 attribute or by a `getattr` name, a module's `__dict__`, and `getattr` on a module
                 with a computed name (`getattr(torch.compiler, "dis" + "able")`);
  torch I/O      `torch.save` / `load` / `hub` / `ops.load_library`, `cpp_extension`, `load_inline`;
  import time    module-level statements other than definitions, imports, constants,
                 `if TYPE_CHECKING:` and the registration of a custom op in a namespace that is not
                 torch's own (`torch.library.register_autograd("transformers::op", ...)`) (code
                 that would run when the file is imported).
"""

from __future__ import annotations

import ast
import builtins

from .pyspan import SCOPES, parents, touched, touches

SIDE_MODULES = frozenset((
    "os", "sys", "subprocess", "socket", "shutil", "ctypes", "urllib", "http", "requests", "httpx", "pathlib",
    "importlib", "builtins", "pickle", "marshal", "multiprocessing", "threading", "signal", "tempfile", "io", "glob",
    "asyncio", "pty", "fcntl", "resource", "mmap", "webbrowser", "ftplib", "smtplib", "ssl", "select", "runpy", "code",
    "codeop", "zipimport", "sysconfig", "site"))
# Reached as an attribute of another module (`torch.os`, a module's own `import os`): the names
# no torch or transformers attribute legitimately shares (`torch.select`, `torch.signal` do).
SIDE_ATTRS = frozenset(("os", "sys", "subprocess", "socket", "shutil", "ctypes", "importlib", "builtins", "pickle",
                        "marshal", "multiprocessing", "pty", "webbrowser", "runpy", "tempfile"))
BUILTIN_CALLS = frozenset(("eval", "exec", "compile", "__import__", "open", "breakpoint", "input", "globals", "locals",
                           "vars"))
INTERNALS = frozenset(("__builtins__", "__import__", "__subclasses__", "__globals__", "__code__", "__loader__",
                       "__spec__", "__bases__", "__mro__"))
TORCH_IO = ("torch.save", "torch.load", "torch.hub", "torch.ops.load_library")
NATIVE = frozenset(("cpp_extension", "load_inline"))
REFLECT = frozenset(("getattr", "setattr", "delattr", "hasattr"))
_BUILTIN_NAMES = frozenset(dir(builtins))


def side_effects(path: str, patched: str, added: frozenset[int]) -> list[str]:
    """Why the nodes `added` (line numbers in `patched`) are refused; empty when fine."""
    tree = ast.parse(patched)
    names = Names(tree)
    found: dict[tuple[int, str], str] = {}
    lines = patched.splitlines()

    def flag(node: ast.AST, why: str) -> None:
        key = (node.lineno, why)
        if key not in found:
            line = lines[node.lineno - 1].strip()
            found[key] = f"{path}:{node.lineno}: {line[:117] + '...' if len(line) > 120 else line!r} {why}"

    for node in touched(tree, added):
        if isinstance(node, ast.Import):
            for alias in node.names:
                _check_dotted(node, alias.name, flag, imported=True)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                _check_dotted(node, node.module, flag, imported=True)
                for alias in node.names:
                    _check_dotted(node, f"{node.module}.{alias.name}", flag, imported=True)
        elif isinstance(node, (ast.Name, ast.Attribute)):
            _check_reference(node, names, flag)
        elif isinstance(node, ast.Call):
            _check_reflection(node, names, flag)
    for stmt in _import_time(tree.body, added):
        flag(stmt, "would run at import; only definitions, imports and constants may be added at module level")
    return list(found.values())


# --- names -----------------------------------------------------------------------------------

class Names:
    """What a name refers to where it is used: ("import", "os.path") for a name bound by an
    import, ("var", None) for one bound otherwise (a parameter, an assignment), ("free", None)
    for one bound nowhere in the file (a builtin, or from a star import)."""

    def __init__(self, tree: ast.Module):
        self.parent = parents(tree)
        self.bound: dict[ast.AST, dict[str, set[str]]] = {}
        self.globals: dict[ast.AST, set[str]] = {}
        for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, SCOPES))]:
            self._collect(scope)

    def _collect(self, scope: ast.AST) -> None:
        bound: dict[str, set[str]] = {}
        glob: set[str] = set()

        def bind(name: str, kind: str) -> None:
            bound.setdefault(name, set()).add(kind)

        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = scope.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg):
                if arg is not None:
                    bind(arg.arg, "var")
        for node in self._own(scope):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                bind(node.id, "var")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        bind(alias.asname, "import:" + alias.name)
                    else:
                        root = alias.name.split(".")[0]
                        bind(root, "import:" + root)
            elif isinstance(node, ast.ImportFrom):
                base = "." * node.level + (node.module or "")
                for alias in node.names:
                    if alias.name != "*":
                        bind(alias.asname or alias.name, "import:" + (f"{base}.{alias.name}" if base else alias.name))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bind(node.name, "var")
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                glob.update(node.names)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                bind(node.name, "var")
            elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
                bind(node.target.id, "var")
        self.bound[scope] = bound
        self.globals[scope] = glob

    def _own(self, scope: ast.AST):
        """Nodes evaluated in `scope` itself (not in the scopes nested in it)."""
        stack = list(ast.iter_child_nodes(scope))
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack = [n for n in stack if self.scope_of(n) is scope]
        while stack:
            node = stack.pop()
            yield node
            if isinstance(node, SCOPES):
                continue  # its own scope (its name is bound here: yielded above)
            stack.extend(ast.iter_child_nodes(node))

    def scope_of(self, node: ast.AST) -> ast.AST:
        """The scope a node is evaluated in: a function's decorators, defaults and annotations
        belong to the scope around it, its body to the function."""
        child, p = node, self.parent.get(node)
        while p is not None:
            if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if child in p.body:
                    return p
            elif isinstance(p, ast.Lambda):
                if child is p.body:
                    return p
            elif isinstance(p, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Module)):
                return p
            child, p = p, self.parent.get(p)
        return child

    def resolve(self, node: ast.Name) -> tuple[str, str | None]:
        scope = self.scope_of(node)
        first = True
        while True:
            if node.id in self.globals.get(scope, ()):
                scope = self._module(scope)
            if not (isinstance(scope, ast.ClassDef) and not first):  # a class body is not seen from its methods
                kinds = self.bound.get(scope, {}).get(node.id)
                if kinds:
                    imports = sorted(k[7:] for k in kinds if k.startswith("import:"))
                    return ("import", imports[0]) if imports else ("var", None)
            if isinstance(scope, ast.Module):
                return ("free", None)
            scope, first = self.scope_of(scope), False

    def _module(self, scope: ast.AST) -> ast.AST:
        while not isinstance(scope, ast.Module):
            scope = self.scope_of(scope)
        return scope

    def qualify(self, node: ast.AST) -> str | None:
        """The dotted name an expression stands for when it reaches a module or a builtin:
        `o.system` -> "os.system" after `import os as o`; `getattr(torch, "os")` -> "torch.os";
        `len` -> "<builtin>.len". None for a value (a local, an attribute of one, a call)."""
        if isinstance(node, ast.Name):
            kind, target = self.resolve(node)
            if kind == "import":
                return target
            if kind == "free":
                if node.id in SIDE_MODULES:
                    return node.id  # used without an import: read it as the module (conservative)
                if node.id in _BUILTIN_NAMES:
                    return "<builtin>." + node.id
            return None
        if isinstance(node, ast.Attribute):
            base = self.qualify(node.value)
            return f"{base}.{node.attr}" if base and not base.startswith("<builtin>") else None
        if isinstance(node, ast.Call) and self.qualify(node.func) == "<builtin>.getattr" and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            base = self.qualify(node.args[0])
            return f"{base}.{node.args[1].value}" if base and not base.startswith("<builtin>") else None
        return None


# --- the checks ------------------------------------------------------------------------------

def _check_dotted(node: ast.AST, name: str, flag, imported: bool = False) -> None:
    parts = name.lstrip(".").split(".")
    if name.startswith("."):
        return  # a relative import: the package's own modules
    if parts[0] in SIDE_MODULES:
        flag(node, f"{'imports' if imported else 'uses'} a module with process, file, network or import machinery "
                   f"({parts[0]})")
    elif any(p in SIDE_ATTRS for p in parts[1:]):
        flag(node, f"reaches a process, file or import module through another module ({name})")
    if any(name == t or name.startswith(t + ".") for t in TORCH_IO) or NATIVE & set(parts):
        flag(node, f"reads or writes files or loads native code through torch ({name})")


def _check_reference(node: ast.Name | ast.Attribute, names: Names, flag) -> None:
    attr = node.id if isinstance(node, ast.Name) else node.attr
    if attr in INTERNALS:
        flag(node, f"touches interpreter internals ({attr})")
    q = names.qualify(node)
    if q is None:
        return
    if q.startswith("<builtin>."):
        if q[10:] in BUILTIN_CALLS:
            flag(node, f"uses {q[10:]}() (code execution, file access or namespace escape)")
        return
    if attr == "__dict__":
        flag(node, f"reads a module's namespace ({q})")
    _check_dotted(node, q, flag)


def _check_reflection(node: ast.Call, names: Names, flag) -> None:
    fn = names.qualify(node.func)
    if fn is None or not fn.startswith("<builtin>.") or fn[10:] not in REFLECT or len(node.args) < 2:
        return
    target, name = node.args[0], node.args[1]
    if isinstance(name, ast.Constant) and isinstance(name.value, str):
        if name.value in INTERNALS or name.value == "__dict__":
            flag(node, f"touches interpreter internals ({name.value})")
        q = names.qualify(node) if fn == "<builtin>.getattr" else None
        if q:
            _check_dotted(node, q, flag)
        return
    module = names.qualify(target)
    if module is not None and not module.startswith("<builtin>") and fn != "<builtin>.hasattr":  # (a test reads)
        flag(node, f"calls {fn[10:]} on a module ({module}) with a computed name; name the attribute")
    elif "__" in _constant_text(name):
        flag(node, f"calls {fn[10:]} with a computed dunder name")


def _constant_text(node: ast.AST) -> str:
    """The string constants inside an expression, run together (`"__glo" + "bals__"`)."""
    return "".join(n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str))


_RUNS = (ast.Call, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)


# Namespaces of torch's own operators: a registration there would change an op every model runs.
_TORCH_OP_NAMESPACES = frozenset(("aten", "prim", "prims", "quantized", "_c10d_functional", "c10d", "c10d_functional",
                                  "inductor", "higher_order", "torch", "_quantized", "profiler", "rngprims", "fbgemm"))
_LIBRARY_REGISTRATIONS = frozenset(("custom_op", "define", "register_fake", "register_autograd", "register_kernel",
                                    "impl", "register_torch_dispatch", "register_vmap"))


def registers_own_op(stmt: ast.stmt) -> bool:
    """`torch.library.register_autograd("ns::op", ...)` and its kin, for an op of the patch's own
    namespace: how code is made opaque to the compiler (a custom op with a fake; transformers does
    it in `integrations/moe.py` from 5.3.0). It adds an op; it cannot change one of torch's."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    call = stmt.value
    name = ast.unparse(call.func)
    if name.rsplit(".", 1)[-1] not in _LIBRARY_REGISTRATIONS or not name.startswith(("torch.library.", "library.")):
        return False
    first = call.args[0] if call.args else None
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str) and "::" in first.value):
        return False
    # The registration runs at import; its arguments must not (a name or a lambda is passed, not
    # called: `register_fake("x::op", os.system("id"))` is import-time code like any other).
    if any(_runs_now(a) for a in [*call.args, *(k.value for k in call.keywords)]):
        return False
    return first.value.split("::", 1)[0] not in _TORCH_OP_NAMESPACES


def _runs_now(node: ast.AST) -> bool:
    """Whether evaluating an expression runs code: a call, walrus, await or yield outside a
    lambda's body (a lambda's body runs only when it is called)."""
    if isinstance(node, ast.Lambda):
        return any(_runs_now(d) for d in [*node.args.defaults, *node.args.kw_defaults] if d is not None)
    if isinstance(node, _RUNS):
        return True
    return any(_runs_now(c) for c in ast.iter_child_nodes(node))


def _import_time(body: list[ast.stmt], added: frozenset[int]) -> list[ast.stmt]:
    """Statements of a module-level block that the patch makes run code at import: a new
    statement other than a definition, an import, a docstring or a constant assignment; a call
    added inside an existing assignment; the additions inside an existing compound statement
    (its body runs at import too). Decorators are allowed (the reference checks still apply)."""
    out: list[ast.stmt] = []
    for stmt in body:
        if not touches(stmt, added):
            continue
        new = stmt.lineno in added
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom, ast.Pass)):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):  # a docstring
            continue
        if registers_own_op(stmt):  # a custom op of the patch's own namespace (not torch's)
            continue
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            runs = stmt.value is not None and any(isinstance(n, _RUNS) and touches(n, added) for n in ast.walk(stmt.value))
            if runs or (new and not all(isinstance(t, ast.Name) for t in targets)):
                out.append(stmt)
        elif isinstance(stmt, ast.If) and _is_type_checking(stmt.test):
            out.extend(_import_time(stmt.body + stmt.orelse, added))
        elif isinstance(stmt, (ast.If, ast.Try, ast.For, ast.While, ast.With)) and not new:
            blocks = [getattr(stmt, f, []) for f in ("body", "orelse", "finalbody")]
            blocks += [h.body for h in getattr(stmt, "handlers", [])]
            if any(isinstance(n, _RUNS) and touches(n, added) for e in _header(stmt) for n in ast.walk(e)):
                out.append(stmt)
            for block in blocks:
                out.extend(_import_time(block, added))
        else:
            out.append(stmt)
    return out


def _header(stmt: ast.stmt) -> list[ast.expr]:
    """The expressions a compound statement evaluates before its blocks."""
    if isinstance(stmt, (ast.If, ast.While)):
        return [stmt.test]
    if isinstance(stmt, ast.For):
        return [stmt.iter]
    if isinstance(stmt, ast.With):
        return [i.context_expr for i in stmt.items]
    return []


def _is_type_checking(test: ast.AST) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
