"""Apply a patch to COPIES of installed files and make a process import those copies.

The installed site-packages are never written. `build_overlay(diff, overlay_dir)` maps each
upstream path of the diff (`torch/_dynamo/...` for pytorch, `src/transformers/...` for
transformers) to the installed file, applies the hunks to a copy under `overlay_dir`, and
writes `manifest.json` (module name -> patched copy). `enablebot.execute.overlay_loader.install_overlay`
(the execution layer's half) makes a child import the copies.

Hunks apply strictly: context and removed lines must match the installed text exactly; only
the position may differ from the hunk header (LLMs miscount lines), as with `patch`'s offset
search without fuzz. The canonical diff (recomputed from the copies) is what a PR carries.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path

# The manifest types and the loader live in the execution layer; fix code imports them from here too.
from ...execute.overlay_loader import MANIFEST, Overlay, OverlayFile, install_overlay, load_overlay, sha256_text  # noqa: F401
from ...fileio import atomic_write_text

from .. import sources
from ..sources import package_root, upstream_path  # noqa: F401 - re-exported for the judge's callers


class PatchApplyError(ValueError):
    """The diff does not apply to the installed files; the message is fed back to the agent."""


def locate(upstream: str) -> tuple[str, Path]:
    """(module name, installed file) of an upstream repo path (`fix.sources.locate`, raising
    PatchApplyError: to the judge, a path without an installed file is a patch that cannot apply)."""
    try:
        return sources.locate(upstream)
    except sources.SourceNotFound as e:
        raise PatchApplyError(str(e)) from e


def _find(lines: list[str], block: list[str], hint: int, start: int) -> int | None:
    """Index where `block` matches `lines` exactly, nearest to `hint`, not before `start`."""
    if not block:
        return max(min(hint, len(lines)), start)
    n = len(block)
    candidates = range(start, len(lines) - n + 1)
    for pos in sorted(candidates, key=lambda i: (abs(i - hint), i)):
        if lines[pos:pos + n] == block:
            return pos
    return None


def apply_hunks(original: str, patched_file, upstream: str) -> str:
    """Apply the hunks of one unidiff PatchedFile to `original` text."""
    return apply_hunks_added(original, patched_file, upstream)[0]


def apply_hunks_added(original: str, patched_file, upstream: str) -> tuple[str, frozenset[int]]:
    """`apply_hunks`, and the line numbers (1-based) of the added lines in the patched text
    where they actually landed: a hunk applies at an offset from its header, so the header's
    numbers are not where a judge of the patched text must look."""
    lines = original.splitlines(keepends=True)
    out: list[str] = []
    added: list[int] = []
    cursor = 0
    for i, hunk in enumerate(patched_file, 1):
        src = [ln.value for ln in hunk if ln.line_type in (" ", "-")]
        dst = [ln.value for ln in hunk if ln.line_type in (" ", "+")]
        pos = _find(lines, src, max(hunk.source_start - 1, 0), cursor)
        if pos is None:
            # Say where the closest line is so the next attempt can fix its context.
            first = next((s for s in src if s.strip()), "")
            near = [j + 1 for j, ln in enumerate(lines) if first and ln.strip() == first.strip()][:3]
            where = f"; its first context line occurs at line(s) {near}" if near else ""
            raise PatchApplyError(
                f"{upstream}: hunk {i} (@@ -{hunk.source_start},{hunk.source_length} @@) does not apply: its "
                f"context/removed lines do not match the installed file exactly{where}. "
                "Copy context lines verbatim from the source shown, with exact indentation."
            )
        out.extend(lines[cursor:pos])
        target = [ln for ln in hunk if ln.line_type in (" ", "+")]
        added.extend(len(out) + i + 1 for i, ln in enumerate(target) if ln.line_type == "+")
        out.extend(dst)
        cursor = pos + len(src)
    out.extend(lines[cursor:])
    text = "".join(out)
    try:
        compile(text, upstream, "exec")
    except SyntaxError as e:
        raise PatchApplyError(f"{upstream}: the patched file does not compile: {e.msg} at line {e.lineno}") from e
    return text, frozenset(added)


def build_overlay(diff: str, overlay_dir: str | Path) -> Overlay:
    """Apply `diff` (already checked by patchguard) to copies under `overlay_dir`."""
    from .diffparse import parse

    root = Path(overlay_dir)
    root.mkdir(parents=True, exist_ok=True)
    overlay = Overlay()
    diffs: list[str] = []
    for fd in parse(diff):  # the guard's own parse: what was judged is what is applied
        pf, upstream = fd.patched_file, fd.path
        module, installed = locate(upstream)
        original = installed.read_text(encoding="utf-8")
        patched = apply_hunks(original, pf, upstream)
        copy = Path("files", *module.split(".")).with_suffix(".py")
        if installed.name == "__init__.py":
            copy = Path("files", *module.split("."), "__init__.py")
        (root / copy).parent.mkdir(parents=True, exist_ok=True)
        (root / copy).write_text(patched, encoding="utf-8")
        overlay.files.append(OverlayFile(upstream=upstream, module=module, installed=str(installed),
                                         copy=copy.as_posix(), sha256_installed=sha256_text(original),
                                         sha256_patched=sha256_text(patched)))
        diffs.append("".join(difflib.unified_diff(original.splitlines(keepends=True), patched.splitlines(keepends=True),
                                                  f"a/{upstream}", f"b/{upstream}")))
    overlay.canonical_diff = "".join(diffs)
    atomic_write_text(root / MANIFEST, json.dumps(overlay.to_dict(), indent=2, sort_keys=True) + "\n")
    return overlay


def installed_hashes(overlay: Overlay) -> dict[str, str]:
    """sha256 of the installed originals now (to prove they were not modified)."""
    return {f.installed: hashlib.sha256(Path(f.installed).read_bytes()).hexdigest() for f in overlay.files}
