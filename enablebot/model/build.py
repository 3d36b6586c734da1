"""Build a tiny random-init model from a resolved config. No weights, ever."""

from __future__ import annotations

import importlib
import importlib.util
import re
from dataclasses import dataclass, field
from typing import Any

from . import catalog
from .resolve import Resolved, UsageError
from .shrink import shrink_config


class MissingDependency(RuntimeError):
    def __init__(self, package: str, detail: str = ""):
        super().__init__(f"needs the optional package {package!r}{': ' + detail if detail else ''}")
        self.package = package


class NoModelClass(UsageError):
    """The registry (from transformers' auto mappings) names a model class that the installed
    transformers does not define: there is no model to build, by anyone."""


@dataclass
class Built:
    model: Any
    config: Any
    class_name: str
    modality: str
    changes: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what a generic fallback changed (narrow.py, repairs.py)


_MISSING_RE = re.compile(
    r"requires the (\w[\w\-.]*) librar|No module named '([\w.]+)'|requires (?:the )?`?(\w[\w\-]*)`? (?:library|package)",
    re.I,
)


def missing_package_from(exc: BaseException) -> str | None:
    """Name of the optional package an ImportError-like exception complains about, here or in the
    exceptions it was raised from (transformers' lazy module re-raises "Could not import module
    'Sam3Model'" from the `No module named 'torchvision'` that caused it)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        m = _MISSING_RE.search(str(e))
        if m:
            return next(g for g in m.groups() if g).split(".")[0]
        e = e.__cause__ or e.__context__
    return None


def check_requires(packages: list[str]) -> None:
    for pkg in packages or []:
        if importlib.util.find_spec(pkg.replace("-", "_")) is None:
            raise MissingDependency(pkg, "listed under `requires` in the registry")


def pick_class(res: Resolved, task: str | None) -> str:
    """The model class to build: explicit class, then task (base/head/class), then registry/catalog."""
    known = catalog.known_architectures().get(res.model_type)
    entry = res.entry
    if task and task not in ("base", "head", "default"):
        return task  # a class name
    head = (entry.head if entry else None) or (known.head if known else None)
    base = (entry.base if entry else None) or (known.base if known else None)
    if task == "base":
        if not base:
            raise UsageError(f"{res.model_type} has no base model class")
        return base
    if task == "head":
        if not head:
            raise UsageError(f"{res.model_type} has no task head class")
        return head
    return res.class_name or head or base or (known.classes[0] if known else "")


def make_config(res: Resolved, size: str, extra: dict[str, Any] | None = None):
    """The shrunk config, with the registry's overrides and then `extra` (dotted keys)."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    overrides = {**(dict(res.entry.config) if res.entry else {}), **(extra or {})}
    asked: dict[str, Any] = {}  # values the default config's own validation asked for
    if res.config_dict is None:
        cfg = default_config(res.model_type, overrides, dict(res.entry.config_init) if res.entry else {}, asked)
    elif res.remote_code:
        # Only reachable when the repo was explicitly allowed (resolve() refuses otherwise), and
        # only from the copy the parent fetched: this process (the sandboxed child) never downloads code.
        cfg = AutoConfig.from_pretrained(remote_code_dir(res), trust_remote_code=True, local_files_only=True)
    else:
        d = {k: v for k, v in res.config_dict.items() if k not in ("auto_map", "_name_or_path")}
        try:
            cfg = CONFIG_MAPPING[res.model_type].from_dict(d)
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            raise UsageError(f"{res.model_id}: malformed config for {res.model_type}: {e}") from e
    # Re-constructed through the config class, so its validation sees the shrunk values.
    # The model's own defaults (use_cache included) are what a user runs; only dropout is
    # zeroed (in shrink_config), as PyTorch's benchmark harness does.
    cfg, changes = shrink_config(cfg, size, overrides)
    define_token_ids(cfg)
    if asked:
        changes = {**{k + VALIDATION_ASKED: v for k, v in _dotted(asked).items() if not k.endswith(".model_type")},
                   **changes}
    return cfg, changes


