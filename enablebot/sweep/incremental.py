"""Incremental sweeps: reuse a previous result when nothing that decides it has changed.

The cache key of a sweep item is
- the torch version (release; the +cpu/+cu build tag is kept too),
- the transformers version,
- a content hash of the model's code: the file that defines the item's model class and every
  file it imports, transitively, from transformers' `models/` tree (relative and absolute
  imports, parsed with `ast`; `models/auto` is not followed: it is the name index of every
  architecture and changes with each release, without changing any one model),
- the run spec (and its scenario) and the registry's builder knowledge for the type.

Reuse rule: every component equal -> reuse. The transformers version alone differing -> reuse,
because the model's code hash is unchanged (that is what "a transformers upgrade re-runs only
the models whose code changed" needs); `strict=True` re-runs on any transformers change. Any
other difference re-runs the item, with the reason recorded. Infrastructure failures (timeout,
crash) are never reused: they say nothing about the model.
"""

from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from .. import jsonl
from ..results import RunResult, RunSpec, Serializable

KEYS_FILE = "cache_keys.jsonl"
DECISIONS_FILE = "incremental.json"
NEVER_REUSED = ("timeout", "crash")
# Spec fields that do not change what a run gives (paths of this machine); the registry's
# knowledge for the type is hashed instead of its path.
_SPEC_IGNORED = ("registry", "trace_dir")
# Entry fields that are builder knowledge; status, first_seen and notes are machine state or prose.
_KNOWLEDGE_FIELDS = ("config_class", "base", "head", "task", "modality", "requires", "config", "inputs", "hook")


@dataclass
class CacheKey(Serializable):
    torch: str
    transformers: str
    files: dict[str, str] = field(default_factory=dict)  # path under transformers/ -> sha256[:16]
    spec: str = ""  # sha256[:16] of the normalised spec
    scenario: str = "call"
    knowledge: str = ""  # sha256[:16] of the registry entry's builder knowledge
    spec_fields: dict[str, Any] = field(default_factory=dict)  # for "what changed" reasons

    @property
    def code_hash(self) -> str:
        return _sha(json.dumps(sorted(self.files.items())))

    def digest(self) -> str:
        return _sha(json.dumps([self.torch, self.transformers, self.code_hash, self.spec, self.scenario,
                                self.knowledge]))


@dataclass
class Decision(Serializable):
    key: str  # the result key (model|task|device|mode|dtype)
    action: str  # reuse | run
    reason: str


