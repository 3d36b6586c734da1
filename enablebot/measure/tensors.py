"""Moving nested inputs and outputs between devices and dtypes (shared by the runner, the
scenarios and the held-out reference)."""

from __future__ import annotations

from typing import Any


def to_device(obj: Any, device: str, float_dtype: Any = None) -> Any:
    """Tensors in a nested structure moved to `device` (floating ones cast to `float_dtype`)."""
    import torch

    if isinstance(obj, torch.Tensor):
        if float_dtype is not None and obj.is_floating_point():
            return obj.to(device=device, dtype=float_dtype)
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: to_device(v, device, float_dtype) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device, float_dtype) for v in obj)
    if hasattr(obj, "inference_device"):
        return _move_session(obj, device)
    return obj


def _move_session(session: Any, device: str) -> Any:
    """A transformers inference session (SAM2/SAM3 video: frames, prompts, a feature cache),
    moved in place: every `*_device` it and its cache hold set to `device` and every tensor it
    holds moved there, as a session created on that device (`inference_device=...`) would be.
    Containers keep their type (the sessions use defaultdicts). Floating tensors keep their
    dtype: the session casts frames to its own `dtype`."""
    import torch

    def move(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.to(device)
        if isinstance(value, dict):
            for k in list(value):
                value[k] = move(value[k])
        elif isinstance(value, list):
            value[:] = [move(v) for v in value]
        return value

    for holder in (session, getattr(session, "cache", None)):
        if holder is None:
            continue
        for name, value in list(vars(holder).items()):
            if name.endswith("_device"):
                setattr(holder, name, device)
            elif holder is session and name != "cache":
                setattr(holder, name, move(value))
    return session


def torch_dtype(name: str) -> Any:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
            "float64": torch.float64}[name]
