"""Dynamo config recipes (enablebot/data/recipes.yaml): which torch._dynamo.config settings
to try for a break, from the data file and from the break's own hints."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..results import GraphBreak, Serializable
from ..shipped import package_data

DEFAULT_RECIPES = package_data("data", "recipes.yaml")
# `torch._dynamo.config.capture_scalar_outputs = True` inside a hint.
_HINT_SETTING = re.compile(r"torch\._dynamo\.config\.(\w+)\s*=\s*(True|False)")


@dataclass
class Recipe(Serializable):
    id: str
    settings: dict[str, Any]
    note: str = ""
    applies_to: list[str] = field(default_factory=list)
    source: str = "data"  # data | hint


def load_recipes(path: str | Path | None = None) -> list[Recipe]:
    raw = yaml.safe_load(Path(path or DEFAULT_RECIPES).read_text(encoding="utf-8")) or {}
    out = []
    seen: set[str] = set()
    for item in raw.get("recipes") or []:
        r = Recipe(id=str(item["id"]), settings=dict(item["settings"]), note=str(item.get("note", "")).strip(),
                   applies_to=[str(a) for a in item.get("applies_to") or []])
        if r.id in seen:
            raise ValueError(f"recipes.yaml: duplicate recipe id {r.id!r}")
        if not r.settings:
            raise ValueError(f"recipes.yaml: recipe {r.id!r} has no settings")
        seen.add(r.id)
        out.append(r)
    return out


def hinted_settings(hints: list[str]) -> dict[str, Any]:
    """Boolean torch._dynamo.config settings a break's hints ask for."""
    text = " ".join(hints)
    return {name: value == "True" for name, value in _HINT_SETTING.findall(text)}


def candidates(gb: GraphBreak, recipes: list[Recipe] | None = None) -> list[Recipe]:
    """Recipes to try for a break, data first, then hint-derived settings not covered by them."""
    recipes = load_recipes() if recipes is None else recipes
    keys = {k for k in (gb.registry_id, gb.gb_type) if k}
    chosen = [r for r in recipes if keys & set(r.applies_to)]
    for name, value in hinted_settings(gb.hints).items():
        settings = {name: value}
        if not any(r.settings == settings for r in chosen):
            chosen.append(Recipe(id=f"hint:{name}", settings=settings, source="hint",
                                 note=f"suggested by the break's hint: torch._dynamo.config.{name} = {value}"))
    return chosen


def settings_text(settings: dict[str, Any]) -> str:
    return ", ".join(f"torch._dynamo.config.{k} = {v!r}" for k, v in sorted(settings.items()))
