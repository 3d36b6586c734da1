"""Shrink a full-size transformers config to a tiny one, keeping its constraints.

The config is turned into a dict, shrunk by generic rules over attribute names
(layers, widths, heads, head dims, experts, vocab, images, state sizes) applied
recursively to nested sub-configs, and then *re-constructed* through its config
class with only the changed and non-default values as arguments: 5.x configs are
strict dataclasses whose `__post_init__` derives fields (`qk_head_dim`, `layer_types`,
`head_dim`...) and validates cross-field constraints, so re-construction keeps derived
values consistent with the shrunk ones instead of leaving stale full-size values.

Rules that keep constraints rather than just capping numbers:
- heads are powers of two, so that every shrunk width stays divisible by them;
- relations the full config satisfies are kept: `heads * head_dim == hidden`
  (or `== expand * hidden` for state-space mixers);
- per-layer lists (`layer_types`, ...) keep one layer of each distinct kind, and
  layer-index lists are remapped, so hybrid models keep every block type;
- expert groups divide experts, top-k fits the groups;
- multimodal RoPE sections are rescaled to the shrunk rotary dimension.

Per-architecture exceptions are data: the registry entry's `config` overrides are
applied to the shrunk dict before re-construction (dotted keys reach sub-configs, e.g.
`text_config.num_hidden_layers: 4`).

Sizes: `tiny` for CPU correctness sweeps, `small` for realistic speed runs
(hidden 512, 4 layers), as PyTorch's benchmark harness does with random weights.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any

from transformers import PretrainedConfig

from .timm_backbones import shrink_timm


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
    head_dim: int
    lora_rank: int
    state: int
    queries: int
    source_positions: int
    sliding_window: int


PROFILES = {
    "tiny": SizeProfile(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, experts=4, vocab=1024,
                        image=32, patch_max=8, max_pos=512, head_dim=16, lora_rank=32, state=16, queries=16,
                        source_positions=64, sliding_window=16),
    "small": SizeProfile(layers=4, hidden=512, heads=8, kv_heads=4, ffn=1536, experts=8, vocab=8192,
                         image=224, patch_max=16, max_pos=2048, head_dim=64, lora_rank=128, state=64, queries=100,
                         source_positions=1500, sliding_window=256),
}

LAYER_KEYS = (
    "num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
    "num_encoder_layers", "num_decoder_layers", "text_layers", "vision_layers", "depth",
    "num_blocks", "num_transformer_layers", "num_decoder_blocks", "num_encoder_blocks",
    "decoder_num_layers", "decoder_num_hidden_layers", "depths", "num_self_attends_per_block",
)
# Per-stage repeat counts of hierarchical models (conv nets, detection backbones): lists
# such as `depths`, `stage_num_blocks`, `stage_numb_of_layers` are capped entry by entry.
_STAGE_COUNT_RE = re.compile(r"(depths|num_blocks|num_layers|numb?_of_layers)$")
# A per-layer kind list (`layer_types`, `layers_block_type`) gives the layer count of configs
# that derive it from the list's length.
_KIND_LIST_RE = re.compile(r"^layers?_(block_)?types?$")
HIDDEN_KEYS = {"hidden_size", "d_model", "n_embd", "embed_dim", "dim", "model_dim", "n_embed", "emb_dim", "d_latents"}
HEAD_KEYS = {
    "num_attention_heads", "n_head", "n_heads", "encoder_attention_heads",
    "decoder_attention_heads", "num_heads", "attention_heads",
}
KV_HEAD_KEYS = {"num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num",
                "num_key_value_attention_heads"}  # the last: Sapiens2's GQA layers
# Feed-forward widths, also with prefixes (`t2u_encoder_ffn_dim`, `projection_intermediate_size`).
_FFN_RE = re.compile(r"(intermediate_size|_ffn_dim)$")
FFN_KEYS = {
    "intermediate_size", "ffn_dim", "d_ff", "n_inner", "encoder_ffn_dim", "decoder_ffn_dim",
    "ffn_hidden_size", "mlp_dim", "hidden_dim", "moe_intermediate_size", "shared_expert_intermediate_size",
    "expert_intermediate_size", "moe_shared_expert_intermediate_size", "shared_experts_intermediate_size",
}
EXPERT_KEYS = {"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts"}
TOPK_KEYS = {"num_experts_per_tok", "num_selected_experts", "moe_topk", "top_k", "router_top_k",
             "moe_k", "moe_top_k", "top_k_experts", "num_experts_per_token", "expert_capacity"}
EXPERT_GROUP_KEYS = {"n_group", "num_expert_group"}
TOPK_GROUP_KEYS = {"topk_group"}
# Head widths: `head_dim`, `d_kv`, and every `*_head_dim` (MLA's qk_rope/qk_nope/v, indexers,
# linear-attention key/value heads, state-space heads).
_HEAD_DIM_RE = re.compile(r"^(head_dim|d_kv|d_head|attention_head_dim|kv_channels|rotary_dim)$|_head_dim$|_d_head$")
_DERIVED_HEAD_DIM = {"qk_head_dim"}  # = qk_nope_head_dim + qk_rope_head_dim, recomputed
LORA_RE = re.compile(r"_lora_rank$")
STATE_KEYS = {"mamba_d_state", "state_size", "ssm_state_size", "d_state"}
CHUNK_KEYS = {"mamba_chunk_size", "chunk_size"}
SSM_HEAD_PAIRS = (("mamba_n_heads", "mamba_d_head"), ("mamba_num_heads", "mamba_head_dim"),
                  ("num_heads", "head_dim"))
SSM_GROUP_KEYS = {"n_groups", "mamba_n_groups", "mamba_ngroups"}
EXPAND_KEYS = ("mamba_expand", "expand")
# The last N layers reuse the KV caches of earlier layers (Gemma 3n/4).
KV_SHARED_KEY = "num_kv_shared_layers"
# Counts of leading dense layers before MoE ones: keep one so that MoE layers exist.
LEADING_DENSE_KEYS = {"first_k_dense_replace", "num_dense_layers"}
_SUBSET_COUNT_RE = re.compile(r"^num_sparse_\w*layers$")
OUT_INDEX_KEYS = ("out_indices", "backbone_out_indices")
# Detection queries: top-k over image tokens, so no more than a tiny image has.
QUERY_KEYS = {"num_queries"}
CONV_BASE_KEYS = {"base_channels"}
VOCAB_KEYS = {"vocab_size"}
# Prefixed vocabularies (`t2u_vocab_size`, `char_vocab_size`) of sub-models.
_VOCAB_RE = re.compile(r"_vocab_size$|^vocab_size_")  # t2u_vocab_size, vocab_size_per_layer_input
MAXPOS_KEYS = {"max_position_embeddings", "n_positions", "max_seq_len", "max_sequence_length", "seq_length"}
# Audio encoders: frames after the convolutional front end; inputs are 2x this long.
SOURCE_POS_KEYS = {"max_source_positions"}
IMAGE_KEYS = {"image_size"}
TOKEN_ID_KEYS = (
    "pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
    "cls_token_id", "mask_token_id", "unk_token_id", "image_token_id", "image_token_index",
    "video_token_id", "video_token_index", "audio_token_id", "audio_token_index",
    "vision_start_token_id", "vision_end_token_id", "boi_token_id", "eoi_token_id",
    "boa_token_id", "eoa_token_id", "image_start_token_id", "image_end_token_id",
)
# Dropout-like probabilities are zeroed so that eager runs are deterministic in train mode.
DROPOUT_SUFFIXES = ("dropout", "dropout_prob", "dropout_rate", "drop_rate", "drop_path_rate", "layerdrop",
                    "pdrop")  # gpt2, gptj, ctrl, codegen: attn_pdrop, resid_pdrop, embd_pdrop
_NOT_KWARGS = {"transformers_version", "_name_or_path", "model_type", "architectures"}
# Per-layer lists keep at most this many distinct kinds of layer.
MAX_LAYER_KINDS = 6


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _ints(v: Any) -> list[int] | None:
    if _int(v):
        return [v]
    if isinstance(v, (list, tuple)) and v and all(_int(x) for x in v):
        return list(v)
    return None


def _pow2_floor(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def _divisor_at_most(n: int, cap: int) -> int:
    d = max(min(cap, n), 1)
    while n % d:
        d -= 1
    return d


def _token_ids(d: dict[str, Any]) -> list[int]:
    ids: list[int] = []
    for k in TOKEN_ID_KEYS:
        for x in _ints(d.get(k)) or []:
            if x >= 0:
                ids.append(x)
    return ids


class _Level:
    """One config level (a dict) being shrunk; records changes with dotted keys.

    `derived` names attributes the config class computes itself (e.g. swin's
    `hidden_size` from `embed_dim`): they are never set, re-construction recomputes them."""

    def __init__(self, d: dict[str, Any], changes: dict[str, Any], prefix: str, derived: frozenset[str]):
        self.d, self.orig, self.changes, self.prefix, self.derived = d, dict(d), changes, prefix, derived
        self.token_ids: tuple[int, ...] = ()

    def set(self, key: str, value: Any) -> None:
        if key in self.derived:
            return
        if self.d.get(key) != value:
            self.d[key] = value
            self.changes[self.prefix + key] = value

    def cap(self, key: str, target: int) -> int | None:
        v = self.d.get(key)
        if not _int(v) or v <= 0:
            return None
        self.set(key, min(v, target))
        return self.d[key]

    def ints(self, key: str) -> list[int] | None:
        return _ints(self.d.get(key))


def shrink_dict(d: dict[str, Any], size: str = "tiny", changes: dict[str, Any] | None = None,
                prefix: str = "", cfg: PretrainedConfig | None = None, token_ids: tuple[int, ...] = ()) -> dict[str, Any]:
    """Shrink a config dict (as `to_dict()` gives) in place; returns the changes (dotted keys).

    With `cfg` (the config object `d` came from), attributes its class derives are left
    alone and implicit defaults the modeling code relies on are made explicit first."""
    changes = {} if changes is None else changes
    p = PROFILES[size]
    if cfg is not None:
        _explicit_defaults(cfg, d)
    lv = _Level(d, changes, prefix, _derived(type(cfg)) if cfg is not None else frozenset())
    _remap_token_ids(lv, p)
    # Special tokens of enclosing configs (a VLM's image token) index this level's vocab too.
    lv.token_ids = tuple(token_ids) + tuple(_token_ids(d))
    _heads(lv, p)
    _widths(lv, p)
    _layers(lv, p)
    _per_layer_heads(lv)
    _experts(lv, p)
    _state_space(lv, p)
    _rope(lv)
    _misc(lv, p)
    shrink_timm(d, changes, prefix, image=p.image)
    subs = [(k, v, dict(v)) for k, v in d.items() if isinstance(v, dict) and "model_type" in v]
    for k, v, _ in subs:
        sub = getattr(cfg, k, None) if cfg is not None else None
        shrink_dict(v, size, changes, prefix=f"{prefix}{k}.",
                    cfg=sub if isinstance(sub, PretrainedConfig) else None, token_ids=lv.token_ids)
    _follow_sub_widths(lv, subs, p)
    _follow_text_width(lv, subs, p)
    _follow_feature_layers(lv, subs)
    _follow_own_width(lv, p)
    _follow_sub_image(lv, subs)
    return changes


def _follow_sub_image(lv: _Level, subs: list[tuple[str, dict, dict]]) -> None:
    """Tile grids in pixels (`image_grid_pinpoints`, LLaVA-NeXT anyres) scale with the vision
    tower's image size: unscaled, a tiny image would be cut into hundreds of tiles."""
    pins = lv.d.get("image_grid_pinpoints")
    if not (isinstance(pins, list) and pins and all(_ints(x) for x in pins)):
        return
    for _, new, old in subs:
        a, b = _ints(old.get("image_size")), _ints(new.get("image_size"))
        if a and b and a[0] != b[0]:
            lv.set("image_grid_pinpoints", [[max(x * b[0] // a[0], 1) for x in pin] for pin in pins])
            return


def _follow_own_width(lv: _Level, p: SizeProfile) -> None:
    """Widths and conv groups equal to this level's hidden size follow it when it shrinks
    (a codec's `upsample_groups`, a `projection_dim` tied to the hidden size)."""
    hk = next((k for k in HIDDEN_KEYS if _int(lv.orig.get(k)) and lv.orig[k] != lv.d.get(k)), None)
    if hk is None:
        return
    old, new = lv.orig[hk], lv.d[hk]
    for k, v in list(lv.d.items()):
        if (lv.prefix + k in lv.changes or k in HIDDEN_KEYS or _NOT_WIDTH.search(k)
                or not (_WIDTH_NAME.search(k) or k.endswith("groups"))):
            continue
        if _int(v) and v == old:
            lv.set(k, new)
        elif isinstance(v, (list, tuple)) and v and all(_int(x) and x == old for x in v):
            lv.set(k, [new] * len(v))  # e.g. a decoder's per-level input channels


_WIDTH_NAME = re.compile(r"hidden|_dim$|_size$|channels")
_NOT_WIDTH = re.compile(r"vocab|image|patch|position|window|kernel|stride|batch|chunk|pool|grid|sampling")


def _follow_sub_widths(lv: _Level, subs: list[tuple[str, dict, dict]], p: SizeProfile) -> None:
    """Parent widths that equal a sub-config's hidden size (a projector's input, a neck's
    `reassemble_hidden_size`) follow that sub-config's shrunk hidden size."""
    follow: dict[int, int] = {}
    for _, new, old in subs:
        for hk in HIDDEN_KEYS:
            if _int(old.get(hk)) and _int(new.get(hk)) and old[hk] != new[hk]:
                follow.setdefault(old[hk], new[hk])
    for k, v in list(lv.d.items()):
        if (_int(v) and v in follow and v > p.hidden and lv.prefix + k not in lv.changes
                and _WIDTH_NAME.search(k) and not _NOT_WIDTH.search(k)):
            lv.set(k, follow[v])


# The width a tower hands the text model (a Qwen2-VL-lineage merger's output): it must be the
# text model's hidden size for the tower's features to replace placeholder embeddings.
# `text_hidden_size` names it so in Inkling-2's vision config, whose composite config requires
# the two equal (transformers 5.25 configuration_inkling2.py:193) but does not set it itself.
_TOWER_OUT_KEYS = ("out_hidden_size", "text_hidden_size")


def _follow_text_width(lv: _Level, subs: list[tuple[str, dict, dict]], p: SizeProfile) -> None:
    """A tower's output width (`vision_config.out_hidden_size`, which a merger projects to and
    the text model reads as its own width) becomes the text model's shrunk hidden size where the
    tower's rules left it at full size. Released checkpoints set the two equal; some default
    configs do not (GLM-OCR: text 1024, merger 1536), and releases differ on which one the
    merger reads (GLM-OCR's on transformers 5.17 reads `out_hidden_size`)."""
    text = next(((new, old) for k, new, old in subs if k == "text_config"), None)
    pairs = [text] if text else [(lv.d, lv.orig)]
    new_h = old_h = None
    for new, old in pairs:
        hk = next((k for k in HIDDEN_KEYS if _int(old.get(k)) and _int(new.get(k))), None)
        if hk:
            new_h, old_h = new[hk], old[hk]
    if not new_h or new_h == old_h:
        return
    for k, new, _ in subs:
        if k == "text_config":
            continue
        sub = _Level(new, lv.changes, f"{lv.prefix}{k}.", frozenset())
        for key in _TOWER_OUT_KEYS:
            v = new.get(key)
            if _int(v) and v > p.hidden and sub.prefix + key not in lv.changes:
                sub.set(key, new_h)


_FEATURE_LAYER_RE = re.compile(r"^(vision_)?feature_layers?$")


def _follow_feature_layers(lv: _Level, subs: list[tuple[str, dict, dict]]) -> None:
    """Indices into the vision tower's hidden states (`vision_feature_layer(s)`: -2, or VipLlava's
    [-2, -5, -8, -11, 6]) stay inside the shrunk tower: n layers give n + 1 hidden states, so
    indices are clamped to [-(n + 1), n]. A list keeps its length (the projector's input width
    is len(list) x hidden), repeating layers where the tower is too shallow."""
    vision = next((new for k, new, _ in subs if k == "vision_config"), None)
    n = next((vision[k] for k in LAYER_KEYS if vision and _int(vision.get(k)) and vision[k] > 0), None)
    if n is None:
        return
    for k, v in list(lv.d.items()):
        if not _FEATURE_LAYER_RE.match(k):
            continue
        if _int(v):
            lv.set(k, max(-(n + 1), min(v, n)))
        elif isinstance(v, list) and v and all(_int(x) for x in v):
            lv.set(k, [max(-(n + 1), min(x, n)) for x in v])


def _derived(cls: type) -> frozenset[str]:
    """Attributes a default instance has that are not constructor fields: computed in
    `__post_init__` from other fields."""
    fields = _field_names(cls)
    defaults = _defaults(cls)
    if fields is None or defaults is None:
        return frozenset()
    # A field stored under its `attribute_map` name (Inkling's vision `num_hidden_layers` is kept
    # as `n_layers`) is a constructor field, not derived.
    aliased = {v for k, v in (getattr(cls, "attribute_map", None) or {}).items() if k in fields}
    return frozenset(k for k in defaults
                     if k not in fields and f"_{k}" not in fields and k not in _NOT_KWARGS and k not in aliased)


# Multimodal RoPE: configs that exempt `mrope_section` from RoPE validation read it with a
# default in the modeling code ([16, 24, 24] in the Qwen2-VL lineage) when it is absent.
_MROPE_DEFAULT = [16, 24, 24]


def _mrope_exempt(cls: type) -> bool:
    """Whether the config class exempts `mrope_section` from RoPE validation: a class attribute from
    transformers 5.x late releases on, a keyword its __init__ passes up in the early ones (5.0-5.5)."""
    if "mrope_section" in (getattr(cls, "ignore_keys_at_rope_validation", None) or ()):
        return True
    import inspect

    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return False
    return bool(re.search(r"ignore_keys_at_rope_validation\s*=\s*\{[^}]*mrope_section", src))


_CODE_MROPE = re.compile(r"rope_parameters\.get\(\s*[\"']mrope_section[\"']\s*,\s*\[([\d, ]+)\]\s*\)")


def _code_mrope_default(cls: type) -> list[int]:
    """The `mrope_section` the config's modeling code falls back to (`rope_parameters.get(
    "mrope_section", [22, 22, 20])`: Ernie 4.5 VL's), else the Qwen2-VL lineage's."""
    import inspect
    from pathlib import Path

    try:
        path = Path(inspect.getfile(cls))
        src = (path.parent / path.name.replace("configuration_", "modeling_", 1)).read_text()
    except (OSError, TypeError):
        return list(_MROPE_DEFAULT)
    m = _CODE_MROPE.search(src)
    return [int(x) for x in m.group(1).replace(" ", "").split(",") if x] if m else list(_MROPE_DEFAULT)


def _explicit_defaults(cfg: PretrainedConfig, d: dict[str, Any]) -> None:
    ignored = {"mrope_section"} if _mrope_exempt(type(cfg)) else ()
    rope = d.get("rope_parameters")
    if "mrope_section" in ignored and isinstance(rope, dict) and "mrope_section" not in rope \
            and all(isinstance(v, (str, int, float, list, type(None))) for v in rope.values()):
        rope["mrope_section"] = _code_mrope_default(type(cfg))


def _heads(lv: _Level, p: SizeProfile) -> None:
    # Powers of two: any shrunk width (64, 128...) stays divisible by them.
    for k in HEAD_KEYS:
        lst = lv.ints(k)
        if lst and len(lst) > 1:
            lv.set(k, [_pow2_floor(min(x, p.heads)) for x in lst])
        elif lst and lst[0] > 0:
            lv.set(k, _pow2_floor(min(lst[0], p.heads)))
    heads = next((lv.d[k] for k in HEAD_KEYS if _int(lv.d.get(k)) and lv.d[k] > 0), None)
    for k in KV_HEAD_KEYS:
        v = lv.d.get(k)
        if v is None and k in lv.d and heads and k != "multi_query_group_num":
            lv.set(k, heads)  # None means one kv head per head; some modeling code divides by it
        elif _int(v) and v > 0:
            full_mha = any(lv.orig.get(h) == v for h in HEAD_KEYS)  # kv heads == heads stays so
            lv.set(k, heads if full_mha and heads else _divisor_at_most(heads or p.heads, min(v, p.kv_heads)))


def _widths(lv: _Level, p: SizeProfile) -> None:
    d, orig = lv.d, lv.orig
    for k in HIDDEN_KEYS:
        lst = lv.ints(k)
        if lst and len(lst) > 1:
            lv.set(k, [min(x, p.hidden) for x in lst])
        elif lst and lst[0] > p.hidden:
            lv.set(k, p.hidden)
    for k in list(d):
        if k in _DERIVED_HEAD_DIM or not _HEAD_DIM_RE.search(k):
            continue
        if _int(d[k]) and d[k] > 0:
            lv.cap(k, p.head_dim)
    # Keep `heads * head_dim == hidden` when the full config has it (most attention blocks).
    hidden_k = next((k for k in HIDDEN_KEYS if _int(d.get(k))), None)
    heads_k = next((k for k in HEAD_KEYS if _int(d.get(k)) and d[k] > 0), None)
    if hidden_k and heads_k and "head_dim" in d:
        hd = orig.get("head_dim")
        if hd is None or (_int(hd) and hd * orig[heads_k] == orig[hidden_k]):
            lv.set("head_dim", max(d[hidden_k] // d[heads_k], 1))
    if _int(d.get("qk_nope_head_dim")) and _int(d.get("qk_rope_head_dim")) and "qk_head_dim" in d:
        lv.set("qk_head_dim", d["qk_nope_head_dim"] + d["qk_rope_head_dim"])
    for k in list(d):
        if LORA_RE.search(k):
            lv.cap(k, p.lora_rank)
    for k in [k for k in d if k in FFN_KEYS or _FFN_RE.search(k)]:
        lst = lv.ints(k)
        if lst and len(lst) == 1:
            lv.cap(k, p.ffn)
        elif lst:
            lv.set(k, [min(x, p.ffn) for x in lst])


def _layer_kinds(lv: _Level, n_layers: int, p: SizeProfile, depth: int,
                 layers: range | None = None) -> list[int]:
    """Indices of the layers to keep (among `layers`, default all): the first layer of each
    distinct kind, then more layers in order up to the profile's depth. A layer's kind is
    its value in every per-layer list plus its membership in every layer-index list."""
    layers = layers if layers is not None else range(n_layers)
    per_layer = [k for k, v in lv.d.items() if _per_layer(k, v, n_layers)]
    index_lists = [k for k, v in lv.d.items() if "layer" in k and _index_list(v, n_layers)]
    kinds: dict[tuple, int] = {}
    for i in layers:
        sig = tuple(lv.d[k][i] for k in per_layer) + tuple(i in lv.d[k] for k in index_lists)
        kinds.setdefault(sig, i)
    keep = sorted(kinds.values())[:MAX_LAYER_KINDS]
    for i in layers:
        if len(keep) >= depth:
            break
        if i not in keep:
            keep.append(i)
    return sorted(keep)


_PART_RE = re.compile(r"^(n|num)_\w+_layers$")


def _part_counts(d: dict[str, Any], main: str | None, n: int) -> list[str]:
    """Counts that split the layers into consecutive parts (Dory's `n_input_layers`,
    `n_recurrent_layers`, `n_output_layers` sum to `num_hidden_layers`): scaled with the layer
    count, so that they still add up (the defaults, 16 + 40 + 16, would leave nothing to loop)."""
    parts = [k for k, v in d.items() if k != main and k not in LAYER_KEYS and _PART_RE.match(k) and _int(v) and v > 0]
    return parts if len(parts) >= 2 and sum(d[k] for k in parts) == n else []


def _paired(kinds: list[Any]) -> int | None:
    """2 where every other entry of a per-layer kind list is one fixed kind found nowhere else
    (Dory lists each layer as an attention block and its "mlp" block; its config halves the list
    and the counts), else None."""
    if len(kinds) < 4 or len(kinds) % 2:
        return None
    for r in (0, 1):
        fixed = set(kinds[r::2])
        if len(fixed) == 1 and fixed.isdisjoint(kinds[1 - r::2]):
            return 2
    return None


def _whole_pairs(keep: list[int], n: int, step: int, parts: int) -> list[int]:
    """`keep` widened to whole pairs of entries, and to at least one pair per part count, taking
    more pairs in order (a config that halves a list must get it in pairs)."""
    blocks = sorted({i // step for i in keep})
    for b in range(n // step):
        if len(blocks) >= parts:
            break
        if b not in blocks:
            blocks.append(b)
    return sorted(i for b in blocks for i in range(b * step, b * step + step))


def _per_layer(key: str, v: Any, n_layers: int) -> bool:
    """A list with one entry per layer: kinds (strings, flags) or anything named *layer*."""
    if not isinstance(v, list) or len(v) != n_layers or key in HIDDEN_KEYS | HEAD_KEYS | FFN_KEYS:
        return False
    return all(isinstance(x, (str, bool)) for x in v) or ("layer" in key and all(isinstance(x, (int, float)) for x in v))


def _index_list(v: Any, n_layers: int) -> bool:
    lst = _ints(v) if isinstance(v, list) else None
    return bool(lst) and len(lst) < n_layers and all(0 <= x < n_layers for x in lst) and lst == sorted(set(lst))


def _layers(lv: _Level, p: SizeProfile) -> None:
    d = lv.d
    # Hierarchical vision models: per-stage lists (widths, heads, depths) keep their length
    # (fewer stages would break the heads), so a layer count equal to the stage count stays.
    stages = {len(v) for k, v in d.items() if k in HIDDEN_KEYS | HEAD_KEYS | {"depths"} and isinstance(v, list)}
    main = next((k for k in LAYER_KEYS if _int(d.get(k)) and d[k] > 0 and d[k] not in stages), None)
    kinds = next((k for k, v in d.items() if _KIND_LIST_RE.match(k) and isinstance(v, list) and v
                  and all(isinstance(x, str) for x in v)), None)
    if main is None and kinds is None:
        _stage_counts(lv, p)
        return
    n = d[main] if main is not None else len(d[kinds])
    # A backbone with k feature taps keeps at least k layers, so that taps stay distinct.
    taps = max((len(lv.ints(k) or []) for k in OUT_INDEX_KEYS if max(lv.ints(k) or [0]) > p.layers), default=0)
    depth = max(p.layers, min(taps, n))
    shared = d.get(KV_SHARED_KEY)
    if n > depth and _int(shared) and 0 < shared < n:
        # KV sharing: the last `shared` layers reuse the caches of earlier layers of their kind,
        # so each kind is kept among both the cache producers and the consumers.
        keep = _layer_kinds(lv, n, p, depth, range(n - shared)) + _layer_kinds(lv, n, p, depth, range(n - shared, n))
    else:
        keep = _layer_kinds(lv, n, p, depth) if n > depth else list(range(n))
    parts = _part_counts(d, main, n)
    step = (_paired(d[kinds]) if kinds is not None else None) or 1
    if step > 1 and len(keep) < n:
        keep = _whole_pairs(keep, n, step, len(parts))
    if len(keep) < n and _int(shared) and shared > 0:
        lv.set(KV_SHARED_KEY, sum(1 for i in keep if i >= n - shared))  # all shared stays all shared
    if len(keep) < n:
        for k, v in list(d.items()):
            if _per_layer(k, v, n):
                lv.set(k, [v[i] for i in keep])
            elif "layer" in k and _index_list(v, n):
                lv.set(k, [j for j, i in enumerate(keep) if i in v])
    for k in LAYER_KEYS:
        lst = lv.ints(k)
        if lst and len(lst) > 1:
            lv.set(k, [min(x, p.layers) for x in lst])
        elif lst and lst[0] > 0 and lst[0] not in stages:
            lv.set(k, len(keep) if lst[0] == n else min(lst[0], p.layers))
    if parts and len(keep) < n and len(keep) // step >= len(parts):  # every part keeps a layer
        for k, v in zip(parts, scale_sections([d[k] // step for k in parts], len(keep) // step)):
            lv.set(k, v * step)
    _stage_counts(lv, p)
    # Backbone feature taps index hidden states (0 = embeddings .. n = last layer): spread
    # them over the kept layers, keeping their number (necks have one input per tap).
    new_n = len(keep)
    for k in OUT_INDEX_KEYS:
        lst = lv.ints(k)
        if lst and len(keep) < n and max(lst) > new_n:
            # Backbones index stage names (0 = stem, so layers are 1-based); plain index
            # lists (DPT's `backbone_out_indices`) count layers from 0.
            one_based = max(lst) >= n or "stage_names" in d or "out_features" in d
            top = new_n if one_based else new_n - 1
            lv.set(k, list(range(max(top - len(lst) + 1, 1 if one_based else 0), top + 1)))
            if isinstance(d.get("out_features"), list):
                lv.set("out_features", None)  # re-derived from the indices
            if isinstance(d.get("stage_names"), list):
                lv.set("stage_names", None)
    # Counts of special layers among them (switch_transformers' sparse layers): keep a mix
    # of both kinds, as the full model has.
    for k, v in list(d.items()):
        if _SUBSET_COUNT_RE.match(k) and k not in LAYER_KEYS and _int(v) and v > len(keep) // 2:
            lv.set(k, max(1, len(keep) // 2))
    for k in LEADING_DENSE_KEYS:
        if _int(d.get(k)) and d[k] > 1:
            lv.set(k, 1)
    _periodic_kinds(lv, len(keep))


_PER_LAYER_HEADS_RE = re.compile(r"heads_per_layer$|^per_layer_\w*heads$")


def _per_layer_heads(lv: _Level) -> None:
    """A per-layer list of head counts (Sapiens2's `num_key_value_heads_per_layer`: full attention
    in the first and last layers, GQA between) follows the head counts it was made of: an entry equal
    to a full-size head (or kv-head) count becomes that count's shrunk value, others the largest
    divisor of the shrunk heads not above them, so every layer's attention still fits the width."""
    heads = next((lv.d[k] for k in HEAD_KEYS if _int(lv.d.get(k)) and lv.d[k] > 0), None)
    if not heads:
        return
    mapping = {lv.orig[k]: lv.d[k] for k in HEAD_KEYS | KV_HEAD_KEYS
               if _int(lv.orig.get(k)) and _int(lv.d.get(k)) and lv.orig[k] > 0}
    for k, v in list(lv.d.items()):
        lst = _ints(v) if isinstance(v, list) else None
        if _PER_LAYER_HEADS_RE.search(k) and lst and all(x > 0 for x in lst):
            lv.set(k, [mapping.get(x, _divisor_at_most(heads, x)) for x in lst])


_PERIOD_RE = re.compile(r"^(\w+)_period$")


def _periodic_kinds(lv: _Level, n: int) -> None:
    """Layer kinds given by a period and an offset (layer i is of the kind when i % period ==
    offset: Jamba's attention and expert layers, Zamba's hybrid ones). With fewer layers than
    the period, no layer would be of the kind: the period shrinks to the layer count and the offset
    to its remainder, so every kind is kept."""
    d = lv.d
    for k, v in list(d.items()):
        m = _PERIOD_RE.match(k)
        off = f"{m.group(1)}_offset" if m else None
        if not (m and _int(v) and _int(d.get(off)) and "layer" in k) or n < 1 or v <= n:
            continue
        period = max(n, 1)
        lv.set(k, period)
        lv.set(off, d[off] % period)


def _stage_counts(lv: _Level, p: SizeProfile) -> None:
    """Per-stage repeat counts (blocks per stage, layers per block) are capped entry by entry;
    the number of stages stays (per-stage widths and feature taps depend on it)."""
    for k, v in list(lv.d.items()):
        lst = _ints(v) if isinstance(v, list) else None
        if lst and len(lst) > 1 and (k in LAYER_KEYS or _STAGE_COUNT_RE.search(k)):
            lv.set(k, [min(x, p.layers) for x in lst])


def _experts(lv: _Level, p: SizeProfile) -> None:
    d = lv.d
    experts = None
    for k in EXPERT_KEYS:
        experts = lv.cap(k, p.experts) or experts
    if not experts:
        return
    groups = None
    for k in EXPERT_GROUP_KEYS:
        if _int(d.get(k)) and d[k] > 1:
            groups = _divisor_at_most(experts, min(d[k], 2))
            lv.set(k, groups)
    for k in TOPK_GROUP_KEYS:
        if _int(d.get(k)) and d[k] > 0:
            lv.set(k, min(d[k], groups or 1))
    # top-k must fit in the selected groups' experts.
    limit = experts if not groups else (experts // groups) * min(d.get("topk_group") or groups, groups)
    for k in TOPK_KEYS:
        v = d.get(k)
        if _int(v) and v > min(2, limit):
            lv.set(k, max(1, min(2, limit)))


def _state_space(lv: _Level, p: SizeProfile) -> None:
    d, orig = lv.d, lv.orig
    for k in STATE_KEYS:
        lv.cap(k, p.state)
    for k in CHUNK_KEYS:
        lv.cap(k, p.state)
    hidden_k = next((k for k in HIDDEN_KEYS if _int(d.get(k))), None)
    expand_k = next((k for k in EXPAND_KEYS if _int(d.get(k)) and d[k] > 0), None)
    if not hidden_k or not expand_k:
        return
    for nh, hd in SSM_HEAD_PAIRS:
        if _int(orig.get(nh)) and _int(orig.get(hd)) and orig[nh] * orig[hd] == orig[expand_k] * orig[hidden_k]:
            # Keep `ssm heads * ssm head dim == expand * hidden`.
            lv.set(nh, max(d[expand_k] * d[hidden_k] // d[hd], 1))
            for g in SSM_GROUP_KEYS:
                if _int(d.get(g)) and d[g] > 1:
                    lv.set(g, _divisor_at_most(d[nh], d[g]))


def scale_sections(sections: list[int], total: int) -> list[int]:
    """Sections (mrope's temporal/height/width split) rescaled to sum to `total` in proportion,
    none below 1. Sections that were equal stay equal (Ernie 4.5 VL stacks its height and width
    parts): the rounding goes to whole groups of equal sections, largest remainder first, and what
    no group can take evenly to the first section."""
    whole = sum(sections)
    new = [max(1, s * total // whole) for s in sections]
    left = total - sum(new)
    groups: dict[int, list[int]] = {}
    for i, s in enumerate(sections):
        groups.setdefault(s, []).append(i)
    for s, idx in sorted(groups.items(), key=lambda g: -((g[0] * total) % whole)):
        if 0 < len(idx) <= left and (s * total) % whole:
            for i in idx:
                new[i] += 1
            left -= len(idx)
    new[0] += left
    return new


def _rope(lv: _Level) -> None:
    """Multimodal RoPE splits the rotary half-dimension into sections: rescale them."""
    d = lv.d
    rope = d.get("rope_parameters") if isinstance(d.get("rope_parameters"), dict) else {}
    sec = rope.get("mrope_section") or d.get("mrope_section")
    if not isinstance(sec, list) or not sec:
        return
    hd = d.get("head_dim")
    if not _int(hd):
        hk = next((k for k in HIDDEN_KEYS if _int(d.get(k))), None)
        nk = next((k for k in HEAD_KEYS if _int(d.get(k)) and d[k] > 0), None)
        if not hk or not nk:
            return
        hd = d[hk] // d[nk]
    factor = rope.get("partial_rotary_factor") or d.get("partial_rotary_factor") or 1.0
    half = int(hd * factor) // 2
    sec = [int(x) for x in sec]
    if sum(sec) == half or half < len(sec):
        return
    new = scale_sections(sec, half)
    if isinstance(rope.get("mrope_section"), list):
        lv.set("rope_parameters", dict(rope, mrope_section=new))
    else:
        lv.set("mrope_section", new)


# The vocabulary grows to fit special-token ids (a VLM's image token is often past the text
# vocab), but never past this: a config saying `eos_token_id: 30000000` would otherwise ask for
# a 30M-row embedding (7.7 GB in one allocation, ~43 GiB with the fp64 reference).
MAX_TOKEN_ID = 1 << 20


def _remap_token_ids(lv: _Level, p: SizeProfile) -> None:
    """Special-token ids at or above the config's own vocab_size (invalid in the full model too)
    or above MAX_TOKEN_ID are remapped to distinct ids at the top of the tiny vocab."""
    vocab = lv.d.get("vocab_size")
    limit = min(vocab, MAX_TOKEN_ID) if _int(vocab) and vocab > 0 else MAX_TOKEN_ID
    keep = set(_token_ids(lv.d))
    free = (i for i in range(p.vocab - 1, -1, -1) if i not in keep)
    new_of: dict[int, int] = {}
    for k in TOKEN_ID_KEYS:
        v = lv.d.get(k)
        ids = _ints(v)
        if not ids or all(x < limit for x in ids):
            continue
        mapped = [new_of.setdefault(x, next(free)) if x >= limit else x for x in ids]
        lv.set(k, mapped[0] if _int(v) else type(v)(mapped))


def _misc(lv: _Level, p: SizeProfile) -> None:
    d = lv.d
    # Vocab: small, but above every special token id the config refers to.
    need = max(lv.token_ids + (0,)) + 1  # every special token id must be a valid index
    for k, v in list(d.items()):
        # A sub-model's own vocabulary (`t2u_vocab_size`, `decoder_vocab_size`): shrunk, never grown.
        if k not in VOCAB_KEYS and _VOCAB_RE.search(k) and k != "type_vocab_size" and _int(v) and v > p.vocab:
            lv.set(k, max(p.vocab, min(v, need)))
    for k in VOCAB_KEYS:
        v = d.get(k)
        if v is None and k in d and "hidden_size" in d:
            lv.set(k, max(p.vocab, need))  # left to a tokenizer in the full config
        elif _int(v) and (v > p.vocab or v < need):
            lv.set(k, max(min(v, p.vocab), need))
    # Hierarchical vision models halve the resolution per stage: the image must keep the
    # last stage at least 2x2 patches, and attention windows must fit in it.
    stages = max((len(v) for k, v in d.items() if k in {"depths"} | HEAD_KEYS and isinstance(v, list)), default=0)
    if stages > 1 and _int(d.get("window_size")):
        lv.cap("window_size", 2)
    for k in IMAGE_KEYS:
        lst = lv.ints(k)
        if lst and lst[0] > p.image:
            patch = lv.ints("patch_size") or [1]
            unit = math.lcm(*patch) * (2 ** stages if stages > 1 else 1)
            # Windowed ViTs (LW-DETR, RF-DETR) cut the patch grid into num_windows = side^2
            # windows: the grid must be a multiple of the side.
            win = d.get("num_windows")
            if _int(win) and win > 1 and math.isqrt(win) ** 2 == win:
                unit *= math.isqrt(win)
            new = max(p.image - p.image % unit, unit * 2 if stages <= 1 else unit)
            lv.set(k, new if len(lst) == 1 else [new] * len(lst))
    # Sliding-window layers need a window; some defaults leave it unset.
    kinds = d.get("layer_types")
    if "sliding_window" in d and d["sliding_window"] is None and isinstance(kinds, list) \
            and any("sliding" in str(x) for x in kinds):
        lv.set("sliding_window", p.sliding_window)
    # VQ-VAE / conv codec widths are `base_channels` times a per-stage multiplier: the base sets
    # every conv's width. Half the hidden size keeps GroupNorm's usual 32 groups dividing it.
    for k in CONV_BASE_KEYS:
        lv.cap(k, max(p.hidden // 2, 32))
    # HiFi-GAN / BigVGAN vocoders halve `upsample_initial_channel` at every upsampling stage:
    # capped, but so that the last stage keeps at least 2 channels.
    rates = d.get("upsample_rates")
    stages = len(rates) if isinstance(rates, list) else 0
    lv.cap("upsample_initial_channel", max(p.hidden, 2 ** (stages + 1)))
    # Conv codecs double `num_filters` at every down/upsampling stage: the widest stage is capped
    # at 8x the hidden size (VibeVoice's 32 filters over 6 stages made 2048-channel convs).
    ratios = next((v for k, v in d.items() if k.endswith(("sampling_ratios", "sampling_rates")) and isinstance(v, list)), None)
    if ratios and _int(d.get("num_filters")):
        lv.cap("num_filters", max(1, 8 * p.hidden // 2 ** len(ratios)))
    for k in QUERY_KEYS:
        lv.cap(k, p.queries)
    for k in SOURCE_POS_KEYS:
        lv.cap(k, p.source_positions)
    for k in MAXPOS_KEYS:
        v = d.get(k)
        if _int(v) and v > p.max_pos:
            lv.set(k, p.max_pos)
    for k, v in list(d.items()):
        if isinstance(v, float) and k.endswith(DROPOUT_SUFFIXES) and v > 0:
            lv.set(k, 0.0)


# ---- applying overrides and re-constructing -------------------------------------------


def apply_overrides(d: dict[str, Any], overrides: dict[str, Any], changes: dict[str, Any] | None = None) -> dict[str, Any]:
    """Apply registry `config` overrides to a config dict; dotted keys walk into sub-configs."""
    applied: dict[str, Any] = {}
    for key, value in (overrides or {}).items():
        target = d
        parts = key.split(".")
        for part in parts[:-1]:
            nxt = target.get(part)
            if not isinstance(nxt, dict):
                raise ValueError(f"config override {key!r}: {part!r} is not a sub-config")
            target = nxt
        target[parts[-1]] = copy.deepcopy(value)
        applied[key] = value
    if changes is not None:
        changes.update(applied)
    return applied


def _field_names(cls: type) -> set[str] | None:
    return {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else None


def _defaults(cls: type) -> dict[str, Any] | None:
    try:
        return cls().to_dict()
    except Exception:
        return None


# Backbone taps are constructor arguments even where the class keeps them off its fields:
# a parent's backbone sub-config (UperNet's ResNet) taps other stages than the class default.
_BACKBONE_TAPS = {"out_features", "out_indices"}


def init_kwargs(cfg: PretrainedConfig, d: dict[str, Any], changed: set[str], prefix: str = "") -> dict[str, Any]:
    """Constructor arguments that rebuild `cfg` with the values of `d`: changed keys, and
    values that differ from the class defaults; derived attributes (present on a default
    instance but not constructor fields) are left for `__post_init__` to recompute."""
    cls = type(cfg)
    defaults = _defaults(cls)
    fields = _field_names(cls)
    out: dict[str, Any] = {}
    for k, v in d.items():
        if k in _NOT_KWARGS:
            continue
        sub = getattr(cfg, k, None)
        if isinstance(sub, PretrainedConfig) and isinstance(v, dict):
            if not any(c.startswith(f"{prefix}{k}.") for c in changed) and defaults is not None \
                    and defaults.get(k) == v:
                continue  # an untouched default sub-config: the parent makes it as before
            out[k] = init_kwargs(sub, v, changed, prefix=f"{prefix}{k}.")
            out[k]["model_type"] = v.get("model_type", sub.model_type)
            continue
        if prefix + k in changed or any(c.startswith(f"{prefix}{k}.") for c in changed):
            out[k] = v
        elif defaults is not None and k in defaults and defaults[k] == v:
            continue
        elif fields is not None and defaults is not None and k in defaults and k not in fields \
                and f"_{k}" not in fields and k not in _BACKBONE_TAPS:  # `_out_indices` fields are set as `out_indices`
            continue
        else:
            out[k] = v
    return out


def shrink_config(cfg: PretrainedConfig, size: str = "tiny", overrides: dict[str, Any] | None = None
                  ) -> tuple[PretrainedConfig, dict[str, Any]]:
    """A shrunk copy of `cfg` (with registry overrides), and the changes (dotted key -> value).

    Re-construction through the config class runs its validation; when a config class
    cannot be re-constructed that way, the values are set on a copy instead."""
    d = cfg.to_dict()
    changes = shrink_dict(d, size, cfg=cfg)
    apply_overrides(d, overrides or {}, changes)
    try:
        return type(cfg)(**init_kwargs(cfg, d, set(changes))), changes
    except Exception as first:
        new = copy.deepcopy(cfg)
        try:
            _set_in_place(new, changes)
        except Exception:
            raise first from None
        return new, changes


def _set_in_place(cfg: PretrainedConfig, changes: dict[str, Any]) -> None:
    for key, value in changes.items():
        target: Any = cfg
        parts = key.split(".")
        for part in parts[:-1]:
            target = getattr(target, part)
        if isinstance(target, dict):
            target[parts[-1]] = value
        else:
            setattr(target, parts[-1], value)
