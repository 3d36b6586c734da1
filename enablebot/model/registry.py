"""model_registry.yaml: the architectures the bot tracks, and what the builder knows of each.

Reviewed knowledge and machine state live in two files:
  model_registry.yaml          knowledge maintainers review: classes, modality, builder knowledge
  model_registry.state.json    what the bot observed: first_seen, the Hub repos that revealed a
                               type, per-device status (time-to-support), the watcher's cursor
In memory an `ArchEntry` carries both; `save` writes each part to its own file, so a nightly
that only observes rewrites the state file and never the registry maintainers review.

The file is data reviewed by maintainers in PRs, so it is written
- atomically (temp file in the same directory, fsync, rename): a crash mid-write
  leaves the old file intact;
- in a stable order (architectures sorted by model_type, keys in a fixed order), so
  a second write of the same content is byte-identical and diffs stay small.

Per-architecture builder knowledge lives in each entry (lm-eval-harness style):
  config:   overrides applied to the shrunk config (dotted keys reach sub-configs)
  config_init: a composite's parts (sub-config -> {model_type, ...}) for releases whose config
            class leaves them unset or of another type; ignored where the release defaults to them
  inputs:   the input recipe (modality and extra tensors)
  requires: optional packages the model needs (missing -> `missing_dependency`)
  hook:     "module:function" for the rare case data cannot express
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..fileio import atomic_write_text
from ..results import Serializable
from ..shipped import shipped
from ..validate import DataError, Strict, load_as

REGISTRY_SCHEMA_VERSION = 1
STATE_SCHEMA_VERSION = 1
# ArchEntry fields that are machine state (the state file), not reviewed knowledge.
STATE_FIELDS = ("first_seen", "first_seen_source", "seen_in", "status")
DEFAULT_REGISTRY = shipped("model_registry.yaml")
# libyaml's loader parses the registry ~10x faster than the pure-Python one; same result.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CACHE: dict[str, Any] = {}

# Key order inside an entry when written; unknown keys follow, sorted.
_ENTRY_ORDER = (
    "origin",
    "config_class",
    "base",
    "head",
    "task",
    "modality",
    "classes",
    "remote_code",
    "first_seen",
    "first_seen_source",
    "new_in",
    "seen_in",
    "requires",
    "config_init",
    "config",
    "inputs",
    "hook",
    "timeout_s",
    "notes",
    "status",
)


@dataclass
class ArchEntry(Serializable):
    """One architecture (a transformers `model_type`, or a Hub-only one)."""

    model_type: str
    origin: str = "transformers"  # transformers | hub (needs a newer transformers) | remote_code
    config_class: str | None = None
    base: str | None = None  # base model class, e.g. LlamaModel
    head: str | None = None  # main task head, e.g. LlamaForCausalLM
    task: str | None = None  # the head's task, e.g. causal-lm
    modality: str = "text"  # text | vision | audio | multimodal | timeseries | other
    classes: list[str] = field(default_factory=list)  # other classes seen on the Hub
    remote_code: bool = False
    first_seen: str | None = None  # ISO date-time the bot first saw it (or the release's date)
    first_seen_source: str | None = None  # release (its transformers release's date) | bot (when the bot first saw it)
    new_in: str | None = None  # "transformers 5.25.0": the release that brought it (day-0 registration)
    seen_in: list[str] = field(default_factory=list)  # Hub repos that revealed it
    requires: list[str] = field(default_factory=list)
    config_init: dict[str, dict[str, Any]] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)
    hook: str | None = None
    # Seconds a sweep item of this architecture may run when the sweep's --timeout is shorter
    # (a compile known to be slow cold); the longer of the two applies (sweep.engine.item_timeout).
    timeout_s: float | None = None
    notes: str | None = None
    # "<device>/<mode>" -> {verdict, numerics, speedup, torch, transformers, date, supported_at}
    status: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_yaml_dict(self) -> dict[str, Any]:
        raw = self.to_dict()
        raw.pop("model_type")
        for k in STATE_FIELDS:
            raw.pop(k, None)
        defaults = ArchEntry(model_type="")
        out: dict[str, Any] = {}
        keys = list(_ENTRY_ORDER) + sorted(k for k in raw if k not in _ENTRY_ORDER)
        for k in keys:
            v = raw.get(k)
            # Keep the file short: drop empty and default-valued fields.
            if v in (None, [], {}) or (k in ("remote_code",) and v is False):
                continue
            if k == "origin" and v == defaults.origin:
                continue
            out[k] = v
        return out

    def state_dict(self) -> dict[str, Any]:
        raw = self.to_dict()
        return {k: raw[k] for k in STATE_FIELDS if raw.get(k) not in (None, [], {})}


def state_path(registry_path: Path) -> Path:
    """The state file that belongs to a registry file (beside it)."""
    return registry_path.with_name(registry_path.stem + ".state.json")


class RegistryError(ValueError):
    pass


@dataclass
class Registry:
    path: Path
    entries: dict[str, ArchEntry] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. the watcher's cursor

    # ---- reading -------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> "Registry":
        p = Path(path) if path else DEFAULT_REGISTRY
        if not p.exists():
            return cls(path=p)
        try:
            data = yaml.load(p.read_text(encoding="utf-8"), Loader=_LOADER) or {}
        except yaml.YAMLError as e:
            raise RegistryError(f"{p}: not valid YAML ({e}); fix or restore it from git") from e
        doc = _load_doc(_RegistryFile, data, p)
        sp = state_path(p)
        state = _load_doc(_StateFile, _load_state(sp), sp)
        entries = {}
        for mt, raw in doc.architectures.items():
            fields = dict(raw or {})
            if "model_type" in fields:
                raise RegistryError(f"{p}: entry {mt}: field model_type: unknown key (the entry's name is its model_type)")
            fields["model_type"] = mt
            # Older registries kept state inline; the state file wins where both have it.
            observed = state.architectures.get(mt) or {}
            if observed:
                _check_state_entry(sp, mt, observed)
            try:
                entries[mt] = ArchEntry.from_dict({**fields, **observed})
            except DataError as e:
                raise RegistryError(str(e.at(f"{p}: entry {mt}"))) from None
        return cls(path=p, entries=entries, meta={**doc.meta, **state.meta})

    @classmethod
    def load_cached(cls, path: str | os.PathLike | None = None) -> "Registry":
        """`load`, memoised on the file's identity (path, mtime, size): a sweep worker reads
        the registry for every model, and parsing 600+ entries costs ~0.25 s each time.
        The result is shared: treat it as read-only (writers use `load`)."""
        p = Path(path) if path else DEFAULT_REGISTRY
        try:
            st = p.stat()
            key = (str(p.resolve()), st.st_mtime_ns, st.st_size)
        except OSError:
            return cls.load(p)
        if _CACHE.get("key") != key:
            _CACHE.update(key=key, registry=cls.load(p))
        return _CACHE["registry"]

    def get(self, model_type: str) -> ArchEntry | None:
        return self.entries.get(model_type)

    def by_class(self, class_name: str) -> ArchEntry | None:
        for e in self.entries.values():
            if class_name in (e.base, e.head, e.config_class) or class_name in e.classes:
                return e
        return None

    def __contains__(self, model_type: str) -> bool:
        return model_type in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    # ---- writing -------------------------------------------------------------
    def upsert(self, entry: ArchEntry) -> None:
        self.entries[entry.model_type] = entry

    def dumps(self) -> str:
        doc: dict[str, Any] = {"schema_version": REGISTRY_SCHEMA_VERSION}
        doc["architectures"] = {k: self.entries[k].to_yaml_dict() for k in sorted(self.entries)}
        header = (
            "# enablebot model registry: the architectures the bot tracks.\n"
            "# Written by `enablebot registry seed` and `enablebot watch`; reviewed in PRs.\n"
            "# Builder knowledge per architecture: config (overrides after shrinking),\n"
            "# inputs (recipe), requires (optional packages), hook (module:function).\n"
        )
        return header + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)

    def dumps_state(self) -> str:
        doc = {"schema_version": STATE_SCHEMA_VERSION, "meta": {k: self.meta[k] for k in sorted(self.meta)},
               "architectures": {k: s for k in sorted(self.entries) if (s := self.entries[k].state_dict())}}
        return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"

    def save(self, path: str | os.PathLike | None = None) -> bool:
        """Write the registry and its state file atomically, each only when its content changed.
        Returns whether anything was written."""
        p = Path(path) if path else self.path
        wrote = False
        for target, text in ((p, self.dumps()), (state_path(p), self.dumps_state())):
            if target.exists() and target.read_text(encoding="utf-8") == text:
                continue
            atomic_write_text(target, text)
            wrote = True
        return wrote


@dataclass
class _RegistryFile(Strict):
    """model_registry.yaml's top level; each entry is validated as an `ArchEntry` on its own,
    so an error names it."""

    schema_version: int = REGISTRY_SCHEMA_VERSION
    architectures: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class _StateFile(Strict):
    """model_registry.state.json's top level."""

    schema_version: int = STATE_SCHEMA_VERSION
    architectures: dict[str, dict[str, Any]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)  # the watcher's cursor (watch/watcher.py reads it)


def _load_doc(cls: type, data: Any, path: Path) -> Any:
    try:
        return load_as(cls, data, str(path), entries="architectures")
    except DataError as e:
        raise RegistryError(str(e)) from None


def _check_state_entry(path: Path, mt: str, observed: dict[str, Any]) -> None:
    """A state entry holds only machine state, checked against ArchEntry's types: its error
    names the state file, not the registry."""
    for k in observed:
        if k not in STATE_FIELDS:
            raise RegistryError(f"{path}: entry {mt}: field {k}: unknown key (the state file holds {', '.join(STATE_FIELDS)})")
    try:
        ArchEntry.from_dict({"model_type": mt, **observed})
    except DataError as e:
        raise RegistryError(str(e.at(f"{path}: entry {mt}"))) from None


def _load_state(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RegistryError(f"{path}: not valid JSON ({e}); restore it from git or delete it (state is "
                            "rebuilt by the next watch/record)") from e
    if not isinstance(data, dict):
        raise RegistryError(f"{path}: expected a JSON object")
    return data
