"""What a sweep's fork server imports once, so that every worker forked from it starts warm.

Importing this module imports torch, Dynamo, transformers and the runner, and fills the caches
every model reads (the transformers catalog, the graph-break registry). It must never initialise
CUDA: a CUDA context does not survive fork, and every worker would fail on its first CUDA call.
torch's import and `torch.cuda.is_available()`-free code leave CUDA uninitialised; `check()`
asserts it, and the pool's tests fork a worker from here and run it.
"""

from __future__ import annotations

import torch
import torch._dynamo  # noqa: F401 - the largest part of the first compile's imports
import transformers  # noqa: F401

from . import build, graph_breaks, inputs, loss, runner  # noqa: F401
from .catalog import class_index, known_architectures
from .registry import Registry

known_architectures()
class_index()
graph_breaks.break_registry()
Registry.load_cached()  # the repo's registry; a sweep on another file just misses this cache


def check() -> None:
    """Raise if the fork server's process has initialised CUDA (workers could not use it)."""
    if torch.cuda.is_initialized():
        raise RuntimeError("CUDA was initialised in the fork server; forked workers cannot use it")


check()
