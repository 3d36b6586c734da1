"""Narrower widths for a shrunk config that is still over the parameter budget.

The shrink rules (shrink.py) know widths by their usual names. A new architecture can keep
its size in names they do not cover (an audio tower's per-stage `hidden_sizes`, a projector's
`out_hidden_size`): the shrunk model is then refused as over budget. Before refusing, the
widths of every level that the rules left above the tiny width are halved together, a round at
a time, until the meta-device count fits (halving keeps the ratios and divisibility that powers
of two give; counts, vocabularies and image sizes are never touched). Only an over-budget
config gets here, so models that fit are built exactly as before.
"""

from __future__ import annotations

import copy
from typing import Any

from .shrink import _NOT_WIDTH, _WIDTH_NAME, PROFILES, init_kwargs

ROUNDS = 4


def _halved(d: dict[str, Any], floor: int, changes: dict[str, Any], prefix: str = "") -> None:
    for k, v in list(d.items()):
        if not isinstance(k, str) or k in ("id2label", "label2id"):
            continue
        if isinstance(v, dict):
            _halved(v, floor, changes, f"{prefix}{k}.")
            continue
        if not _WIDTH_NAME.search(k) or _NOT_WIDTH.search(k) or k.endswith("_id"):
            continue
        if isinstance(v, int) and not isinstance(v, bool) and v > floor:
            d[k] = max(floor, v // 2)
        elif isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v) \
                and max(v) > floor:
            d[k] = [max(floor // 4, x // 2) if x > floor // 4 else x for x in v]
        else:
            continue
        changes[prefix + k] = d[k]


def fit_budget(cls: Any, cfg: Any, size: str, count: Any) -> tuple[Any, dict[str, Any]] | None:
    """(a narrower copy of `cfg` that `count(cls, cfg)` puts within `budget`, its changes), or
    None when ROUNDS of halving do not fit or the config cannot be rebuilt."""
    from .budget import budget_for

    budget = budget_for(size)
    if budget is None:
        return None
    floor = PROFILES[size].hidden
    d = cfg.to_dict()
    changes: dict[str, Any] = {}
    for _ in range(ROUNDS):
        before = dict(changes)
        _halved(d, floor, changes)
        if changes == before:
            return None  # nothing left to narrow
        try:
            new = type(cfg)(**init_kwargs(cfg, copy.deepcopy(d), set(changes)))
        except Exception:  # noqa: BLE001 - a config its own validation refuses narrower: give up
            return None
        n = count(cls, new)
        if n is not None and n <= budget:
            return new, changes
    return None
