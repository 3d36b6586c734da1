"""Inputs for a tiny model, from its forward signature, its config and a recipe.

Generic rules pick the tensors a forward needs (its main input, every required
argument, and companions such as attention masks, decoder ids, both towers of a dual
encoder) and make each one by its name: token ids, masks, images, videos, audio
waveforms and features, layout boxes, patchified images with their `grid_thw`.
A registry entry's `inputs` recipe adds or replaces tensors as data:

    inputs:
      drop: [attention_mask]
      tensors:
        pixel_values: {shape: [B, config.vision_config.num_channels, 32, 32]}
        input_features: {shape: [B, config.num_mel_bins, "2 * config.max_source_positions"]}
        image_grid_thw: {value: [[1, 4, 4]], repeat_batch: true, dtype: long}
        bbox: {rule: bbox}            # one of the generic rules below, by name
        shared_kv_states: {items: {full_attention: {tuple: [{shape: [...]}, {shape: [...]}]}}}  # nested
        input_values: {rule: input_values, unsqueeze: 1}      # ... with a channel axis
        input_features: {rule: input_features, transpose: [1, 2]}  # ... frames first
      kwargs: {return_loss: false}    # non-tensor arguments
      seq_len: 16
      tokens: {audio_token_id: "config.audio_config.max_source_positions // 2"}  # placeholders per sample
      replace: true                   # only the recipe's tensors
      hook: enablebot.model.hooks:video_session  # code for inputs data cannot express
      by_class:                       # per model class, merged over the above
        WhisperForConditionalGeneration: {drop: [decoder_attention_mask]}

When neither the image path nor these inputs run, extended rules try (`add_image_tokens(...,
extended=True)`): the image encoder deeper in the module tree, (batch, images, C, H, W) images
counted per image, all-true pixel masks, and arguments the trial forward reports missing, shaped
as the sub-model that requires them documents them (documented.py). An argument with no rule by
name gets its documented shape, else (batch, config.<name>_dim). None of this per architecture.

Shape entries are ints, `B` (batch), `S` (sequence length), or arithmetic over
`config.<path>` attributes with + - * // % and max()/min(). Batch is >= 2 so that
shapes do not specialise on 0/1.
"""

from __future__ import annotations

import ast
import inspect
import operator
from dataclasses import dataclass
from typing import Any, Callable

from .configs import first_attr, text_config  # noqa: F401 - re-exported

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv, ast.Div: operator.floordiv, ast.Mod: operator.mod}
_FUNCS = {"max": max, "min": min}


def _attr(config: Any, path: str) -> Any:
    obj = config
    for part in path.split("."):
        if isinstance(obj, dict) or (not hasattr(obj, part) and hasattr(obj, "__getitem__")):
            obj = obj[part]  # dicts, and per-layer configs by layer type (`per_layer_config.full_attention`)
        else:
            obj = getattr(obj, part)
    return obj


def eval_dim(expr: Any, *, config: Any, batch: int, seq_len: int) -> int:
    """Evaluate one shape entry: an int, B, S, config.x.y, or + - * // % max() min() of those."""
    if isinstance(expr, int):
        return expr
    env = {"B": batch, "S": seq_len}

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS:
            return _FUNCS[node.func.id](*(ev(a) for a in node.args))
        if isinstance(node, ast.Name) and node.id in env:
            return env[node.id]
        if isinstance(node, (ast.Attribute, ast.Name)):
            path = ast.unparse(node)
            if path.startswith("config."):
                return int(_attr(config, path[len("config."):]))
        raise ValueError(f"unsupported shape expression {expr!r}")

    return ev(ast.parse(str(expr), mode="eval").body)


# ---- what the config says ---------------------------------------------------------------


def special_ids(config: Any) -> set[int]:
    from .shrink import TOKEN_ID_KEYS

    ids: set[int] = set()
    for c in (config, text_config(config)):
        for k in TOKEN_ID_KEYS:
            v = getattr(c, k, None)
            for x in v if isinstance(v, (list, tuple)) else [v]:
                if isinstance(x, int) and not isinstance(x, bool) and x >= 0:
                    ids.add(x)
    return ids


_IMAGE_TOKEN_KEYS = ("image_token_id", "image_token_index")
# Where an image placeholder token is set: the text model, or the VLM that a retrieval
# wrapper (ColPali lineage: `model.vlm`, `config.vlm_config`) embeds.
_IMAGE_TOKEN_SUBS = ("text_config", "vlm_config")
_VISION_SUBS = ("vision_config", "backbone_config", "encoder_config", "image_config")
AUDIO_SUBS = ("audio_config", "encoder_config", "speech_config")


