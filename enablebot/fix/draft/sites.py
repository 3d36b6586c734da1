"""The I/O edge of the playbook: a graph break's user stack as `rewrites.Site`s, read from the
installed files (the versions the break was measured on; the caller checks they match)."""

from __future__ import annotations

from ...results import GraphBreak, UserFrame
from ..sources import SourceNotFound, read_upstream, upstream_path
from .rewrites import Site


def frames_of(gb: GraphBreak) -> list[UserFrame]:
    """Outermost first, the innermost frame last. The user frame is appended only when the stack
    lacks it: it can be a caller in the stack (the last model-code frame above a transformers
    utility, e.g. a ContextVar.get() in utils/output_capturing.py), not the innermost frame."""
    frames = list(gb.stack)
    uf = gb.user_frame
    if uf and not any((f.filename, f.lineno) == (uf.filename, uf.lineno) for f in frames):
        frames.append(uf)
    return frames


def sites_of(gb: GraphBreak, cache: dict[str, str | None] | None = None) -> list[Site]:
    """The frames inside installed torch / transformers, with each file's text. Frames outside
    them (the harness, remote code) cannot be patched and are left out."""
    cache = {} if cache is None else cache
    out: list[Site] = []
    for f in frames_of(gb):
        if not f.filename:
            continue
        up = upstream_path(f.filename)
        if up is None:
            continue
        if up not in cache:
            try:  # this install's file (the frame may have been recorded in another venv)
                cache[up] = read_upstream(up)
            except (OSError, UnicodeDecodeError, SourceNotFound):
                cache[up] = None
        text = cache[up]
        if text is not None:
            out.append(Site(path=up, text=text, lineno=int(f.lineno or 0), function=f.function or ""))
    return out
