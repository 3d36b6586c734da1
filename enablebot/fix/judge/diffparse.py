"""The one parse of a unified diff, shared by the patch guard and the anti-gaming gates.

Both judge the same untrusted text, so they must read it the same way. A hand parse that takes
any line starting with `+++ ` for a file header is wrong inside a hunk: an added line whose text
is `++ os.system("id")` (valid Python) would be filed as a header, never checked, and the lines
after it filed under a bogus path. `unidiff` reads a hunk by its header's counts, so an added
line is an added line whatever it starts with.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from ..sources import strip_prefix


class DiffParseError(ValueError):
    """The text is not a well-formed unified diff; the message says why."""


@dataclass(frozen=True)
class FileDiff:
    path: str  # upstream path of the target side, `a/` / `b/` stripped
    source: str  # upstream path of the source side
    # (line number the hunk header claims, text without "+" and newline). A hunk may apply at an
    # offset: judge positions with overlay.apply_hunks_added or added_between, never these numbers.
    added: tuple[tuple[int, str], ...]
    patched_file: object  # the unidiff PatchedFile (hunks for overlay.apply_hunks)

    @property
    def added_texts(self) -> list[str]:
        return [text for _, text in self.added]


def parse(diff: str) -> list[FileDiff]:
    """Every file of `diff`, strictly: hunk bodies must match their headers' counts."""
    from unidiff import PatchSet
    from unidiff.errors import UnidiffParseError

    try:
        patch = PatchSet(diff)
    except (UnidiffParseError, ValueError, IndexError) as e:
        raise DiffParseError(f"the diff does not parse as a unified diff: {e}") from e
    # unidiff stops a hunk where its header's counts say; change/context lines left over mean
    # wrong counts. Lines are counted by their tag alone, less one `---`/`+++` header pair per
    # file: an added line whose text starts `++ ` is a body line like any other.
    body = sum(1 for ln in diff.splitlines() if ln[:1] in ("+", "-", " ")) - 2 * len(patch)
    parsed = sum(len(h) for pf in patch for h in pf)
    if body > parsed:  # (unidiff also takes blank lines as context: parsed may be larger)
        raise DiffParseError(f"the diff does not parse: {body - parsed} change/context line(s) fall outside "
                             "the hunks (the @@ line counts do not match the hunk bodies)")
    out = []
    for pf in patch:
        added = tuple((ln.target_line_no, ln.value.rstrip("\n").rstrip("\r")) for h in pf for ln in h if ln.is_added)
        out.append(FileDiff(path=strip_prefix(pf.target_file), source=strip_prefix(pf.source_file), added=added,
                            patched_file=pf))
    return out


def added_lines(diff: str) -> dict[str, list[str]]:
    """Added lines per upstream file (the target side's path)."""
    out: dict[str, list[str]] = {}
    for f in parse(diff):
        out.setdefault(f.path, []).extend(f.added_texts)
    return out


def added_between(original: str, patched: str) -> frozenset[int]:
    """Line numbers (1-based) of `patched` that are not matched to a line of `original`:
    computed from the texts themselves, so a judge holding both never trusts a hunk header."""
    a, b = original.splitlines(), patched.splitlines()
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    return frozenset(j + 1 for tag, _i1, _i2, j1, j2 in ops if tag in ("replace", "insert") for j in range(j1, j2))
