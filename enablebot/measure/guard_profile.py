"""Skip Dynamo's guard-latency profile where only verdicts are measured.

After building each frame's guards, Dynamo (torch 2.6+) flushes the CPU cache and times one guard
evaluation (`profile_guard_manager`), only to log `guard_latency_us` in its compile metrics. The
flush costs about 30 ms per graph on the 2-core machine: 6.5% of a breaking item's trace (qwen3_5,
51 graphs). Nothing a verdict reads depends on it: the guards, their same-frame check, the graphs
and the breaks are unchanged. The Inductor pass keeps it, because its compile time should be the
time a user waits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def skipped() -> Iterator[bool]:
    """Within: Dynamo's guard-latency profile returns 0 us at once. Yields whether it was found
    (the name is internal; a torch without it runs unchanged)."""
    import torch._dynamo.guards as guards

    original = getattr(guards, "profile_guard_manager", None)
    if original is None:
        yield False
        return
    guards.profile_guard_manager = lambda *args, **kwargs: 0.0
    try:
        yield True
    finally:
        guards.profile_guard_manager = original
