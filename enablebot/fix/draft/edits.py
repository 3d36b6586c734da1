"""Turn an LLM reply into edits of given file texts, in the formats a model actually gets right.

Three formats are recognised in a reply (several edits of each):
- search/replace blocks (aider's `diff` format): the file's path on its own line, then a fence
  holding `<<<<<<< SEARCH` / old lines / `=======` / new lines / `>>>>>>> REPLACE`; the path may
  also sit inside the fence (`diff-fenced`). Strong models do well with these.
- whole functions: a python fence holding complete `def`s (decorators and a `class X:` wrapper
  optional). Each replaces the function of that name in the target file. A 1.5B model follows
  this format when it follows no other (REFERENCE.md, "LLM edit formats").
- unified diffs in a diff fence. Hunks are read leniently (the @@ counts are ignored) and
  applied as search/replace blocks, so miscounted headers and re-indented context still land.
Search/replace blocks and diffs may be mixed; python blocks count as edits only in a reply
that has neither (beside explicit edits they are illustrations).

The module is pure: file texts come in as a dict, new texts and a canonical unified diff go out.
Every edit is located in the ORIGINAL text (the text the model saw), so edits that overlap are
a conflict, never silently stacked. Which paths may be edited is patchguard's call; this module
only maps edits onto the files it is given. Every `EditError` message is written to be fed back
to the model: it names the allowed paths, quotes the nearest real lines, or lists candidates.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass

from ..sources import strip_prefix

SEARCH, DIVIDER, REPLACE = "SEARCH", "=======", "REPLACE"
_HEAD = re.compile(r"^\s*<{5,9} ?SEARCH\b.*$")
_DIV = re.compile(r"^\s*={5,9}\s*$")
_TAIL = re.compile(r"^\s*>{5,9} ?REPLACE\b.*$")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([^\s`]*)\s*(.*?)\s*$")
_HUNK = re.compile(r"^@@+ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")
_PY_LANGS = ("", "python", "py", "python3", "py3")
_DIFF_LANGS = ("diff", "patch", "udiff")
# A python line that stands for code the model left out ("lazy" edits) rather than code.
_ELISION = re.compile(r"^\s*(?:\.\.\.\s*$|#\s*\.\.\.|#.*\b(?:rest of the|remaining code|existing code)\b|"
                      r"#.*\b(?:code|lines|rest|body|function|method|logic)\b.*\b(?:unchanged|omitted|as before)\b)",
                      re.I)
NO_EDIT = ("the reply contains no edit: answer with SEARCH/REPLACE blocks, the whole corrected function in one "
           "```python block, or one ```diff block")
NEAR_LINES = 3  # context lines quoted around the nearest match
NEAR_CANDIDATES = 12  # windows scored with difflib when looking for the nearest match
_WORD = re.compile(r"\w+")


_DIFF_FENCE = re.compile(r"```(?:diff|patch|udiff)?[ \t]*\n(.*?)```", re.S)
_DIFF_START = re.compile(r"^(?:diff --git |--- )", re.M)


def extract_diff(text: str) -> str | None:
    """The unified diff inside an LLM reply: the first fenced block that looks like a diff,
    else the text from the first `--- ` / `diff --git` line. None when there is none."""
    if not text:
        return None
    for block in _DIFF_FENCE.findall(text):
        if _DIFF_START.search(block) and "@@" in block:
            return _normalise(block)
    m = _DIFF_START.search(text)
    if m and "@@" in text[m.start():]:
        return _normalise(text[m.start():])
    return None


def _normalise(diff: str) -> str:
    diff = diff.replace("\r\n", "\n")
    return diff if diff.endswith("\n") else diff + "\n"


class EditError(ValueError):
    """An edit cannot be parsed or applied; the message is feedback for the model."""


class _NoSuchFunction(EditError):
    """A whole-function edit names no existing function (it may be a new helper)."""


@dataclass(frozen=True)
class Edit:
    """One edit as the reply wrote it (nothing is resolved against a file yet).

    kind: `search_replace` (search -> replace), `hunk` (a unified-diff hunk as old -> new lines;
    `line` is its @@ -N start, used only to choose between several matches; `body` its lines as
    written, each tagged ' ', '-' or '+', which says which lines are context) or `function`
    (replace: the reply's source of one function; name: its qualname as written,
    `Cls.method` inside a class wrapper, else the bare name; imports: import statements that
    stood at the top of the same block; group: the number of its python block, as a function
    new to the file is added next to a function of the same block and class that replaces an
    existing one). path: as written in the reply, None when not given. index: 1-based position
    in the reply, for messages."""

    kind: str
    path: str | None
    search: str = ""
    replace: str = ""
    name: str = ""
    line: int | None = None
    imports: tuple[str, ...] = ()
    index: int = 0
    body: str = ""
    group: int = 0

    def describe(self) -> str:
        what = {"search_replace": "SEARCH/REPLACE block", "hunk": "diff hunk", "function": "function"}[self.kind]
        return f"{what} {self.index}" + (f" (`{self.name}`)" if self.name else "")


# ---------------------------------------------------------------------------- parsing


@dataclass
class _Fence:
    lang: str
    info: str  # the rest of the opening line (sometimes a path)
    start: int  # line index of the opening fence
    body: list[str]


def _fences(lines: list[str]) -> list[_Fence]:
    out, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        mark, j = m.group(1), i + 1
        while j < len(lines) and lines[j].strip() != mark:
            j += 1
        out.append(_Fence(m.group(2).lower(), m.group(3), i, lines[i + 1:j]))
        i = j + 1
    return out


def _as_path(line: str) -> str | None:
    """A file path written on its own line (`**x.py**`, `` `x.py` ``, `File: x.py:` ...), else None."""
    s = line.strip().strip("*`#").strip().replace("\\_", "_")  # markdown escapes `_` in names
    s = re.sub(r"^(?:file(?:name)?|path)\s*:\s*", "", s, flags=re.I).strip().strip("`*").rstrip(":").strip()
    if not s or " " in s or not re.search(r"\.py\w?$", s):
        return None
    return s


def _path_before(lines: list[str], i: int) -> str | None:
    """The path written just before line i: up to 3 non-blank lines back, passing only fence
    lines (`path` then a fence; the path alone in a fence of its own, as Deepseek Coder writes it)."""
    seen = 0
    for j in range(i - 1, -1, -1):
        if not lines[j].strip():
            continue
        seen += 1
        m = _FENCE.match(lines[j])
        found = _as_path(m.group(3)) if m else _as_path(lines[j])
        if found or not m or seen >= 3:
            return found
    return None


def _search_blocks(lines: list[str], first_index: int) -> tuple[list[Edit], set[int]]:
    """The SEARCH/REPLACE blocks of the reply, and the line indexes they cover."""
    edits: list[Edit] = []
    covered: set[int] = set()
    path: str | None = None
    i = 0
    while i < len(lines):
        if not _HEAD.match(lines[i]):
            i += 1
            continue
        n = first_index + len(edits)
        path = _path_before(lines, i) or path  # a block without a path line continues the previous file
        j = i + 1
        while j < len(lines) and not _DIV.match(lines[j]) and not _HEAD.match(lines[j]):
            j += 1
        if j >= len(lines) or not _DIV.match(lines[j]):
            raise EditError(f"SEARCH/REPLACE block {n} (reply line {i + 1}) has no `{DIVIDER}` line; write "
                            f"<<<<<<< {SEARCH}, the old lines, {DIVIDER}, the new lines, >>>>>>> {REPLACE}")
        k = j + 1
        while k < len(lines) and not _TAIL.match(lines[k]) and not _HEAD.match(lines[k]) and not _DIV.match(lines[k]):
            k += 1
        if k >= len(lines) or not _TAIL.match(lines[k]):
            raise EditError(f"SEARCH/REPLACE block {n} (reply line {i + 1}) does not end with `>>>>>>> {REPLACE}`")
        edits.append(Edit("search_replace", path, search=_join(lines[i + 1:j]), replace=_join(lines[j + 1:k]), index=n))
        covered.update(range(i, k + 1))
        i = k + 1
    return edits, covered


def _join(lines: list[str]) -> str:
    return "".join(ln + "\n" for ln in lines)


def _diff_hunks(diff: str, first_index: int) -> list[Edit]:
    """Hunks of a unified diff as old -> new line edits. The @@ counts are ignored (models
    miscount them); a hunk ends at the next header or at a line that is not ' ', '+', '-' or blank."""
    edits: list[Edit] = []
    path: str | None = None
    hunk: tuple[int, list[str]] | None = None  # (@@ -N, body lines tagged ' ', '-', '+'; '' for a bare blank)

    def close() -> None:
        nonlocal hunk
        if hunk:
            body = hunk[1]
            while body and body[-1] == "":  # blank lines between the diff and the prose after it
                body.pop()
            old = [b[1:] for b in body if b[:1] in (" ", "-", "")]
            new = [b[1:] for b in body if b[:1] in (" ", "+", "")]
            if old != new:
                edits.append(Edit("hunk", path, search=_join(old), replace=_join(new), line=hunk[0],
                                  index=first_index + len(edits), body=_join(body)))
        hunk = None

    lines = diff.splitlines()
    for i, ln in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if ln.startswith("--- ") and nxt.startswith("+++ "):  # a file header (a removed `-- x` line is not)
            close()
            old = ln[4:].split("\t")[0].strip()
            path = None if old == "/dev/null" else strip_prefix(old)
        elif ln.startswith("+++ ") and hunk is None:
            new = ln[4:].split("\t")[0].strip()
            if new != "/dev/null":
                path = strip_prefix(new)
        elif ln.startswith("@@"):
            close()
            m = _HUNK.match(ln)
            hunk = (int(m.group(1)) if m else 0, [])
        elif hunk is not None and ln[:1] in (" ", "-", "+", ""):
            hunk[1].append(ln)
        elif ln.startswith("\\"):
            continue
        else:
            close()
    close()
    return edits


def _function_edits(fence: _Fence, path: str | None, first_index: int, group: int) -> list[Edit]:
    """The functions of a python block (module-level ones and methods of classes), [] when it
    has none (an illustration). Other statements are not edits and are left out: an example
    call after the function, or the rest of a reprinted module. A block that starts like a
    function but does not parse is an error."""
    src = _dedent("\n".join(fence.body)) + "\n"
    code = [ln for ln in src.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    looks = bool(code) and re.match(r"^(?:@|def |async def |class )", code[0].lstrip()) is not None
    if not looks and not any(re.match(r"^(?:def |async def |class )", ln) for ln in code):
        return []
    try:
        tree = ast.parse(src)
    except SyntaxError as e:
        raise EditError(f"the python block at reply line {fence.start + 1} does not parse: {e.msg} at its line "
                        f"{e.lineno}: {_line(src, e.lineno)!r}; return complete, valid functions") from e
    lines = src.splitlines()
    funcs: list[tuple[str, ast.AST]] = []
    imports: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            funcs.append((node.name, node))
        elif isinstance(node, ast.ClassDef):
            funcs.extend(_methods(node, node.name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(ast.get_source_segment(src, node) or ast.unparse(node))
    out = []
    for qual, node in funcs:
        first = _first_line(node)
        text = "\n".join(lines[first - 1:node.end_lineno]) + "\n"
        out.append(Edit("function", path, replace=text, name=qual, imports=tuple(imports),
                        index=first_index + len(out), group=group))
    return out


def _methods(cls: ast.ClassDef, prefix: str) -> list[tuple[str, ast.AST]]:
    out: list[tuple[str, ast.AST]] = []
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((f"{prefix}.{node.name}", node))
        elif isinstance(node, ast.ClassDef):
            out.extend(_methods(node, f"{prefix}.{node.name}"))
    return out


def parse_reply(text: str) -> list[Edit]:
    """All edits in an LLM reply: its search/replace blocks and diff hunks, in that order; when it
    has neither, the functions of its python blocks. [] when the reply holds none (see `NO_EDIT`).
    Raises EditError for a block that is recognisably an edit but malformed (a SEARCH block
    without its divider or end marker, a function block that does not parse)."""
    if not text:
        return []
    lines = text.replace("\r\n", "\n").split("\n")
    edits, covered = _search_blocks(lines, 1)
    diffs: list[str] = []
    python: list[_Fence] = []
    for fence in _fences(lines):
        if fence.start in covered or any(_HEAD.match(ln) for ln in fence.body):
            continue
        body = _join(fence.body)
        diff_like = body.lstrip().startswith(("--- ", "diff --git ", "@@"))  # a diff in a python fence
        if fence.lang in _DIFF_LANGS or (fence.lang in _PY_LANGS and diff_like):
            d = extract_diff(body)
            if d:
                diffs.append(d)
        elif fence.lang in _PY_LANGS:
            python.append(fence)
    if not diffs and not edits:
        d = extract_diff(text)  # an unfenced diff
        if d:
            diffs.append(d)
    for d in diffs:
        edits.extend(_diff_hunks(d, len(edits) + 1))
    if edits:
        return edits  # python blocks beside explicit edits illustrate them; they are not edits
    for group, fence in enumerate(python, 1):
        path = _as_path(fence.info) or _path_before(lines, fence.start)
        edits.extend(_function_edits(fence, path, len(edits) + 1, group))
    return edits


# ---------------------------------------------------------------------------- matching


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _min_indent(lines: list[str]) -> int:
    widths = [len(_indent(ln)) for ln in lines if ln.strip()]
    return min(widths) if widths else 0


def _dedent(text: str) -> str:
    lines = text.splitlines()
    n = _min_indent(lines)
    return "\n".join(ln[n:] if ln.strip() else "" for ln in lines)


def _strip_indent(line: str, n: int) -> str:
    """`line` without up to n leading whitespace characters."""
    k = 0
    while k < n and k < len(line) and line[k] in " \t":
        k += 1
    return line[k:]


@dataclass
class _Span:
    """Lines [start, end) of the original file (0-based) replaced by `new`."""

    path: str
    start: int
    end: int
    new: list[str]
    edit: Edit
    top: int | None = None  # a replaced function's first line (0-based, decorators included)
    indent: str = ""  # and its indentation: where and how a new sibling function goes


def _windows_exact(lines: list[str], pat: list[str], key) -> list[int]:
    n = len(pat)
    want = [key(p) for p in pat]
    keyed = [key(ln) for ln in lines]
    return [i for i in range(len(lines) - n + 1) if keyed[i:i + n] == want]


def _match_indented(lines: list[str], pat: list[str]) -> list[tuple[int, str]]:
    """Windows where `pat` (already dedented) matches with one uniform extra indentation; (start, indent)."""
    n, out = len(pat), []
    first = next(k for k, p in enumerate(pat) if p.strip())
    for i in range(len(lines) - n + 1):
        head = lines[i + first].rstrip()
        if not head.endswith(pat[first].rstrip()):
            continue
        pre = head[: len(head) - len(pat[first].rstrip())]
        if pre.strip():
            continue
        window = zip(lines[i:i + n], pat)
        if all((not p.strip() and not f.strip()) or f.rstrip() == pre + p.rstrip() for f, p in window):
            out.append((i, pre))
    return out


def _locate(lines: list[str], search: list[str], replace: list[str]) -> list[tuple[int, int, list[str]]]:
    """Where `search` matches `lines`, tolerating drift, as (start, end, replacement) per match.
    The first strategy with any match decides: exact; ignoring trailing whitespace; ignoring a
    uniform leading indentation (the replacement is re-indented to the match); and, last,
    ignoring blank lines (with the same indentation tolerance)."""
    n = len(search)
    hits = _windows_exact(lines, search, lambda s: s)
    if hits:
        return [(i, i + n, list(replace)) for i in hits]
    hits = _windows_exact(lines, search, str.rstrip)
    if hits:
        return [(i, i + n, [r.rstrip() for r in replace]) for i in hits]
    # Uniform indentation drift: strip the indentation common to SEARCH and REPLACE (their
    # relative indentation is meaningful), find windows that equal SEARCH plus one prefix.
    k = _min_indent(search + replace)
    pat = [_strip_indent(s, k).rstrip() for s in search]
    rep = [_strip_indent(r, k).rstrip() for r in replace]
    found = _match_indented(lines, pat)
    if found:
        return [(i, i + n, [pre + r if r else "" for r in rep]) for i, pre in found]
    # Blank lines added or dropped: match the non-blank lines of SEARCH against non-blank file lines.
    dense = [p for p in pat if p]
    idx = [i for i, ln in enumerate(lines) if ln.strip()]
    found = _match_indented([lines[i] for i in idx], dense)
    return [(idx[i], idx[i + len(dense) - 1] + 1, [pre + r if r else "" for r in rep]) for i, pre in found]


def _locate_hunk(lines: list[str], body: list[str]) -> list[tuple[int, int, list[str]]]:
    """A diff hunk whose context/removed lines match only when each line's own indentation is
    ignored (a context line off by a space, the failure of the 1.5B model's diffs). The lines
    are then the file's own for context, and the model's for added lines, shifted by the
    indentation offset most of the matched lines share."""
    body = [b or " " for b in body]  # a bare blank line is an empty context line
    old = [b[1:] for b in body if b[:1] in (" ", "-")]
    want = [o.strip() for o in old]
    if not any(want):
        return []
    out = []
    for i in range(len(lines) - len(old) + 1):
        if [ln.strip() for ln in lines[i:i + len(old)]] != want:
            continue
        shifts = [len(_indent(f)) - len(_indent(o)) for f, o in zip(lines[i:i + len(old)], old) if o.strip()]
        shift = max(set(shifts), key=shifts.count)
        new, k = [], i
        for b in body:
            tag, text = b[:1], b[1:]
            if tag == " ":
                new.append(lines[k])
            elif tag == "+":
                new.append(" " * shift + text.rstrip() if shift >= 0 and text.strip() else
                           _strip_indent(text, -shift).rstrip())
            k += tag in (" ", "-")
        out.append((i, i + len(old), new))
    return out


def _lines(text: str) -> list[str]:
    """A file's lines split on "\n" only, as ast counts them (str.splitlines also splits on form
    feeds and other separators, which rejoining would turn into newlines)."""
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def _quote(lines: list[str], start: int, end: int) -> str:
    return "\n".join(f"{i + 1:5d}| {lines[i]}" for i in range(max(start, 0), min(end, len(lines))))


def _nearest(lines: list[str], search: list[str]) -> tuple[int, int, float] | None:
    """The window of the file most similar to `search`: windows are ranked by the identifiers
    they share with it (linear in the file), and the best few are scored with difflib's ratio
    over their stripped text (quadratic, so only for those few)."""
    pat = [s.strip() for s in search if s.strip()]
    if not pat or not lines:
        return None
    n = min(len(search), len(lines))
    want = set(_WORD.findall(" ".join(pat)))
    per_line = [len(set(_WORD.findall(ln)) & want) for ln in lines]
    sums = [sum(per_line[:n])]
    for i in range(1, len(lines) - n + 1):
        sums.append(sums[-1] + per_line[i + n - 1] - per_line[i - 1])
    ranked = sorted(range(len(sums)), key=lambda i: (-sums[i], i))[:NEAR_CANDIDATES]
    sm = difflib.SequenceMatcher(autojunk=False)
    sm.set_seq2("\n".join(pat))
    best = (0, n, -1.0)
    for i in sorted(ranked):
        sm.set_seq1("\n".join(s for s in (ln.strip() for ln in lines[i:i + n]) if s))
        r = sm.ratio()
        if r > best[2]:
            best = (i, i + n, r)
    return best


def _no_match(path: str, lines: list[str], edit: Edit, search: list[str], replace: list[str]) -> EditError:
    msg = [f"{path}: the {edit.describe()} matches no lines of the file."]
    near = _nearest(lines, search)
    if near and near[2] > 0.3:
        s, e, r = near
        msg.append(f"Did you mean to match these actual lines (lines {s + 1}-{e}, {r:.0%} similar)?\n"
                   + _quote(lines, s - NEAR_LINES, e + NEAR_LINES))
    if replace and any(r.strip() for r in replace) and _locate(lines, replace, replace):
        msg.append("Its REPLACE lines are already in the file: this edit may already be applied.")
    msg.append("The old lines must copy existing lines of the file verbatim (a uniform indentation shift, "
               "trailing spaces and blank lines are tolerated); quote enough lines to be unique.")
    return EditError("\n".join(msg))


def _resolve_block(path: str, text: str, edit: Edit) -> _Span:
    search = edit.search.splitlines()
    replace = edit.replace.splitlines()
    if not any(s.strip() for s in search):
        raise EditError(f"{path}: the {edit.describe()} has an empty SEARCH section; to add code, quote the "
                        "existing lines next to it in SEARCH and repeat them with the new code in REPLACE")
    lines = _lines(text)
    hits = _locate(lines, search, replace)
    if not hits and edit.body:
        hits = _locate_hunk(lines, edit.body.splitlines())
    if not hits:
        raise _no_match(path, lines, edit, search, replace)
    if len(hits) > 1 and edit.line:  # a diff hunk: its header chooses, as `patch` does
        hits = [min(hits, key=lambda h: (abs(h[0] + 1 - edit.line), h[0]))]
    if len(hits) > 1:
        where = ", ".join(f"lines {s + 1}-{e}" for s, e, _ in hits[:6])
        raise EditError(f"{path}: the {edit.describe()} matches {len(hits)} places ({where}); include more "
                        "surrounding lines in SEARCH so that it matches exactly one")
    s, e, new = hits[0]
    return _Span(path, s, e, new, edit)


# ---------------------------------------------------------------------------- functions


@dataclass
class _Def:
    qualname: str
    node: ast.AST
    first: int  # 1-based, the first decorator's line

    @property
    def end(self) -> int:
        return self.node.end_lineno  # type: ignore[attr-defined]


def _first_line(node) -> int:
    return min([d.lineno for d in node.decorator_list] + [node.lineno])


def _defs(tree: ast.Module) -> list[_Def]:
    """Module-level functions and methods of (nested) classes, with their qualnames."""
    out: list[_Def] = []

    def walk(body, prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append(_Def(prefix + node.name, node, _first_line(node)))
            elif isinstance(node, ast.ClassDef):
                walk(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.If, ast.Try)):  # `if TYPE_CHECKING:` / `try: import` definitions
                walk(node.body, prefix)
                walk(getattr(node, "orelse", []), prefix)

    walk(tree.body, "")
    return out


def _arg_names(node) -> list[str]:
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    return names + [f"*{a.vararg.arg}" if a.vararg else "", f"**{a.kwarg.arg}" if a.kwarg else ""]


def _parse(path: str, text: str) -> ast.Module:
    try:
        return ast.parse(text)
    except SyntaxError as e:
        raise EditError(f"{path} does not parse as Python ({e.msg} at line {e.lineno}); "
                        "whole-function edits need a parseable file") from e


def _pick_def(path: str, defs: list[_Def], edit: Edit, reply_node, anchor: int | None) -> _Def:
    """The function an edit replaces: by qualname (suffix match), then the one enclosing the
    anchor line (the break), then the one with the same parameters."""
    name = edit.name
    cands = [d for d in defs if d.qualname == name or d.qualname.endswith("." + name)]
    if not cands and "." in name and anchor is not None:
        # A misnamed class wrapper: the bare name still finds the function enclosing the break.
        short = name.rsplit(".", 1)[-1]
        cands = [d for d in defs if d.qualname.rsplit(".", 1)[-1] == short and d.first <= anchor <= d.end]
    if not cands:
        short = name.rsplit(".", 1)[-1]
        same = [d.qualname for d in defs if d.qualname.rsplit(".", 1)[-1] == short]
        hint = (f"functions named `{short}` there: {', '.join(same)}" if same else
                "its functions include: " + ", ".join(d.qualname for d in defs[:40]))
        raise _NoSuchFunction(f"{path}: the {edit.describe()} names no existing function ({hint}). A "
                              "whole-function block replaces existing functions (a new helper goes in the same "
                              "block as a function it serves); wrap a method in its `class Name:` line")
    if len(cands) > 1 and anchor is not None:
        inside = [d for d in cands if d.first <= anchor <= d.end]
        cands = inside or cands
    if len(cands) > 1:
        sig = _arg_names(reply_node)
        same_sig = [d for d in cands if _arg_names(d.node) == sig]
        cands = same_sig if len(same_sig) == 1 else cands
    if len(cands) > 1:
        listed = ", ".join(f"{d.qualname} (line {d.first})" for d in cands[:12])
        owner = next((d.qualname.rsplit(".", 1)[0] for d in cands if "." in d.qualname), None)
        how = (f"Wrap the function in its class, e.g. `class {owner}:` followed by the indented method" if owner
               else "Name its file on the line before the block")
        raise EditError(f"{path}: `{name}` is ambiguous: {listed}. {how}")
    return cands[0]


def _reply_node(edit: Edit):
    lines = edit.replace.splitlines()
    k = len(_indent(lines[0]))  # a method taken from its class wrapper is still indented
    return ast.parse("\n".join(_strip_indent(ln, k) for ln in lines)).body[0]


def _resolve_function(path: str, text: str, edit: Edit, anchor: int | None) -> list[_Span]:
    tree = _parse(path, text)
    node = _reply_node(edit)
    target = _pick_def(path, _defs(tree), edit, node, anchor)
    lines = _lines(text)
    _no_elision(path, edit, lines[target.first - 1:target.end])
    want = _indent(lines[target.node.lineno - 1])  # type: ignore[attr-defined]
    new = _reindent(edit, want)
    # A reply without decorators keeps the original's (small models leave them out); one with
    # decorators replaces them.
    first = target.first if node.decorator_list else target.node.lineno  # type: ignore[attr-defined]
    spans = [_Span(path, first - 1, target.end, new, edit, top=target.first - 1, indent=want)]
    missing = _missing_imports(tree, edit.imports)
    if missing:
        at = max((n.end_lineno for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))), default=0)
        if not at and tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant):
            at = tree.body[0].end_lineno  # after the module docstring, never above it
        spans.append(_Span(path, at, at, missing, edit))
    return spans


def _no_elision(path: str, edit: Edit, old: list[str]) -> None:
    old_set = {ln.strip() for ln in old}
    lazy = [ln for ln in edit.replace.splitlines() if _ELISION.match(ln) and ln.strip() not in old_set]
    if lazy:
        raise EditError(f"{path}: the {edit.describe()} leaves code out ({lazy[0].strip()!r}); return the "
                        "complete function, every line of it, with your change")


def _reindent(edit: Edit, want: str) -> list[str]:
    """The reply's function lines at indentation `want` (measured from its def/decorator line:
    a multi-line string's lines may sit further left)."""
    src = edit.replace.splitlines()
    have = len(_indent(src[0]))
    return [want + _strip_indent(ln, have) if ln.strip() else "" for ln in src]


