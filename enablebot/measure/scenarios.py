"""Scenarios: the calls a user makes, as data the runner compiles step by step.

  call     `model(**inputs)` with the config's own defaults (the cache on where it is on by
           default) and a padded batch where the forward takes an attention mask.
           Eval: a forward; train: forward + backward on a loss (train is only `call`).
  decode   generative heads: a prefill with `use_cache=True`, then one decode step fed the
           returned cache, the next token, the grown attention mask and the position ids,
           as `generate()` passes them (encoder-decoders reuse `encoder_outputs`).
  dynamic  two batch/sequence shapes through one compiled model; `mark_dynamic` names the
           dims that differ, `recompile_reasons()` captures Dynamo's recompile log.

Two diagnostic variants of `call` change one thing each, so a break that `call` shows and the
old minimal harness (cache off, no padding) hid can be attributed (scripts/scenario_table.py):
  call_unpadded  `call` without padding (every row full length; the cache at its default);
  call_nocache   `call` with `use_cache=False` passed, as a user turns the cache off.
They are never defaults: they answer "which of the two made it break".
A third diagnostic, `naive`, is the call of an independent naive harness (benchmarks/naive_harness.py):
the builder's inputs, unpadded, the model's defaults, in eval and in train (forward + backward).
In eval it is `call_unpadded`; it exists so that benchmarks/speed_split.py can run the naive
harness's own calls through the engine and price the engine apart from what the calls cost.

`plan()` returns the steps; each `Step.make_inputs()` returns fresh inputs (a forward
mutates a cache in place, so every call gets its own deep copy). Preparing `decode` runs
the prefill once eagerly to get the cache: a failure there raises `ScenarioError` for
that scenario only.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ..model.padding import Padding, forward_params, pad_batch
from ..model.trial import trial_forward

SCENARIOS = ("call", "decode", "dynamic", "call_unpadded", "call_nocache", "naive")
TRAIN_SCENARIOS = ("call", "naive")  # the only ones with a train step (forward + backward)
DEFAULT_SCENARIOS = ("call", "decode")  # what a default Dynamo pass covers

# Inputs generate() feeds only to the prefill (transformers' MULTIMODAL_INPUTS_TO_DROP_OUTSIDE_PREFILL
# on 5.24; this copy is used where the constant does not exist).
_PREFILL_ONLY = (
    "mm_encoder_outputs", "pixel_values", "pixel_mask", "input_features", "input_features_mask", "input_values",
    "padding_mask", "input_values_mask", "pixel_values_videos", "num_local_patches", "high_res_pixel_values",
    "image_patches_indices", "image_patches", "image_sizes", "image_sizes_videos", "pixel_attention_mask",
    "pixel_values_images", "pixel_values_local", "patches_grid", "image_token_pooling", "image_grids",
    "video_token_pooling", "video_grids",
)
# Inputs that a model's own prepare_inputs_for_generation sets to None once the cache holds the
# prompt, beyond transformers' list above: Kosmos-2 and Kosmos-2.5's image-position mask (its
# positions were filled at the prefill; kept, it no longer fits the one-token step).
_ALSO_PREFILL_ONLY = ("image_embeds_position_mask",)
_CACHE_KEYS = ("cache", "past_key_values")  # forward argument / output field, newest first


@dataclass
class Step:
    """One compiled call of a scenario."""

    name: str  # "call", "prefill", "decode", "shape_a", "shape_b"
    make_inputs: Callable[[], dict]  # fresh inputs on every call


@dataclass
class ScenarioPlan:
    name: str
    steps: list[Step] = field(default_factory=list)
    skip_reason: str | None = None
    mark_dynamic: dict | None = None  # `dynamic`: input name -> dims to mark
    padding: Padding | None = None    # what the batch's padding is (rows' real lengths)
    notes: list[str] = field(default_factory=list)  # where the scenario differs from a user call


class ScenarioError(RuntimeError):
    """Preparing a scenario failed in eager (e.g. the prefill raised with the cache on)."""

    def __init__(self, scenario: str, stage: str, cause: BaseException):
        super().__init__(f"{scenario}/{stage}: {type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''}")
        self.scenario, self.stage, self.cause = scenario, stage, cause


def fresh(inputs: dict[str, Any]) -> Callable[[], dict]:
    """A factory returning a deep copy of `inputs` each call (tensors, caches, outputs)."""
    frozen = dict(inputs)
    return lambda: copy.deepcopy(frozen)


def has_forward(model: Any) -> bool:
    import torch

    return getattr(type(model), "forward", None) is not torch.nn.Module.forward


_GRADLESS_DECORATOR = re.compile(r"^\s*@torch\.(inference_mode|no_grad)\(", re.M)


def gradless_forward(model: Any) -> str | None:
    """The decorator when the class's forward runs under `@torch.inference_mode()` / `@torch.no_grad()`
    (SAM2's video propagation): a forward no one trains through."""
    import inspect

    fwd = getattr(type(model), "forward", None)
    try:
        head = inspect.getsource(fwd).split("def forward", 1)[0]
    except (OSError, TypeError):
        return None
    m = _GRADLESS_DECORATOR.search(head)
    return f"@torch.{m.group(1)}()" if m else None


def plan(name: str, model: Any, config: Any, inputs: dict, modality: str, mode: str, *,
         recipe: dict | None = None) -> ScenarioPlan:
    """The steps of scenario `name` for this model. `inputs` are the builder's (unpadded);
    `recipe` is the registry's inputs recipe (the `dynamic` scenario builds a second shape)."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    if not has_forward(model):  # e.g. 5.0's GlmImageVQVAE: used through encode(), never model(**inputs)
        return ScenarioPlan(name, skip_reason=f"{type(model).__name__} defines no forward: it is not called as "
                                              "model(**inputs)")
    if mode == "train" and (deco := gradless_forward(model)):
        return ScenarioPlan(name, skip_reason=f"{type(model).__name__}.forward runs under {deco}: train mode does not apply")
    if mode == "train" and name not in TRAIN_SCENARIOS:
        return ScenarioPlan(name, skip_reason="train runs only the call scenario (forward + backward)")
    if name == "call":
        return plan_call(model, config, inputs)
    if name in ("call_unpadded", "naive"):
        return ScenarioPlan(name, steps=[Step("call", fresh(inputs))],
                            padding=Padding(reason=f"{name}: every row at full length"))
    if name == "call_nocache":
        return plan_call_nocache(model, config, inputs)
    if name == "decode":
        return plan_decode(model, config, inputs)
    return plan_dynamic(model, config, inputs, modality, recipe)


# ---- call ------------------------------------------------------------------------------


def plan_call(model: Any, config: Any, inputs: dict, name: str = "call", **extra: Any) -> ScenarioPlan:
    """The user call on a padded batch; `extra` arguments make a diagnostic variant of it."""
    padded, info = pad_batch(model, config, inputs)
    return ScenarioPlan(name, steps=[Step("call", fresh({**padded, **extra}))], padding=info)


def plan_call_nocache(model: Any, config: Any, inputs: dict) -> ScenarioPlan:
    if "use_cache" not in forward_params(model):
        return ScenarioPlan("call_nocache", skip_reason=f"{type(model).__name__}.forward takes no use_cache")
    return plan_call(model, config, inputs, "call_nocache", use_cache=False)


# ---- decode ----------------------------------------------------------------------------


def is_generative(model: Any) -> bool:
    can = getattr(model, "can_generate", None)
    try:
        return bool(can()) if callable(can) else False
    except Exception:  # noqa: BLE001
        return False


def cache_arg(model: Any) -> str | None:
    """The forward's cache argument: `cache` (transformers >= 5.2x) or `past_key_values`."""
    params = forward_params(model)
    return next((k for k in _CACHE_KEYS if k in params), None)


def output_cache(out: Any) -> Any:
    getter = getattr(out, "get", None)
    for k in _CACHE_KEYS:
        c = getter(k) if getter else getattr(out, k, None)
        if c is not None:
            return c
    return None


def cache_length(cache: Any) -> int | None:
    """Tokens in a cache (None where it cannot say, e.g. a cache of linear-attention layers)."""
    try:
        return int(cache.get_seq_length())
    except Exception:  # noqa: BLE001
        return None


def _explicit(model: Any, name: str) -> bool:
    p = inspect.signature(model.forward).parameters.get(name)
    return p is not None and p.kind != p.VAR_KEYWORD


def _prefill_only() -> tuple[str, ...]:
    try:
        from transformers.generation.utils import MULTIMODAL_INPUTS_TO_DROP_OUTSIDE_PREFILL as names
        return tuple(names)
    except ImportError:
        return _PREFILL_ONLY


def _logits(out: Any) -> Any:
    getter = getattr(out, "get", None)
    logits = getter("logits") if getter else getattr(out, "logits", None)
    if logits is None and isinstance(out, (tuple, list)) and out:
        logits = out[0]
    return logits


def _start_ids(config: Any, batch: int, device: Any = None) -> Any:
    import torch

    from ..model.configs import text_config

    start = None
    for c in (config, text_config(config)):
        for k in ("decoder_start_token_id", "bos_token_id", "pad_token_id"):
            v = getattr(c, k, None)
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                start = v
                break
        if start is not None:
            break
    return torch.full((batch, 1), start or 0, dtype=torch.long, device=device)


def _own_decoder_start(model: Any, config: Any, batch: int, device: Any) -> tuple[Any, dict] | None:
    """The decoder's first ids (and any `decoder_*` inputs beside them) as generate() makes them,
    for a model whose class prepares its own (`_prepare_decoder_input_ids_for_generation`
    overridden): MusicGen starts one row per codebook, (batch x codebooks, 1); Dia one id per
    channel, (batch, 1, channels), with its decoder mask. None for every other model (the
    generic start below is what generate() makes for them) or when the call fails."""
    import torch
    from transformers.generation.utils import GenerationMixin

    own = getattr(type(model), "_prepare_decoder_input_ids_for_generation", None)
    if own is None or own is getattr(GenerationMixin, "_prepare_decoder_input_ids_for_generation", None):
        return None
    start = int(_start_ids(config, 1)[0, 0])
    gen = getattr(model, "generation_config", None)
    for k in ("decoder_start_token_id", "bos_token_id"):
        v = getattr(gen, k, None)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            start = v
            break
    kwargs = {"batch_size": batch, "model_input_name": getattr(model, "main_input_name", "input_ids"),
              "model_kwargs": {}, "decoder_start_token_id": torch.tensor(start, device=device),
              "bos_token_id": torch.tensor(start, device=device), "device": device}
    accepted = inspect.signature(own).parameters
    try:
        ids, extra = own(model, **{k: v for k, v in kwargs.items() if k in accepted})
    except Exception:  # noqa: BLE001 - a private helper of another release: fall back to the generic start
        return None
    if not torch.is_tensor(ids):
        return None
    params = forward_params(model)
    return ids.long(), {k: v for k, v in (extra or {}).items()
                        if k.startswith("decoder_") and k in params and torch.is_tensor(v)}


def plan_decode(model: Any, config: Any, inputs: dict) -> ScenarioPlan:
    import torch

    if not is_generative(model):
        return ScenarioPlan("decode", skip_reason=f"{type(model).__name__} is not a generative head (can_generate() is False)")
    key = cache_arg(model)
    if key is None:
        return ScenarioPlan("decode", skip_reason=f"{type(model).__name__}.forward takes no cache")
    params = forward_params(model)
    enc_dec = bool(getattr(config, "is_encoder_decoder", False))
    padded, info = pad_batch(model, config, inputs)
    prefill = dict(padded)
    mask = prefill.get("attention_mask")
    ids = prefill.get("input_ids")
    notes: list[str] = []
    if enc_dec:
        first = next(v for v in prefill.values() if torch.is_tensor(v))
        prefill["decoder_input_ids"] = _start_ids(config, first.shape[0], first.device)
        prefill.pop("decoder_attention_mask", None)
        own = _own_decoder_start(model, config, first.shape[0], first.device)
        if own is not None:
            prefill["decoder_input_ids"], extra = own
            prefill.update(extra)
        notes.append("the prefill runs the encoder inside the compiled forward; generate() calls the encoder "
                     "separately and passes encoder_outputs")
    else:
        if "position_ids" in params and torch.is_tensor(mask) and mask.dim() == 2:
            # generate(): position ids from the mask, padding at position 0
            prefill["position_ids"] = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
        if _explicit(model, "cache_position") and torch.is_tensor(ids):
            prefill["cache_position"] = torch.arange(ids.shape[1], device=ids.device)
    if "use_cache" in params:
        prefill["use_cache"] = True
    try:
        with torch.no_grad():
            out = model(**copy.deepcopy(prefill))
    except Exception as e:  # noqa: BLE001 - the scenario's eager failure is its verdict
        own = _generate_plan(model, padded, info)
        if own is not None:
            return own
        raise ScenarioError("decode", "prefill", e) from e
    cache = output_cache(out)
    if cache is None:
        return ScenarioPlan("decode", skip_reason=f"{type(model).__name__} returned no cache with use_cache=True")
    logits = _logits(out)
    if not torch.is_tensor(logits):
        return ScenarioPlan("decode", skip_reason=f"{type(model).__name__} returns no logits to pick a next token")
    nxt = logits[:, -1].argmax(-1) if logits.dim() >= 3 else logits.argmax(-1)
    # One new position, in the layout of the ids it follows: (rows, 1), or (batch, 1, channels)
    # where a decoder takes one id per audio channel (Dia).
    ids_before = prefill.get("decoder_input_ids" if enc_dec else "input_ids")
    tail = tuple(ids_before.shape[2:]) if torch.is_tensor(ids_before) and ids_before.dim() > 2 else ()
    rows = nxt.shape[0]
    fits = bool(tail) and nxt.numel() == rows * math.prod(tail)
    nxt = (nxt.reshape(rows, 1, *tail) if fits else nxt.reshape(rows, 1)).long()
    step = _decode_inputs(model, config, prefill, out, cache, nxt, key, enc_dec)
    if trial_forward(model, copy.deepcopy(step)) is not None:
        # The step built the common way does not run: this head generates its own way.
        own = _generate_plan(model, padded, info)
        if own is not None:
            return own
    return ScenarioPlan("decode", steps=[Step("prefill", fresh(prefill)), Step("decode", fresh(step))],
                        padding=info, notes=notes)


def _generate_plan(model: Any, prompt: dict, info: Padding) -> ScenarioPlan | None:
    """The prefill and first decode step as the model's own generate() calls its forward, where
    the steps built the common way do not run (generate_capture). None when generate() fails too,
    or runs the forward fewer times (the scenario's own failure stands)."""
    from .generate_capture import generate_calls

    got = generate_calls(model, prompt)
    if got is None or trial_forward(model, copy.deepcopy(got.calls[1])) is not None:
        return None
    calls = got.calls
    return ScenarioPlan("decode", steps=[Step("prefill", fresh(calls[0])), Step("decode", fresh(calls[1]))],
                        padding=info, notes=["the prefill and the decode step are the forward calls the model's own "
                                             "generate() makes (the common-way step did not run)", *got.notes])


def _audio_prefill_only(model: Any, prefill: dict) -> set[str]:
    """The audio an audio LM merges at its placeholders, under whatever name its
    `get_audio_features` takes it (Inkling's `audio_input_ids`): like the media in
    `_prefill_only`, the prefill's placeholders consumed it, and the model's
    `prepare_inputs_for_generation` passes it on the first iteration only. Its mask stays, as
    generate() keeps it in the model kwargs (the forward reads it only with the audio)."""
    from ..model.audio import _audio_features_fn, audio_input

    fn = _audio_features_fn(model)
    main = audio_input(fn) if fn is not None else None
    return {main} if main is not None and "input_ids" in prefill else set()


def _decode_inputs(model: Any, config: Any, prefill: dict, out: Any, cache: Any, nxt: Any, key: str,
                   enc_dec: bool) -> dict:
    """The second forward of generate(): one new token per row, the prefill's cache."""
    import torch

    params = forward_params(model)
    drop = set(_prefill_only()) | set(_ALSO_PREFILL_ONLY) | {
        "input_ids", "decoder_input_ids", "position_ids", "cache_position", "cache", "past_key_values",
        "decoder_position_ids", "labels"}
    drop |= _audio_prefill_only(model, prefill)
    step = {k: v for k, v in prefill.items() if k not in drop}
    step[key] = cache
    if enc_dec:
        step["encoder_outputs"] = _encoder_outputs(model, prefill, out)
        step["decoder_input_ids"] = nxt
        step.pop("input_ids", None)
        dmask = prefill.get("decoder_attention_mask")
        if torch.is_tensor(dmask) and dmask.dim() == 2:  # grown by one column, as generate() does
            step["decoder_attention_mask"] = torch.cat([dmask, dmask.new_ones(dmask.shape[0], 1)], dim=-1)
        if _explicit(model, "cache_position"):
            dec = prefill["decoder_input_ids"]
            step["cache_position"] = torch.tensor([dec.shape[1]], device=dec.device)
        return step
    mask = prefill.get("attention_mask")
    if torch.is_tensor(mask) and mask.dim() == 2:
        step["attention_mask"] = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=-1)
    pos = prefill.get("position_ids")
    if torch.is_tensor(pos):
        step["position_ids"] = pos[..., -1:] + 1
    tt = prefill.get("token_type_ids")
    if torch.is_tensor(tt) and tt.dim() == 2:
        step["token_type_ids"] = tt[:, -1:].clone()
    xm = prefill.get("cross_attention_mask")  # (batch, seq, images, tiles): grown by the last row, as generate() does
    if torch.is_tensor(xm) and xm.dim() >= 3:
        step["cross_attention_mask"] = torch.cat([xm, xm[:, -1:]], dim=1)
    mm = prefill.get("mm_token_type_ids")
    if torch.is_tensor(mm) and mm.dim() == 2:
        step["mm_token_type_ids"] = mm.new_zeros(mm.shape[0], 1)
    past = prefill["input_ids"].shape[1] if torch.is_tensor(prefill.get("input_ids")) else None
    if _explicit(model, "cache_position") and past is not None:
        step["cache_position"] = torch.tensor([past], device=prefill["input_ids"].device)
    step["input_ids"] = nxt
    if "use_cache" in params:
        step["use_cache"] = True
    return step


