"""What a sweep's fork server imports once, so that every worker forked from it starts warm.

Importing this module imports torch, Dynamo, transformers (with its modeling base, which the
first model build would import) and the runner, fills the caches every model reads (the
transformers catalog, the graph-break registry, the registry file). Measured on 2 loaded cores:
a spawned worker spends ~6 s of CPU before its first model, a forked one ~0.05 s
(benchmarks/pool_startup.py).

It also imports what transformers' modeling modules share (generation, masks, processors,
tokenizers; `SHARED_MODELING`): measured on 2 cores, a worker's first modeling import took
0.23-0.25 s, of which one model type's own module was 7-18 ms (bert, gpt2, llama, t5, vit,
whisper, qwen2_moe, clip), so the shared part is paid once here instead of once per worker.
The per-type modules are left to the workers: the pool sends a type's items to the worker that
built it (pool._affine), so each is imported about once anyway, and a serial import of every
type's module here would hold every worker's start for as long as it saves.

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


# What modeling modules import besides their own code (transformers 5.x names; one that is missing
# in another release is skipped).
SHARED_MODELING = (
    "transformers.generation.utils", "transformers.masking_utils", "transformers.modeling_layers",
    "transformers.processing_utils", "transformers.image_processing_utils", "transformers.video_processing_utils",
    "transformers.feature_extraction_utils", "transformers.convert_slow_tokenizer",
)


def import_shared_modeling() -> list[str]:
    """Import SHARED_MODELING; returns the names that did not import (absent in this release)."""
    import importlib

    missing = []
    for name in SHARED_MODELING:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a preload must never stop the fork server
            missing.append(name)
    return missing


import_shared_modeling()
known_architectures()
class_index()
graph_breaks.break_registry()
Registry.load_cached()  # the repo's registry; a sweep on another file just misses this cache
check()
