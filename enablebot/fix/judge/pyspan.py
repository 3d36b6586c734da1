"""Small AST helpers for judging a patched Python file by the nodes a diff adds.

A check that reads one added line at a time is beaten by splitting an expression over two
lines (`(os` then `.system)("id")`). The judges instead parse the whole patched file and look
at the nodes whose line span meets an added line.
"""

from __future__ import annotations

import ast
from typing import Iterator


def touches(node: ast.AST, lines: frozenset[int]) -> bool:
    """Whether `node`'s line span contains one of `lines` (1-based, the patched file's)."""
    start = getattr(node, "lineno", None)
    if start is None:
        return False
    end = getattr(node, "end_lineno", None) or start
    return any(start <= n <= end for n in lines)


def touched(tree: ast.AST, lines: frozenset[int]) -> Iterator[ast.AST]:
    """The nodes of `tree` whose span meets `lines`, without walking subtrees that cannot: a
    child lies within its parent's lines (a decorator counts as part of what it decorates)."""
    lo, hi = (min(lines), max(lines)) if lines else (0, -1)
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            start = getattr(child, "lineno", None)
            if start is None:  # (arguments, comprehension: no position of their own)
                stack.append(child)
                continue
            start = min([start] + [d.lineno for d in getattr(child, "decorator_list", [])])
            end = getattr(child, "end_lineno", None) or start
            if end < lo or start > hi:
                continue
            if any(start <= n <= end for n in lines):
                yield child
            stack.append(child)


def parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    out: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            out[child] = node
    return out


def dotted(node: ast.AST) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def final_name(node: ast.AST) -> str | None:
    """The last name of a Name/Attribute (`is_compiling` of `torch.compiler.is_compiling`)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


SCOPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
          ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def walk_own(node: ast.AST) -> Iterator[ast.AST]:
    """Descendants of `node` that run when `node` runs: nested function and class bodies
    are left out (their decorators, defaults and bases are not)."""
    for child in ast.iter_child_nodes(node):
        yield child
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in (*child.decorator_list, *child.args.defaults, *child.args.kw_defaults):
                if sub is not None:
                    yield sub
                    yield from walk_own(sub)
        elif isinstance(child, ast.ClassDef):
            for sub in (*child.decorator_list, *child.bases, *child.keywords):
                yield sub
                yield from walk_own(sub)
        elif isinstance(child, ast.Lambda):
            for sub in (*child.args.defaults, *child.args.kw_defaults):
                if sub is not None:
                    yield sub
                    yield from walk_own(sub)
        else:
            yield from walk_own(child)


def segment(text: str, node: ast.AST, limit: int = 100) -> str:
    """The source of `node`, on one line, cut at `limit`."""
    src = ast.get_source_segment(text, node) or ""
    src = " ".join(src.split())
    return src if len(src) <= limit else src[: limit - 3] + "..."
