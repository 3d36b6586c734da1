"""Real audio for language models that merge it at placeholder tokens (audio LMs).

`add_audio_tokens` is `images.add_image_tokens` for audio: spectrogram features by the
`input_features` rule (with their frame mask where the audio-features function takes one),
the rows one clip's features take counted through the model's own `get_audio_features`, that
many audio placeholder tokens written into every sample (as a processor expands `<sound>`), and
the layout kept only when a trial forward then runs. Nothing here is per architecture; models
whose count needs more (per-row frame arithmetic) keep their registry recipe.

- The audio input is the features function's first argument (`input_features`, a waveform's
  `input_values`, codec ids): whatever `get_audio_features` encodes. A registry recipe may shape
  it (frames-first stacked features, a channel axis): the recipe's tensors are then counted and
  get their placeholders, as recipe-shaped images do.
- A mask the function takes over its input's frames (`feature_attention_mask`, `padding_mask`,
  `<input>_mask`) is all ones over that input, as a feature extractor returns for unpadded clips.
- A features function that reads the placeholders themselves (`input_ids`: MusicFlamingo builds
  per-window timestamps from them) is counted by the audio tower's own output-length function
  (`_get_feat_extract_output_lengths` of the frame mask), the arithmetic its forward uses.
- A bare delegating wrapper (`get_audio_features(*args, **kwargs)`: Voxtral's head) is read
  through to the inner model's function, whose signature names the inputs; so is a wrapper that
  leaves an argument the inner function requires to `**kwargs` (MOSS-Transcribe-Diarize's
  `padding_mask`).

`rows_per_sample` counts each row of a (padded) batch the same ways; `padding.pad_batch` uses it
to give each row as many placeholders as its real audio encodes to.
"""

from __future__ import annotations

import inspect
from typing import Any

from .configs import first_attr
from .images import _feature_rows
from .padding import MASK_OF  # masks over an audio input's frames, by the extractors' names
from .tensors import Ctx, rule_for, token_ids
from .trial import runs

AUDIO_TOKEN_KEYS = ("audio_token_id", "audio_token_index")
AUDIO_TOKEN_SUBS = ("text_config", "audio_config")
# Other media's placeholders the text may already carry (an omni model's image and video).
MEDIA_TOKEN_KEYS = ("image_token_id", "image_token_index", "video_token_id", "video_token_index")
MEDIA_TOKEN_SUBS = ("text_config",)


def audio_token(config: Any) -> Any:
    """The audio placeholder token id, if the model merges audio into its text; else None."""
    return first_attr(config, AUDIO_TOKEN_KEYS, AUDIO_TOKEN_SUBS)


def _named(fn: Any) -> list[inspect.Parameter]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]


def _audio_features_fn(model: Any) -> Any:
    """`get_audio_features` on the model or its inner model, the first that names its arguments;
    the inner model's where it requires an argument the head's wrapper leaves to `**kwargs`
    (MOSS-Transcribe-Diarize's `padding_mask`), as the head's forward passes it on."""
    found = None
    for obj in (model, getattr(model, "model", None)):
        fn = getattr(obj, "get_audio_features", None)
        if fn is None or not _named(fn):
            continue
        if found is None:
            found = fn
            continue
        named = {p.name for p in _named(found)}
        if any(p.default is p.empty and p.name not in named for p in _named(fn)):
            found = fn
    return found


def audio_input(fn: Any) -> str | None:
    """The audio input a features function encodes: its first argument other than the text."""
    return next((p.name for p in _named(fn) if p.name != "input_ids"), None)


def mask_target(name: str, inputs: Any) -> str | None:
    """The input a mask argument covers: by the extractors' names, else `<input>_mask`."""
    if name in MASK_OF:
        return MASK_OF[name]
    if name.endswith("_mask") and name[:-len("_mask")] in inputs:
        return name[:-len("_mask")]
    return None


def _frames(t: Any, config: Any) -> int:
    from .padding import _frames_axis

    return int(t.shape[_frames_axis(t, config)])


def wants_audio(model: Any, ctx: Ctx, skip: set[str] | frozenset[str] = frozenset()) -> bool:
    fn = _audio_features_fn(model)
    main = audio_input(fn) if fn is not None else None
    params = inspect.signature(model.forward).parameters
    return (main is not None and main in params and main not in skip and main not in ctx.out
            and "input_ids" in ctx.out and audio_token(ctx.config) is not None)


def recipe_audio(model: Any, ctx: Ctx, given: Any) -> bool:
    """Whether a recipe shaped the audio input of an audio LM that still needs its placeholders."""
    fn = _audio_features_fn(model)
    main = audio_input(fn) if fn is not None else None
    return (main is not None and main in given and "input_ids" in ctx.out and "input_ids" not in given
            and audio_token(ctx.config) is not None)