@dataclass
class ReusePlan(Serializable):
    decisions: list[Decision] = field(default_factory=list)
    reused: dict[str, RunResult] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for d in self.decisions:
            out[d.action] = out.get(d.action, 0) + 1
        return out

    def reasons(self) -> dict[str, int]:
        """Reasons with their counts; version numbers and file names kept out so they group."""
        out: dict[str, int] = {}
        for d in self.decisions:
            r = d.reason.split(":")[0]
            out[f"{d.action}: {r}"] = out.get(f"{d.action}: {r}", 0) + 1
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _sha(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()[:16]


# ---------------------------------------------------------------- model code and its imports

def transformers_root() -> Path:
    import transformers

    return Path(transformers.__file__).resolve().parent


def _module_path(root: Path, dotted: str) -> Path | None:
    """'models.llama.modeling_llama' (relative to the transformers package) -> its file."""
    p = root.joinpath(*dotted.split("."))
    if p.with_suffix(".py").is_file():
        return p.with_suffix(".py")
    if (p / "__init__.py").is_file():
        return p / "__init__.py"
    return None


def class_module_file(root: Path, class_name: str, model_type: str | None = None) -> Path | None:
    """The file that defines `class_name`, found without importing the model.

    transformers' lazy module index (`_class_to_module`, 5.x) is asked first; otherwise (older
    releases) the type's package is scanned for `class <name>`."""
    try:
        import transformers

        index = getattr(transformers, "_class_to_module", None) or {}
    except ImportError:
        index = {}
    if root == transformers_root() and class_name in index:
        f = _module_path(root, index[class_name])
        if f is not None:
            return f
    candidates: list[Path] = []
    if model_type:
        try:
            from transformers.models.auto.configuration_auto import model_type_to_module_name

            candidates.append(root / "models" / model_type_to_module_name(model_type))
        except ImportError:
            pass
        candidates.append(root / "models" / model_type.replace("-", "_"))
    needle = f"class {class_name}("
    for d in candidates:
        for f in sorted(d.glob("modeling*.py")) if d.is_dir() else []:
            if needle in f.read_text(encoding="utf-8", errors="replace"):
                return f
    return None


def _import_snippets(text: str):
    """The import statements of a file, as source snippets: parsing only these with `ast` is ~20x
    cheaper than parsing whole modeling files (thousands of lines each) and finds the same imports,
    including those nested in functions, `if` and `try` blocks."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        s = lines[i].lstrip()
        if s.startswith(("from ", "import ")):
            chunk = [s]
            depth = s.count("(") - s.count(")")
            while (depth > 0 or chunk[-1].rstrip().endswith("\\")) and i + 1 < len(lines):
                i += 1
                chunk.append(lines[i])
                depth += lines[i].count("(") - lines[i].count(")")
            yield "\n".join(chunk)
        i += 1


@lru_cache(maxsize=8192)
def _imports_of(path: Path, root: Path) -> tuple[Path, ...]:
    """Files under root/models (not models/auto) that `path` imports directly."""
    tree = ast.Module(body=[], type_ignores=[])
    for snippet in _import_snippets(path.read_text(encoding="utf-8", errors="replace")):
        try:
            tree.body.extend(ast.parse(snippet).body)
        except SyntaxError:
            continue  # e.g. a docstring line that starts with "from "
    package = list(path.relative_to(root).parts[:-1])  # the package the file's relative imports start from
    found: list[Path] = []

    def add(dotted_parts: list[str]) -> None:
        if len(dotted_parts) < 2 or dotted_parts[0] != "models" or dotted_parts[1] == "auto":
            return
        f = _module_path(root, ".".join(dotted_parts))
        if f is not None and f != path:
            found.append(f)

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level - 1 > len(package):
                    continue
                base = package[: len(package) - (node.level - 1)]
            elif node.module and node.module.startswith("transformers."):
                base = []
            else:
                continue
            mod = (node.module or "")
            mod_parts = [p for p in mod.split(".") if p]
            if not node.level:
                mod_parts = mod_parts[1:]  # drop "transformers"
            target = base + mod_parts
            add(target)
            for alias in node.names:  # `from . import modeling_x` names submodules
                if alias.name != "*" and _module_path(root, ".".join(target + [alias.name])) is not None:
                    add(target + [alias.name])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("transformers.models."):
                    add(alias.name.split(".")[1:])
    return tuple(sorted(set(found)))


def import_closure(entry: Path, root: Path) -> list[Path]:
    """`entry` and every file of transformers' models/ tree it reaches by imports."""
    seen: set[Path] = set()
    stack = [entry]
    while stack:
        f = stack.pop()
        if f in seen:
            continue
        seen.add(f)
        # A package's __init__ in transformers is a lazy name index: the modeling file imports its
        # configuration module explicitly, so following imports is enough.
        stack.extend(_imports_of(f, root))
    return sorted(seen)


@lru_cache(maxsize=8192)
def _file_hash(path: Path, mtime_ns: int, size: int) -> str:
    return _sha(path.read_bytes())


def file_hashes(files: Iterable[Path], root: Path) -> dict[str, str]:
    out = {}
    for f in files:
        st = f.stat()
        out[str(f.relative_to(root))] = _file_hash(f, st.st_mtime_ns, st.st_size)
    return out


# ---------------------------------------------------------------- the key

def _normalised_spec(spec: RunSpec) -> dict[str, Any]:
    d = spec.to_dict()
    for k in _SPEC_IGNORED:
        d.pop(k, None)
    d.setdefault("scenario", "call")
    return d


def knowledge_hash(entry: Any) -> str:
    if entry is None:
        return ""
    d = {k: getattr(entry, k, None) for k in _KNOWLEDGE_FIELDS}
    return _sha(json.dumps(d, sort_keys=True, default=str))


@lru_cache(maxsize=4096)
def sub_model_types(model_type: str) -> tuple[str, ...]:
    """Model types of the default sub-configs (llava -> clip_vision_model, llama): composite models
    build their towers through AutoModel, which static imports do not show."""
    try:
        from transformers import CONFIG_MAPPING
        from transformers.utils import logging as hf_logging

        level = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # default configs warn about their own token ids
        try:
            cfg = CONFIG_MAPPING[model_type]()
        finally:
            hf_logging.set_verbosity(level)
    except Exception:  # noqa: BLE001 - configs whose defaults do not construct: own code only
        return ()
    out = []
    for name in getattr(cfg, "sub_configs", None) or {}:
        mt = getattr(getattr(cfg, name, None), "model_type", None)
        if isinstance(mt, str) and mt != model_type:
            out.append(mt)
    return tuple(dict.fromkeys(out))


def model_files(root: Path, class_name: str, model_type: str, *, depth: int = 2) -> list[Path]:
    """The class's file, its import closure, and the same for its default sub-models' base classes."""
    files: set[Path] = set()
    f = class_module_file(root, class_name, model_type)
    if f is not None:
        files.update(import_closure(f, root))
    if depth and root == transformers_root():
        from ..model.catalog import known_architectures

        known = known_architectures()
        for sub in sub_model_types(model_type):
            k = known.get(sub)
            cls = k.base or k.head if k else None
            if cls:
                files.update(model_files(root, cls, sub, depth=depth - 1))
    return sorted(files)


def cache_key(spec: RunSpec, class_name: str | None, *, torch_version: str, transformers_version: str,
              root: Path, entry: Any = None, model_type: str | None = None) -> CacheKey:
    files: dict[str, str] = {}
    if class_name:
        files = file_hashes(model_files(root, class_name, model_type or spec.model_id), root)
    sd = _normalised_spec(spec)
    return CacheKey(torch=torch_version, transformers=transformers_version, files=files,
                    spec=_sha(json.dumps(sd, sort_keys=True, default=str)), scenario=str(sd.get("scenario") or "call"),
                    knowledge=knowledge_hash(entry), spec_fields=sd)


def decide(result_key: str, old: RunResult | None, old_key: CacheKey | None, new: CacheKey,
           *, strict: bool = False, keep_timeouts: bool = False) -> Decision:
    """Reuse `old` for the new key, or run again; the reason says which component moved."""
    def run(why: str) -> Decision:
        return Decision(result_key, "run", why)

    if old is None:
        return run("no previous result")
    if old_key is None:
        return run("no recorded cache key for the previous result")
    # A timeout is retried (load can cause it), unless the caller re-measures the same code on the
    # same machine and asks to keep it (the replay: a release with the type's code unchanged).
    if old.verdict in NEVER_REUSED and not (keep_timeouts and old.verdict == "timeout"):
        return run(f"previous verdict {old.verdict}: retried")
    if old_key.torch != new.torch:
        return run(f"torch changed: {old_key.torch} -> {new.torch}")
    if old_key.spec != new.spec or old_key.scenario != new.scenario:
        moved = sorted(k for k in set(old_key.spec_fields) | set(new.spec_fields)
                       if old_key.spec_fields.get(k) != new.spec_fields.get(k))
        return run("run spec changed: " + (", ".join(moved) or "scenario"))
    if old_key.knowledge != new.knowledge:
        return run("registry knowledge changed")
    if not new.files:
        return run("model code not found: cannot tell whether it changed")
    if old_key.files != new.files:
        moved = sorted(k for k in set(old_key.files) | set(new.files) if old_key.files.get(k) != new.files.get(k))
        return run("model code changed: " + ", ".join(moved[:5]) + (" ..." if len(moved) > 5 else ""))
    if old_key.transformers != new.transformers:
        if strict:
            return run(f"transformers changed (strict): {old_key.transformers} -> {new.transformers}")
        return Decision(result_key, "reuse", f"transformers {old_key.transformers} -> {new.transformers}, "
                                             f"model code unchanged ({len(new.files)} files)")
    return Decision(result_key, "reuse", "key unchanged")


# ---------------------------------------------------------------- the edges: recorded keys

def load_keys(sweep_dir: Path) -> dict[str, CacheKey]:
    """The recorded keys; a torn last line is dropped (that item re-runs), another bad line raises JsonlError."""
    out: dict[str, CacheKey] = {}
    p = Path(sweep_dir) / KEYS_FILE
    for no, d in jsonl.read(p).records:
        try:
            out[d["key"]] = CacheKey.from_dict(d["cache_key"])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise jsonl.JsonlError(p, no, f"not a cache-key record ({type(e).__name__}: {e})") from None
    return out


def append_key(sweep_dir: Path, result_key: str, key: CacheKey) -> None:
    jsonl.append(Path(sweep_dir) / KEYS_FILE, {"key": result_key, "cache_key": key.to_dict()})


def plan_reuse(new_keys: dict[str, CacheKey], previous: dict[str, RunResult], previous_keys: dict[str, CacheKey],
               *, strict: bool = False, keep_timeouts: bool = False) -> ReusePlan:
    plan = ReusePlan()
    for rk, nk in new_keys.items():
        d = decide(rk, previous.get(rk), previous_keys.get(rk), nk, strict=strict, keep_timeouts=keep_timeouts)
        plan.decisions.append(d)
        if d.action == "reuse":
            plan.reused[rk] = previous[rk]
    return plan


# ---------------------------------------------------------------- keys for a sweep's items

def installed_versions() -> tuple[str, str]:
    """(torch, transformers) from the installed distributions, without importing torch."""
    from importlib.metadata import version

    return version("torch"), version("transformers")


def spec_class(spec: RunSpec, registry: Any) -> str | None:
    """The model class an item builds: its task names base/head (registry first, then transformers)."""
    from ..model.catalog import known_architectures

    task = spec.task or "head"
    if task not in ("base", "head"):
        return task  # a class name
    e = registry.get(spec.model_id) if registry is not None else None
    k = known_architectures().get(spec.model_id)
    if task == "base":
        return (e.base if e else None) or (k.base if k else None)
    return (e.head if e else None) or (k.head if k else None) or (k.base if k else None)


def item_keys(specs: Iterable[RunSpec], registry: Any, *, versions: tuple[str, str] | None = None,
              root: Path | None = None) -> dict[str, CacheKey]:
    """Result key -> cache key for every spec."""
    torch_v, tf_v = versions or installed_versions()
    root = root or transformers_root()
    out = {}
    for s in specs:
        rk = RunResult(spec=s, verdict="").key
        out[rk] = cache_key(s, spec_class(s, registry), torch_version=torch_v, transformers_version=tf_v, root=root,
                            entry=registry.get(s.model_id) if registry is not None else None)
    return out
