"""Generic input tensors by argument name: the rules `inputs.py` applies.

Each rule makes one tensor a forward takes from the config and the batch/sequence size:
token ids (with special ids avoided, so no row ends early), masks, images, videos,
audio waveforms and features, layout boxes, patchified images with their `grid_thw`.
`RULES` maps argument names to rules; `rule_for` adds name patterns. A registry recipe
names a rule with `{rule: NAME}`. `eval_dim` reads a recipe's shape entries.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from typing import Any, Callable

from .configs import first_attr, text_config

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


IMAGE_TOKEN_KEYS = ("image_token_id", "image_token_index")
# Where an image placeholder token is set: the text model, or the VLM that a retrieval
# wrapper (ColPali lineage: `model.vlm`, `config.vlm_config`) embeds.
IMAGE_TOKEN_SUBS = ("text_config", "vlm_config")
VISION_SUBS = ("vision_config", "backbone_config", "encoder_config", "image_config")
AUDIO_SUBS = ("audio_config", "encoder_config", "speech_config")


def image_token(config: Any) -> Any:
    """The image placeholder token id, if the model merges images into its text; else None."""
    return first_attr(config, IMAGE_TOKEN_KEYS, IMAGE_TOKEN_SUBS)


def _spatial_merge(config: Any) -> int:
    merge = first_attr(config, ("spatial_merge_size", "merge_size", "merge_kernel_size"), VISION_SUBS, 1) or 1
    if isinstance(merge, (list, tuple)):  # a (height, width) merge kernel (Kimi-K2.5's [2, 2])
        merge = max(int(m) for m in merge) if merge else 1
    return int(merge)


def image_hw(config: Any) -> tuple[int, int]:
    size = first_attr(config, ("image_size", "img_size", "input_size"), VISION_SUBS, 32)
    if isinstance(size, dict):
        return int(size.get("height", 32)), int(size.get("width", 32))
    if isinstance(size, (list, tuple)):
        return int(size[0]), int(size[-1])
    return int(size), int(size)


def _channels(config: Any) -> int:
    return int(first_attr(config, ("num_channels", "in_channels", "in_chans", "input_channels"), VISION_SUBS, 3))


# ---- generic tensors by argument name --------------------------------------------------


@dataclass
class Ctx:
    model: Any
    config: Any
    batch: int
    seq_len: int
    gen: Any
    out: dict[str, Any]


def token_ids(ctx: Ctx, seq: int | None = None) -> Any:
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

    h, w = image_hw(ctx.config)
    frames = first_attr(ctx.config, ("num_frames",), VISION_SUBS)
    if frames:  # video models take (batch, frames, channels, height, width)
        return torch.randn(ctx.batch, int(frames), _channels(ctx.config), h, w, generator=ctx.gen)
    return torch.randn(ctx.batch, _channels(ctx.config), h, w, generator=ctx.gen)


def _video(ctx: Ctx) -> Any:
    import torch

    h, w = image_hw(ctx.config)
    frames = int(first_attr(ctx.config, ("num_frames", "frames_per_clip"), VISION_SUBS, 4))
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
    merge = _spatial_merge(ctx.config)
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
    patch = int(first_attr(c, ("patch_size",), VISION_SUBS, 14))
    tp = int(first_attr(c, ("temporal_patch_size", "patch_temporal"), VISION_SUBS, 1))
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
    if name.endswith("_merge_sizes"):  # per image or per video (VideoLLaMA3's `image_merge_sizes`)
        return RULES["merge_sizes"]
    if name.startswith("prompt_") and name[len("prompt_"):] in RULES:
        return RULES[name[len("prompt_"):]]  # prompt images/masks shaped like the inputs
    return None


def _merge_sizes(ctx: Ctx) -> Any:
    import torch

    return torch.full((ctx.batch,), _spatial_merge(ctx.config), dtype=torch.long)


def _decoder_ids(ctx: Ctx) -> Any:
    return token_ids(ctx, max(ctx.seq_len // 2, 2))


RULES: dict[str, Callable[[Ctx], Any]] = {
    "input_ids": token_ids,
    "qformer_input_ids": token_ids,
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


def config_width_vector(ctx: Ctx, name: str) -> Any:
    """(batch, width) floats for an argument the config gives a width by its name:
    `<name>_dim` or `max_<name>_dim` (shorter vectors are zero-padded to the max). None otherwise."""
    import torch

    width = first_attr(ctx.config, (f"{name}_dim", f"max_{name}_dim"))
    if not isinstance(width, int) or width <= 0:
        return None
    return torch.randn(ctx.batch, width, generator=ctx.gen)


def _image_sizes(ctx: Ctx) -> Any:
    import torch

    h, w = image_hw(ctx.config)
    return torch.tensor([[h, w]] * ctx.batch, dtype=torch.long)


RULES["image_sizes"] = _image_sizes


def _high_res_pixel_values(ctx: Ctx) -> Any:
    """The high-resolution copy of each image a hybrid tower takes beside the low-resolution one
    (DeepSeek-VL hybrid: the processor resizes one image twice), at the size of the config's
    `high_res_vision_config`."""
    import torch

    sub = getattr(ctx.config, "high_res_vision_config", None)
    h, w = image_hw(sub) if sub is not None else image_hw(ctx.config)
    return torch.randn(ctx.batch, _channels(sub if sub is not None else ctx.config), h, w, generator=ctx.gen)


RULES["high_res_pixel_values"] = _high_res_pixel_values


def _image_token_mask(ctx: Ctx) -> Any:
    """1 at image placeholder tokens, else 0: the token types some processors return beside
    `input_ids` (Gemma 3's `token_type_ids`; what `mm_token_type_ids` is elsewhere)."""
    token = image_token(ctx.config)
    ids = ctx.out.get("input_ids")
    if ids is None:
        return _zeros_like_ids(ctx)
    return (ids == int(token)).long() if token is not None else _zeros_like_ids(ctx)


RULES["image_token_mask"] = _image_token_mask
RULES["mm_token_type_ids"] = _image_token_mask  # the processor's modality per token: 1 at image tokens


def _flattened_patches(ctx: Ctx) -> Any:
    """Variable-resolution patches (Pix2Struct, Kosmos-2.5): (batch, patches, 2 + patch
    features), where columns 0 and 1 are the patch's 1-based row and column in its grid
    (they index position embeddings, so they must be small non-negative integers)."""
    import math

    import torch

    feats = int(first_attr(ctx.config, ("patch_embed_hidden_size",), VISION_SUBS, 768))
    n = 16
    side = math.isqrt(n)
    idx = torch.arange(n)
    rows = (idx // side + 1).float().expand(ctx.batch, n)
    cols = (idx % side + 1).float().expand(ctx.batch, n)
    pixels = torch.randn(ctx.batch, n, feats, generator=ctx.gen)
    return torch.cat([rows[..., None], cols[..., None], pixels], dim=-1)


RULES["flattened_patches"] = _flattened_patches
