"""Tiny timm backbones: the `model_args` that shrink a timm model a config names.

A TimmWrapperConfig (and subclasses such as Gemma 3n's vision config) holds a timm model name
in `architecture` and timm keyword arguments in `model_args`; its layers are built by timm, out
of reach of the attribute-name rules in shrink.py. Which keyword arguments cut a timm family's
depth is timm's own per-family knowledge, so it is data (enablebot/data/timm_backbones.yaml).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import yaml

from ..shipped import package_data


@lru_cache(maxsize=1)
def table() -> dict[str, dict[str, Any]]:
    """timm architecture prefix -> model_args that make it tiny."""
    data = yaml.safe_load(package_data("data", "timm_backbones.yaml").read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ValueError("enablebot/data/timm_backbones.yaml: expected a mapping of timm name prefix -> keyword arguments")
    return data


def tiny_args(architecture: str, rules: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The keyword arguments for `architecture` (the longest matching prefix), or {}."""
    rules = table() if rules is None else rules
    keys = [k for k in rules if architecture.startswith(k)]
    return dict(rules[max(keys, key=len)]) if keys else {}


def is_timm_level(d: dict[str, Any]) -> bool:
    """A config dict that builds a timm model from its name (TimmWrapperConfig's fields)."""
    return isinstance(d.get("architecture"), str) and "model_args" in d


IMAGE = "{image}"  # in the table: the size profile's image side (a ViT's fixed `img_size` must match the input)


def shrink_timm(d: dict[str, Any], changes: dict[str, Any], prefix: str = "", image: int = 32) -> None:
    """Merge the tiny keyword arguments into `d['model_args']` (the config's own ones, such as
    `features_only`, are kept unless the table sets the same key); record the change."""
    if not is_timm_level(d):
        return
    extra = {k: (image if v == IMAGE else v) for k, v in tiny_args(d["architecture"]).items()}
    if not extra:
        return
    merged = {**(d.get("model_args") or {}), **extra}
    if merged != d.get("model_args"):
        d["model_args"] = merged
        changes[f"{prefix}model_args"] = merged