def _encoder_outputs(model: Any, prefill: dict, out: Any) -> Any:
    """The encoder's own output, as generate() computes it once (`get_encoder()` on the
    encoder's inputs): models read fields beside the hidden states (e.g. a frame mask)."""
    import torch

    from transformers.modeling_outputs import BaseModelOutput

    get = getattr(model, "get_encoder", None)
    encoder = get() if callable(get) else None
    if encoder is not None:
        params = forward_params(encoder)
        kwargs = {k: v for k, v in prefill.items() if k in params and not k.startswith("decoder_")
                  and k not in ("use_cache", "cache", "past_key_values")}
        try:
            with torch.no_grad():
                return encoder(**copy.deepcopy(kwargs))
        except Exception as e:  # noqa: BLE001 - the scenario's eager failure is its verdict
            raise ScenarioError("decode", "encoder", e) from e
    return BaseModelOutput(last_hidden_state=getattr(out, "encoder_last_hidden_state", None))


# ---- dynamic ---------------------------------------------------------------------------


def _batch_seq(inputs: dict) -> tuple[int, int]:
    import torch

    ids = inputs.get("input_ids")
    if torch.is_tensor(ids) and ids.dim() >= 2:
        return int(ids.shape[0]), int(ids.shape[1])
    first = next((v for v in inputs.values() if torch.is_tensor(v) and v.dim() >= 1), None)
    return (int(first.shape[0]) if first is not None else 2), 32


