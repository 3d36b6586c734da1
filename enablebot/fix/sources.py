"""Where upstream repo paths live in this install (read only): `torch/_dynamo/x.py` and
`src/transformers/models/x/modeling_x.py` <-> the installed files. Shared by the drafting side
(which reads sources to show and rewrite) and the judge (which copies them into overlays)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

# Upstream repo layout -> installed package: (upstream prefix, top-level package).
LAYOUT = (("torch/", "torch"), ("src/transformers/", "transformers"))


class SourceNotFound(ValueError):
    """An upstream path with no installed file behind it (or one that may not be read)."""


def package_root(package: str) -> Path:
    """Directory containing the installed top-level package (find_spec does not import it)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SourceNotFound(f"package {package!r} is not installed")
    return Path(list(spec.submodule_search_locations)[0]).resolve().parent


def locate(upstream: str) -> tuple[str, Path]:
    """(module name, installed file) of an upstream repo path."""
    for prefix, package in LAYOUT:
        if upstream.startswith(prefix):
            rel = package + "/" + upstream[len(prefix):] if prefix.startswith("src/") else upstream
            root = package_root(package)
            installed = root / rel
            if installed.is_symlink():
                raise SourceNotFound(f"{upstream}: the installed file is a symlink; refusing to patch it")
            resolved = installed.resolve()
            if not resolved.is_relative_to(root / package) or not resolved.is_file():
                raise SourceNotFound(f"{upstream}: no such file in the installed {package} ({installed})")
            module = rel[:-3].replace("/", ".")
            if module.endswith(".__init__"):
                module = module[: -len(".__init__")]
            return module, resolved
    raise SourceNotFound(f"{upstream}: not a torch/ or src/transformers/ path")


def upstream_path(filename: str) -> str | None:
    """Upstream repo path of an installed file (the inverse of `locate`), None if outside. A frame
    recorded on another machine (another venv or checkout: committed results, the GPU machine) is
    matched by its path below the package directory when this install has that file."""
    path = Path(filename).resolve()
    for prefix, package in LAYOUT:
        try:
            root = package_root(package) / package
        except SourceNotFound:
            continue
        try:
            rel = path.relative_to(root)
        except ValueError:
            parts = Path(filename).parts
            tails = [Path(*parts[i + 1:]) for i in range(len(parts) - 2, -1, -1) if parts[i] == package]
            rel = next((t for t in tails if (root / t).is_file()), None)
            if rel is None:
                continue
        return f"{prefix}{rel.as_posix()}" if prefix.startswith("src/") else f"{package}/{rel.as_posix()}"
    return None


def strip_prefix(path: str) -> str:
    """`a/x` / `b/x` -> `x` (git-style prefixes)."""
    return path[2:] if path[:2] in ("a/", "b/") else path


def read_upstream(upstream: str) -> str:
    """The installed text of an upstream path."""
    return locate(upstream)[1].read_text(encoding="utf-8")
