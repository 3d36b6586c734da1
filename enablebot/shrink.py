"""Shrink a full-size transformers config to a tiny one, keeping its constraints.

Generic rules over attribute names (layers, widths, heads, experts, vocab, images,
audio) applied recursively to nested sub-configs; per-architecture exceptions are
data: the registry entry's `config` overrides are applied afterwards (dotted keys
reach sub-configs, e.g. `text_config.num_hidden_layers: 1`).

Sizes: `tiny` for CPU correctness sweeps, `small` for realistic speed runs
(hidden 512, 4 layers), as PyTorch's benchmark harness does with random weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from transformers import PretrainedConfig


@dataclass(frozen=True)
class SizeProfile:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    experts: int
    vocab: int
    image: int
    patch_max: int
    max_pos: int


PROFILES = {
    "tiny": SizeProfile(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, experts=4, vocab=1024,
                        image=32, patch_max=8, max_pos=512),
    "small": SizeProfile(layers=4, hidden=512, heads=8, kv_heads=4, ffn=1536, experts=8, vocab=8192,
                         image=224, patch_max=16, max_pos=2048),
}

LAYER_KEYS = {
    "num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
    "num_encoder_layers", "num_decoder_layers", "text_layers", "vision_layers", "depth",
    "num_blocks", "num_transformer_layers", "num_decoder_blocks", "num_encoder_blocks",
}
HIDDEN_KEYS = {"hidden_size", "d_model", "n_embd", "embed_dim", "dim", "model_dim", "n_embed", "emb_dim"}
HEAD_KEYS = {
    "num_attention_heads", "n_head", "n_heads", "encoder_attention_heads",
    "decoder_attention_heads", "num_heads", "attention_heads",
}
KV_HEAD_KEYS = {"num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num"}
FFN_KEYS = {
    "intermediate_size", "ffn_dim", "d_ff", "n_inner", "encoder_ffn_dim", "decoder_ffn_dim",
    "ffn_hidden_size", "mlp_dim", "hidden_dim", "moe_intermediate_size", "shared_expert_intermediate_size",
    "expert_intermediate_size",
}
EXPERT_KEYS = {"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts"}
TOPK_KEYS = {"num_experts_per_tok", "num_selected_experts", "moe_topk", "top_k", "router_top_k", "expert_capacity"}
HEAD_DIM_KEYS = {"head_dim", "d_kv", "attention_head_dim", "kv_channels"}
VOCAB_KEYS = {"vocab_size"}
MAXPOS_KEYS = {"max_position_embeddings", "n_positions", "max_seq_len", "max_sequence_length", "seq_length"}
IMAGE_KEYS = {"image_size"}
PATCH_KEYS = {"patch_size"}
TOKEN_ID_KEYS = (
    "pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
    "cls_token_id", "mask_token_id", "unk_token_id", "image_token_id", "image_token_index",
    "video_token_id", "video_token_index", "audio_token_id", "audio_token_index",
    "vision_start_token_id", "vision_end_token_id", "boi_token_id", "eoi_token_id",
    "boa_token_id", "eoa_token_id", "image_start_token_id", "image_end_token_id",
)
# Dropout-like probabilities are zeroed so that eager runs are deterministic in train mode.
DROPOUT_SUFFIXES = ("dropout", "dropout_prob", "dropout_rate", "drop_rate", "drop_path_rate", "layerdrop")


def _ints(v: Any) -> list[int] | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return [v]
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return list(v)
    return None


def _shrink_list(v: list[int], cap: int) -> list[int]:
    """Per-stage lists (hierarchical vision models): fewer stages would break the head, so
    cap each value and keep the length."""
    return [min(x, cap) for x in v]


def _token_ids(cfg: PretrainedConfig) -> list[int]:
    ids: list[int] = []
    for k in TOKEN_ID_KEYS:
        v = getattr(cfg, k, None)
        for x in _ints(v) or []:
            if x >= 0:
                ids.append(x)
    return ids


def _sub_configs(cfg: PretrainedConfig) -> list[tuple[str, PretrainedConfig]]:
    out = []
    for k, v in vars(cfg).items():
        if isinstance(v, PretrainedConfig):
            out.append((k, v))
    return out


def _set(cfg: PretrainedConfig, key: str, value: Any, changes: dict[str, Any], prefix: str) -> None:
    try:
        setattr(cfg, key, value)
    except Exception:  # read-only properties on some configs: leave them as they are
        return
    changes[prefix + key] = value


def shrink_config(cfg: PretrainedConfig, size: str = "tiny") -> dict[str, Any]:
    """Shrink `cfg` in place; returns the changes made (dotted key -> new value)."""
    prof = PROFILES[size]
    changes: dict[str, Any] = {}
    _shrink(cfg, prof, changes, prefix="")
    return changes


def _shrink(cfg: PretrainedConfig, p: SizeProfile, changes: dict[str, Any], prefix: str) -> None:
    attrs = dict(vars(cfg))

    def cap(key: str, target: int) -> int | None:
        v = attrs.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            return None
        new = min(v, target)
        if new != v:
            _set(cfg, key, new, changes, prefix)
        return new

    # Heads first: hidden sizes are then made divisible by them.
    heads = None
    for k in HEAD_KEYS:
        lst = _ints(attrs.get(k))
        if lst and len(lst) > 1:
            _set(cfg, k, _shrink_list(lst, p.heads), changes, prefix)
        elif lst:
            heads = cap(k, p.heads) or heads
    for k in KV_HEAD_KEYS:
        v = attrs.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            h = heads or p.heads
            kv = min(v, p.kv_heads)
            while h % kv:
                kv -= 1
            _set(cfg, k, max(kv, 1), changes, prefix)

    head_dim = None
    for k in HEAD_DIM_KEYS:
        v = attrs.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            head_dim = min(v, max(p.hidden // p.heads, 8))
            _set(cfg, k, head_dim, changes, prefix)

    for k in HIDDEN_KEYS:
        lst = _ints(attrs.get(k))
        if lst and len(lst) > 1:
            _set(cfg, k, _shrink_list(lst, p.hidden), changes, prefix)
        elif lst and lst[0] > p.hidden:
            h = p.hidden
            if heads:
                h = max(h - h % heads, heads)
            _set(cfg, k, h, changes, prefix)

    for k in LAYER_KEYS:
        lst = _ints(attrs.get(k))
        if lst and len(lst) > 1:
            _set(cfg, k, [min(x, p.layers) for x in lst], changes, prefix)
        elif lst:
            cap(k, p.layers)
    for k in FFN_KEYS:
        lst = _ints(attrs.get(k))
        if lst and len(lst) == 1:
            cap(k, p.ffn)

    experts = None
    for k in EXPERT_KEYS:
        experts = cap(k, p.experts) or experts
    if experts:
        for k in TOPK_KEYS:
            v = attrs.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v > experts:
                _set(cfg, k, max(1, min(2, experts)), changes, prefix)

    # Vocab: small, but above every special token id the config refers to.
    for k in VOCAB_KEYS:
        v = attrs.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > p.vocab:
            need = max(_token_ids(cfg) + [0]) + 1
            _set(cfg, k, max(p.vocab, need), changes, prefix)

    for k in IMAGE_KEYS:
        lst = _ints(attrs.get(k))
        if lst and lst[0] > p.image:
            patch = _ints(attrs.get("patch_size")) or [1]
            unit = math.lcm(*patch) if patch else 1
            new = max(p.image - p.image % unit, unit * 2)
            _set(cfg, k, new if len(lst) == 1 else [new] * len(lst), changes, prefix)
    for k in MAXPOS_KEYS:
        v = attrs.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > p.max_pos:
            _set(cfg, k, p.max_pos, changes, prefix)

    for k, v in attrs.items():
        if isinstance(v, float) and not isinstance(v, bool) and k.endswith(DROPOUT_SUFFIXES) and v > 0:
            _set(cfg, k, 0.0, changes, prefix)

    for name, sub in _sub_configs(cfg):
        _shrink(sub, p, changes, prefix=f"{prefix}{name}.")


def apply_overrides(cfg: PretrainedConfig, overrides: dict[str, Any]) -> dict[str, Any]:
    """Apply registry `config` overrides; dotted keys walk into sub-configs."""
    applied: dict[str, Any] = {}
    for key, value in (overrides or {}).items():
        target: Any = cfg
        parts = key.split(".")
        for part in parts[:-1]:
            target = getattr(target, part)
            if isinstance(target, dict):
                raise ValueError(f"override {key!r}: {part} is a dict, not a sub-config")
        setattr(target, parts[-1], value)
        applied[key] = value
    return applied
