"""Seed or refresh model_registry.yaml from what the installed transformers knows."""

from __future__ import annotations

import datetime as _dt

from . import catalog
from .registry import ArchEntry, Registry


def seed_registry(registry: Registry, *, now: str | None = None) -> list[str]:
    """Add every model_type of the installed transformers missing from the registry and
    fill class facts an entry lacks. What an entry already says (a hand-picked head or
    modality, config, inputs, requires, hook, status, first_seen) is never overwritten.
    Returns the added model types."""
    now = now or _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    added = []
    for mt, k in sorted(catalog.known_architectures().items()):
        e = registry.get(mt)
        if e is None:
            e = ArchEntry(model_type=mt, first_seen=now)
            added.append(mt)
        if e.origin == "hub":  # a Hub-only architecture that transformers now knows
            e.origin = "transformers"
            e.modality = k.modality
        e.config_class = e.config_class or k.config_class
        e.base = e.base or k.base
        if not e.head and k.head:
            # the modality was guessed without a head; the head's task now tells it
            e.head, e.task, e.modality = k.head, k.task, k.modality
        registry.upsert(e)
    return added
