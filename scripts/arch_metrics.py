"""Structure of the enablebot package, read with `ast` (nothing is imported):

- import floors: the longest chain of intra-package imports (a module that imports nothing of
  the package is floor 1);
- upward imports: a module importing from a package it is not part of, where that package sits
  *above* it in the layout (LAYERS below, lowest first);
- import cycles between modules;
- private names (`_x`) imported across modules;
- places that interpret verdict words: a membership test over several of them (`v in ("a", "b")`)
  or a table keyed by them, outside verdict.py (an equality with one word names a verdict; it
  does not re-derive what verdicts mean);
- places that start a child process (subprocess.Popen/run of a Python child, multiprocessing
  Process).

    python scripts/arch_metrics.py [PACKAGE_DIR] [--json]
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

VERDICT_WORDS = {"full_graph", "graph_break", "compile_error", "eager_error", "create_error", "timeout", "crash",
                 "missing_dependency", "memory_limit", "skipped", "eager_ok"}
# Layers of the target layout, lowest first; a module may import only its own layer or lower ones.
# "" is the package root: the shared vocabulary every layer uses (results, verdict, file helpers).
LAYERS = ("", "model", "measure", "execute", "sweep", "watch", "fix", "pr", "site", "commands",
          "testing", "cli")
# Where each module of the older flat layout belongs, so the same layering measures both layouts.
FLAT = {
    "results": "", "verdict": "", "shipped": "", "fileio": "", "versions": "", "redact": "", "outputs": "", "progress": "",
    "budget": "model", "heldout": "measure", "overlay_loader": "execute",
    "registry": "model", "catalog": "model", "resolve": "model", "shrink": "model", "inputs": "model",
    "hooks": "model", "build": "model", "prepare": "model", "padding": "model", "loss": "model", "seed": "model",
    "runner": "measure", "graph_breaks": "measure", "numerics": "measure", "timing": "measure",
    "scenarios": "measure", "towers": "measure", "render": "measure",
    "isolation": "execute", "preload": "execute", "schedule": "sweep", "worker": "execute", "pool": "execute", "sandbox": "execute", "child": "execute",
    "sweep": "sweep", "checkpoint": "sweep", "triage": "sweep", "reports": "sweep", "baseline": "sweep",
    "coverage": "sweep", "day0": "sweep", "compare": "sweep", "incremental": "sweep",
    "hub": "model", "tensors": "measure", "watch": "watch", "support": "watch",
    "pr": "pr", "pr_body": "pr", "dashboard": "pr", "github_client": "pr", "pr_fetch": "pr",
    "nightly": "commands", "cli": "cli",
}


def modules(pkg: Path) -> dict[str, Path]:
    out = {}
    for f in sorted(pkg.rglob("*.py")):
        rel = f.relative_to(pkg.parent).with_suffix("")
        name = ".".join(rel.parts)
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        out[name] = f
    return out


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    parts = mod.split(".")
    base = parts if is_pkg else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(mods: dict[str, Path], root: str) -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    """Intra-package import edges, and (importer, module, name) for private names imported."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    private = []
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_pkg = path.name == "__init__.py"
        # Imports under `if TYPE_CHECKING:` are for annotations only: not an import edge.
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING"
                       for n in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            targets: list[tuple[str, str | None]] = []
            if isinstance(node, ast.Import):
                targets = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, is_pkg, node)
                for a in node.names:
                    full = f"{base}.{a.name}"
                    targets.append((full if full in mods else base, a.name))
            for target, name in targets:
                if not target.startswith(root):
                    continue
                while target and target not in mods:
                    target = target.rsplit(".", 1)[0] if "." in target else ""
                if target and target != mod:
                    edges[mod].add(target)
                    if name and name.startswith("_") and not name.startswith("__") and target != mod:
                        private.append((mod, target, name))
    return edges, private


def floors(edges: dict[str, set[str]]) -> dict[str, int]:
    memo: dict[str, int] = {}

    def depth(m: str, stack: tuple[str, ...]) -> int:
        if m in memo:
            return memo[m]
        if m in stack:
            return 0  # a cycle: counted separately
        d = 1 + max((depth(t, stack + (m,)) for t in edges[m]), default=0)
        memo[m] = d
        return d

    return {m: depth(m, ()) for m in edges}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in edges:
        if v not in index:
            visit(v)
    return out


