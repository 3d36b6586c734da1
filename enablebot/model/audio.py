"""Real audio for language models that merge it at placeholder tokens (audio LMs).

`add_audio_tokens` is `images.add_image_tokens` for audio: spectrogram features by the
`input_features` rule (with their frame mask where the audio-features function takes one),
the rows one clip's features take counted through the model's own `get_audio_features`, that
many audio placeholder tokens written into every sample (as a processor expands `<sound>`), and
the layout kept only when a trial forward then runs. Nothing here is per architecture; models
whose count needs more (per-row frame arithmetic) keep their registry recipe.
"""

from __future__ import annotations

import inspect
from typing import Any

from .configs import first_attr
from .images import _feature_rows, features_fn
from .tensors import Ctx, rule_for, token_ids
from .trial import runs

AUDIO_TOKEN_KEYS = ("audio_token_id", "audio_token_index")
AUDIO_TOKEN_SUBS = ("text_config", "audio_config")


def audio_token(config: Any) -> Any:
    """The audio placeholder token id, if the model merges audio into its text; else None."""
    return first_attr(config, AUDIO_TOKEN_KEYS, AUDIO_TOKEN_SUBS)


def _audio_features_fn(model: Any) -> Any:
    return features_fn(model, "get_audio_features")


def wants_audio(model: Any, ctx: Ctx, skip: set[str] | frozenset[str] = frozenset()) -> bool:
    params = inspect.signature(model.forward).parameters
    return ("input_features" in params and "input_features" not in skip and "input_features" not in ctx.out
            and "input_ids" in ctx.out and audio_token(ctx.config) is not None
            and _audio_features_fn(model) is not None)


def add_audio_tokens(model: Any, ctx: Ctx) -> bool:
    """Give an audio LM one clip per sample: features, their mask where the model takes one, and
    as many placeholder tokens as the clip's encoded rows. False (nothing added) when the count
    cannot be found or the forward does not then run."""
    import torch

    fn = _audio_features_fn(model)
    token = audio_token(ctx.config)
    saved = dict(ctx.out)
    kwargs: dict[str, Any] = {}
    for name, p in inspect.signature(fn).parameters.items():
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        if name == "input_ids":
            kwargs[name] = ctx.out[name]
            continue
        rule = rule_for(name)
        if rule is None:
            if p.default is p.empty:
                return False
            continue
        kwargs[name] = ctx.out[name] = rule(ctx)
    try:
        with torch.no_grad():
            n = _feature_rows(fn(**kwargs), ctx.batch)
    except Exception:  # noqa: BLE001 - these features do not fit: text only
        n = None
    if n:
        ids = ctx.out["input_ids"]
        new_ids = token_ids(ctx, max(ids.shape[1], n + 8))
        new_ids[:, 1:1 + n] = int(token)
        ctx.out["input_ids"] = new_ids
        if "attention_mask" in ctx.out:
            ctx.out["attention_mask"] = torch.ones(new_ids.shape, dtype=torch.long)
        if runs(model, ctx.out):
            return True
    ctx.out.clear()
    ctx.out.update(saved)
    return False
