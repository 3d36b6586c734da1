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
    return obj


def torch_dtype(name: str) -> Any:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
            "float64": torch.float64}[name]
