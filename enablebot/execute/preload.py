"""What a sweep's fork server imports once, so that every worker forked from it starts warm.

Importing this module imports torch, Dynamo, transformers (with its modeling base, which the
first model build would import) and the runner, fills the caches every model reads (the
transformers catalog, the graph-break registry, the registry file). Measured on 2 loaded cores:
a spawned worker spends ~6 s of CPU before its first model, a forked one ~0.05 s
(benchmarks/pool_startup.py).

Nothing here may run a model or a compile: a fork server that had traced a tiny module through
Dynamo (to pre-load its lazy imports) gave children that hung in their first multi-threaded
op. Nor may it initialise CUDA: a CUDA context does not survive fork. `check()` asserts that.
"""

from __future__ import annotations

import torch
import torch._dynamo
import transformers
import transformers.modeling_utils  # noqa: F401 - ~1.6 s the first model build would pay

from ..model import build
from ..measure import graph_breaks
from ..model import inputs
from ..model import loss
from ..measure import runner  # noqa: F401
from ..model.catalog import class_index, known_architectures
from ..model.registry import Registry


def check() -> None:
    """Raise if the fork server's process has initialised CUDA (workers could not use it)."""
    if torch.cuda.is_initialized():
        raise RuntimeError("CUDA was initialised in the fork server; forked workers cannot use it")


known_architectures()
class_index()
graph_breaks.break_registry()
Registry.load_cached()  # the repo's registry; a sweep on another file just misses this cache
check()