# The suffix of a `changes` key whose value the default config's own validation asked for.
VALIDATION_ASKED = " (the config's own validation asks for it)"


def default_config(model_type: str, overrides: dict[str, Any], init: dict[str, Any],
                   asked: dict[str, Any] | None = None) -> Any:
    """The config class's defaults, as the model card's `from_config` path starts. `init` (the
    registry's `config_init`: sub-config name -> kwargs with its `model_type`) is passed to the
    constructor only where this release leaves that sub-config unset or of another type: older
    releases gave a composite no default parts (5.17's encoder-decoder, MusicGen, Gemma 4
    assistant) or another one (Granite 4 Vision's text model), so a release that already
    defaults to them builds exactly as before."""
    from transformers import AutoConfig

    try:
        cfg = AutoConfig.for_model(model_type)
    except Exception as e:
        # Some defaults do not validate on their own; the registry overrides (and parts) make them.
        if not overrides and not init:
            return _validated(model_type, e, asked if asked is not None else {})
        return AutoConfig.for_model(model_type, **merge(init, nested(overrides)))
    sub = {k: v for k, v in nested(overrides).items() if isinstance(v, dict)}
    wrong = {k: merge(v, sub.get(k, {})) for k, v in init.items()
             if getattr(getattr(cfg, k, None), "model_type", None) != v.get("model_type")}
    # The part's overrides go in with it: its validation may need them (Gemma 4 assistant).
    return AutoConfig.for_model(model_type, **wrong) if wrong else cfg


def _validated(model_type: str, err: Exception, asked: dict[str, Any], rounds: int = 8) -> Any:
    """A default config its own validation refuses, built with the values each refusal names
    (repairs.asked_value: "enable_moe_block must be False, got True"), one per round; `asked`
    receives them (as constructor kwargs). The first error is raised where none is named."""
    from transformers import AutoConfig

    from .repairs import asked_value

    first = err
    for _ in range(rounds):
        value = asked_value(model_type, err)
        if value is None or merge(asked, value) == asked:
            raise first
        asked.update(merge(asked, value))
        try:
            return AutoConfig.for_model(model_type, **asked)
        except Exception as e:  # noqa: BLE001 - the next value it asks for, or its own failure
            err = e
    raise first


def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """`a` updated with `b`, nested dicts merged key by key."""
    out = dict(a)
    for k, v in b.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id")


def define_token_ids(cfg: Any) -> None:
    """Give every (sub-)config the token-id attributes 4.x configs always had (None). transformers 5.0
    dropped them from the base config while some modeling code still read them (5.0's Glm4vTextModel:
    `config.pad_token_id`); a checkpoint's config.json carries them, so a user never hits that."""
    from .configs import configs_in

    for c in configs_in(cfg):
        for name in _TOKEN_IDS:
            try:
                getattr(c, name)
            except AttributeError:
                setattr(c, name, None)


def remote_code_dir(res: Resolved) -> str:
    if not res.code_dir:
        raise UsageError(f"{res.model_id}: remote code is built only from the copy the parent fetched into the "
                         "sandbox (a child of `run` / `watch --run` with --allow-remote-code), never in-process")
    return res.code_dir


def remote_class(res: Resolved, task: str | None) -> tuple[str, Any]:
    """(class name, class) of a remote-code model, from the auto_map of its fetched copy."""
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    from .remote_code import pick_model_ref

    config = res.config_dict or {}
    ref = pick_model_ref(config.get("auto_map") or {}, config.get("architectures") or [], task)
    cls = get_class_from_dynamic_module(ref, remote_code_dir(res), local_files_only=True)
    return cls.__name__, cls