def _image_hw(config: Any) -> tuple[int, int]:
    size = first_attr(config, ("image_size", "img_size", "input_size"), _VISION_SUBS, 32)
    if isinstance(size, dict):
        return int(size.get("height", 32)), int(size.get("width", 32))
    if isinstance(size, (list, tuple)):
        return int(size[0]), int(size[-1])
    return int(size), int(size)


def _channels(config: Any) -> int:
    return int(first_attr(config, ("num_channels", "in_channels", "in_chans", "input_channels"), _VISION_SUBS, 3))


# ---- generic tensors by argument name --------------------------------------------------


@dataclass
class Ctx:
    model: Any
    config: Any
    batch: int
    seq_len: int
    gen: Any
    out: dict[str, Any]


def _ids(ctx: Ctx, seq: int | None = None) -> Any:
    import torch

    config = ctx.config
    vocab = getattr(text_config(config), "vocab_size", None) or getattr(config, "vocab_size", None) or 100
    special = special_ids(config)
    # Ordinary tokens only: special ids (image/audio placeholders) trigger modality merging
    # that needs matching pixel/audio inputs, which a recipe adds explicitly.
    ids = torch.randint(0, vocab, (ctx.batch, seq or ctx.seq_len), generator=ctx.gen)
    safe = next((i for i in range(3, vocab) if i not in special), 0)
    for s in special:
        ids[ids == s] = safe
    return ids


def _mask_like(ctx: Ctx, name: str) -> Any:
    import torch

    base = name.replace("_attention_mask", "_input_ids").replace("attention_mask", "input_ids")
    ref = ctx.out.get(base) if base in ctx.out else ctx.out.get("input_ids")
    shape = tuple(ref.shape[:2]) if ref is not None else (ctx.batch, ctx.seq_len)
    return torch.ones(shape, dtype=torch.long)


def _pixel_values(ctx: Ctx) -> Any:
    import torch

    h, w = _image_hw(ctx.config)
    frames = first_attr(ctx.config, ("num_frames",), _VISION_SUBS)
    if frames:  # video models take (batch, frames, channels, height, width)
        return torch.randn(ctx.batch, int(frames), _channels(ctx.config), h, w, generator=ctx.gen)
    return torch.randn(ctx.batch, _channels(ctx.config), h, w, generator=ctx.gen)


def _video(ctx: Ctx) -> Any:
    import torch

    h, w = _image_hw(ctx.config)
    frames = int(first_attr(ctx.config, ("num_frames", "frames_per_clip"), _VISION_SUBS, 4))
    return torch.randn(ctx.batch, frames, _channels(ctx.config), h, w, generator=ctx.gen)


def _input_features(ctx: Ctx) -> Any:
    """Spectrogram features. Whisper-style configs (`num_mel_bins`) take (batch, mels,
    frames); feature-extractor-style ones (`feature_size`, `input_feat_per_channel`)
    take (batch, frames, features)."""
    import torch

    c = ctx.config
    src = first_attr(c, ("max_source_positions",), AUDIO_SUBS)
    frames = 2 * int(src) if src else max(ctx.seq_len * 4, 64)
    mels = first_attr(c, ("num_mel_bins", "n_mels"), AUDIO_SUBS)
    if mels is None:
        feats = first_attr(c, ("feature_size", "input_feat_per_channel", "feature_projection_input_dim"), AUDIO_SUBS)
        if feats is not None:
            per = int(first_attr(c, ("input_channels",), AUDIO_SUBS, 1) or 1)
            return torch.randn(ctx.batch, frames, int(feats) * per, generator=ctx.gen)
    return torch.randn(ctx.batch, int(mels or 80), frames, generator=ctx.gen)


def _input_values(ctx: Ctx) -> Any:
    """Raw waveforms; codecs with `audio_channels` take (batch, channels, samples)."""
    import torch

    ch = first_attr(ctx.config, ("audio_channels",), AUDIO_SUBS)
    if ch:
        return torch.randn(ctx.batch, int(ch), 4000, generator=ctx.gen)
    return torch.randn(ctx.batch, 4000, generator=ctx.gen)


def _zeros_like_ids(ctx: Ctx) -> Any:
    import torch

    ref = ctx.out.get("input_ids")
    return torch.zeros(tuple(ref.shape) if ref is not None else (ctx.batch, ctx.seq_len), dtype=torch.long)


def _bbox(ctx: Ctx) -> Any:
    """Layout boxes (x0, y0, x1, y1) in [0, 1000] with x0 <= x1 and y0 <= y1."""
    import torch

    ref = ctx.out.get("input_ids")
    seq = ref.shape[1] if ref is not None else ctx.seq_len
    a = torch.randint(0, 500, (ctx.batch, seq, 2), generator=ctx.gen)
    b = a + torch.randint(0, 500, (ctx.batch, seq, 2), generator=ctx.gen)
    return torch.cat([a, b], dim=-1)


