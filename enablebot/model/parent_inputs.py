"""Inputs for a sub-model type as the composite that contains it passes them.

Transformers registers many towers as types of their own (`gemma4_vision`, `kimi_k25_vision`,
`granite_docling_vision`): a composite's config names the tower's config class in its
`sub_configs`. A tower's inputs are often not the generic ones (Gemma 4's vision model takes
patches with their (x, y) positions; MiniCPM's resampler takes the target sizes), and nothing in
the tower's own config says how they relate. The composite knows: it makes them from its own
inputs. So where no generic input runs the tower, this builds the composite (the same size and
seed), runs its forward once, captures the arguments its tower is called with, and measures the
tower type built from the composite's (shrunk) sub-config with exactly those arguments. That is
what the tower meets when a user runs the composite, the path the day-0 rules most trust.

Used as prepare's last fallback; each item's note says which composite supplied the inputs.
"""

from __future__ import annotations

import copy
import inspect
import os
from dataclasses import dataclass
from typing import Any

MAX_PARENTS = 3  # composites tried per tower, nearest name first


@dataclass
class Captured:
    """A tower's call inside its composite: the composite's type, the sub-config's attribute, the
    tower's config as the composite built it, and the arguments by name."""

    parent: str
    attr: str
    config: Any
    inputs: dict[str, Any]


def parent_types(config_cls: type) -> list[tuple[str, str]]:
    """(model_type, sub-config attribute) of the composites whose `sub_configs` name `config_cls`,
    the type whose name shares the longest prefix with the tower's first (`gemma4` for
    `gemma4_vision`)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    found: list[tuple[str, str]] = []
    for model_type in list(CONFIG_MAPPING.keys()):
        try:
            parent_cls = CONFIG_MAPPING[model_type]
        except Exception:  # noqa: BLE001 - a config module that does not import here is no parent
            continue
        for attr, sub in (getattr(parent_cls, "sub_configs", None) or {}).items():
            if sub is config_cls and parent_cls is not config_cls:
                found.append((model_type, attr))
    own = getattr(config_cls, "model_type", "") or ""
    return sorted(found, key=lambda p: (-len(os.path.commonprefix([p[0], own])), p[0]))


def bound_arguments(module: Any, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments by the forward's parameter names (positional ones bound), without the
    ones passed as None; tensors detached and cloned, the rest deep-copied."""
    import torch

    try:
        bound = inspect.signature(module.forward).bind_partial(*args, **kwargs)
    except TypeError:
        return {}
    named: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        param = bound.signature.parameters[name]
        if param.kind is param.VAR_KEYWORD:
            named.update(value)
        elif param.kind is not param.VAR_POSITIONAL:
            named[name] = value
    out: dict[str, Any] = {}
    for name, value in named.items():
        if value is None:
            continue
        out[name] = value.detach().clone() if isinstance(value, torch.Tensor) else copy.deepcopy(value)
    return out


def capture(model: Any, inputs: dict[str, Any], config_cls: type) -> tuple[Any, dict[str, Any]] | None:
    """Run `model(**inputs)` once (no grad) and return the first sub-model built from a
    `config_cls` config that ran, with the arguments it was called with; None when none ran."""
    import torch

    seen: list[tuple[Any, dict[str, Any]]] = []

    def hook(module: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        if not seen:
            seen.append((module, bound_arguments(module, args, kwargs)))

    handles = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in model.modules()
               if m is not model and isinstance(getattr(m, "config", None), config_cls)
               and callable(getattr(m, "forward", None))]
    if not handles:
        return None
    try:
        with torch.no_grad():
            model(**inputs)
    except Exception:  # noqa: BLE001 - the composite's own failure: no capture from it
        pass  # a capture made before a later failure is still the tower's real call
    finally:
        for h in handles:
            h.remove()
    return seen[0] if seen and seen[0][1] else None


def from_parent(tower_cls: type, config_cls: type, *, build_parent, seed: int,
                runs) -> tuple[Any, Captured] | None:
    """The tower `tower_cls` built from the first composite's sub-config whose captured call
    runs it (`runs(model, inputs)` -> error or None), with the capture; None when none does.
    `build_parent(model_type)` returns (model, inputs) of a built composite, or None."""
    import torch

    for parent, attr in parent_types(config_cls)[:MAX_PARENTS]:
        made = build_parent(parent)
        if made is None:
            continue
        got = capture(*made, config_cls)
        if got is None:
            continue
        module, args = got
        params = inspect.signature(tower_cls.forward).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            args = {k: v for k, v in args.items() if k in params}
        cfg = copy.deepcopy(module.config)
        try:
            torch.manual_seed(seed)
            tower = tower_cls._from_config(cfg).eval()
        except Exception:  # noqa: BLE001 - the class refuses the composite's sub-config
            continue
        if runs(tower, args) is None:
            return tower, Captured(parent=parent, attr=attr, config=cfg, inputs=args)
    return None