def layer(mod: str, root: str) -> int:
    parts = mod[len(root) + 1:].split(".") if mod != root else []
    if len(parts) == 1:
        sub = FLAT.get(parts[0], "")
    else:
        sub = parts[0] if parts else ""
    return LAYERS.index(sub) if sub in LAYERS else 0


def upward(edges: dict[str, set[str]], root: str) -> list[tuple[str, str]]:
    return sorted((m, t) for m, ts in edges.items() for t in ts if layer(t, root) > layer(m, root))


def verdict_sites(mods: dict[str, Path]) -> list[str]:
    """file:line of code comparing with or mapping a verdict word (not verdict.py, not docstrings)."""
    sites = []
    for mod, path in mods.items():
        if mod.endswith(".verdict") or ".testing" in mod:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
                words = [n for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in VERDICT_WORDS]
            elif isinstance(node, ast.Dict):  # a table keyed by verdicts
                words = [k for k in node.keys if isinstance(k, ast.Constant) and k.value in VERDICT_WORDS]
            else:
                words = []
            if words:
                sites.append(f"{path.name}:{node.lineno}")
    return sorted(set(sites))


def child_starts(mods: dict[str, Path]) -> list[str]:
    """file:line of code that starts a Python child (subprocess with sys.executable, mp Process)."""
    sites = []
    for mod, path in mods.items():
        if ".testing" in mod:
            continue
        src = path.read_text(encoding="utf-8")
        tree = ast.parse(src)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            text = ast.get_source_segment(src, node) or ""
            fn = text.split("(", 1)[0]
            if fn.endswith(("Popen", "subprocess.run")) and "sys.executable" in text:
                sites.append(f"{path.name}:{node.lineno}")
            elif fn.endswith(".Process") or fn == "Process":
                sites.append(f"{path.name}:{node.lineno}")
    return sorted(set(sites))


def package_floors(edges: dict[str, set[str]], root: str) -> tuple[int, list[str]]:
    """Floors of the layout: the longest chain of package-to-package imports (the root
    modules count as one package, the CLI entry point as another)."""
    def pkg(m: str) -> str:
        parts = m[len(root) + 1:].split(".") if m != root else []
        if len(parts) > 1:
            return parts[0]
        # a module of the flat layout: the package it belongs to (FLAT), so both layouts compare
        return FLAT.get(parts[0], "") or "(root)" if parts else "(root)"

    graph: dict[str, set[str]] = {}
    for m, ts in edges.items():
        graph.setdefault(pkg(m), set()).update(pkg(t) for t in ts if pkg(t) != pkg(m))
    memo: dict[str, list[str]] = {}

    def chain(p: str, stack: tuple[str, ...]) -> list[str]:
        if p in memo:
            return memo[p]
        if p in stack:
            return []
        best = max((chain(t, stack + (p,)) for t in graph.get(p, ())), key=len, default=[])
        memo[p] = [p] + best
        return memo[p]

    longest = max((chain(p, ()) for p in graph), key=len)
    return len(longest), longest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("package", nargs="?", default=str(Path(__file__).resolve().parent.parent / "enablebot"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    pkg = Path(args.package)
    mods = modules(pkg)
    edges, private = imports(mods, pkg.name)
    fl = floors(edges)
    report = {
        "modules": len(mods),
        "package_floors": package_floors(edges, pkg.name)[0],
        "package_chain": package_floors(edges, pkg.name)[1],
        "module_import_floors": max(fl.values()),
        "deepest": sorted((m for m, d in fl.items() if d == max(fl.values()))),
        "upward_imports": [f"{a} -> {b}" for a, b in upward(edges, pkg.name)],
        "cycles": cycles(edges),
        "private_imports": [f"{a} imports {n} from {b}" for a, b, n in private],
        "verdict_sites": verdict_sites(mods),
        "child_start_sites": child_starts(mods),
    }
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        for k, v in report.items():
            n = len(v) if isinstance(v, list) else v
            print(f"{k}: {n}")
            if isinstance(v, list):
                for item in v[:40]:
                    print(f"  {item}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