def _dotted(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(_dotted(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def nested(dotted: dict[str, Any]) -> dict[str, Any]:
    """{"a.b": 1} -> {"a": {"b": 1}}."""
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        *path, last = key.split(".")
        target = out
        for part in path:
            target = target.setdefault(part, {})
        target[last] = value
    return out


def build_model(res: Resolved, *, size: str = "tiny", task: str | None = None, seed: int = 0,
                extra_config: dict[str, Any] | None = None) -> Built:
    import torch
    import transformers

    if res.entry:
        check_requires(res.entry.requires)
    try:  # a config or a modeling module can need an optional package too (TimmWrapperConfig: timm)
        cfg, changes = make_config(res, size, extra_config)
        if res.remote_code:
            class_name, cls = remote_class(res, task)
        else:
            class_name = pick_class(res, task)
            cls = getattr(transformers, class_name, None)
    except ImportError as e:
        pkg = missing_package_from(e)
        if pkg:
            raise MissingDependency(pkg, str(e).strip().splitlines()[0]) from e
        raise
    if cls is None:
        raise NoModelClass(f"transformers has no class {class_name!r} for {res.model_type}")
    from .budget import OverBudget, check_budget, count_params_meta

    notes: list[str] = [f"config {k.removesuffix(VALIDATION_ASKED)}={v!r} (the default config's own validation "
                        "asks for it)" for k, v in changes.items() if k.endswith(VALIDATION_ASKED)]

    try:
        check_budget(cls, cfg, size)  # before any allocation: an oversized model is a create_error
    except OverBudget:
        from .narrow import fit_budget

        fitted = fit_budget(cls, cfg, size, count_params_meta)  # widths the shrink rules missed
        if fitted is None:
            raise
        cfg, narrowed = fitted
        changes = {**changes, **narrowed}
        notes.append(f"config widths halved to fit the {size} budget: "
                     + ", ".join(f"{k}={v}" for k, v in narrowed.items()))
    from .repairs import repair
    from .unset import fill_unset

    for _ in range(6):
        torch.manual_seed(seed)
        try:
            model = cls._from_config(cfg) if hasattr(cls, "_from_config") else cls(cfg)
            break
        except ImportError as e:
            pkg = missing_package_from(e)
            if pkg:
                raise MissingDependency(pkg, str(e).splitlines()[0]) from e
            raise
        except AttributeError as e:  # an attribute the default config lacks (a checkpoint has it)
            fixed = repair(cfg, e)
            if fixed is not None:
                changes = {**changes, f"{fixed.name} (set: the default config lacks it)": fixed.value}
                notes.append(str(fixed))
                continue
            fills = fill_unset(cfg, e)  # or a sub-config it leaves None
            if not fills:
                raise
            changes = {**changes, **{f"{f.where}.{f.name} (set: the default config leaves it unset)": f.value
                                     for f in fills}}
            notes += [str(f) for f in fills]
        except (TypeError, KeyError, ValueError) as e:  # a value the default config leaves unset (unset.py)
            fills = fill_unset(cfg, e)
            if not fills:
                raise
            changes = {**changes, **{f"{f.where}.{f.name} (set: the default config leaves it unset)": f.value
                                     for f in fills}}
            notes += [str(f) for f in fills]
    model.eval()
    known = catalog.known_architectures().get(res.model_type)
    modality = (res.entry.modality if res.entry else None) or (known.modality if known else "text")
    if res.entry and res.entry.hook:
        model = call_hook(res.entry.hook, model=model, config=cfg)
        cfg = getattr(model, "config", cfg)  # a hook may return a sub-model with its sub-config
    return Built(model=model, config=cfg, class_name=class_name, modality=modality, changes=changes, notes=notes)


def call_hook(ref: str, **kwargs: Any) -> Any:
    """Registry hooks are `module:function` names; the function returns the (possibly new) model."""
    mod_name, _, fn_name = ref.partition(":")
    if not mod_name.startswith("enablebot."):
        raise UsageError(f"hook {ref!r}: only enablebot.* hooks are allowed")
    fn = getattr(importlib.import_module(mod_name), fn_name)
    out = fn(**kwargs)
    return out if out is not None else kwargs["model"]
