"""Remote code (a Hub repo's own modelling files, named by `auto_map`): fetched by the parent,
imported only in the sandbox.

Fetching and running are split so that no process holding the network or the Hub token ever
imports the repo's code:
  - the parent (`fetch_for`) reads config.json, pins the commit it resolved to, and downloads that
    commit's config.json and *.py files into a fresh local directory with huggingface_hub
    (`snapshot_download(allow_patterns=...)`): files are written, nothing is imported;
  - the child (enablebot.execute.isolation, always sandboxed for such a spec) builds from that
    directory with HF_HUB_OFFLINE=1 (`AutoConfig.from_pretrained(code_dir, trust_remote_code=True)`,
    the model class from `auto_map`): no network, no token, a read-only filesystem.

All of the repo's .py files are fetched, not only the modules `auto_map` names, because those
import their siblings (`from .configuration_x import ...`) and transformers resolves that from
the directory. A reference into another repo (`org/repo--module.Class`) is refused: it would
be unpinned code the parent did not fetch.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .resolve import UsageError

CODE_PATTERNS = ["config.json", "*.py"]  # what the sandboxed build reads; never weights


@dataclass(frozen=True)
class RemoteCode:
    repo_id: str
    revision: str  # the commit the files were fetched at
    code_dir: str  # local directory: config.json and the repo's .py files
    files: tuple[str, ...]


def auto_map_refs(auto_map: Mapping[str, Any]) -> dict[str, str]:
    """auto_map key -> "module.Class" (tokenizer entries are [slow, fast] pairs: both kept as
    key, key#1). Raises UsageError for a reference into another repo."""
    out: dict[str, str] = {}
    for key, value in (auto_map or {}).items():
        refs = value if isinstance(value, (list, tuple)) else [value]
        for i, ref in enumerate(refs):
            if ref is None:
                continue
            if not isinstance(ref, str) or "." not in ref:
                raise UsageError(f"auto_map[{key!r}] = {ref!r} is not a module.Class reference")
            if "--" in ref:
                raise UsageError(f"auto_map[{key!r}] = {ref!r} points into another repo: only the repo's own, "
                                 "pinned code is fetched and run")
            out[key if i == 0 else f"{key}#{i}"] = ref
    return out


def pick_model_ref(auto_map: Mapping[str, Any], architectures: list[str], task: str | None) -> str:
    """The auto_map reference of the model class to build: a class named by `task`, the AutoModel
    for task "base", else the config's first architecture, else a task head, else AutoModel."""
    refs = {k: r for k, r in auto_map_refs(auto_map).items()
            if k.startswith("AutoModel") and "#" not in k}
    by_class = {r.rsplit(".", 1)[1]: r for r in refs.values()}
    if task and task not in ("base", "head", "default"):
        if task not in by_class:
            raise UsageError(f"auto_map has no model class {task!r} (it has {', '.join(sorted(by_class)) or 'none'})")
        return by_class[task]
    if task == "base":
        if "AutoModel" not in refs:
            raise UsageError("auto_map has no AutoModel (the base model class)")
        return refs["AutoModel"]
    base = refs.get("AutoModel")
    for arch in architectures or []:
        if arch in by_class and not (task == "head" and by_class[arch] == base):
            return by_class[arch]
    heads = sorted(k for k in refs if k != "AutoModel")
    if heads:
        return refs["AutoModelForCausalLM"] if "AutoModelForCausalLM" in refs else refs[heads[0]]
    if task != "head" and "AutoModel" in refs:
        return refs["AutoModel"]
    raise UsageError("auto_map names no model class (AutoModel...) to build")


def fetch_code(repo_id: str, revision: str | None, *, dest: str | os.PathLike | None = None,
               endpoint: str | None = None, token: str | None = None, timeout_s: float = 10.0) -> RemoteCode:
    """Download config.json and every .py of `repo_id` at `revision` into `dest` (a new temporary
    directory by default). No file is imported. Raises HubError."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    from .hub import HubError, resolve_endpoint

    ep = resolve_endpoint(endpoint)
    dest = Path(dest) if dest is not None else Path(tempfile.mkdtemp(prefix="enablebot-code-"))
    rev = revision or "main"
    quiet = are_progress_bars_disabled()
    disable_progress_bars()  # a handful of small files; a bar would garble the CLI's status line
    try:
        snapshot_download(repo_id, revision=rev, local_dir=dest, allow_patterns=CODE_PATTERNS, endpoint=ep,
                          token=token, etag_timeout=timeout_s, library_name="enablebot")
    except (HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled, OSError) as e:
        status = getattr(getattr(e, "response", None), "status_code", None)
        raise HubError(f"{repo_id}@{rev}: fetching its code from {ep} failed ({type(e).__name__}: "
                       f"{str(e).splitlines()[0][:300] if str(e) else ''})",
                       transient=status is None or status in (408, 429) or status >= 500, status=status) from None
    finally:
        if not quiet:
            enable_progress_bars()
    files = tuple(sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")
                         if p.is_file() and ".cache" not in p.relative_to(dest).parts))
    if "config.json" not in files:
        raise HubError(f"{repo_id}@{rev}: no config.json")
    return RemoteCode(repo_id=repo_id, revision=rev, code_dir=str(dest), files=files)


def check_code(code: RemoteCode, config: Mapping[str, Any]) -> None:
    """Every module auto_map names is among the fetched files (else the sandboxed build would
    look for it on the network it does not have)."""
    refs = auto_map_refs(config.get("auto_map") or {}).values()
    modules = {ref.rsplit(".", 1)[0].replace(".", "/") + ".py" for ref in refs}
    missing = sorted(modules - set(code.files))
    if missing:
        raise UsageError(f"{code.repo_id}@{code.revision}: auto_map names {', '.join(missing)}, "
                         "which the repo does not have")


def fetch_for(spec: Any) -> Any:
    """The parent's half: a spec allowed to run remote code -> the same spec with its resolution
    (config at the pinned commit, `code_dir`) filled in, for a sandboxed child that never touches
    the network. A repo without remote code comes back resolved, with nothing fetched. Raises
    UsageError / HubError."""
    import dataclasses

    from .registry import Registry
    from .resolve import resolve

    res = resolve(spec.model_id, Registry.load_cached(spec.registry), allow_remote_code=True)
    if res.remote_code:
        if res.source != "hub":
            raise UsageError(f"{spec.model_id}: remote code is built only from a Hub repo, fetched at a "
                             "pinned commit (not from a local path)")
        code = fetch_code(res.model_id, res.hub_sha)
        with open(Path(code.code_dir) / "config.json", encoding="utf-8") as f:
            config = json.load(f)  # the config of the very commit the code is from
        if not isinstance(config, dict) or config.get("model_type") != res.model_type:
            raise UsageError(f"{spec.model_id}: config.json changed between fetches; try again")
        check_code(code, config)
        res.config_dict, res.code_dir, res.hub_sha = config, code.code_dir, code.revision
    return dataclasses.replace(spec, resolved=res.to_dict())