def _new_sibling(edit: Edit, resolved: list[tuple[Edit, list[_Span]]]) -> list[_Span] | None:
    """A function new to the file, placed above a function of the same block and scope (module
    or class, as the reply wrote it) that replaces an existing one; None without such a sibling."""
    scope = edit.name.rpartition(".")[0]
    for other, spans in resolved:
        if other.kind == "function" and other.group == edit.group and other.name.rpartition(".")[0] == scope:
            main = spans[0]
            _no_elision(main.path, edit, [])
            blank = [""] * (1 if main.indent else 2)  # between methods one blank line, two at module level
            return [_Span(main.path, main.top, main.top, _reindent(edit, main.indent) + blank, edit)]
    return None


def _missing_imports(tree: ast.Module, imports: tuple[str, ...]) -> list[str]:
    """The reply's import statements that the file does not already have (compared as unparsed AST)."""
    have = {ast.unparse(n) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))}
    out = []
    for imp in imports:
        for n in ast.parse(imp).body:
            if ast.unparse(n) not in have:
                out.append(ast.unparse(n))
    return out


# ---------------------------------------------------------------------------- applying


def _target(edit: Edit, files: dict[str, str], default_path: str | None) -> list[str]:
    """The files an edit may land in: its own path mapped onto `files`, else the default path,
    else every file (a unique match decides)."""
    if edit.path is None:
        if default_path is not None:
            return [default_path]
        return list(files)
    p = strip_prefix(edit.path.strip().replace("\\", "/"))
    if p in files:
        return [p]
    # Models shorten paths (`modeling_x.py`) or write the installed one (`.../site-packages/transformers/...`):
    # accept a whole-component suffix that names exactly one given file.
    parts = [x for x in p.split("/") if x]
    if parts and ".." not in parts:
        hits = [f for f in files if _suffix_match(f.split("/"), parts)]
        if len(hits) == 1:
            return hits
    raise EditError(f"the {edit.describe()} names the file {edit.path!r}, which is not one you may edit here; "
                    f"the files are: {', '.join(files)}")


