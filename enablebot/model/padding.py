"""Padded batches: rows of different real lengths, as a tokenizer or feature extractor makes them.

A user's batch is padded: the attention mask has zeros, and the model's masking code
(padding-aware causal masks, position ids from the mask, audio feature masks) runs.
`pad_batch` turns the builder's unpadded inputs into such a batch:

- text (`input_ids` + `attention_mask`): right padding for encoders and encoder-decoders,
  left padding for decoder-only generative models (what `generate()` needs). Left-padded
  rows are shifted right, so their real tokens (placeholder tokens included) stay intact;
  the tokens shifted out at the end are ordinary text.
- audio (`input_values` / `input_features` without `input_ids`): an `attention_mask` over
  raw samples or feature frames, right-padded, with the padded samples zeroed, as the
  wav2vec2/whisper feature extractors return with `return_attention_mask=True`. Audio next to
  text whose placeholder tokens count its frames (Qwen2-Audio) is padded under its own mask and
  each row keeps as many placeholders as its real audio encodes to (`pad_counted_audio`).

Row 0 keeps its full length; the last row loses about a quarter. Nothing is padded when
the forward takes no attention mask or there is no room (every position is special).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from .documented import documented_unused

# Masks over audio frames that feature extractors return under their own names.
AUDIO_MASK_KEYS = ("attention_mask", "input_features_mask", "feature_attention_mask", "padding_mask")
MASK_OF = {"input_features_mask": "input_features", "feature_attention_mask": "input_features",
           "padding_mask": "input_values"}  # the input each named mask covers
AUDIO_MAIN_KEYS = ("input_values", "input_features")


@dataclass
class Padding:
    key: str | None = None           # the mask that carries the padding
    side: str | None = None          # "left" | "right"
    lengths: list[int] = field(default_factory=list)  # real length per row
    reason: str | None = None        # why nothing was padded


def forward_params(model: Any) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def is_decoder_only_generative(model: Any, config: Any) -> bool:
    can = getattr(model, "can_generate", None)
    try:
        gen = bool(can()) if callable(can) else False
    except Exception:  # noqa: BLE001 - a broken can_generate means "not generative"
        gen = False
    return gen and not getattr(config, "is_encoder_decoder", False)


def _pad_id(model: Any, config: Any, ids: Any = None) -> int:
    """The config's pad token, if the input embedding has a row for it (encoder-decoders
    may name the decoder's pad, outside the encoder's vocabulary); else 0. Where the model
    does not say which embedding its ids reach (Dia: `get_input_embeddings` is not
    implemented), the ids themselves bound the vocabulary: they were drawn from it, so a
    pad id above all of them may name another tower's vocabulary (Dia's text config is the
    audio decoder's, pad 1025, over a 256-byte encoder)."""
    from .configs import text_config

    try:
        vocab = int(model.get_input_embeddings().num_embeddings)
    except Exception:  # noqa: BLE001 - no (standard) input embedding
        vocab = int(ids.max()) + 1 if ids is not None and ids.numel() else None
    for c in (config, text_config(config)):
        v = getattr(c, "pad_token_id", None)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0 and (vocab is None or v < vocab):
            return v
    return 0