def _patch_grid(ctx: Ctx) -> tuple[int, int]:
    merge = int(first_attr(ctx.config, ("spatial_merge_size", "merge_size"), _VISION_SUBS, 1) or 1)
    return 2 * merge, 2 * merge


def _grid_thw(ctx: Ctx) -> Any:
    """One image per sample as a (t, h, w) patch grid divisible by the spatial merge."""
    import torch

    h, w = _patch_grid(ctx)
    return torch.tensor([[1, h, w]] * ctx.batch, dtype=torch.long)


def _patchified(ctx: Ctx) -> Any:
    """Images already cut into flattened patches, one row per patch (Qwen2-VL lineage):
    (sum of t*h*w over images, channels * temporal_patch * patch * patch)."""
    import torch

    c = ctx.config
    patch = int(first_attr(c, ("patch_size",), _VISION_SUBS, 14))
    tp = int(first_attr(c, ("temporal_patch_size", "patch_temporal"), _VISION_SUBS, 1))
    h, w = _patch_grid(ctx)
    return torch.randn(ctx.batch * h * w, _channels(c) * tp * patch * patch, generator=ctx.gen)


def _features_mask(ctx: Ctx) -> Any:
    """Ones over the frames of `input_features` (whichever axis is not the feature axis)."""
    import torch

    feats = ctx.out.get("input_features")
    if feats is None:
        return torch.ones(ctx.batch, ctx.seq_len, dtype=torch.long)
    mels = first_attr(ctx.config, ("num_mel_bins", "n_mels"), AUDIO_SUBS)
    frames = feats.shape[-1] if mels is not None and feats.shape[1] == int(mels) else feats.shape[1]
    return torch.ones(feats.shape[0], frames, dtype=torch.long)


def _embeds(ctx: Ctx) -> Any:
    """Hidden-state inputs a forward requires (`inputs_embeds`, `*_embeds`, `*hidden_states`):
    (batch, seq, hidden) of the text model."""
    import torch

    tc = text_config(ctx.config)
    hidden = first_attr(tc, ("hidden_size", "d_model", "n_embd", "dim")) or first_attr(ctx.config, ("hidden_size", "d_model"), (), 64)
    return torch.randn(ctx.batch, ctx.seq_len, int(hidden), generator=ctx.gen)


def rule_for(name: str) -> Callable[[Ctx], Any] | None:
    """The generic rule for an argument name: exact names first, then name patterns."""
    if name in RULES:
        return RULES[name]
    if name.endswith("_embeds") or name.endswith("hidden_states"):
        return _embeds
    if name.startswith("prompt_") and name[len("prompt_"):] in RULES:
        return RULES[name[len("prompt_"):]]  # prompt images/masks shaped like the inputs
    return None


def _merge_sizes(ctx: Ctx) -> Any:
    import torch

    merge = int(first_attr(ctx.config, ("spatial_merge_size", "merge_size"), _VISION_SUBS, 1) or 1)
    return torch.full((ctx.batch,), merge, dtype=torch.long)