def differing_dims(a: dict, b: dict) -> dict[str, list[int]]:
    """Input name -> the dims whose sizes differ between two input sets."""
    import torch

    out: dict[str, list[int]] = {}
    for k, x in a.items():
        y = b.get(k)
        if torch.is_tensor(x) and torch.is_tensor(y) and x.dim() == y.dim():
            dims = [d for d in range(x.dim()) if x.shape[d] != y.shape[d]]
            if dims:
                out[k] = dims
    return out


def plan_dynamic(model: Any, config: Any, inputs: dict, modality: str, recipe: dict | None) -> ScenarioPlan:
    from ..model.inputs import build_inputs

    batch, seq = _batch_seq(inputs)
    a, info = pad_batch(model, config, inputs)
    try:
        other = build_inputs(model, config, modality, recipe, batch=batch + 1, seq_len=max(seq - seq // 4, 4), seed=1)
    except Exception as e:  # noqa: BLE001
        raise ScenarioError("dynamic", "inputs", e) from e
    other = _like(other, inputs)
    b, _ = pad_batch(model, config, other)
    dims = differing_dims(a, b)
    if not dims:
        return ScenarioPlan("dynamic", skip_reason="the second input set has the same shapes", padding=info)
    return ScenarioPlan("dynamic", steps=[Step("shape_a", fresh(a)), Step("shape_b", fresh(b))],
                        mark_dynamic=dims, padding=info)


def _like(new: dict, ref: dict) -> dict:
    """`new` (made on the CPU in fp32) on the device and float dtype of the inputs `ref`."""
    import torch

    from .tensors import to_device

    tensors = [v for v in ref.values() if torch.is_tensor(v)]
    if not tensors:
        return new
    floats = [v for v in tensors if v.is_floating_point()]
    return to_device(new, str(tensors[0].device), floats[0].dtype if floats else None)


def apply_mark_dynamic(inputs: dict, mark: dict[str, list[int]] | None) -> dict:
    """`torch._dynamo.mark_dynamic` on the named dims (before the first compiled call)."""
    import torch

    for k, dims in (mark or {}).items():
        t = inputs.get(k)
        if torch.is_tensor(t):
            for d in dims:
                torch._dynamo.mark_dynamic(t, d)
    return inputs


# ---- recompile reasons -----------------------------------------------------------------

_GUARD_LINE = re.compile(r"^\s*-\s*(?:\d+/\d+:\s*)?(.+)$")


class _ReasonHandler(logging.Handler):
    def __init__(self, reasons: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.reasons = reasons

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if not msg.startswith("Recompiling"):
            return
        lines = [m.group(1).strip() for m in map(_GUARD_LINE.match, msg.splitlines()[1:]) if m]
        self.reasons.append("; ".join(lines) if lines else msg.strip())


@contextlib.contextmanager
def recompile_reasons() -> Iterator[list[str]]:
    """Collect Dynamo's recompile reasons (the guard failures of each recompile) in a list.

        with recompile_reasons() as reasons:
            compiled(**a); compiled(**b)
        reasons  # ["tensor 'input_ids' size mismatch at index 0. expected 2, actual 3"]
    """
    import torch

    reasons: list[str] = []
    handler = _ReasonHandler(reasons)
    torch._logging.set_logs(recompiles=True)
    loggers = [logging.getLogger(n) for n in list(logging.Logger.manager.loggerDict) if n.endswith("__recompiles")]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        yield reasons
    finally:
        for lg in loggers:
            lg.removeHandler(handler)
        torch._logging.set_logs()