def _suffix_match(have: list[str], given: list[str]) -> bool:
    """`given` is `have` shortened (`modeling_x.py`) or an installed path ending with it
    (`.../site-packages/transformers/models/x/modeling_x.py`: the installed layout drops `src/`)."""
    package = have[1:] if have[0] == "src" else have
    return given[-len(package):] == package or (len(given) <= len(have) and have[-len(given):] == given)


def _resolve(edit: Edit, files: dict[str, str], default_path: str | None,
             anchor: tuple[str, int] | None) -> list[_Span]:
    paths = _target(edit, files, default_path)
    errors: list[EditError] = []
    found: list[list[_Span]] = []
    for p in paths:
        line = anchor[1] if anchor and anchor[0] == p else None
        try:
            if edit.kind == "function":
                found.append(_resolve_function(p, files[p], edit, line))
            else:
                found.append([_resolve_block(p, files[p], edit)])
        except EditError as e:
            errors.append(e)
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise EditError(f"the {edit.describe()} matches in several files ({', '.join(f[0].path for f in found)}); "
                        "name the file on the line before the block")
    if len(errors) == 1:
        raise errors[0]
    kind = _NoSuchFunction if all(isinstance(e, _NoSuchFunction) for e in errors) else EditError
    raise kind("\n".join(str(e) for e in errors))