def _lengths(batch: int, total: int, free: int) -> list[int]:
    """Real length per row: row 0 full, the last row `min(total // 4, free)` shorter."""
    cut = min(max(total // 4, 1), free)
    if batch < 2 or cut <= 0:
        return [total] * batch
    return [total - round(cut * i / (batch - 1)) for i in range(batch)]


def _trailing_ordinary(ids: Any, special: set[int]) -> int:
    """How many positions at the end of every row hold ordinary (non-special) tokens."""
    n = ids.shape[1]
    free = n
    for row in ids.tolist():
        k = 0
        for tok in reversed(row):
            if tok in special:
                break
            k += 1
        free = min(free, k)
    return free


def pad_text(model: Any, config: Any, inputs: dict[str, Any]) -> tuple[dict[str, Any], Padding]:
    import torch

    from .tensors import special_ids

    ids = inputs.get("input_ids")
    if not (torch.is_tensor(ids) and ids.dim() == 2 and not ids.is_floating_point()):
        return inputs, Padding(reason="no 2-D input_ids")
    b, s = ids.shape
    special = special_ids(config)
    pad = _pad_id(model, config, ids)
    # Room to pad: trailing positions with ordinary tokens (image placeholders stay real),
    # at least 2 real tokens per row.
    free = min(_trailing_ordinary(ids, special), s - 2)
    lengths = _lengths(b, s, free)
    if len(set(lengths)) == 1:
        return inputs, Padding(reason="no room: every trailing position is a special token")
    side = "left" if is_decoder_only_generative(model, config) else "right"
    out = dict(inputs)
    mask = torch.zeros(b, s, dtype=torch.long, device=ids.device)
    new_ids = ids.clone()
    for i, n in enumerate(lengths):
        k = s - n
        if side == "left":
            mask[i, k:] = 1
            if k:
                new_ids[i, k:] = ids[i, :n]
                new_ids[i, :k] = pad
        else:
            mask[i, :n] = 1
            new_ids[i, n:] = pad
    out["input_ids"] = new_ids
    out["attention_mask"] = mask
    if side == "left":  # other per-token tensors (token types, boxes) move with their tokens
        for key, t in inputs.items():
            if key in ("input_ids", "attention_mask") or not torch.is_tensor(t) or t.dim() < 2 \
                    or tuple(t.shape[:2]) != (b, s):
                continue
            moved = t.clone()
            for i, n in enumerate(lengths):
                k = s - n
                if k:
                    moved[i, k:] = t[i, :n]
                    moved[i, :k] = 0
            out[key] = moved
    return out, Padding(key="attention_mask", side=side, lengths=lengths)


def _frames_axis(t: Any, config: Any) -> int:
    """The time axis of an audio tensor: last for waveforms and (batch, mels, frames)
    features, 1 for (batch, frames, features)."""
    from .configs import first_attr
    from .tensors import AUDIO_SUBS

    if t.dim() == 2:
        return 1
    mels = first_attr(config, ("num_mel_bins", "n_mels"), AUDIO_SUBS)
    if t.dim() == 3 and mels is not None and t.shape[1] == int(mels):
        return 2
    if t.dim() == 3 and t.shape[1] <= 8:  # (batch, channels, samples)
        return 2
    return 1


def pad_audio(model: Any, config: Any, inputs: dict[str, Any]) -> tuple[dict[str, Any], Padding]:
    import torch

    main = next((k for k in AUDIO_MAIN_KEYS if torch.is_tensor(inputs.get(k))), None)
    if main is None:
        return inputs, Padding(reason="no audio input")
    params = forward_params(model)
    key = next((k for k in AUDIO_MASK_KEYS if k in inputs and k != "attention_mask"), None)
    if key is None and "attention_mask" in params and "input_ids" not in inputs:
        key = "attention_mask"
    if key == "attention_mask" and key not in inputs and documented_unused(model, key):
        return inputs, Padding(reason="the forward documents its audio mask as not used")
    if key is None:
        return inputs, Padding(reason="the forward takes no audio mask")
    # A mask belongs to its own input: a codec with a waveform and semantic features pads the
    # features' frames under `input_features_mask`, not the waveform's samples.
    if torch.is_tensor(inputs.get(MASK_OF.get(key, ""))):
        main = MASK_OF[key]
    x = inputs[main]
    axis = _frames_axis(x, config)
    b, t = x.shape[0], x.shape[axis]
    lengths = _lengths(b, t, t - 2)
    out = dict(inputs)
    padded, mask = _right_padded(x, axis, lengths, torch.zeros(b, t, dtype=torch.long, device=x.device))
    old = inputs.get(key)
    if torch.is_tensor(old):
        mask = mask.to(old.dtype)
    out[main], out[key] = padded, mask
    if key == "attention_mask" and key not in inputs and extractor_mask_default(config) is not True \
            and not _runs(model, out) and _runs(model, {k: v for k, v in out.items() if k != key}):
        # The forward's `attention_mask` is not a mask over samples or frames (AST masks its
        # patch sequence; Voxtral Realtime's 5.17 encoder one over its downsampled frames, which
        # its own head never passes), and the feature extractor does not return one by default:
        # the user's batch is the padded audio alone.
        del out[key]
        return out, Padding(side="right", lengths=lengths,
                            reason="audio padded without a mask: the forward rejects one over frames, and the "
                                   "feature extractor does not return one by default")
    return out, Padding(key=key, side="right", lengths=lengths)


def _right_padded(x: Any, axis: int, lengths: list[int], mask: Any) -> tuple[Any, Any]:
    """A copy of audio `x` whose frames along `axis` past each row's real length are zero (feature
    extractors pad with 0.0), and `mask` (zeros, one row per sample) set to 1 over the real frames."""
    padded = x.clone()
    t = x.shape[axis]
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        padded.narrow(0, i, 1).narrow(axis, n, t - n).zero_()
    return padded, mask


def _runs(model: Any, inputs: dict[str, Any]) -> bool:
    from .trial import runs

    return runs(model, inputs)


def extractor_mask_default(config: Any) -> bool | None:
    """Whether the model type's feature extractor returns an attention mask by default (its
    `return_attention_mask` argument's default); None when it has no extractor or no such switch."""
    import inspect as _inspect

    try:
        import transformers
        from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING_NAMES
    except ImportError:
        return None
    name = FEATURE_EXTRACTOR_MAPPING_NAMES.get(getattr(config, "model_type", None) or "")
    try:
        cls = getattr(transformers, name) if name else None
        param = _inspect.signature(cls.__init__).parameters.get("return_attention_mask") if cls else None
    except Exception:  # noqa: BLE001 - an extractor that needs a missing package
        return None
    return param.default if param is not None and isinstance(param.default, bool) else None


def pad_batch(model: Any, config: Any, inputs: dict[str, Any]) -> tuple[dict[str, Any], Padding]:
    """A padded copy of `inputs` (rows of different real lengths) and what was padded."""
    import torch

    params = forward_params(model)
    info = Padding(reason="the forward takes no attention mask")
    if torch.is_tensor(inputs.get("input_ids")) and "attention_mask" in params:
        inputs, info = pad_text(model, config, inputs)
    if any(torch.is_tensor(inputs.get(k)) for k in AUDIO_MAIN_KEYS) or _audio_mask(model, inputs) is not None:
        if _has_audio_placeholders(config, inputs):
            # A processor writes one placeholder per encoder frame of each row's real audio: the
            # audio is padded under its own mask and each row keeps as many placeholders as its real
            # audio encodes to (`pad_counted_audio`); where that cannot be done, it keeps its length.
            padded, audio = pad_counted_audio(model, config, inputs)
            if info.key is None:
                info = audio
            return padded, info
        # Audio next to text (audio LMs) is padded under its own mask name.
        inputs, audio = pad_audio(model, config, inputs)
        if info.key is None:
            info = audio
    return inputs, info


AUDIO_TOKEN_KEYS = ("audio_token_id", "audio_token_index")


def _audio_mask(model: Any, inputs: dict[str, Any]) -> tuple[str, str] | None:
    """(mask, input) of the named mask over an audio LM's audio frames in `inputs`: an
    extractor's mask name (`feature_attention_mask`, `input_features_mask`, `padding_mask`) or
    `<input>_mask` for the input the audio-features function encodes (Inkling's
    `audio_input_ids_mask`)."""
    import torch

    from .audio import _audio_features_fn, audio_input, mask_target

    fn = _audio_features_fn(model)
    main = audio_input(fn) if fn is not None else None
    for key in inputs:
        target = mask_target(key, inputs)
        if key == "attention_mask" or target is None or not torch.is_tensor(inputs.get(key)) \
                or not torch.is_tensor(inputs.get(target)):
            continue
        if key in MASK_OF or target == main:
            return key, target
    return None


def pad_counted_audio(model: Any, config: Any, inputs: dict[str, Any]) -> tuple[dict[str, Any], Padding]:
    """Audio whose placeholders in the text count its encoded rows, padded as a feature extractor
    pads a batch of clips of different lengths: frames past each row's real length zeroed, its
    mask 0 there, and in each row only as many placeholders as its real audio encodes to (counted
    by the model: `audio.rows_per_sample`), the rest of the run ordinary text, as a processor
    writes a shorter clip's prompt; where the model rejects that but takes the padded audio with
    the run unchanged (a fixed run per clip that the model fills itself), that. Unpadded (with
    the reason) where the model takes no audio mask, the count cannot be found, or the padded
    batch does not run."""
    import torch

    from .audio import audio_token, rows_per_sample
    from .tensors import special_ids
    from .trial import runs

    keep = "audio placeholders in the text count the frames: audio not padded"
    named = _audio_mask(model, inputs)
    if named is None:
        return inputs, Padding(reason=f"{keep} (the forward takes no audio mask)")
    key, main = named
    x, old_mask = inputs[main], inputs[key]
    if old_mask.dim() != 2 or old_mask.shape[0] != x.shape[0]:
        return inputs, Padding(reason=f"{keep} (a {tuple(old_mask.shape)} mask)")
    b, t = old_mask.shape
    axis = _frames_axis(x, config)
    if x.shape[axis] != t:
        axis = next((d for d in range(1, x.dim()) if x.shape[d] == t), None)
        if axis is None:
            return inputs, Padding(reason=f"{keep} (the mask does not cover {main}'s frames)")
    lengths = _lengths(b, t, t - 2)
    if len(set(lengths)) == 1:
        return inputs, Padding(reason=f"{keep} (no room)")
    padded, mask = _right_padded(x, axis, lengths, torch.zeros_like(old_mask))
    out = dict(inputs)
    out[main], out[key] = padded, mask
    counts = rows_per_sample(model, config, out)
    token = audio_token(config)
    ids = inputs["input_ids"]
    if not counts or len(counts) != ids.shape[0]:
        return inputs, Padding(reason=f"{keep} (no per-row count)")
    special = special_ids(config) | {int(token)}
    new_ids = ids.clone()
    for i, row in enumerate(ids.tolist()):
        where = [j for j, tok in enumerate(row) if tok == token]
        if counts[i] > len(where):
            return inputs, Padding(reason=f"{keep} (a row encodes to more rows than its placeholders)")
        filler = next((tok for tok in reversed(row) if tok not in special), None)
        if filler is None:
            return inputs, Padding(reason=f"{keep} (no ordinary token)")
        for j in where[counts[i]:]:
            new_ids[i, j] = filler
    out["input_ids"] = new_ids
    if runs(model, out):
        return out, Padding(key=key, side="right", lengths=lengths)
    # A processor that writes a fixed run per clip (Gemma 3n: 188 audio tokens, the model pads the
    # encoded rows up to them): the padded audio with the placeholders as they were.
    out["input_ids"] = ids
    if not bool((new_ids == ids).all()) and runs(model, out):
        return out, Padding(key=key, side="right", lengths=lengths)
    return inputs, Padding(reason=f"{keep} (the padded batch does not run)")


def _has_audio_placeholders(config: Any, inputs: dict[str, Any]) -> bool:
    import torch

    from .configs import first_attr

    ids = inputs.get("input_ids")
    token = first_attr(config, AUDIO_TOKEN_KEYS, ("text_config",))
    return torch.is_tensor(ids) and isinstance(token, int) and bool((ids == token).any())
