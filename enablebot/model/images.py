"""Real images for models that merge them at placeholder tokens.

`add_image_tokens` tries image layouts (one image per sample; patchified with a (t, h, w)
grid; LLaVA-NeXT "anyres" tiles; several images per sample; with all-true pixel masks),
counts the rows one image's features take through the model's own `get_image_features`,
writes that many placeholder tokens into every sample, and keeps the layout only when a
trial forward then runs. Nothing here is per architecture.
"""

from __future__ import annotations

import inspect
from typing import Any

from .configs import first_attr
from .tensors import IMAGE_TOKEN_SUBS, RULES, VISION_SUBS, Ctx, image_hw, image_token, rule_for, token_ids
from .trial import run_completing, runs

def features_fn(model: Any, name: str) -> Any:
    """The model's `name` (get_audio_features, get_video_features), on it or on its inner model."""
    for obj in (model, getattr(model, "model", None)):
        fn = getattr(obj, name, None)
        if fn is not None:
            return fn
    return None


def _pass_through(fn: Any) -> bool:
    """A function that only hands `*args, **kwargs` on (MiniCPM-V 4.6's head to its model): its
    signature names nothing, so the inner model's function is the one to read."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)


def _image_features_fn(model: Any, deep: bool = False) -> Any:
    vlm = getattr(model, "vlm", None)  # retrieval wrappers around a VLM
    objs = (model, getattr(model, "model", None), vlm, getattr(vlm, "model", None))
    fns = [fn for fn in (getattr(obj, "get_image_features", None) for obj in objs) if fn is not None]
    for fn in fns:
        if not _pass_through(fn):
            return fn
    if fns:
        return fns[0]
    # Deeper wrappers (a policy or a head around a model around a VLM: `model.model.vlm`):
    # the first sub-module, in module order, that has one.
    for m in model.modules() if deep else ():
        fn = getattr(m, "get_image_features", None)
        if fn is not None:
            return fn
    return None


# The forward's image argument: `pixel_values`, or `pixel_values_images` where a model takes images
# and videos under two names (Video-LLaVA on transformers 5.17).
IMAGE_ARGS = ("pixel_values", "pixel_values_images")


def image_arg(model: Any) -> str | None:
    params = inspect.signature(model.forward).parameters
    return next((n for n in IMAGE_ARGS if n in params), None)


def config_settings(fn: Any, ctx: Ctx, given: Any = (), optional: bool = False) -> dict[str, Any]:
    """Arguments of a features function that the config names (`vision_feature_layer`,
    `vision_feature_select_strategy`): the config's values, which the model's forward passes
    when its caller gives none. Required ones only, or (`optional`) also those defaulting to None."""
    out: dict[str, Any] = {}
    for name, p in inspect.signature(fn).parameters.items():
        if name in given or p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) or rule_for(name) is not None:
            continue
        if p.default is p.empty or (optional and p.default is None):
            value = first_attr(ctx.config, (name,), VISION_SUBS)
            if value is not None and isinstance(value, (int, str, list, tuple)):
                out[name] = value
    return out


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
                # A setting the config names (`vision_feature_select_strategy`): the config's value.
                value = config_settings(fn, ctx).get(name)
                if value is None:
                    return None
                kwargs[name] = value
                continue
            kwargs[name] = ctx.out[name] = rule(ctx)
    calls = [(kwargs, ctx.batch, 1)]
    pv = kwargs.get("pixel_values")
    if extended and torch.is_tensor(pv) and pv.dim() == 5:
        # (batch, images, C, H, W) for a model whose image encoder takes (images, C, H, W) and
        # which flattens the image axis itself (multi-camera policies): count per image, times images.
        calls.append(({**kwargs, "pixel_values": pv.flatten(0, 1)}, pv.shape[0] * pv.shape[1], int(pv.shape[1])))
    for call_kwargs, images, per_sample in calls:
        out = _call_completing(model, fn, call_kwargs, ctx)
        if out is None:
            continue
        n = _feature_rows(out, images)
        return n * per_sample if n is not None else None
    return None


def _call_completing(model: Any, fn: Any, kwargs: dict[str, Any], ctx: Ctx, rounds: int = 2) -> Any:
    """`fn(**kwargs)`, or None where it raises. An argument it reports missing (an inner model's
    function reached through a wrapper's `**kwargs`: VideoLLaMA3's `image_merge_sizes`) that the
    forward takes too and a rule makes is added, to the call and to the inputs, and it is tried again."""
    import torch

    from .documented import missing_arguments

    params = inspect.signature(model.forward).parameters
    for _ in range(rounds + 1):
        try:
            with torch.no_grad():
                return fn(**kwargs)
        except Exception as e:  # noqa: BLE001 - any failure means "not these images"
            names = [n for n in missing_arguments(e) if n not in kwargs]
        rules = {n: rule_for(n) for n in names}
        if not names or any(r is None or n not in params for n, r in rules.items()):
            return None
        for n, r in rules.items():
            kwargs[n] = ctx.out[n] = r(ctx)
    return None


def _feature_rows(out: Any, images: int) -> int | None:
    """Rows of image features per image (or per sample) in an image-features output."""
    import torch

    feats = out.get("pooler_output") if hasattr(out, "get") else out
    if feats is None:
        # Set as an attribute on an output class without that field (transformers 5.17's
        # Mistral3 sets `pooler_output` on a BaseModelOutput): not among its keys.
        feats = getattr(out, "pooler_output", None)
    if feats is None:
        # Features injected at LLM layers (Granite 4 Vision's `deepstack_features`: (LLM layer,
        # per-image features) pairs), every pair at the same placeholders: the first pair's.
        stack = getattr(out, "deepstack_features", None)
        if isinstance(stack, (list, tuple)) and stack and isinstance(stack[0], (list, tuple)) and len(stack[0]) == 2:
            feats = stack[0][1]
    if feats is None and hasattr(out, "get"):  # models merging the encoder output itself (Llama 4)
        feats = out.get("last_hidden_state")
    if isinstance(feats, (list, tuple)) and feats and torch.is_tensor(feats[0]):
        return int(feats[0].shape[0]) if feats[0].dim() == 2 else int(feats[0].shape[-2])
    if torch.is_tensor(feats):
        if feats.dim() == 3 and images > 1 and feats.shape[0] != images:
            # Not one sequence per image: one holding every image's rows (HunYuan-VL on
            # transformers 5.17: (1, rows, width)), or one per frame or tile (Video-LLaVA's clips:
            # (clips x frames, rows, width)); the forward merges them all, so rows per image.
            return int(feats.shape[0] * feats.shape[1]) // images
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

    token = image_token(ctx.config)
    ids = ctx.out.get("input_ids")
    arg = image_arg(model) or "pixel_values"
    if token is None or ids is None:
        return False
    saved = dict(ctx.out)
    for layout in _image_layouts(model, ctx, arg in saved, extended):
        ctx.out.clear()
        ctx.out.update(saved)
        ctx.out.update({arg if k == "pixel_values" else k: v for k, v in layout.items()})
        n = image_token_count(model, ctx, extended)
        if not n:
            continue
        seq = max(ids.shape[1], n + 8)
        base_ids = token_ids(ctx, seq)
        # The run as is; then, where that does not run, between the image start and end tokens the
        # config names, as a processor that wraps each image so writes it (Ovis2.5's
        # `image_start_token + image_token * n + image_end_token`, whose forward counts them).
        for bounds in (None, _image_bounds(ctx.config)):
            if bounds is False:
                continue
            new_ids = base_ids.clone()
            new_ids[:, 1:1 + n] = int(token)
            if bounds is not None:
                new_ids[:, 0], new_ids[:, 1 + n] = bounds
            ctx.out["input_ids"] = new_ids
            if "mm_token_type_ids" in inspect.signature(model.forward).parameters:
                # what the processor returns beside input_ids: 1 at image tokens (M-RoPE needs it)
                ctx.out["mm_token_type_ids"] = (new_ids == int(token)).long()
            if "attention_mask" in ctx.out:
                ctx.out["attention_mask"] = torch.ones(new_ids.shape, dtype=torch.long)
            if (run_completing(model, ctx) if extended else runs(model, ctx.out)):  # else the count was wrong
                return True
    ctx.out.clear()
    ctx.out.update(saved)
    return False


_IMAGE_BOUNDS = ("image_start_token_id", "image_end_token_id")


def _image_bounds(config: Any) -> tuple[int, int] | bool:
    """The (start, end) token ids the config names around an image's placeholders; False if none."""
    ids = [first_attr(config, (k,), IMAGE_TOKEN_SUBS) for k in _IMAGE_BOUNDS]
    return (int(ids[0]), int(ids[1])) if all(isinstance(i, int) for i in ids) else False


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
    plain = RULES["pixel_values"](ctx)
    out: list[dict[str, Any]] = []
    if "image_grid_thw" in params:
        patches = RULES["patchified"](ctx)
        out.append({"pixel_values": patches, "image_grid_thw": RULES["image_grid_thw"](ctx)})
        # The same patches not flattened, (patches, C, patch, patch), where there is no temporal
        # patch to flatten (the PaddleOCR-VL and Kimi-K2.5 processors return them so).
        side = int(first_attr(ctx.config, ("patch_size",), VISION_SUBS, 14))
        if first_attr(ctx.config, ("temporal_patch_size", "patch_temporal"), VISION_SUBS, 1) == 1 \
                and patches.shape[1] % (side * side) == 0:
            out.append({"pixel_values": patches.reshape(patches.shape[0], -1, side, side),
                        "image_grid_thw": RULES["image_grid_thw"](ctx)})
    if "image_sizes" in params and plain.dim() == 4 and _anyres_tiles(ctx):
        out.append({"pixel_values": _anyres(ctx, plain), "image_sizes": RULES["image_sizes"](ctx)})
    out.append({"pixel_values": plain})
    if plain.dim() == 4:
        out.append({"pixel_values": plain.unsqueeze(1)})
    if "image_grid_thw" not in params and isinstance(first_attr(ctx.config, ("patch_size",), VISION_SUBS, 14), int):
        # Flattened patches with no grid argument, (patches, C * patch * patch), where the image
        # layouts above do not run (NeoMME's processor returns every image's patches so); only
        # for one patch size (Florence-2's per-stage list has no one patch width).
        out.append({"pixel_values": RULES["patchified"](ctx)})
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
    h, w = image_hw(ctx.config)
    bh, bw = select_best_resolution((h, w), [tuple(p) for p in pins])
    return -(-bh // h) * -(-bw // w)  # tiles cover the resized image (ceil), as image_size_to_num_patches counts


def _anyres(ctx: Ctx, plain: Any) -> Any:
    """(batch, 1 + tiles, C, H, W): the resized whole image, then its tiles."""
    import torch

    n = 1 + _anyres_tiles(ctx)
    return torch.randn(plain.shape[0], n, *plain.shape[1:], generator=ctx.gen)
