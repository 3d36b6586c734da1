"""Config attributes a model reads but its default config does not define.

A released checkpoint's config.json carries every attribute its modeling code reads; a
default config built from the class sometimes lacks one (Qwen2.5-Omni's thinker reads
`vision_start_token_id`, T5Gemma2's encoder `dropout_rate`), and the tiny model then fails with
`'<Config>' object has no attribute '<name>'`, which no user with a checkpoint ever sees.
`repair` gives the attribute the value a checkpoint would make harmless, by its name, and only
on the config classes the error names; the caller then builds or runs again. A value the
error asks for in words (`sliding_window` "not set") is given the same way. Nothing here is
per architecture: the table is per attribute name, and what was set is recorded.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from .configs import configs_in

_MISSING = re.compile(r"'(\w+)' object has no attribute '(\w+)'")
# Errors that name an unset config value in words (transformers' masking utils).
_NOT_SET = re.compile(r"Could not find a `(\w+)` argument in the config, or it is not set")

# By attribute name: the value that changes nothing a checkpoint would not.
_BY_NAME: tuple[tuple[re.Pattern[str], Any], ...] = (
    (re.compile(r"(dropout|drop_rate|drop_path_rate|layerdrop)\w*$"), 0.0),  # zeroed like every dropout
    (re.compile(r"(multiplier|_scale|scaling)$"), 1.0),  # identity scalings
    (re.compile(r"^sliding_window$"), 16),  # the tiny profile's window (shrink.PROFILES)
)


def _token_ids(configs: list[Any]) -> set[int]:
    ids: set[int] = set()
    for c in configs:
        for k, v in vars(c).items():
            if k.endswith(("_token_id", "_token_index")) and isinstance(v, int) and not isinstance(v, bool):
                ids.add(v)
    return ids


def _value(name: str, configs: list[Any]) -> tuple[bool, Any]:
    for pattern, value in _BY_NAME:
        if pattern.search(name):
            return True, value
    if name.endswith(("_token_id", "_token_index")):
        # A placeholder id no input carries: the code path that looks for it finds none, as for a
        # text-only prompt to a checkpoint.
        vocab = min((v for c in configs for v in [getattr(c, "vocab_size", None)]
                     if isinstance(v, int) and v > 8), default=None)
        if vocab is None:
            return False, None
        used = _token_ids(configs)
        free = next((i for i in range(vocab - 1, 0, -1) if i not in used), None)
        return free is not None, free
    return False, None


@dataclass(frozen=True)
class Repair:
    name: str
    value: Any
    where: str  # the config classes it was set on

    def __str__(self) -> str:
        return f"config {self.name}={self.value!r} on {self.where} (the default config leaves it unset)"


def repair(cfg: Any, err: BaseException) -> Repair | None:
    """Set the config attribute `err` says is missing or unset; what was set, or None when the
    error is not about one or no value is known for its name."""
    msg = str(err)
    m = _MISSING.search(msg) if isinstance(err, AttributeError) else None
    n = _NOT_SET.search(msg) if isinstance(err, ValueError) else None
    if cfg is None or (m is None and n is None):
        return None
    configs = configs_in(cfg)
    if m is not None:
        cls_name, name = m.groups()
        targets = [c for c in configs if type(c).__name__ == cls_name]
    else:
        name = n.group(1)
        targets = [c for c in configs if getattr(c, name, "absent") is None]
    if not targets:
        return None
    known, value = _value(name, configs)
    if not known:
        return None
    for c in targets:
        setattr(c, name, value)
    return Repair(name, value, ", ".join(sorted({type(c).__name__ for c in targets})))


# A config's own validation naming the value it needs: "hidden_size_per_layer_input must be 0, got 256".
_MUST_BE = re.compile(r"\b(\w+) must be ([\w.\-]+), got\b")


def asked_value(model_type: str, err: BaseException) -> dict[str, Any] | None:
    """The override a config's validation error asks for, as constructor kwargs: `{name: value}`,
    or `{sub: {"model_type": ..., name: value}}` when a default sub-config holds the attribute
    (a composite's validator checks its parts). None when the error names no value."""
    m = _MUST_BE.search(str(err))
    if m is None:
        return None
    name, text = m.groups()
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    parts = dict(getattr(cls, "sub_configs_defaults", None) or {})
    for sub, spec in parts.items():
        mt = getattr(spec, "model_type", None)
        if mt is None:
            continue
        try:
            part = AutoConfig.for_model(mt)
        except Exception:  # noqa: BLE001 - a part that does not build alone names nothing
            continue
        if name in vars(part):
            return {sub: {"model_type": mt, name: value}}
    return {name: value} if name in getattr(cls, "__annotations__", {}) or hasattr(cls, name) else None
