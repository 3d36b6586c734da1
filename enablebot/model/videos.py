"""Real videos for models that merge them at placeholder tokens (video LMs).

`add_video_tokens` is `images.add_image_tokens` for a video: a clip per sample (frames, or patch
rows with a (t, h, w) grid of two temporal steps where the video-features function takes
`video_grid_thw`), the rows one clip's features take counted through the model's own
`get_video_features`, that many video placeholder tokens appended to every sample's text (after
any image placeholders, as a processor expands `<video>` in a prompt that also holds an image),
and the clip kept only when a trial forward then runs. A video-only tower part (LLaVA-NeXT-Video's
resampler) runs only this way. Nothing here is per architecture.
"""

from __future__ import annotations

import inspect
from typing import Any

from .configs import first_attr
from .images import _feature_rows, config_settings, features_fn
from .tensors import RULES, Ctx, _patch_grid, token_ids
from .trial import runs

VIDEO_TOKEN_KEYS = ("video_token_id", "video_token_index")
VIDEO_TOKEN_SUBS = ("text_config", "vision_config")
_TEMPORAL_STEPS = 2  # a clip of two temporal patches: the smallest that is a video, not an image


def video_token(config: Any) -> Any:
    """The video placeholder token id, if the model merges videos into its text; else None."""
    return first_attr(config, VIDEO_TOKEN_KEYS, VIDEO_TOKEN_SUBS)


def _video_features_fn(model: Any) -> Any:
    return features_fn(model, "get_video_features")


def wants_video(model: Any, ctx: Ctx, skip: set[str] | frozenset[str] = frozenset()) -> bool:
    params = inspect.signature(model.forward).parameters
    return ("pixel_values_videos" in params and "pixel_values_videos" not in skip
            and "pixel_values_videos" not in ctx.out and "input_ids" in ctx.out
            and video_token(ctx.config) is not None and _video_features_fn(model) is not None)


def _clips(ctx: Ctx, grid: bool) -> dict[str, Any]:
    import dataclasses

    import torch

    if not grid:
        return {"pixel_values_videos": RULES["pixel_values_videos"](ctx)}
    # The image rule's patch rows, for every temporal step of every clip.
    h, w = _patch_grid(ctx)
    return {"pixel_values_videos": RULES["patchified"](dataclasses.replace(ctx, batch=ctx.batch * _TEMPORAL_STEPS)),
            "video_grid_thw": torch.tensor([[_TEMPORAL_STEPS, h, w]] * ctx.batch, dtype=torch.long)}


def _rows_per_clip(out: Any, clips: int) -> int | None:
    """Rows of video features per clip: a features list may be split per clip (Qwen2-VL) or per
    frame (GLM-4V), so every piece counts."""
    import torch

    feats = out.get("pooler_output") if hasattr(out, "get") else out
    if isinstance(feats, (list, tuple)) and feats and all(torch.is_tensor(f) and f.dim() == 2 for f in feats):
        return sum(int(f.shape[0]) for f in feats) // clips
    if isinstance(feats, (list, tuple)) and feats and all(torch.is_tensor(f) and f.dim() == 3 for f in feats):
        # One (frames, rows, width) piece per clip (LLaVA-NeXT-Video on transformers 5.17): the
        # forward flattens each clip's frames, so every frame's rows count.
        return sum(int(f.shape[0]) * int(f.shape[1]) for f in feats) // clips
    return _feature_rows(out, clips)


def _placements(n: int, steps: int) -> list[list[int]]:
    """Token runs to try for one clip of n rows: one run (Qwen2-VL, LLaVA-NeXT-Video), then one
    run per temporal step with a text token between them (Qwen3-VL reads each frame as its own
    group, as its processor writes a timestamp before every frame)."""
    out = [[n]]
    if steps > 1 and n % steps == 0:
        out.append([n // steps] * steps)
    return out


def add_video_tokens(model: Any, ctx: Ctx) -> bool:
    """Give a video LM one clip per sample and as many placeholder tokens as the clip's encoded
    rows, appended to the text already there. False (nothing added) when the count cannot be
    found or the forward does not then run."""
    import torch

    fn = _video_features_fn(model)
    token = int(video_token(ctx.config))
    params = inspect.signature(fn).parameters
    saved = dict(ctx.out)
    grid = "video_grid_thw" in params
    clip = _clips(ctx, grid)
    # Settings the config names (Video-LLaVA's `vision_feature_layer`), as the forward passes them.
    settings = config_settings(fn, ctx, given=clip, optional=True)
    call = {k: v for k, v in clip.items() if k in params}
    if "pixel_values_videos" not in params and "pixel_values" in params:
        # The function names its clip `pixel_values` (LLaVA-NeXT-Video on transformers 5.17).
        call["pixel_values"] = clip["pixel_values_videos"]
    try:
        with torch.no_grad():
            n = _rows_per_clip(fn(**call, **settings), ctx.batch)
    except Exception:  # noqa: BLE001 - this clip does not fit the tower: no video
        n = None
    for runs_of in _placements(n, _TEMPORAL_STEPS if grid else 1) if n else []:
        ids = saved["input_ids"]
        old = ids.shape[1]
        length = sum(runs_of) + len(runs_of) - 1
        new_ids = token_ids(ctx, old + length + 8)
        new_ids[:, :old] = ids
        where = torch.zeros(new_ids.shape[1], dtype=torch.bool)
        at = old
        for r in runs_of:
            where[at:at + r] = True
            at += r + 1  # one text token between runs
        new_ids[:, where] = token
        ctx.out.clear()
        ctx.out.update(saved)
        ctx.out.update(clip)
        ctx.out["input_ids"] = new_ids
        if "attention_mask" in ctx.out:
            ctx.out["attention_mask"] = torch.ones(new_ids.shape, dtype=torch.long)
        if "mm_token_type_ids" in saved:  # the processor's modality per token: 2 at video tokens
            mm = torch.zeros(new_ids.shape, dtype=torch.long)
            mm[:, :old] = saved["mm_token_type_ids"]
            mm[:, where] = 2
            ctx.out["mm_token_type_ids"] = mm
        if runs(model, ctx.out):
            return True
    ctx.out.clear()
    ctx.out.update(saved)
    return False
