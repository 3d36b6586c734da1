"""The execution layer's half of an overlay: read an overlay's manifest and make this process
import its patched copies instead of the installed files.

`fix.judge.overlay.build_overlay` writes the overlay (the fix layer's half); the one child entry point
(`enablebot.execute.worker`) calls `install_overlay` first thing, before torch or transformers are
imported. The installed site-packages are never written.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..results import Serializable

MANIFEST = "manifest.json"


@dataclass
class OverlayFile(Serializable):
    upstream: str  # torch/_dynamo/variables/misc.py
    module: str  # torch._dynamo.variables.misc
    installed: str  # absolute path of the original
    copy: str  # path of the patched copy, relative to the overlay dir
    sha256_installed: str = ""
    sha256_patched: str = ""


@dataclass
class Overlay(Serializable):
    files: list[OverlayFile] = field(default_factory=list)
    canonical_diff: str = ""

    @property
    def modules(self) -> dict[str, str]:
        return {f.module: f.copy for f in self.files}


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def load_overlay(overlay_dir: str | Path) -> Overlay:
    return Overlay.from_dict(json.loads((Path(overlay_dir) / MANIFEST).read_text(encoding="utf-8")))


class _OverlayFinder(importlib.abc.MetaPathFinder):
    """Resolves the patched modules to their copies; everything else falls through."""

    def __init__(self, root: Path, overlay: Overlay):
        self.root = root
        self.files = {f.module: f for f in overlay.files}

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001 - importlib protocol
        f = self.files.get(fullname)
        if f is None:
            return None
        location = str(self.root / f.copy)
        loader = importlib.machinery.SourceFileLoader(fullname, location)
        search = [str(Path(f.installed).parent)] if Path(f.installed).name == "__init__.py" else None
        return importlib.util.spec_from_file_location(fullname, location, loader=loader,
                                                      submodule_search_locations=search)


def install_overlay(overlay_dir: str | Path) -> list[str]:
    """Make this process import the overlay's patched copies. Returns the module names.
    Refuses when one of them is already imported (the overlay would silently not apply)."""
    root = Path(overlay_dir).resolve()
    overlay = load_overlay(root)
    loaded = [m for m in overlay.modules if m in sys.modules]
    if loaded:
        raise RuntimeError(f"install_overlay: {loaded} already imported; install the overlay before importing them")
    for f in overlay.files:
        copy = root / f.copy
        if not copy.is_file() or sha256_text(copy.read_text(encoding="utf-8")) != f.sha256_patched:
            raise RuntimeError(f"install_overlay: {copy} is missing or was modified after the overlay was built")
    sys.meta_path.insert(0, _OverlayFinder(root, overlay))
    os.environ["ENABLEBOT_OVERLAY"] = str(root)  # visible to the child's logs / result
    return sorted(overlay.modules)
