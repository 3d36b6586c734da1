"""Turn a user's `model_id` into a config and a model class, without any weights.

Accepted forms: a transformers `model_type` (`llama`), a model class name
(`LlamaForCausalLM`), a Hub repo id (`org/name`: only its config.json is fetched),
or a path to a local config.json (or a directory holding one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import catalog
from .registry import ArchEntry, Registry


class UsageError(ValueError):
    """Bad input from the user: the CLI prints it and exits 2."""


class RemoteCodeRefused(UsageError):
    pass


@dataclass
class Resolved:
    model_id: str
    model_type: str
    config_dict: dict[str, Any] | None  # None: transformers' defaults for model_type
    class_name: str | None  # None: decided by task (registry/catalog head or base)
    source: str  # model_type | class | hub | file
    entry: ArchEntry | None = None
    remote_code: bool = False
    hub_sha: str | None = None
    notes: list[str] = field(default_factory=list)
    # Remote code only: the local copy of the repo's config and code at `hub_sha`, fetched by the
    # parent (remote_code.fetch_for); the sandboxed child builds from it and nothing else.
    code_dir: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """What a child needs to skip resolving again (the registry entry is looked up there)."""
        return {"model_id": self.model_id, "model_type": self.model_type, "config_dict": self.config_dict,
                "class_name": self.class_name, "source": self.source, "remote_code": self.remote_code,
                "hub_sha": self.hub_sha, "notes": list(self.notes), "code_dir": self.code_dir}

    @classmethod
    def from_dict(cls, data: dict[str, Any], registry: Registry) -> "Resolved":
        fields = {k: data[k] for k in ("model_id", "model_type", "config_dict", "class_name", "source",
                                       "remote_code", "hub_sha", "notes", "code_dir") if k in data}
        return cls(**fields, entry=registry.get(data["model_type"]))


def _remote_code(config: dict[str, Any]) -> bool:
    return bool(config.get("auto_map"))


def _from_config_dict(model_id: str, config: dict[str, Any], source: str, registry: Registry,
                      allow_remote_code: bool, sha: str | None = None) -> Resolved:
    if not isinstance(config, dict):
        raise UsageError(f"{model_id}: config.json must be a JSON object")
    mt = config.get("model_type")
    remote = _remote_code(config)
    if remote and not allow_remote_code:
        raise RemoteCodeRefused(
            f"{model_id} uses remote code (auto_map in its config): enablebot never executes Hub code "
            "unless the repo is explicitly allowed (--allow-remote-code for this repo)."
        )
    known = catalog.known_architectures()
    if not mt:
        raise UsageError(f"{model_id}: config.json has no 'model_type'; it is not a transformers model config")
    if mt not in known and not remote:
        raise UsageError(
            f"{model_id}: model_type {mt!r} is unknown to the installed transformers; "
            "it needs a newer transformers (pip install -U transformers)"
        )
    archs = config.get("architectures") or []
    cls = archs[0] if archs and archs[0] in catalog.class_index() else None
    return Resolved(model_id=model_id, model_type=mt, config_dict=config, class_name=cls, source=source,
                    entry=registry.get(mt), remote_code=remote, hub_sha=sha)


def resolve(model_id: str, registry: Registry | None = None, *, allow_remote_code: bool = False) -> Resolved:
    registry = registry if registry is not None else Registry.load()
    known = catalog.known_architectures()
    if not model_id or not model_id.strip():
        raise UsageError("model_id is empty")

    path = Path(model_id)
    if path.suffix == ".json" or (path.is_dir() and (path / "config.json").is_file()):
        f = path / "config.json" if path.is_dir() else path
        if not f.is_file():
            raise UsageError(f"{f}: no such file")
        try:
            config = json.loads(f.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise UsageError(f"{f}: malformed config.json ({e}); it must be a JSON object with a model_type") from e
        return _from_config_dict(model_id, config, "file", registry, allow_remote_code)

    if model_id in known:
        return Resolved(model_id=model_id, model_type=model_id, config_dict=None, class_name=None,
                        source="model_type", entry=registry.get(model_id))
    entry = registry.get(model_id)
    if entry is not None and entry.origin != "transformers":
        raise UsageError(
            f"{model_id} is in the registry ({entry.origin}) but unknown to the installed transformers; "
            f"run it by a Hub repo that uses it ({', '.join(entry.seen_in[:3]) or 'see the registry'}) "
            "or install a newer transformers"
        )
    idx = catalog.class_index()
    if model_id in idx:
        mt = idx[model_id]
        return Resolved(model_id=model_id, model_type=mt, config_dict=None, class_name=model_id,
                        source="class", entry=registry.get(mt))

    if "/" in model_id and not path.exists():
        from . import hub  # imported late: huggingface_hub reads HF_ENDPOINT at import

        got = hub.fetch_config(model_id)
        return _from_config_dict(model_id, got.config, "hub", registry,
                                 allow_remote_code, sha=getattr(got, "sha", None))

    close = catalog.suggest(model_id)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise UsageError(
        f"unknown model id {model_id!r}: not a transformers model_type, model class, Hub repo id (org/name) "
        f"or config.json path.{hint}"
    )
