"""Inputs for a tiny model, by modality and forward signature.

Generic rules cover most families (text, encoder-decoder, vision, audio features and
raw values); a registry entry's `inputs` recipe adds or replaces tensors as data:

    inputs:
      drop: [attention_mask]
      tensors:
        pixel_values: {shape: [B, config.vision_config.num_channels, 32, 32]}
        input_features: {shape: [B, config.num_mel_bins, "2 * config.max_source_positions"]}
        image_grid_thw: {value: [[1, 4, 4]], repeat_batch: true, dtype: long}

Shape entries are ints, `B` (batch), `S` (sequence length), or arithmetic over
`config.<path>` attributes. Batch is >= 2 so that shapes do not specialise on 0/1.
"""

from __future__ import annotations

import ast
import inspect
import operator
from typing import Any

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv, ast.Div: operator.floordiv, ast.Mod: operator.mod}


def _attr(config: Any, path: str) -> Any:
    obj = config
    for part in path.split("."):
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    return obj


def eval_dim(expr: Any, *, config: Any, batch: int, seq_len: int) -> int:
    """Evaluate one shape entry: an int, B, S, config.x.y, or + - * // % of those."""
    if isinstance(expr, int):
        return expr
    env = {"B": batch, "S": seq_len}

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.Name) and node.id in env:
            return env[node.id]
        if isinstance(node, (ast.Attribute, ast.Name)):
            path = ast.unparse(node)
            if path.startswith("config."):
                return int(_attr(config, path[len("config."):]))
        raise ValueError(f"unsupported shape expression {expr!r}")

    return ev(ast.parse(str(expr), mode="eval").body)


def _text_config(config: Any) -> Any:
    get = getattr(config, "get_text_config", None)
    try:
        return get(decoder=True) if get else config
    except TypeError:
        return get()


def _special_ids(config: Any) -> set[int]:
    from .shrink import TOKEN_ID_KEYS

    ids: set[int] = set()
    for c in (config, _text_config(config)):
        for k in TOKEN_ID_KEYS:
            v = getattr(c, k, None)
            for x in v if isinstance(v, (list, tuple)) else [v]:
                if isinstance(x, int) and not isinstance(x, bool) and x >= 0:
                    ids.add(x)
    return ids


def _token_ids(config: Any, batch: int, seq_len: int, gen: Any) -> Any:
    import torch

    vocab = getattr(_text_config(config), "vocab_size", None) or getattr(config, "vocab_size", None) or 100
    special = _special_ids(config)
    # Ordinary tokens only: special ids (image/audio placeholders) trigger modality merging
    # that needs matching pixel/audio inputs, which a recipe adds explicitly.
    ids = torch.randint(0, vocab, (batch, seq_len), generator=gen)
    safe = next((i for i in range(3, vocab) if i not in special), 0)
    for s in special:
        ids[ids == s] = safe
    return ids


def _vision_cfg(config: Any) -> Any:
    return getattr(config, "vision_config", None) or config


def _image_hw(config: Any) -> tuple[int, int]:
    vc = _vision_cfg(config)
    size = getattr(vc, "image_size", None) or getattr(config, "image_size", None) or 32
    if isinstance(size, dict):
        size = size.get("height", 32), size.get("width", 32)
    if isinstance(size, (list, tuple)):
        return int(size[0]), int(size[-1])
    return int(size), int(size)


def default_inputs(model: Any, config: Any, modality: str, *, batch: int, seq_len: int, gen: Any) -> dict[str, Any]:
    import torch

    params = set(inspect.signature(model.forward).parameters)
    main = getattr(model, "main_input_name", "input_ids")
    out: dict[str, Any] = {}

    if main == "pixel_values" or (modality == "vision" and "pixel_values" in params and "input_ids" not in params):
        ch = getattr(_vision_cfg(config), "num_channels", None) or getattr(config, "num_channels", 3) or 3
        h, w = _image_hw(config)
        out["pixel_values"] = torch.randn(batch, ch, h, w, generator=gen)
    elif main == "input_features":
        mels = getattr(config, "num_mel_bins", None) or getattr(config, "feature_size", None) or 80
        src = getattr(config, "max_source_positions", None)
        frames = 2 * src if src else max(seq_len * 4, 64)
        out["input_features"] = torch.randn(batch, mels, frames, generator=gen)
    elif main == "input_values":
        out["input_values"] = torch.randn(batch, 4000, generator=gen)
    elif "input_ids" in params:
        out["input_ids"] = _token_ids(config, batch, seq_len, gen)
    elif main in params:
        raise ValueError(f"no generic input for {type(model).__name__}.{main}; add an `inputs` recipe to the registry")

    if "input_ids" in out and "attention_mask" in params:
        out["attention_mask"] = torch.ones(batch, seq_len, dtype=torch.long)
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in params:
        out["decoder_input_ids"] = _token_ids(config, batch, max(seq_len // 2, 2), gen)
    return out


def _dtype(name: str | None, default: Any) -> Any:
    import torch

    return {"long": torch.long, "int": torch.int32, "float": torch.float32, "bool": torch.bool}.get(name or "", default)


def recipe_tensor(spec: dict[str, Any], *, config: Any, batch: int, seq_len: int, gen: Any) -> Any:
    import torch

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
    high = spec.get("high", "config.vocab_size")
    high = eval_dim(high, config=config, batch=batch, seq_len=seq_len)
    return torch.randint(int(spec.get("low", 0)), high, shape, generator=gen, dtype=dtype)


def build_inputs(model: Any, config: Any, modality: str, recipe: dict[str, Any] | None, *,
                 batch: int = 2, seq_len: int = 32, seed: int = 0) -> dict[str, Any]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    recipe = recipe or {}
    out = {} if recipe.get("replace") else default_inputs(model, config, modality, batch=batch, seq_len=seq_len, gen=gen)
    for name in recipe.get("drop", []):
        out.pop(name, None)
    for name, spec in (recipe.get("tensors") or {}).items():
        out[name] = recipe_tensor(spec, config=config, batch=batch, seq_len=seq_len, gen=gen)
    for name, value in (recipe.get("kwargs") or {}).items():
        out[name] = value
    return out
