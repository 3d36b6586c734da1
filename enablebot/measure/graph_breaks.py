"""Graph breaks: parse Dynamo's reasons into typed records with registry ids and user frames.

Dynamo's break reasons look like:

    Data dependent operator
      Explanation: Operator `aten._local_scalar_dense.default` has a non-Tensor output ...
      Hint: Enable tracing of data-dependent output operators with ...

      Developer debug context: aten._local_scalar_dense.default

     For more details about this graph break, please visit: https://.../gb/gb0033.html

The first line is the gb_type; the link (or, failing that, the gb_type) maps to the
id in torch/_dynamo/graph_break_registry.json.
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from typing import Any, Iterable

from ..results import GraphBreak, UserFrame

_GB_LINK = re.compile(r"gb/gb(\d{4})\.html", re.I)
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>[^\n]+)\n(?P<src>[ \t]+[^\n]*)?')


@lru_cache(maxsize=1)
def break_registry() -> dict[str, dict[str, Any]]:
    """GBxxxx -> {Gb_type, Context, Explanation, Hints} from the installed torch (may be empty)."""
    try:
        import torch._dynamo

        path = os.path.join(os.path.dirname(torch._dynamo.__file__), "graph_break_registry.json")
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError):
        return {}
    return {k: (v[0] if isinstance(v, list) and v else v) for k, v in raw.items()}


@lru_cache(maxsize=1)
def _ids_by_type() -> dict[str, str]:
    out: dict[str, str] = {}
    for gid, entry in sorted(break_registry().items()):
        out.setdefault(str(entry.get("Gb_type", "")), gid)
    return out


def registry_id(gb_type: str, text: str = "") -> str | None:
    m = _GB_LINK.search(text or "")
    if m:
        return f"GB{m.group(1)}"
    return _ids_by_type().get(gb_type)


def parse_reason(text: str) -> dict[str, Any]:
    """Split a Dynamo reason into gb_type, explanation, hints, context and registry id."""
    text = (text or "").strip()
    lines = text.splitlines()
    gb_type = lines[0].strip() if lines else ""
    # Older messages prefix the type: "Graph break: ..." / "Unsupported: ...".
    for prefix in ("Graph break: ", "Unsupported: "):
        if gb_type.startswith(prefix):
            gb_type = gb_type[len(prefix):]
    explanation, context, hints = "", "", []
    for line in lines[1:]:
        s = line.strip()
        if s.startswith("Explanation:"):
            explanation = s[len("Explanation:"):].strip()
        elif s.startswith("Hint:"):
            hints.append(s[len("Hint:"):].strip())
        elif s.startswith("Developer debug context:"):
            context = s[len("Developer debug context:"):].strip()
    rid = registry_id(gb_type, text)
    if rid and not explanation:
        entry = break_registry().get(rid, {})
        explanation = str(entry.get("Explanation", ""))
        hints = hints or [str(h) for h in entry.get("Hints", [])]
    return {"gb_type": gb_type, "explanation": explanation, "hints": hints, "context": context,
            "registry_id": rid}


_TORCH_FILE = re.compile(r"(^|/)(torch|functorch)/")
# Model code: transformers' per-model tree, remote code modules, overlays of either.
_MODEL_FILE = re.compile(r"(^|/)(transformers/models/|transformers_modules/)")


def _is_user_frame(filename: str) -> bool:
    f = filename.replace("\\", "/")
    return not (_TORCH_FILE.search(f) or f.startswith("<") or "/enablebot/" in f or f.endswith("/contextlib.py"))


def is_model_frame(filename: str, model_files: frozenset[str] | set[str] = frozenset()) -> bool:
    """A frame in the model's own code: transformers' `models/` tree, a remote-code module,
    or one of `model_files` (the files defining the model's modules, e.g. an overlay)."""
    f = filename.replace("\\", "/")
    return bool(_MODEL_FILE.search(f)) or filename in model_files


def model_files(model: Any) -> frozenset[str]:
    """Source files of the classes of a model's modules (outside torch)."""
    import inspect
    import sys

    out = set()
    for mod in model.modules():
        m = sys.modules.get(type(mod).__module__)
        path = getattr(m, "__file__", None)
        if path and not _TORCH_FILE.search(path.replace("\\", "/")):
            out.add(path)
    for cls in type(model).__mro__:
        try:
            out.add(inspect.getfile(cls))
        except (TypeError, OSError):
            pass
    return frozenset(f for f in out if not _TORCH_FILE.search(f.replace("\\", "/")))


def frames_from_stack(stack: Iterable[Any]) -> list[UserFrame]:
    out = []
    for fr in stack or []:
        out.append(UserFrame(filename=str(fr.filename), lineno=int(fr.lineno or 0), function=str(fr.name),
                             source=(fr.line or "").strip()))
    return out


def frames_from_text(text: str) -> list[UserFrame]:
    """Frames from a formatted traceback (as in Dynamo's 'from user code:' section)."""
    return [UserFrame(m["file"], int(m["line"]), m["func"].strip(), (m["src"] or "").strip())
            for m in _FRAME.finditer(text or "")]


def user_frame(frames: list[UserFrame], model_files: frozenset[str] | set[str] = frozenset()) -> UserFrame | None:
    """The innermost frame in model code; failing that, the innermost frame outside torch
    and the harness (transformers' shared utils); failing that, the innermost frame."""
    for pick in (lambda f: is_model_frame(f, model_files), _is_user_frame):
        for fr in reversed(frames):
            if pick(fr.filename):
                return fr
    return frames[-1] if frames else None


def make_break(reason: str, frames: list[UserFrame], source: str,
               model_files: frozenset[str] | set[str] = frozenset()) -> GraphBreak:
    p = parse_reason(reason)
    uf = user_frame(frames, model_files)
    trimmed = "\n".join(reason.strip().splitlines()[:12])
    return GraphBreak(gb_type=p["gb_type"], registry_id=p["registry_id"], explanation=p["explanation"],
                      hints=p["hints"], context=p["context"], user_frame=uf,
                      stack=[f for f in frames if _is_user_frame(f.filename)][-8:], count=1, reason=trimmed,
                      source=source)


def aggregate(breaks: Iterable[GraphBreak]) -> list[GraphBreak]:
    """Merge breaks of the same type at the same user frame, counting occurrences."""
    merged: dict[tuple, GraphBreak] = {}
    for b in breaks:
        uf = b.user_frame
        key = (b.gb_type, b.context, uf.filename if uf else None, uf.lineno if uf else None, b.step)
        if key in merged:
            merged[key].count += b.count
        else:
            merged[key] = b
    return sorted(merged.values(), key=lambda b: (-b.count, b.gb_type))


def from_reasons(reasons: Iterable[Any], *, step: str | None = None,
                 model_files: frozenset[str] | set[str] = frozenset()) -> list[GraphBreak]:
    """Typed breaks from Dynamo's GraphCompileReasons (explain's `break_reasons`, or those an
    ExplainWithBackend collected), not yet aggregated."""
    out = []
    for br in reasons or []:
        b = make_break(str(br.reason), frames_from_stack(getattr(br, "user_stack", [])), "explain", model_files)
        b.step = step
        out.append(b)
    return out


def from_explain(explain_output: Any, model_files: frozenset[str] | set[str] = frozenset()) -> list[GraphBreak]:
    """Typed breaks from torch._dynamo.explain(...)(...) output."""
    return aggregate(from_reasons(getattr(explain_output, "break_reasons", []), model_files=model_files))


def from_exception(exc: BaseException, model_files: frozenset[str] | set[str] = frozenset()) -> GraphBreak:
    """The break that made a fullgraph=True compile fail. Dynamo's own `Unsupported` errors
    carry a gb_type; others (e.g. GuardOnDataDependentSymNode from a data-dependent
    expression) are typed by their exception class, with the first line as explanation."""
    text = str(exc)
    frames = frames_from_stack(getattr(exc, "real_stack", None) or [])
    if not frames and "from user code:" in text:
        frames = frames_from_text(text.split("from user code:", 1)[1])
    if not frames and "User Stack" in text:
        frames = frames_from_text(text.split("User Stack", 1)[1])
    reason = text.split("\n\nfrom user code:")[0]
    b = make_break(reason, frames, "fullgraph", model_files)
    if getattr(exc, "gb_type", None):
        b.gb_type = str(exc.gb_type)
        b.registry_id = b.registry_id or registry_id(b.gb_type, text)
    elif b.registry_id is None and "Explanation:" not in reason:
        b.explanation = b.gb_type
        b.gb_type = type(exc).__name__
    return b


def from_error_text(text: str, source: str = "compile_error") -> GraphBreak | None:
    """The trace-stage error that stopped a compile (a `compile_error` verdict's message), as a
    break-like record: its type and registry id from the message's first lines (Dynamo words
    these like a break: "RuntimeError when making fake tensor call ... gb4315"), its frames from
    the "from user code:" section. The frame that keys it is the innermost one outside torch and
    the harness (for a failing op, the library or model line that calls it), not the innermost
    model-file frame a break is keyed on: the error is raised where the op is called. None when
    the message names no frame (nothing to localise a fix to)."""
    text = text or ""
    if "from user code:" not in text:
        return None
    reason, _, tail = text.partition("from user code:")
    frames = frames_from_text(tail)
    own = [f for f in frames if _is_user_frame(f.filename)]
    if not own:
        return None
    p = parse_reason(reason.strip())
    trimmed = "\n".join(reason.strip().splitlines()[:12])
    return GraphBreak(gb_type=p["gb_type"], registry_id=p["registry_id"], explanation=p["explanation"],
                      hints=p["hints"], context=p["context"], user_frame=own[-1], stack=own[-8:], count=1,
                      reason=trimmed, source=source)