def apply_edits(edits: list[Edit], files: dict[str, str], default_path: str | None = None,
                anchor: tuple[str, int] | None = None) -> dict[str, str]:
    """The new text of every file the edits change, {upstream path: new text}.

    files: {upstream path: original text}, the only files edits may touch. default_path: where
    an edit without a path goes (else every file is tried and exactly one must match). anchor:
    (path, 1-based line) of the break, which picks among same-named functions. Every edit is
    located in the original text; edits that change nothing are dropped, identical duplicates
    merged, and overlapping edits refused. A whole function new to the file is added above a
    function of the same python block and scope that replaces an existing one. Raises EditError
    (feedback for the model) for an edit that cannot be placed, a conflict, a result that does
    not parse, or no change at all."""
    if not edits:
        raise EditError(NO_EDIT)
    if default_path is not None and default_path not in files:
        raise ValueError(f"default_path {default_path!r} is not one of the files")
    resolved: list[tuple[Edit, list[_Span]]] = []
    new_functions: list[tuple[Edit, EditError]] = []
    for edit in edits:
        try:
            resolved.append((edit, _resolve(edit, files, default_path, anchor)))
        except _NoSuchFunction as e:
            new_functions.append((edit, e))
    for edit, err in new_functions:
        placed = _new_sibling(edit, resolved)
        if placed is None:
            raise err
        resolved.append((edit, placed))
    spans = [sp for _, found in resolved for sp in found if sp.new != _lines(files[sp.path])[sp.start:sp.end]]
    if not spans:
        raise EditError("the edits change nothing: the code you returned is identical to the current code; "
                        "change the lines that cause the graph break")
    out: dict[str, str] = {}
    for path in files:
        mine = _dedupe(sorted((s for s in spans if s.path == path), key=lambda s: (s.start, s.end)))
        if not mine:
            continue
        reach = mine[0]  # the span reaching furthest so far: any overlap shows against it
        for b in mine[1:]:
            if b.start < reach.end:
                raise EditError(f"{path}: the {reach.edit.describe()} and the {b.edit.describe()} both change lines "
                                f"{b.start + 1}-{min(reach.end, b.end)}; make one edit per place")
            reach = b if b.end >= reach.end else reach
        original = files[path]
        lines = _lines(original)
        new: list[str] = []
        cursor = 0
        for sp in mine:
            new.extend(lines[cursor:sp.start])
            new.extend(sp.new)
            cursor = max(cursor, sp.end)
        new.extend(lines[cursor:])
        text = "\n".join(new) + ("\n" if original.endswith("\n") or not original else "")
        try:
            ast.parse(text)
        except SyntaxError as e:
            raise EditError(f"{path}: after the edits the file does not parse: {e.msg} at line {e.lineno}:\n"
                            + _quote(text.splitlines(), (e.lineno or 1) - 3, (e.lineno or 1) + 2)) from e
        if text != original:
            out[path] = text
    return out


