"""The forward calls `generate()` itself makes: its prefill and its first decode step, as kwargs.

The `decode` scenario builds its two calls the way `GenerationMixin` does for most heads. Some
heads generate their own way (Idefics feeds the prefill's image states back as
`perceiver_embeddings`, Voxtral Realtime slices pre-computed audio embeddings per step, Dia doubles
the batch for classifier-free guidance, CPM-Ant wants the whole ids every step). Where the built
step does not run, the scenario asks the model: it runs `generate()` eagerly for one new token
past the prefill and records what the head's forward was called with, deep-copied before each call
(the cache as it was at that moment). Only the model's own code decides those inputs.

A streaming head (Voxtral Realtime) generates exactly as many tokens as its audio lasts, prompt
included, so a prompt as long as the audio leaves generate() nothing to do ("Input length of
input_ids is 32, but `max_length` is set to 32"). Real prompts are shorter than the audio; the
prompt's audio is then lengthened (its time axis doubled) until generate() runs past the prompt,
which keeps the padded prompt as it was.
"""

from __future__ import annotations

import copy
import inspect
import re
from dataclasses import dataclass, field
from typing import Any

# What generate() makes itself from the prompt: passing the harness's would be a different call.
_GENERATE_MAKES = ("use_cache", "cache_position", "position_ids", "decoder_input_ids", "decoder_attention_mask",
                   "past_key_values", "cache", "labels")


# generate() refuses a prompt that already fills the max_length the model derived (from its audio).
_FILLED = re.compile(r"Input length of \w+ is (\d+), but `max_length` is set to (\d+)")
MAX_FRAMES = 16384


class _Enough(Exception):
    """Raised from the pre-hook once the calls wanted are recorded: generate() stops there."""


@dataclass
class Recorded:
    """The forward calls generate() made, and what was changed in the prompt to get them."""

    calls: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)


def generate_calls(model: Any, prompt: dict[str, Any], calls: int = 2) -> Recorded | None:
    """The kwargs of the first `calls` forward calls `model.generate(**prompt)` makes (greedy), or
    None where generate() raises first or calls the head's forward fewer times (a head whose
    generate() delegates to a sub-model's: Kosmos-2)."""
    prompt = {k: v for k, v in prompt.items() if k not in _GENERATE_MAKES}
    notes: list[str] = []
    while True:
        try:
            seen = _record(model, prompt, calls)
        except Exception as e:  # noqa: BLE001 - generate() itself failed: no calls to measure
            longer = _longer_audio(prompt, e)
            if longer is None:
                return None
            prompt, note = longer
            notes.append(note)
            continue
        return Recorded(seen, notes) if len(seen) >= calls else None


def _longer_audio(prompt: dict[str, Any], err: BaseException) -> tuple[dict[str, Any], str] | None:
    """The prompt with its audio's time axis doubled (the same clip twice; masks over it grown
    with it), where generate() said the prompt fills the length the model derives from the audio;
    else None."""
    import torch

    from ..model.layouts import _AUDIO  # the audio, by the names processors give it

    filled = _FILLED.search(str(err)) if isinstance(err, ValueError) else None
    if filled is None:
        return None
    name = next((n for n in _AUDIO if torch.is_tensor(prompt.get(n)) and prompt[n].is_floating_point()), None)
    if name is None or 2 * prompt[name].shape[-1] > MAX_FRAMES:
        return None
    x = prompt[name]
    t = x.shape[-1]
    out = dict(prompt)
    out[name] = torch.cat([x, x], dim=-1)
    ids = prompt.get("input_ids")
    text = ids.shape[-1] if torch.is_tensor(ids) else None
    for k, v in prompt.items():  # a mask over the audio's frames (not the text's): the clip repeated, so is its mask
        if k != name and torch.is_tensor(v) and v.dim() == 2 and v.shape[-1] == t != text and not v.is_floating_point():
            out[k] = torch.cat([v, v], dim=-1)
    return out, (f"{name}: last axis {t} -> {2 * t} (generate() derives its length from the audio, and the "
                 f"prompt filled it: {filled.group(0)})")


def _record(model: Any, prompt: dict[str, Any], calls: int) -> list[dict[str, Any]]:
    """The first `calls` forward calls of greedy generate() (fewer where it stops first); raises
    what generate() raises."""
    import torch

    seen: list[dict[str, Any]] = []

    def pre_hook(module: Any, args: tuple, kwargs: dict) -> None:
        if args:  # positional inputs: name them as the forward does
            names = list(inspect.signature(module.forward).parameters)
            kwargs = {**dict(zip(names, args)), **kwargs}
        seen.append(copy.deepcopy(kwargs))
        if len(seen) >= calls:
            raise _Enough

    handle = model.register_forward_pre_hook(pre_hook, with_kwargs=True)
    training = model.training
    try:
        with torch.random.fork_rng(), torch.no_grad():
            model.eval()
            model.generate(**copy.deepcopy(prompt), max_new_tokens=calls, min_new_tokens=calls, do_sample=False)
    except _Enough:
        pass
    finally:
        handle.remove()
        model.train(training)
    return seen
