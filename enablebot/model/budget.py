"""Parameter budget: refuse, before allocating anything, a shrunk model that is not small.

The shrunk config is instantiated on the `meta` device (no memory, no init) to count its
parameters; over the budget of its size profile the build fails with a create_error that
says which config value to look at. Budgets are per size profile; ENABLEBOT_PARAM_BUDGET
(a number of parameters) overrides them. The address-space rlimit of the model child
(enablebot.execute.sandbox.Limits) is the backstop for anything this count misses.
"""

from __future__ import annotations

import os
from typing import Any

PARAM_BUDGET = {"tiny": 100_000_000, "small": 1_000_000_000}  # fp32: 0.4 GB / 4 GB (+ fp64 reference)
BUDGET_ENV = "ENABLEBOT_PARAM_BUDGET"


class OverBudget(RuntimeError):
    """The shrunk model has more parameters than its size profile allows."""


def budget_for(size: str) -> int | None:
    env = os.environ.get(BUDGET_ENV, "").strip()
    if env:
        return int(float(env)) or None
    return PARAM_BUDGET.get(size)


def count_params_meta(cls: Any, cfg: Any) -> int | None:
    """Parameters of `cls(cfg)` built on the meta device; None when that cannot be built
    (the real build then reports its own error, and the rlimit still applies)."""
    import torch

    try:
        with torch.device("meta"):
            model = cls._from_config(cfg) if hasattr(cls, "_from_config") else cls(cfg)
    except Exception:  # noqa: BLE001 - some models cannot be built on meta; not our verdict to give
        return None
    return sum(p.numel() for p in model.parameters())


def check_budget(cls: Any, cfg: Any, size: str) -> int | None:
    """Raise OverBudget when the model would exceed the budget; returns the count."""
    budget = budget_for(size)
    if budget is None:
        return None
    n = count_params_meta(cls, cfg)
    if n is not None and n > budget:
        vocab = getattr(cfg, "vocab_size", None)
        raise OverBudget(f"the {size} model would have {n:,} parameters, over the budget of {budget:,} "
                         f"(vocab_size={vocab}); check the config for an oversized value "
                         f"(or raise {BUDGET_ENV})")
    return n
