"""Trial forwards: does a model run on these inputs, and what does it say is missing?

`run_completing` adds the arguments a sub-model reports missing (documented shapes, else the
rule for the name) until the forward runs, and keeps them only if it does.
"""

from __future__ import annotations

import re
from typing import Any

from .tensors import Ctx, rule_for

def runs(model: Any, inputs: dict[str, Any]) -> bool:
    """One no-grad forward, leaving the model's mode and the RNG as they were."""
    return trial_forward(model, inputs) is None


def trial_forward(model: Any, inputs: dict[str, Any], *, train: bool = False) -> Exception | None:
    """One no-grad forward in eval (or training) mode, mode and RNG left as they were: None, or
    what it raised."""
    import torch

    training = model.training
    try:
        with torch.random.fork_rng(), torch.no_grad():
            model.train(train)
            model(**inputs)
        return None
    except Exception as e:  # noqa: BLE001 - any failure means "not these inputs"
        return e
    finally:
        model.train(training)


def run_completing(model: Any, ctx: Ctx, rounds: int = 4) -> bool:
    """A trial forward of `ctx.out`. Arguments it reports missing (a sub-model's, reaching it
    through the top forward's `**kwargs`, so in no signature of the top model) are added, as
    the sub-model that requires them documents their shape, else by the rule for their name,
    and the forward is tried again. Additions stay only when the forward then runs."""
    from .documented import missing_arguments

    added: list[str] = []
    for _ in range(rounds):
        err = trial_forward(model, ctx.out)
        if err is None:
            return True
        names = [n for n in missing_arguments(err) if n not in ctx.out]
        tensors = {n: _missing_tensor(model, n, ctx) for n in names}
        if not tensors or any(t is None for t in tensors.values()):
            break
        ctx.out.update(tensors)
        added += names
    for n in added:
        ctx.out.pop(n, None)
    return False


# "You must specify exactly one of input_features or encoder_inputs_embeds" (Voxtral Realtime with
# text only): the forward wants one of the arguments it names and was given none of them.
_ONE_OF_RE = re.compile(r"(?:exactly one of|either)\s+`?(\w+)`?\s+or\s+`?(\w+)`?")


def one_of(model: Any, err: BaseException, ctx: Ctx) -> dict[str, Any]:
    """The first of the arguments such an error names that the forward takes and a documented
    shape or a rule by name can make, when none of them is given; else nothing."""
    import inspect

    m = _ONE_OF_RE.search(str(err))
    if not isinstance(err, ValueError) or m is None or any(n in ctx.out for n in m.groups()):
        return {}
    params = inspect.signature(model.forward).parameters
    for name in (n for n in m.groups() if n in params):
        t = _missing_tensor(model, name, ctx)
        if t is not None:
            return {name: t}
    return {}


def _missing_tensor(model: Any, name: str, ctx: Ctx) -> Any:
    from .documented import declaring_modules, documented_tensor

    for m in declaring_modules(model, name):
        t = documented_tensor(m, name, config=getattr(m, "config", ctx.config), batch=ctx.batch,
                              seq_len=ctx.seq_len, gen=ctx.gen)
        if t is not None:
            return t
    rule = rule_for(name)
    return rule(ctx) if rule is not None else None


# An argument a forward names as required (`mm_token_type_ids` is required ...), in backticks or quotes.
_NAMED_RE = re.compile(r"[`'](\w+)[`']")


def add_training_inputs(model: Any, ctx: Ctx, rounds: int = 2) -> list[str]:
    """Inputs that run in eval but that the forward refuses in training mode, naming an argument
    it requires then (Molmo 2: "`mm_token_type_ids` is required as a model input when training";
    its processor always returns it): that argument by the rule for its name (else as documented),
    kept only when the forward then runs in both modes. Returns the names added."""
    import copy
    import inspect

    # A training-mode forward leaves state behind even under no_grad: BatchNorm's running
    # statistics, caches kept as plain attributes (CLVP's rotary table stayed a CPU tensor after the
    # model moved to CUDA: an eager_error no user meets). The trials run on a copy.
    try:
        probe = copy.deepcopy(model)
    except Exception:  # noqa: BLE001 - a model that cannot be copied is not probed in training mode
        return []
    params = inspect.signature(model.forward).parameters
    added: list[str] = []
    for _ in range(rounds):
        err = trial_forward(probe, ctx.out, train=True)
        if err is None:
            break
        names = [n for n in dict.fromkeys(_NAMED_RE.findall(str(err))) if n in params and n not in ctx.out]
        tensors = {n: _missing_tensor(model, n, ctx) for n in names[:1]}
        if not tensors or any(t is None for t in tensors.values()):
            break
        ctx.out.update(tensors)
        added += list(tensors)
    if added and (trial_forward(probe, ctx.out, train=True) is not None or trial_forward(probe, ctx.out) is not None):
        for n in added:
            ctx.out.pop(n, None)
        return []
    return added
