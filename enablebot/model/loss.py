"""A scalar training loss from whatever a model's forward returned.

The model's own `loss` when it computed one (labels were given); otherwise the sum of
the means of every floating-point tensor in the output structure, so that backward
reaches every output head. Means are taken in fp32 so low-precision outputs do not
overflow when summed.
"""

from __future__ import annotations

from typing import Any, Iterator


def iter_tensors(obj: Any, _seen: set[int] | None = None) -> Iterator[Any]:
    """Every tensor in a (nested) model output: ModelOutput, dict, tuple, list, dataclass."""
    import torch

    seen = _seen if _seen is not None else set()
    if id(obj) in seen:
        return
    if isinstance(obj, torch.Tensor):
        seen.add(id(obj))
        yield obj
        return
    if isinstance(obj, (str, bytes, int, float, bool)) or obj is None:
        return
    seen.add(id(obj))
    if isinstance(obj, dict):  # ModelOutput is an OrderedDict of its non-None fields
        values = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        values = list(obj)
    elif hasattr(obj, "__dataclass_fields__"):
        values = [getattr(obj, f, None) for f in obj.__dataclass_fields__]
    else:
        return  # caches and other objects: not outputs to train on
    for v in values:
        yield from iter_tensors(v, seen)


class NothingToTrain(ValueError):
    """No output carries a gradient (a tokenizer's integer codes, detached masks): there is
    nothing a user trains through, so train mode does not apply."""


def loss_from_outputs(outputs: Any) -> Any:
    """The model's `loss` when present, else sum of `.float().mean()` of floating outputs."""
    import torch

    loss = outputs.get("loss") if isinstance(outputs, dict) else getattr(outputs, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.requires_grad:
        return loss.float().mean() if loss.dim() else loss.float()
    terms = [t.float().mean() for t in iter_tensors(outputs)
             if t.is_floating_point() and t.requires_grad and t.numel() > 0]
    if not terms:
        raise NothingToTrain("the model returned no floating-point output that requires grad; nothing to train on")
    return torch.stack(terms).sum()