def _decoder_ids(ctx: Ctx) -> Any:
    return _ids(ctx, max(ctx.seq_len // 2, 2))


RULES: dict[str, Callable[[Ctx], Any]] = {
    "input_ids": _ids,
    "qformer_input_ids": _ids,
    "decoder_input_ids": _decoder_ids,
    "attention_mask": lambda ctx: _mask_like(ctx, "attention_mask"),
    "qformer_attention_mask": lambda ctx: _mask_like(ctx, "qformer_attention_mask"),
    "token_type_ids": _zeros_like_ids,
    "pixel_values": _pixel_values,
    "pixel_values_videos": _video,
    "input_features": _input_features,
    "input_values": _input_values,
    "bbox": _bbox,
    "grid_thw": _grid_thw,
    "image_grid_thw": _grid_thw,
    "patchified": _patchified,
    "merge_sizes": _merge_sizes,
    "input_features_mask": _features_mask,
    "inputs_embeds": _embeds,
    "masks": _pixel_values,
}


def _required(model: Any) -> list[str]:
    out = []
    for name, p in inspect.signature(model.forward).parameters.items():
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            out.append(name)
    return out


def wanted_inputs(model: Any, config: Any, modality: str) -> list[str]:
    """The argument names a forward gets: main input, required ones, companions."""
    params = set(inspect.signature(model.forward).parameters)
    main = getattr(model, "main_input_name", "input_ids")
    names: list[str] = []

    def want(n: str) -> None:
        if n in params and n not in names:
            names.append(n)

    if isinstance(main, (list, tuple)):  # several main inputs (e.g. image and task)
        for n in main:
            want(n)
        main = main[0] if main else "input_ids"
    if main in params:
        want(main)
    elif modality == "vision" and "pixel_values" in params:
        want("pixel_values")
    elif "input_ids" in params:
        want("input_ids")
    for n in _required(model):
        want(n)
    # Dual encoders (CLIP-like: text and image towers, no image placeholder token) run
    # both towers; models that merge images at placeholder tokens get text only unless a
    # recipe adds images with their tokens.
    has_image_token = first_attr(config, _IMAGE_TOKEN_KEYS, _IMAGE_TOKEN_SUBS) is not None
    if not has_image_token and {"input_ids", "pixel_values"} <= params and ({"input_ids", "pixel_values"} & set(names)):
        want("input_ids")
        want("pixel_values")
    if has_image_token and "pixel_values" in names:
        want("input_ids")  # image placeholders go in the text (see add_image_tokens)
    if "input_ids" in names:
        want("attention_mask")
        want("bbox")  # layout models: boxes per token
    if "input_features" in names:
        want("input_features_mask")
    if "qformer_input_ids" in names:
        want("qformer_attention_mask")
    if getattr(config, "is_encoder_decoder", False):
        want("decoder_input_ids")
    return names


def _image_features_fn(model: Any, deep: bool = False) -> Any:
    vlm = getattr(model, "vlm", None)  # retrieval wrappers around a VLM
    for obj in (model, getattr(model, "model", None), vlm, getattr(vlm, "model", None)):
        fn = getattr(obj, "get_image_features", None)
        if fn is not None:
            return fn
    # Deeper wrappers (a policy or a head around a model around a VLM: `model.model.vlm`):
    # the first sub-module, in module order, that has one.
    for m in model.modules() if deep else ():
        fn = getattr(m, "get_image_features", None)
        if fn is not None:
            return fn
    return None


def image_token_count(model: Any, ctx: Ctx, extended: bool = False) -> int | None:
    """How many placeholder tokens one image takes: the rows of projected image features
    (`get_image_features(...).pooler_output`, per image) the model merges into the text.
    None when the model has no such function or it does not run on these inputs."""
    import torch

    fn = _image_features_fn(model, deep=extended)
    if fn is None:
        return None
    kwargs = {}
    for name, p in inspect.signature(fn).parameters.items():
        if name in ctx.out:
            kwargs[name] = ctx.out[name]
        elif p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            rule = rule_for(name)
            if rule is None:
                return None
            kwargs[name] = ctx.out[name] = rule(ctx)
    calls = [(kwargs, ctx.batch, 1)]
    pv = kwargs.get("pixel_values")
    if extended and torch.is_tensor(pv) and pv.dim() == 5:
        # (batch, images, C, H, W) for a model whose image encoder takes (images, C, H, W) and
        # which flattens the image axis itself (multi-camera policies): count per image, times images.
        calls.append(({**kwargs, "pixel_values": pv.flatten(0, 1)}, pv.shape[0] * pv.shape[1], int(pv.shape[1])))
    for call_kwargs, images, per_sample in calls:
        try:
            with torch.no_grad():
                out = fn(**call_kwargs)
        except Exception:
            continue
        n = _feature_rows(out, images)
        return n * per_sample if n is not None else None
    return None


def _feature_rows(out: Any, images: int) -> int | None:
    """Rows of image features per image (or per sample) in an image-features output."""
    import torch

    feats = out.get("pooler_output") if hasattr(out, "get") else out
    if feats is None and hasattr(out, "get"):  # models merging the encoder output itself (Llama 4)
        feats = out.get("last_hidden_state")
    if isinstance(feats, (list, tuple)) and feats and torch.is_tensor(feats[0]):
        return int(feats[0].shape[0]) if feats[0].dim() == 2 else int(feats[0].shape[-2])
    if torch.is_tensor(feats):
        return int(feats.shape[1]) if feats.dim() == 3 else int(feats.shape[0]) // images
    return None


def add_image_tokens(model: Any, ctx: Ctx, extended: bool = False) -> bool:
    """Give a model that merges images at placeholder tokens real images: pixel values and,
    in every sample, as many placeholder tokens as one image's features. False (and
    nothing added) when the count cannot be found: the text-only path is used.

    `extended` (for a model whose text-only forward does not run either) also looks for the
    image encoder deeper in the module tree, counts (batch, images, C, H, W) images through
    an encoder that takes (images, C, H, W), tries all-true pixel masks, and completes
    arguments the trial forward reports missing (`run_completing`)."""
    import torch

    token = first_attr(ctx.config, _IMAGE_TOKEN_KEYS, _IMAGE_TOKEN_SUBS)
    ids = ctx.out.get("input_ids")
    if token is None or ids is None:
        return False
    saved = dict(ctx.out)
    for layout in _image_layouts(model, ctx, "pixel_values" in saved, extended):
        ctx.out.clear()
        ctx.out.update(saved)
        ctx.out.update(layout)
        n = image_token_count(model, ctx, extended)
        if not n:
            continue
        seq = max(ids.shape[1], n + 8)
        new_ids = _ids(ctx, seq)
        new_ids[:, 1:1 + n] = int(token)
        ctx.out["input_ids"] = new_ids
        if "mm_token_type_ids" in inspect.signature(model.forward).parameters:
            # what the processor returns beside input_ids: 1 at image tokens (M-RoPE needs it)
            ctx.out["mm_token_type_ids"] = (new_ids == int(token)).long()
        if "attention_mask" in ctx.out:
            ctx.out["attention_mask"] = torch.ones(new_ids.shape, dtype=torch.long)
        if (run_completing(model, ctx) if extended else _runs(model, ctx.out)):  # else the count was wrong
            return True
    ctx.out.clear()
    ctx.out.update(saved)
    return False


def _image_layouts(model: Any, ctx: Ctx, given: bool, extended: bool = False) -> list[dict[str, Any]]:
    """Image tensors to try, in order: as given (a recipe's), one image per sample
    (batch, C, H, W); patchified with a (t, h, w) grid where the image-features function
    takes `image_grid_thw` (Qwen2-VL lineage); (batch, images=1, C, H, W) for models
    that take several images per sample (Idefics3/SmolVLM lineage)."""
    if given:
        return [{}]
    fn = _image_features_fn(model, deep=extended)
    params = set(inspect.signature(fn).parameters) if fn is not None else set()
    params |= set(inspect.signature(model.forward).parameters)
    plain = _pixel_values(ctx)
    out: list[dict[str, Any]] = []
    if "image_grid_thw" in params:
        out.append({"pixel_values": _patchified(ctx), "image_grid_thw": _grid_thw(ctx)})
    if "image_sizes" in params and plain.dim() == 4 and _anyres_tiles(ctx):
        out.append({"pixel_values": _anyres(ctx, plain), "image_sizes": _image_sizes(ctx)})
    out.append({"pixel_values": plain})
    if plain.dim() == 4:
        out.append({"pixel_values": plain.unsqueeze(1)})
    # Then each layout with a pixel mask, for forwards that need one to run (all true: no
    # padded image or camera). Last, so that a layout that runs without one keeps running so.
    masks = [n for n in _PIXEL_MASKS if extended and n in inspect.signature(model.forward).parameters
             and n not in ctx.out]
    out += [{**layout, name: mask} for layout in list(out) for name in masks
            for mask in _pixel_masks(layout["pixel_values"])]
    return out


_PIXEL_MASKS = ("pixel_attention_mask", "pixel_mask")


def _pixel_masks(pixel_values: Any) -> list[Any]:
    """All-true masks a pixel tensor may come with: per image ((batch, images), the
    multi-camera layout) or per pixel ((batch, [images,] H, W))."""
    import torch

    shape = tuple(pixel_values.shape)
    if len(shape) == 5:  # (batch, images, C, H, W)
        return [torch.ones(shape[:2], dtype=torch.bool), torch.ones(shape[:2] + shape[3:], dtype=torch.bool)]
    if len(shape) == 4:  # (batch, C, H, W)
        return [torch.ones(shape[:1] + shape[2:], dtype=torch.bool)]
    return []


def _runs(model: Any, inputs: dict[str, Any]) -> bool:
    """One no-grad forward, leaving the model's mode and the RNG as they were."""
    return _trial(model, inputs) is None


def _trial(model: Any, inputs: dict[str, Any]) -> Exception | None:
    """One no-grad forward (mode and RNG left as they were): None, or what it raised."""
    import torch

    training = model.training
    try:
        with torch.random.fork_rng(), torch.no_grad():
            model.eval()
            model(**inputs)
        return None
    except Exception as e:  # noqa: BLE001 - any failure means "not these inputs"
        return e
    finally:
        model.train(training)


def run_completing(model: Any, ctx: Ctx, rounds: int = 4) -> bool:
    """A trial forward of `ctx.out`. Arguments it reports missing (a sub-model's, reaching it
    through the top forward's `**kwargs`, so in no signature of the top model) are added, as
    the sub-model that requires them documents their shape, else by the rule for their name,
    and the forward is tried again. Additions stay only when the forward then runs."""
    from .documented import missing_arguments

    added: list[str] = []
    for _ in range(rounds):
        err = _trial(model, ctx.out)
        if err is None:
            return True
        names = [n for n in missing_arguments(err) if n not in ctx.out]
        tensors = {n: _missing_tensor(model, n, ctx) for n in names}
        if not tensors or any(t is None for t in tensors.values()):
            break
        ctx.out.update(tensors)
        added += names
    for n in added:
        ctx.out.pop(n, None)
    return False


def _missing_tensor(model: Any, name: str, ctx: Ctx) -> Any:
    from .documented import declaring_modules, documented_tensor

    for m in declaring_modules(model, name):
        t = documented_tensor(m, name, config=getattr(m, "config", ctx.config), batch=ctx.batch,
                              seq_len=ctx.seq_len, gen=ctx.gen)
        if t is not None:
            return t
    rule = rule_for(name)
    return rule(ctx) if rule is not None else None


def _config_width_vector(ctx: Ctx, name: str) -> Any:
    """(batch, width) floats for an argument the config gives a width by its name:
    `<name>_dim` or `max_<name>_dim` (shorter vectors are zero-padded to the max). None otherwise."""
    import torch

    width = first_attr(ctx.config, (f"{name}_dim", f"max_{name}_dim"))
    if not isinstance(width, int) or width <= 0:
        return None
    return torch.randn(ctx.batch, width, generator=ctx.gen)


def _image_sizes(ctx: Ctx) -> Any:
    import torch

    h, w = _image_hw(ctx.config)
    return torch.tensor([[h, w]] * ctx.batch, dtype=torch.long)


RULES["image_sizes"] = _image_sizes


def _anyres_tiles(ctx: Ctx) -> int:
    """Tiles of one image under the config's `image_grid_pinpoints` (LLaVA-NeXT "anyres"):
    the processor resizes the image to the best pinpoint and cuts it into image-size tiles.
    0 when the config has no pinpoints."""
    pins = first_attr(ctx.config, ("image_grid_pinpoints",))
    if not (isinstance(pins, (list, tuple)) and pins):
        return 0
    try:
        from transformers.image_processing_utils import select_best_resolution
    except ImportError:  # older transformers: the first pinpoint
        def select_best_resolution(_size: Any, pinpoints: Any) -> Any:
            return pinpoints[0]
    h, w = _image_hw(ctx.config)
    bh, bw = select_best_resolution((h, w), [tuple(p) for p in pins])
    return -(-bh // h) * -(-bw // w)  # tiles cover the resized image (ceil), as image_size_to_num_patches counts


def _anyres(ctx: Ctx, plain: Any) -> Any:
    """(batch, 1 + tiles, C, H, W): the resized whole image, then its tiles."""
    import torch

    n = 1 + _anyres_tiles(ctx)
    return torch.randn(plain.shape[0], n, *plain.shape[1:], generator=ctx.gen)


def _image_token_mask(ctx: Ctx) -> Any:
    """1 at image placeholder tokens, else 0: the token types some processors return beside
    `input_ids` (Gemma 3's `token_type_ids`; what `mm_token_type_ids` is elsewhere)."""
    token = first_attr(ctx.config, _IMAGE_TOKEN_KEYS, _IMAGE_TOKEN_SUBS)
    ids = ctx.out.get("input_ids")
    if ids is None:
        return _zeros_like_ids(ctx)
    return (ids == int(token)).long() if token is not None else _zeros_like_ids(ctx)


RULES["image_token_mask"] = _image_token_mask


def _flattened_patches(ctx: Ctx) -> Any:
    """Variable-resolution patches (Pix2Struct, Kosmos-2.5): (batch, patches, 2 + patch
    features), where columns 0 and 1 are the patch's 1-based row and column in its grid
    (they index position embeddings, so they must be small non-negative integers)."""
    import math

    import torch

    feats = int(first_attr(ctx.config, ("patch_embed_hidden_size",), _VISION_SUBS, 768))
    n = 16
    side = math.isqrt(n)
    idx = torch.arange(n)
    rows = (idx // side + 1).float().expand(ctx.batch, n)
    cols = (idx % side + 1).float().expand(ctx.batch, n)
    pixels = torch.randn(ctx.batch, n, feats, generator=ctx.gen)
    return torch.cat([rows[..., None], cols[..., None], pixels], dim=-1)


RULES["flattened_patches"] = _flattened_patches


def default_inputs(model: Any, config: Any, modality: str, *, batch: int, seq_len: int, gen: Any,
                   skip: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """Generic inputs; names in `skip` (given or dropped by a recipe) are left out."""
    ctx = Ctx(model=model, config=config, batch=batch, seq_len=seq_len, gen=gen, out={})
    names = [n for n in wanted_inputs(model, config, modality) if n not in skip]
    # A (t, h, w) patch grid means the image comes already cut into flattened patches.
    patch_arg = None
    if "grid_thw" in names or "image_grid_thw" in names:
        patch_arg = next((n for n in ("hidden_states", "pixel_values") if n in names), None)
    for name in names:
        rule = RULES["patchified"] if name == patch_arg else rule_for(name)
        if rule is None:
            from .documented import documented_tensor

            # No rule by name: the shape the model's own docstring gives the argument, else a
            # per-sample vector as wide as the config's width for that name (`state`: max_state_dim).
            t = documented_tensor(model, name, config=config, batch=batch, seq_len=seq_len, gen=gen)
            if t is None:
                t = _config_width_vector(ctx, name)
            if t is None:
                raise ValueError(f"no generic input for {type(model).__name__}.{name}; "
                                 "add an `inputs` recipe to the registry")
            ctx.out[name] = t
            continue
        ctx.out[name] = rule(ctx)
    params = inspect.signature(model.forward).parameters
    with_images = False
    merges_images = "pixel_values" in params and "pixel_values" not in skip \
        and first_attr(config, _IMAGE_TOKEN_KEYS, _IMAGE_TOKEN_SUBS) is not None
    if merges_images and "input_ids" in ctx.out:
        with_images = add_image_tokens(model, ctx)
    if merges_images and not with_images and not _runs(model, ctx.out):
        # Neither images by the rules above nor these inputs run: the extended image rules,
        # with the text that carries the image placeholders where the main input is another
        # (a policy's robot `state`).
        saved = dict(ctx.out)
        for n in ("input_ids", "attention_mask"):
            if n in params and n not in skip and n not in ctx.out:
                ctx.out[n] = RULES[n](ctx)
        with_images = add_image_tokens(model, ctx, extended=True)
        if not with_images:
            ctx.out.clear()
            ctx.out.update(saved)
    if not with_images:
        from .documented import hidden_requirements

        # A sub-model needs an argument the top forward only passes on: find it by trial.
        if hidden_requirements(model) - set(ctx.out) - set(skip):
            run_completing(model, ctx)
    return ctx.out


# ---- recipes ---------------------------------------------------------------------------


def _dtype(name: str | None, default: Any) -> Any:
    import torch

    return {"long": torch.long, "int": torch.int32, "float": torch.float32, "bool": torch.bool}.get(name or "", default)


def recipe_tensor(spec: dict[str, Any], *, config: Any, batch: int, seq_len: int, gen: Any,
                  ctx: Ctx | None = None) -> Any:
    import torch

    # Structured arguments (a dict of (key, value) tensor pairs per layer type...): nested specs.
    if "items" in spec:
        return {k: recipe_tensor(v, config=config, batch=batch, seq_len=seq_len, gen=gen, ctx=ctx)
                for k, v in spec["items"].items()}
    if "tuple" in spec:
        return tuple(recipe_tensor(v, config=config, batch=batch, seq_len=seq_len, gen=gen, ctx=ctx)
                     for v in spec["tuple"])
    if "rule" in spec:
        rule = rule_for(spec["rule"])
        if ctx is None or rule is None:
            raise ValueError(f"unknown input rule {spec['rule']!r}; known: {', '.join(sorted(RULES))}")
        t = rule(ctx)
        # Layout adjustments of a generic tensor: frames-first features, a channel axis.
        if "transpose" in spec:
            t = t.transpose(*spec["transpose"]).contiguous()
        if "unsqueeze" in spec:
            t = t.unsqueeze(int(spec["unsqueeze"]))
        return t
    if "value" in spec:
        t = torch.tensor(spec["value"], dtype=_dtype(spec.get("dtype"), None))
        if spec.get("repeat_batch"):
            t = t.repeat(batch, *([1] * (t.dim() - 1))) if t.dim() else t
        return t
    shape = [eval_dim(d, config=config, batch=batch, seq_len=seq_len) for d in spec["shape"]]
    dtype = _dtype(spec.get("dtype"), torch.float32)
    if "fill" in spec:
        return torch.full(shape, spec["fill"], dtype=dtype)
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=gen, dtype=dtype)
    if dtype == torch.bool:
        return torch.ones(*shape, dtype=torch.bool)
    high = spec.get("high", "config.vocab_size")
    high = eval_dim(high, config=config, batch=batch, seq_len=seq_len)
    return torch.randint(int(spec.get("low", 0)), high, shape, generator=gen, dtype=dtype)


def build_inputs(model: Any, config: Any, modality: str, recipe: dict[str, Any] | None, *,
                 batch: int = 2, seq_len: int = 32, seed: int = 0) -> dict[str, Any]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    recipe = for_class(recipe or {}, type(model).__name__)
    seq_len = int(recipe.get("seq_len", seq_len))
    # Text no longer than the learned position table (CLIP-like text towers have 16-77).
    maxpos = first_attr(text_config(config), ("max_position_embeddings", "n_positions", "max_seq_len"))
    if isinstance(maxpos, int) and 2 <= maxpos < seq_len:
        seq_len = maxpos
    batch = int(recipe.get("batch", batch))
    skip = set(recipe.get("drop", [])) | set(recipe.get("tensors") or {}) | set(recipe.get("kwargs") or {})
    out = {} if recipe.get("replace") else default_inputs(model, config, modality, batch=batch, seq_len=seq_len,
                                                          gen=gen, skip=skip)
    for name in recipe.get("drop", []):
        out.pop(name, None)
    ctx = Ctx(model=model, config=config, batch=batch, seq_len=seq_len, gen=gen, out=out)
    for name, spec in (recipe.get("tensors") or {}).items():
        out[name] = recipe_tensor(spec, config=config, batch=batch, seq_len=seq_len, gen=gen, ctx=ctx)
    for name, value in (recipe.get("kwargs") or {}).items():
        out[name] = value
    # Images a recipe shapes (e.g. (batch, images, C, H, W)) still get their placeholder tokens;
    # after the kwargs, which the trial forward in add_image_tokens needs too.
    given = recipe.get("tensors") or {}
    if "pixel_values" in given and "input_ids" in out and "input_ids" not in given \
            and first_attr(config, _IMAGE_TOKEN_KEYS, _IMAGE_TOKEN_SUBS) is not None:
        add_image_tokens(model, ctx)
    if recipe.get("tokens"):
        place_tokens(ctx, recipe["tokens"])
    if recipe.get("hook"):  # inputs no tensor recipe can express (e.g. a video inference session)
        out.update(call_inputs_hook(recipe["hook"], model=model, config=config, batch=batch, seq_len=seq_len,
                                    gen=gen, out=out))
    for name in recipe.get("drop", []):
        out.pop(name, None)
    return out


def place_tokens(ctx: Ctx, tokens: dict[str, Any]) -> None:
    """A recipe's `tokens: {config_key: count}`: in every sample, `count` copies of the token
    id the config names, in a run from position 1 (after the first token), as a processor
    expands `<image>`/`<|AUDIO|>` placeholders. For models whose placeholder count no
    image-features function gives (audio towers, cross-attention VLMs)."""
    ids = ctx.out.get("input_ids")
    if ids is None:
        raise ValueError("inputs recipe `tokens` needs input_ids")
    pos = 1
    for key, expr in tokens.items():
        token = first_attr(ctx.config, (key,), _IMAGE_TOKEN_SUBS)
        if not isinstance(token, int):
            raise ValueError(f"inputs recipe `tokens`: the config has no token id {key!r}")
        n = eval_dim(expr, config=ctx.config, batch=ctx.batch, seq_len=ctx.seq_len)
        if pos + n + 2 > ids.shape[1]:
            raise ValueError(f"inputs recipe `tokens`: {n} x {key} do not fit in {ids.shape[1]} tokens; "
                             "raise the recipe's seq_len")
        ids[:, pos:pos + n] = token
        pos += n


def call_inputs_hook(ref: str, **kwargs: Any) -> dict[str, Any]:
    """An `inputs: {hook: "enablebot.module:function"}` recipe: the function returns more inputs."""
    import importlib

    mod_name, _, fn_name = ref.partition(":")
    if not mod_name.startswith("enablebot."):
        raise ValueError(f"inputs hook {ref!r}: only enablebot.* hooks are allowed")
    return dict(getattr(importlib.import_module(mod_name), fn_name)(**kwargs) or {})


def for_class(recipe: dict[str, Any], class_name: str) -> dict[str, Any]:
    """The recipe for one model class: `by_class: {ClassName: {...}}` entries are merged
    over the shared recipe (tensors and kwargs by name; drop lists added)."""
    special = (recipe.get("by_class") or {}).get(class_name)
    if not special:
        return recipe
    merged = {k: v for k, v in recipe.items() if k != "by_class"}
    for key in ("tensors", "kwargs"):
        if key in special:
            merged[key] = {**(recipe.get(key) or {}), **special[key]}
    merged["drop"] = list(recipe.get("drop", [])) + list(special.get("drop", []))
    merged.update({k: v for k, v in special.items() if k not in ("tensors", "kwargs", "drop")})
    return merged