def output_lengths(model: Any, frames: Any) -> list[int] | None:
    """Encoded rows per clip of `frames` real frames, by the audio tower's own arithmetic
    (`_get_feat_extract_output_lengths`; its last value where it returns several)."""
    import torch

    for m in model.modules():
        f = getattr(m, "_get_feat_extract_output_lengths", None)
        if f is None:
            continue
        try:
            out = f(frames.to(torch.long))
        except Exception:  # noqa: BLE001 - another signature: not this one
            continue
        if isinstance(out, (tuple, list)):
            out = out[-1]
        if torch.is_tensor(out) and out.shape == frames.shape:
            return [int(v) for v in out.tolist()]
    return None


def _mask_for(fn: Any, inputs: dict[str, Any]) -> Any:
    """The frame mask among the function's arguments in `inputs` (None if it takes none)."""
    for p in _named(fn):
        if mask_target(p.name, inputs) and p.name in inputs:
            return inputs[p.name]
    return None


def rows_per_sample(model: Any, config: Any, inputs: dict[str, Any]) -> list[int] | None:
    """How many placeholder rows each sample's audio in `inputs` encodes to: one features call
    per row (its own audio and mask), or, where the function reads the placeholders or there is
    none, the tower's output lengths of each row's real frames. None when neither works."""
    import torch

    fn = _audio_features_fn(model)
    names = [p.name for p in _named(fn)] if fn is not None else []
    main = audio_input(fn) if fn is not None else None
    if fn is not None and "input_ids" not in names and torch.is_tensor(inputs.get(main)):
        batch = inputs[main].shape[0]
        counts = []
        try:
            for i in range(batch):
                kw = {n: inputs[n][i:i + 1] if torch.is_tensor(inputs[n]) and inputs[n].shape[:1] == (batch,)
                      else inputs[n] for n in names if n in inputs}
                with torch.no_grad():
                    counts.append(_feature_rows(fn(**kw), 1))
        except Exception:  # noqa: BLE001 - these features do not fit
            return None
        return counts if all(counts) else None
    mask = _mask_for(fn, inputs) if fn is not None else next(
        (inputs[k] for k in MASK_OF if torch.is_tensor(inputs.get(k))), None)
    if mask is None and fn is not None and torch.is_tensor(inputs.get(main)):
        t = inputs[main]
        mask = torch.ones(t.shape[0], _frames(t, config), dtype=torch.long)
    if mask is None:
        return None
    return output_lengths(model, mask.sum(-1))


def add_audio_tokens(model: Any, ctx: Ctx) -> bool:
    """Give an audio LM one clip per sample: features, their mask where the model takes one, and
    as many placeholder tokens as the clip's encoded rows. Tensors already in `ctx.out` (a recipe's)
    are used as they are. False (nothing added) when the count cannot be found or the forward
    does not then run."""
    import torch

    fn = _audio_features_fn(model)
    token = audio_token(ctx.config)
    saved = dict(ctx.out)
    kwargs: dict[str, Any] = {}
    for p in _named(fn):
        name = p.name
        if name in ctx.out:
            kwargs[name] = ctx.out[name]
            continue
        rule = rule_for(name)
        target = mask_target(name, kwargs)
        if rule is None and target is not None and target in kwargs:  # a mask over its input's frames: all real
            x = kwargs[target]
            dtype = torch.bool if name == "padding_mask" else torch.long
            kwargs[name] = ctx.out[name] = torch.ones(x.shape[0], _frames(x, ctx.config), dtype=dtype)
            continue
        if rule is None:
            if p.default is p.empty:
                ctx.out.clear()
                ctx.out.update(saved)
                return False
            continue
        kwargs[name] = ctx.out[name] = rule(ctx)
    rows = rows_per_sample(model, ctx.config, kwargs)
    n = rows[0] if rows and len(set(rows)) == 1 else None
    if n:
        ids = ctx.out["input_ids"]
        old = ids.shape[1]
        media = [t for t in (first_attr(ctx.config, (k,), MEDIA_TOKEN_SUBS) for k in MEDIA_TOKEN_KEYS)
                 if isinstance(t, int) and not isinstance(t, bool)]
        if media and bool(torch.isin(ids, torch.tensor(media, dtype=ids.dtype)).any()):
            # The text already carries placeholders (an omni model's image and video): the audio's
            # run is appended after them, the other per-token tensors extended with zeros.
            new_ids = token_ids(ctx, old + n + 8)
            new_ids[:, :old] = ids
            new_ids[:, old:old + n] = int(token)
            for key, t in saved.items():
                if key not in ("input_ids", "attention_mask") and torch.is_tensor(t) and t.dim() == 2 \
                        and tuple(t.shape) == tuple(ids.shape) and not t.is_floating_point():
                    ext = torch.zeros(new_ids.shape, dtype=t.dtype)
                    ext[:, :old] = t
                    ctx.out[key] = ext
        else:
            new_ids = token_ids(ctx, max(old, n + 8))
            new_ids[:, 1:1 + n] = int(token)
        ctx.out["input_ids"] = new_ids
        if "attention_mask" in ctx.out:
            ctx.out["attention_mask"] = torch.ones(new_ids.shape, dtype=torch.long)
        if runs(model, ctx.out):
            return True
    ctx.out.clear()
    ctx.out.update(saved)
    return False
