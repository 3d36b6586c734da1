"""Versions that decide graph breaks: recorded in every result and baseline."""

from __future__ import annotations

import platform

from .results import Versions


def current(device: str = "cpu") -> Versions:
    import torch
    import transformers

    v = Versions(torch=torch.__version__, transformers=transformers.__version__, python=platform.python_version())
    try:
        import triton  # noqa: F401  (only on CUDA machines)

        v.triton = triton.__version__
    except ImportError:
        pass
    if device.startswith("cuda") and torch.cuda.is_available():
        v.cuda = torch.version.cuda
        v.device_name = torch.cuda.get_device_name()
    else:
        v.device_name = platform.processor() or platform.machine()
    return v
