"""The forward calls `generate()` itself makes: its prefill and its first decode step, as kwargs.

The `decode` scenario builds its two calls the way `GenerationMixin` does for most heads. Some
heads generate their own way (Idefics feeds the prefill's image states back as
`perceiver_embeddings`, Voxtral Realtime slices pre-computed audio embeddings per step, Dia doubles
the batch for classifier-free guidance, CPM-Ant wants the whole ids every step). Where the built
step does not run, the scenario asks the model: it runs `generate()` eagerly for one new token
past the prefill and records what the head's forward was called with, deep-copied before each call
(the cache as it was at that moment). Only the model's own code decides those inputs.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

# What generate() makes itself from the prompt: passing the harness's would be a different call.
_GENERATE_MAKES = ("use_cache", "cache_position", "position_ids", "decoder_input_ids", "decoder_attention_mask",
                   "past_key_values", "cache", "labels")


class _Enough(Exception):
    """Raised from the pre-hook once the calls wanted are recorded: generate() stops there."""


def generate_calls(model: Any, prompt: dict[str, Any], calls: int = 2) -> list[dict[str, Any]] | None:
    """The kwargs of the first `calls` forward calls `model.generate(**prompt)` makes (greedy), or
    None where generate() raises first or calls the head's forward fewer times (a head whose
    generate() delegates to a sub-model's: Kosmos-2)."""
    import torch

    seen: list[dict[str, Any]] = []

    def pre_hook(module: Any, args: tuple, kwargs: dict) -> None:
        if args:  # positional inputs: name them as the forward does
            names = list(inspect.signature(module.forward).parameters)
            kwargs = {**dict(zip(names, args)), **kwargs}
        seen.append(copy.deepcopy(kwargs))
        if len(seen) >= calls:
            raise _Enough

    prompt = {k: v for k, v in prompt.items() if k not in _GENERATE_MAKES}
    handle = model.register_forward_pre_hook(pre_hook, with_kwargs=True)
    training = model.training
    try:
        with torch.random.fork_rng(), torch.no_grad():
            model.eval()
            model.generate(**copy.deepcopy(prompt), max_new_tokens=calls, min_new_tokens=calls, do_sample=False)
    except _Enough:
        pass
    except Exception:  # noqa: BLE001 - generate() itself failed: no calls to measure
        return None
    finally:
        handle.remove()
        model.train(training)
    return seen if len(seen) >= calls else None