def _dedupe(spans: list[_Span]) -> list[_Span]:
    out: list[_Span] = []
    for s in spans:
        if out and (out[-1].start, out[-1].end, out[-1].new) == (s.start, s.end, s.new):
            continue
        out.append(s)
    return out


def to_unified_diff(originals: dict[str, str], news: dict[str, str]) -> str:
    """The canonical diff of the changed files, in `originals` order: difflib's unified diff
    with `a/<path>` / `b/<path>` headers, the format overlay.build_overlay recomputes and
    patchguard.check_patch parses. "" when nothing changed."""
    parts: list[str] = []
    for path, old in originals.items():
        new = news.get(path, old)
        if new == old:
            continue
        for ln in difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                       f"a/{path}", f"b/{path}"):
            parts.append(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n")
    return "".join(parts)


def _line(text: str, n: int | None) -> str:
    lines = text.splitlines()
    return lines[n - 1] if n and 0 < n <= len(lines) else ""


def named_paths(edits: list[Edit]) -> list[str]:
    """The paths the edits name, `a/`/`b/` prefixes stripped, in first-mention order, so that a
    caller can police them (patchguard.check_path) and load the allowed ones into `files`."""
    out: list[str] = []
    for e in edits:
        if e.path is not None:
            p = strip_prefix(e.path.strip())
            if p not in out:
                out.append(p)
    return out


def reply_to_diff(text: str, files: dict[str, str], default_path: str | None = None,
                  anchor: tuple[str, int] | None = None) -> str:
    """parse_reply -> apply_edits -> to_unified_diff in one call: the canonical diff of the
    reply's edits to `files`. Raises EditError (NO_EDIT when the reply has no edit)."""
    edits = parse_reply(text)
    if not edits:
        raise EditError(NO_EDIT)
    return to_unified_diff(files, apply_edits(edits, files, default_path=default_path, anchor=anchor))
