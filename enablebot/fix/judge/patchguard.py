"""Guard an LLM-proposed patch: extract the diff, parse it, and enforce the path policy.

LLM output is untrusted data. A patch is accepted only when
- it is a well-formed unified diff (parsed with `unidiff`) that modifies existing text files;
- every path is relative, normalised (no `..`, no absolute path, no backslash) and inside
  the allow-list: `torch/_dynamo/**`, `torch/_inductor/**`, the model's own
  `src/transformers/models/<type>/modeling_<type>.py`, and the transformers files on the break's
  own call path (`frame_files`, from the reproduction run);
- it stays under a size limit (bytes, files, changed lines);
- what it adds carries no side effects: no process, file, network, `eval`/`exec`/`compile`,
  dynamic-import or introspection-escape use, and no module-level call (code that would run
  at import). A graph-break fix rewrites tensor code; it never needs those. Judged on the AST of
  each patched file (the hunks applied to the installed original, as the overlay will apply
  them; `sideeffects.side_effects`); the per-line regexes (`side_effects_by_line`) are only the
  fallback for a file the hunks do not apply to here (it cannot become an overlay here either).
The diff is parsed once, by `diffparse.parse`, which the anti-gaming gates use too.
Anything touching tests, the verifier, the harness or the bot itself is outside the
allow-list and so rejected; `FORBIDDEN` names them explicitly for a clearer message.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ...results import Serializable
from ..sources import strip_prefix  # noqa: F401 - imported from here too
from .diffparse import DiffParseError, parse
from .sideeffects import SIDE_MODULES, side_effects

TORCH_ALLOWED = ("torch/_dynamo/**", "torch/_inductor/**")
FORBIDDEN = ("**/test/**", "**/tests/**", "**/test_*.py", "enablebot/**", "prompts/**", "**/conftest.py",
             ".github/**", "setup.py", "pyproject.toml")
MAX_PATCH_BYTES = 40_000
MAX_FILES = 3
MAX_CHANGED_LINES = 400



class PatchRejected(ValueError):
    """The patch violates the policy; the message is fed back to the agent."""


@dataclass
class PatchPolicy:
    model_type: str | None = None  # allows src/transformers/models/<type>/modeling_<type>.py
    allow_torch: bool = True
    # Upstream transformers files of the break's own frames (`frame_files`): a break in a file the
    # model borrows (mistral3 -> pixtral's modeling file) is fixed where it is.
    frame_files: tuple[str, ...] = ()
    max_bytes: int = MAX_PATCH_BYTES
    max_files: int = MAX_FILES
    max_changed_lines: int = MAX_CHANGED_LINES

    def allowed_globs(self) -> list[str]:
        globs = list(TORCH_ALLOWED) if self.allow_torch else []
        if self.model_type:
            globs.append(model_file(self.model_type))
        globs += [f for f in self.frame_files if f not in globs]
        return globs


def frame_files(breaks: Iterable[Any]) -> tuple[str, ...]:
    """The upstream transformers files on the call path of `breaks` (GraphBreak-like objects with
    `user_frame` and `stack`), as a patch policy may allow them: Python files under
    src/transformers/, never a forbidden one (tests, ...). Derived from a reproduction run, never
    from anything a candidate or a bundle says."""
    from ..sources import upstream_path

    out: list[str] = []
    for gb in breaks:
        for f in [getattr(gb, "user_frame", None), *getattr(gb, "stack", [])]:
            up = upstream_path(f.filename) if f is not None and getattr(f, "filename", None) else None
            if up and up.startswith("src/transformers/") and up.endswith(".py") and up not in out \
                    and not any(fnmatch.fnmatchcase(up, pat) for pat in FORBIDDEN):
                out.append(up)
    return tuple(out)


@dataclass
class CheckedPatch(Serializable):
    diff: str
    files: list[str] = field(default_factory=list)  # upstream paths
    added: int = 0
    removed: int = 0

    @property
    def target(self) -> str:
        return target_of(self.files)


def target_of(files: list[str]) -> str:
    """The bundle target of a patch: model-code | inductor | dynamo."""
    if any(f.startswith("src/transformers/") for f in files):
        return "model-code"
    return "inductor" if files and all(f.startswith("torch/_inductor/") for f in files) else "dynamo"


def model_file(model_type: str) -> str:
    return f"src/transformers/models/{model_type}/modeling_{model_type}.py"


def check_path(path: str, policy: PatchPolicy) -> str:
    """The normalised upstream path, or PatchRejected saying why it is not allowed."""
    raw = path
    path = strip_prefix(path.strip())
    if not path or path == "/dev/null":
        raise PatchRejected("the patch creates or deletes a file; only edits to existing files are allowed")
    if "\\" in path or "\x00" in path or path.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", path):
        raise PatchRejected(f"path {raw!r} is absolute or malformed; use upstream repo-relative paths")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise PatchRejected(f"path {raw!r} is not normalised (empty, '.' or '..' component)")
    if not path.endswith(".py"):
        raise PatchRejected(f"path {path!r}: only Python source files may be patched")
    for pat in FORBIDDEN:
        if fnmatch.fnmatchcase(path, pat):
            raise PatchRejected(f"path {path!r} is forbidden (tests, the verifier and the bot itself are off limits)")
    allowed = policy.allowed_globs()
    if not any(fnmatch.fnmatchcase(path, g) for g in allowed):
        raise PatchRejected(f"path {path!r} is outside the allowed paths: {', '.join(allowed)}")
    return path


_MOD = "|".join(sorted(SIDE_MODULES))
_SIDE_RULES = (
    (re.compile(rf"^\s*(?:import\s+(?:{_MOD})\b|from\s+(?:{_MOD})(?:\.|\s+import\b))"),
     "imports a module with process, file, network or import machinery ({m})"),
    (re.compile(rf"(?<![\w.])(?:{_MOD})\s*\.\s*\w"), "uses a process, file, network or import module ({m})"),
    (re.compile(r"(?<![\w.])(?:eval|exec|compile|__import__|open|breakpoint|input|globals|locals|vars)\s*\("),
     "calls {m} (code execution, file access or namespace escape)"),
    (re.compile(r"__(?:builtins|import|subclasses|globals|code|loader|spec|bases|mro)__"),
     "touches interpreter internals ({m})"),
    (re.compile(r"\btorch\s*\.\s*(?:save|load|hub|ops\s*\.\s*load_library)\b|cpp_extension|load_inline"),
     "reads or writes files or loads native code through torch ({m})"),
)
_TOP_LEVEL_OK = re.compile(r"^(?:def |async def |class |@|#|import |from |if TYPE_CHECKING|[)\]},\s]*$|\w+\s*(?::[^=]+)?=)")
_STRING = re.compile(r"(\"\"\"|\'\'\'|\"|\')(?:\\.|(?!\1).)*?\1")


def side_effects_by_line(path: str, added: list[str]) -> list[str]:
    """Why the added lines of `path` are refused, one line at a time (empty when they are
    fine). Strings and comments are ignored. Only the fallback for a file whose patched text
    cannot be built here: a call split over two lines passes it."""
    reasons: list[str] = []
    for ln in added:
        code = _STRING.sub('""', ln).split("#", 1)[0]
        if not code.strip():
            continue
        for rule, why in _SIDE_RULES:
            m = rule.search(code)
            if m:
                reasons.append(f"{path}: the added line {ln.strip()[:120]!r} {why.format(m=m.group(0).strip())}")
        top = not code[:1].isspace() and not code.startswith(("def ", "async def ", "class ", "@"))
        if top and (not _TOP_LEVEL_OK.match(code) or "(" in code and not code.startswith(("import ", "from "))):
            reasons.append(f"{path}: the added module-level line {ln.strip()[:120]!r} would run at import; "
                           "only definitions, imports and constants may be added at module level")
    return reasons


def installed_original(upstream: str) -> str | None:
    """The installed file an upstream path maps to, None when there is none."""
    from .overlay import PatchApplyError, locate

    try:
        return locate(upstream)[1].read_text(encoding="utf-8")
    except (PatchApplyError, OSError, UnicodeDecodeError):
        return None


def check_patch(diff: str, policy: PatchPolicy,
                read_original: Callable[[str], str | None] = installed_original) -> CheckedPatch:
    """Parse and police a diff; raises PatchRejected with a message fit to feed back.
    `read_original(upstream)`: the text the hunks will be applied to (the installed file)."""
    if not diff or not diff.strip():
        raise PatchRejected("no unified diff found in the reply; answer with one ```diff fenced block")
    if len(diff.encode("utf-8")) > policy.max_bytes:
        raise PatchRejected(f"patch is {len(diff.encode('utf-8'))} bytes; the limit is {policy.max_bytes}")
    if "GIT binary patch" in diff or re.search(r"^Binary files ", diff, re.M):
        raise PatchRejected("binary patches are not allowed")
    if re.search(r"^(?:new|deleted) file mode|^(?:old|new) mode|^rename (?:from|to)|^similarity index|^copy (?:from|to)",
                 diff, re.M):
        raise PatchRejected("mode changes, renames, copies, new and deleted files are not allowed")
    try:
        patch = parse(diff)
    except DiffParseError as e:
        raise PatchRejected(str(e)) from e
    if len(patch) == 0:
        raise PatchRejected("the diff contains no file changes")
    if len(patch) > policy.max_files:
        raise PatchRejected(f"the patch touches {len(patch)} files; at most {policy.max_files} are allowed")
    files: list[str] = []
    added = removed = 0
    for fd in patch:
        pf = fd.patched_file
        if pf.is_binary_file:
            raise PatchRejected("binary patches are not allowed")
        if pf.is_added_file or pf.is_removed_file or pf.is_rename:
            raise PatchRejected("new, deleted and renamed files are not allowed")
        src, dst = check_path(pf.source_file, policy), check_path(pf.target_file, policy)
        if src != dst:
            raise PatchRejected(f"source {src!r} and target {dst!r} differ; edit a file in place")
        if len(pf) == 0:
            raise PatchRejected(f"{src}: no hunks")
        if src in files:
            raise PatchRejected(f"{src} appears twice in the patch")
        files.append(src)
        added += pf.added
        removed += pf.removed
    if added + removed == 0:
        raise PatchRejected("the patch changes no lines")
    if added + removed > policy.max_changed_lines:
        raise PatchRejected(f"the patch changes {added + removed} lines; the limit is {policy.max_changed_lines}")
    for fd in patch:
        bad = _file_side_effects(fd, read_original)
        if bad:
            raise PatchRejected("the patch adds side effects that a compile fix never needs: " + "; ".join(bad[:3]))
    return CheckedPatch(diff=diff, files=files, added=added, removed=removed)


def _file_side_effects(fd, read_original: Callable[[str], str | None]) -> list[str]:
    """The AST judgement of one file's additions, on the text the overlay will build, at the
    lines where the hunks landed (not where their headers say: a hunk applies at an offset)."""
    from .overlay import PatchApplyError, apply_hunks_added

    original = read_original(fd.path)
    if original is not None:
        try:
            patched, added = apply_hunks_added(original, fd.patched_file, fd.path)
        except PatchApplyError:
            # The overlay cannot build this file from this original either (the same
            # apply_hunks), so nothing judged here could run; the regexes still say why not.
            pass
        else:
            return side_effects(fd.path, patched, added)
    return side_effects_by_line(fd.path, fd.added_texts)
