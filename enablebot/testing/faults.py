"""Registry hooks that make a model run die the ways real ones do (tests of isolation).

Use in a test registry entry: `hook: enablebot.testing.faults:abort`.
"""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any


def abort(model: Any, **_: Any) -> Any:
    os.abort()  # SIGABRT, like a failed C++ assertion in a kernel


def segfault(model: Any, **_: Any) -> Any:
    ctypes.string_at(0)  # SIGSEGV


def hang(model: Any, **_: Any) -> Any:
    while True:  # a deadlock in a compiler worker looks like this from outside
        time.sleep(1)


def oom(model: Any, **_: Any) -> Any:
    raise MemoryError("simulated allocator failure")


def env_probe(model: Any, **_: Any) -> Any:
    # Fails with the worker's view of ENABLEBOT_PROBE: tests that a forked worker gets the pool's environment.
    raise RuntimeError(f"ENABLEBOT_PROBE={os.environ.get('ENABLEBOT_PROBE')}")


def nondeterministic(model: Any, **_: Any) -> Any:
    """Eager that disagrees with itself far beyond any tolerance (vilt-like): random noise on
    every floating output. Numerics must then be `inconclusive`, never pass."""
    import torch

    def noisy(_module: Any, _inputs: Any, out: Any) -> Any:
        for k in list(out.keys()) if hasattr(out, "keys") else []:
            v = out[k]
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                out[k] = v + torch.randn_like(v)
        return out

    model.register_forward_hook(noisy)
    return model
