"""Values a default config leaves unset where the modeling code needs one, read from the failure.

A released checkpoint's config.json fills every value its modeling code reads. A default config
built from the class sometimes leaves one `None` (LFM2-MoE's `layer_types`, Qwen4-Exp's
`indexer_*` sizes), keys a per-layer-type dict by nothing (Cohere Compass's `rope_parameters`),
or holds a tuple where the code concatenates lists (ViTMatte's `fusion_hidden_sizes`; a
config.json never holds a tuple). The tiny model then fails at construction with a TypeError or
KeyError that no user with a checkpoint sees.

`fill_unset(cfg, err)` reads the innermost transformers modeling frame of the traceback (its line,
its `self`, its module's source) and fills what that line reads as None, on the config classes
that hold it as None:
- a per-layer kind list (`config.X[layer_idx] == "full_attention"`): one kind per layer, the first
  literal the module compares it with;
- a count or size (also through `self.a = config.X`): the tiny profile's value for its name
  (experts, top-k, heads, head dim, feed-forward width), else 1; None siblings sharing its prefix
  (`indexer_*`) together, since configs validate such groups all or none;
- a per-layer-type dict lacking a type `layer_types` lists: keyed by every layer type;
- tuples where the code concatenates a list: lists;
- a value (not a count) the config class's own docstring gives for the attribute (`downsample_rate
  (`str`, *optional*): ... e.g. `"1/4"``, `defaults to `[12, 15]``), where the line reads it as None.
The caller builds again and keeps the result only if it builds (build.build_model). Nothing here is
per architecture; what was set is recorded.
"""

from __future__ import annotations

import ast
import linecache
import re
from dataclasses import dataclass
from typing import Any

from .configs import configs_in
from .shrink import EXPERT_KEYS, FFN_KEYS, HEAD_KEYS, PROFILES, TOPK_KEYS, scale_sections

_TUPLE_CONCAT = 'can only concatenate list (not "tuple")'
_NOT_PREFIXES = ("num_", "n_", "max_", "min_", "use_", "is_")


@dataclass(frozen=True)
class Fill:
    where: str  # the config class
    name: str
    value: Any
    why: str

    def __str__(self) -> str:
        return f"config {self.where}.{self.name}={self.value!r} ({self.why})"


def _model_frame(err: BaseException) -> Any:
    """The innermost traceback entry in a transformers modeling file, or None."""
    tb, last = err.__traceback__, None
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        if "/transformers/models/" in path and "/transformers/models/auto/" not in path:  # the factory reads no config
            last = tb
        tb = tb.tb_next
    return last


def _source(path: str) -> str:
    return "".join(linecache.getlines(path))


def _statement(path: str, lineno: int, most: int = 12) -> str:
    """The failing line and, for a call spread over lines (`torch.topk(\n x,\n k=self.config.k)`),
    the lines up to its closing parenthesis."""
    text, depth = "", 0
    for i in range(lineno, lineno + most):
        line = linecache.getline(path, i)
        text += line
        depth += line.count("(") + line.count("[") - line.count(")") - line.count("]")
        if depth <= 0:
            break
    return text


def _annotation(c: Any, name: str) -> str:
    """The config class's declared type of `name` as text (`int | None`, `list | None`), or ''."""
    for klass in type(c).__mro__:
        ann = vars(klass).get("__annotations__", {})
        if name in ann:
            a = ann[name]
            return a if isinstance(a, str) else str(a)
    return ""


def _members(annotation: str) -> list[str]:
    """The top-level members of a union annotation: `list[int] | None` -> ['list[int]', 'None'];
    `Optional[int]` -> ['int', 'None']; `typing.` prefixes dropped."""
    a = annotation.replace("typing.", "").strip()
    m = re.fullmatch(r"(Optional|Union)\[(.*)\]", a)
    if m:
        inner = _members_split(m.group(2), ",")
        return inner + (["None"] if m.group(1) == "Optional" else [])
    return _members_split(a, "|")


def _members_split(text: str, sep: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += 1 if ch in "[(" else -1 if ch in "])" else 0
        if ch == sep and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [x for x in out + [cur.strip()] if x]


def _admits(annotation: str, kind: str) -> bool:
    """Whether a value of `kind` (int, list, ...) is one of the annotation's own members: `list[int]`
    admits a list, not an int (a strict config refuses an int there)."""
    if not annotation:
        return True
    for m in _members(annotation):
        head = re.sub(r"^<class '(\w+)'>$", r"\1", m).split("[")[0].strip()
        if head in (kind, "Any") or head == kind.capitalize() and kind in ("list", "dict", "tuple"):
            return True
    return False


# "split_with_sizes expects split_sizes to sum exactly to 8 (...), but got split_sizes=[16, 24, 24]":
# a section list (mrope_section) still at full size where the shrunk width it splits is smaller.
_SPLIT = re.compile(r"split_sizes to sum exactly to (\d+).*?split_sizes=\[([\d, ]+)\]", re.S)


def _tiny_count(name: str, size: str = "tiny") -> int:
    """The value the shrink gives an attribute of this name; 1 (a neutral count, ratio or budget)
    for names it has no rule for."""
    p = PROFILES[size]
    if name in TOPK_KEYS or re.search(r"top_?k", name):
        return 2
    if name in EXPERT_KEYS or re.search(r"(num|n)_experts$", name):
        return p.experts
    if re.search(r"head_dim$|_d_head$", name):
        return p.head_dim
    if name in FFN_KEYS or re.search(r"(intermediate_size|_ffn_dim)$", name):
        return p.ffn
    if name in HEAD_KEYS or (name.endswith("_heads") and "kv" not in name):
        return p.heads
    if re.search(r"kv_heads$|key_value_heads$", name):
        return 1
    if re.search(r"(hidden_size|channels|width)$", name):
        return p.hidden
    return 1


def _layers(c: Any) -> int | None:
    for k in ("num_hidden_layers", "num_layers", "n_layer", "n_layers"):
        v = getattr(c, k, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def _kinds(src: str, name: str) -> list[str]:
    """The kinds the module knows for `<...>.name[i]`, in source order: the string literals it
    compares an entry with, then the keys of a dict it looks an entry up in (a mask per layer
    type: `causal_mask_mapping[self.config.layer_types[i]]`), which name a kind the code
    otherwise only excludes (`!= "conv"`)."""
    n = re.escape(name)
    found = re.findall(r"\.%s\[[^\]]+\]\s*(?:==|!=)\s*[\"'](\w+)[\"']" % n, src)
    for table in re.findall(r"(\w+)\[\s*(?:self\.)?config\.%s\[" % n, src):
        m = re.search(r"\b%s\s*=\s*\{(.*?)\n\s*\}" % re.escape(table), src, re.S)
        if m:
            found += re.findall(r"[\"'](\w+)[\"']\s*:", m.group(1))
    return list(dict.fromkeys(found))


def _tuples_to_lists(configs: list[Any]) -> list[Fill]:
    out = []
    for c in configs:
        for k, v in list(vars(c).items()):
            if isinstance(v, tuple) and not k.startswith("_"):
                setattr(c, k, list(v))
                out.append(Fill(type(c).__name__, k, list(v), "a tuple where the code concatenates lists"))
    return out


def _head_dim(c: Any) -> int | None:
    hd = getattr(c, "head_dim", None)
    if isinstance(hd, int) and hd > 0:
        return hd
    h, n = getattr(c, "hidden_size", None), getattr(c, "num_attention_heads", None)
    return h // n if isinstance(h, int) and isinstance(n, int) and n > 0 else None


def _sections(c: Any) -> list[int] | None:
    """Multimodal rope sections (temporal, height, width) over half the head dim, in Qwen2-VL's
    released proportions (16, 24, 24 of 64), which the models that read them copy."""
    hd = _head_dim(c)
    if not hd or hd // 2 < 3:
        return None
    return scale_sections(_QWEN2_VL_SECTIONS, hd // 2)


_QWEN2_VL_SECTIONS = [16, 24, 24]
# Keys a config dict must hold where the code reads them and no default config sets them, by name.
_DICT_KEYS: dict[str, Any] = {"mrope_section": _sections}


def _keyed(configs: list[Any], line: str, key: Any) -> list[Fill]:
    """`config.X["key"]` on a dict lacking a key known by name (_DICT_KEYS): set on each config
    whose X lacks it."""
    m = re.search(r"config\.(\w+)\[\s*[\"']%s[\"']\s*\]" % re.escape(str(key)), line)
    if m is None or key not in _DICT_KEYS:
        return []
    fills = []
    for c in configs:
        d = getattr(c, m.group(1), None)
        if isinstance(d, dict) and key not in d and (v := _DICT_KEYS[key](c)) is not None:
            d[key] = v
            fills.append(Fill(type(c).__name__, f"{m.group(1)}[{key!r}]", v, "a key the code reads, by its name"))
    return fills


def _rekeyed(configs: list[Any], line: str, key: Any) -> list[Fill]:
    """A dict-valued config attribute the line subscripts, lacking a layer type `layer_types` lists:
    keyed by every layer type (its flat entries, or the default rope, for each)."""
    m = re.search(r"config\.(\w+)\[", line)
    if m is None:
        return []
    name, out = m.group(1), []
    for c in configs:
        d, kinds = getattr(c, name, None), getattr(c, "layer_types", None) or []
        if not isinstance(d, dict) or key in d or key not in kinds:
            continue
        flat = {k: v for k, v in d.items() if not isinstance(v, dict)}
        if name == "rope_parameters":
            flat = {"rope_type": "default", "rope_theta": getattr(c, "default_theta", 10000.0), **flat}
        new = {t: dict(d.get(t) or flat) for t in dict.fromkeys(kinds)}
        setattr(c, name, new)
        out.append(Fill(type(c).__name__, name, new, "keyed by the layer types the config lists"))
    return out


def _rescaled(configs: list[Any], total: int, sizes: list[int], src: str = "") -> list[Fill]:
    """Each list config value equal to `sizes` (also inside a dict value: `rope_parameters`),
    scaled to sum to `total` in the same proportions (shrink.scale_sections, as the shrink scales a
    section list it finds), none below 1. Where
    no config holds them, the modeling code's own default for a config dict's key
    (`config.rope_parameters.get("mrope_section", [16, 24, 24])`) is set on that dict, scaled."""
    if total < len(sizes) or sum(sizes) <= 0:
        return []
    new = scale_sections(sizes, total)
    if min(new) < 1:
        return []
    fills = []
    for c in configs:
        for k, v in list(vars(c).items()):
            if v == sizes:
                setattr(c, k, list(new))
                fills.append(Fill(type(c).__name__, k, new, f"sections scaled to the shrunk width {total}"))
            elif isinstance(v, dict):
                for dk, dv in v.items():
                    if dv == sizes:
                        v[dk] = list(new)
                        fills.append(Fill(type(c).__name__, f"{k}[{dk!r}]", new, f"sections scaled to the shrunk width {total}"))
    if fills:
        return fills
    for attr, key, default in re.findall(r"config\.(\w+)\.get\(\s*[\"'](\w+)[\"']\s*,\s*\[([\d, ]+)\]\s*\)", src):
        if [int(x) for x in default.replace(" ", "").split(",") if x] != sizes:
            continue
        for c in configs:
            d = getattr(c, attr, None)
            if isinstance(d, dict) and key not in d:
                d[key] = list(new)
                fills.append(Fill(type(c).__name__, f"{attr}[{key!r}]", new,
                                  f"the code's default {sizes} scaled to the shrunk width {total}"))
    return fills


def _count(c: Any, name: str, why: str, statement: str = "") -> list[Fill]:
    ann = _annotation(c, name)
    if _admits(ann, "list") and (per := _per_label(c, name)) is not None:
        # One entry per class label (PP-DocLayoutV2's `class_thresholds`, `class_order`): by its name,
        # before the count rule (a 5.3 config declares no annotation, which admits an int too).
        value: Any = per
        why = f"one entry per label ({len(per)} labels), by its name"
    elif _admits(ann, "int"):
        value = _tiny_count(name)
    elif _admits(ann, "list") and re.search(r"\blen\(\s*(?:self\.)?(?:config\.)?%s\b" % re.escape(name), statement):
        value = []  # only counted: none of them
    elif _admits(ann, "list") and _WIDTHS.search(name) and re.search(r"\b%s\s*\[" % re.escape(name), statement):
        # A per-stage width list the code indexes (Sapiens2's head `upsample_out_channels[:-1]`):
        # checkpoints set it; the tiny profile's width for each of _STAGES stages.
        value = [PROFILES["tiny"].hidden] * _STAGES
        why = f"per-stage widths the code indexes; the tiny width for {_STAGES} stages"
    else:
        return []  # a string or structure the name does not tell
    setattr(c, name, value)
    fills = [Fill(type(c).__name__, name, value, why)]
    if isinstance(value, list) and value:
        return fills + _per_stage_siblings(c, name, len(value))
    prefix = name.split("_")[0] + "_"
    if prefix not in _NOT_PREFIXES:
        for k, v in list(vars(c).items()):
            if k != name and k.startswith(prefix) and v is None and _admits(_annotation(c, k), "int"):
                sib = _tiny_count(k)
                setattr(c, k, sib)
                fills.append(Fill(type(c).__name__, k, sib, f"unset beside {name}"))
    return fills


# Per-label lists by the name of their entries: a score threshold at even odds, an order or index
# by the label's own position, a weight at one.
_PER_LABEL = ((re.compile(r"^class_\w*thresholds?$"), lambda i: 0.5), (re.compile(r"^class_\w*(order|ids|indices)$"), lambda i: i),
              (re.compile(r"^class_\w*weights?$"), lambda i: 1.0))


def _per_label(c: Any, name: str) -> list[Any] | None:
    n = getattr(c, "num_labels", None)
    if not isinstance(n, int) or n <= 0:
        return None
    for pattern, entry in _PER_LABEL:
        if pattern.match(name):
            return [entry(i) for i in range(n)]
    return None


# A list of per-stage widths, by its name; kernel sizes and strides are not widths.
_WIDTHS = re.compile(r"(out_channels|hidden_sizes|_dims|_widths)$")
_STAGES = 2


def _per_stage_siblings(c: Any, name: str, n: int) -> list[Fill]:
    """The unset per-stage lists beside a filled one (`upsample_kernel_sizes` beside
    `upsample_out_channels`), each its scalar namesake repeated (`upsample_kernel_size`) as
    configs derive them when the width list is given; a list is never given a length of its own."""
    stem, out = name.split("_")[0] + "_", []
    for k, v in list(vars(c).items()):
        if k == name or not k.startswith(stem) or v is not None or not k.endswith("s"):
            continue
        scalar = getattr(c, k[:-1], None)
        if isinstance(scalar, (int, float)) and not isinstance(scalar, bool) and _admits(_annotation(c, k), "list"):
            setattr(c, k, [scalar] * n)
            out.append(Fill(type(c).__name__, k, [scalar] * n, f"{k[:-1]} for each stage of {name}"))
    return out


def _sub_configs(configs: list[Any], line: str, message: str) -> list[Fill]:
    """`config.head_config.use_pixel_shuffle` on a sub-config the default config leaves None
    (Sapiens2 at 5.10.1): the class its config names for that key in `sub_configs`, at its
    defaults. Only a concrete config class (not AutoConfig, which needs a model type to pick one)."""
    m = re.search(r"'NoneType' object has no attribute '(\w+)'", message)
    if m is not None:  # config.head_config.use_pixel_shuffle
        reads = [(sub, attr) for sub, attr in re.findall(r"config\.(\w+)\.(\w+)", line) if attr == m.group(1)]
    elif _NONE_CONFIG in message:  # AutoModel.from_config(config.vision_config)
        reads = [(sub, "") for sub in re.findall(r"from_config\(\s*(?:self\.)?config\.(\w+)\s*\)", line)]
    else:
        return []
    fills = []
    for sub, attr in reads:
        for c in configs:
            if sub not in vars(c) or getattr(c, sub) is not None:
                continue
            cls, why = _sub_config_class(type(c), sub)
            if cls is None or attr and not hasattr(cls, attr):
                continue
            setattr(c, sub, _shrunk(cls()))
            fills.append(Fill(type(c).__name__, sub, f"{cls.__name__}()", f"a sub-config the code reads: {why}, shrunk"))
    return fills


_NONE_CONFIG = "Unrecognized configuration class <class 'NoneType'>"
# In a config's docstring entry: the literal it gives as the default or as an example.
_DOC_VALUE = re.compile(r"(?:defaults to|e\.g\.,?|for example,?)\s*`([^`]+)`")


def doc_value(cls: type, name: str) -> Any:
    """The value `cls`'s docstring gives for `name` (its default, else its first example), as a
    Python literal; None when the entry gives none. The entry is transformers' `name (`type`,
    *optional*...):` line and the indented lines under it."""
    doc = cls.__doc__ or ""
    m = re.search(r"^([ \t]*)%s \(`[^\n]*\):[^\n]*\n((?:\1[ \t]+[^\n]*\n?)*)" % re.escape(name), doc, re.M)
    if m is None:
        return None
    for lit in _DOC_VALUE.findall(" ".join(m.group(0).split())):
        if "..." in lit:  # an elided example (`["dense", "sparse", ...]`) is no value
            continue
        try:
            return ast.literal_eval(lit)
        except (ValueError, SyntaxError):
            continue
    return None


def _documented(configs: list[Any], line: str) -> list[Fill]:
    """The attributes `line` reads as `config.X` that are None, set to the value their config
    class's docstring gives; counts are left to the tiny profile (a documented 4096 is a full size)."""
    fills = []
    for name in dict.fromkeys(re.findall(r"config\.(\w+)", line)):
        for c in configs:
            if name not in vars(c) or getattr(c, name) is not None:
                continue
            value = doc_value(type(c), name)
            if value is None or isinstance(value, (bool, int, float)):
                continue
            setattr(c, name, value)
            fills.append(Fill(type(c).__name__, name, value, "the value its config class's docstring gives"))
    return fills


def _sub_config_class(holder: type, sub: str) -> tuple[type | None, str]:
    """The config class for `holder.sub`: the one `sub_configs` names, else, where that is AutoConfig,
    the model type the holder's own code defaults a dict of that key to
    (`self.vision_config.get("model_type", "gemma4_vision")`); never a guess."""
    import inspect

    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = (getattr(holder, "sub_configs", None) or {}).get(sub)
    if isinstance(cls, type) and cls.__name__ != "AutoConfig":
        return cls, f"the class {holder.__name__}.sub_configs names, at its defaults"
    spec = (getattr(holder, "sub_configs_defaults", None) or {}).get(sub)  # 5.2x: SubConfigSpec(model_type=...)
    default = spec if isinstance(spec, type) else None
    if default is None and isinstance(getattr(spec, "model_type", None), str) and spec.model_type in CONFIG_MAPPING:
        default = CONFIG_MAPPING[spec.model_type]
    if default is not None and default.__name__ != "AutoConfig":
        return default, f"the default {holder.__name__}.sub_configs_defaults names ({default.__name__})"
    try:
        src = inspect.getsource(holder)
    except (OSError, TypeError):
        return None, ""
    m = re.search(r"%s(?:\.get\(\s*|\[\s*)[\"']model_type[\"']\s*(?:,|\]\s*(?:if|or)[^\n]*?)\s*[\"'](\w+)[\"']"
                  % re.escape(sub), src)
    if m is None or m.group(1) not in CONFIG_MAPPING:
        return None, ""
    return CONFIG_MAPPING[m.group(1)], f"the model type {holder.__name__}'s own code defaults it to ({m.group(1)!r})"


def _shrunk(cfg: Any) -> Any:
    """A default sub-config is full size: shrunk as the rest of the tiny model was."""
    from .shrink import shrink_config

    try:
        return shrink_config(cfg)[0]
    except Exception:  # noqa: BLE001 - a config the shrink cannot rebuild stays at its defaults
        return cfg


def _through_locals(configs: list[Any], tb: Any, path: str, line: str, back: int = 8) -> list[Fill]:
    """Read through a local: `config.num_attention_heads // num_key_value_heads` where a line just
    above set `num_key_value_heads = config.num_global_key_value_heads if ... else ...` (Diffusion
    Gemma at 5.11.0): the None config values that assignment reads, filled as counts."""
    local = tb.tb_frame.f_locals
    fills: list[Fill] = []
    for name in sorted(set(re.findall(r"\b([A-Za-z_]\w*)\b", line))):
        if name not in local or local[name] is not None:
            continue
        for i in range(tb.tb_lineno - 1, max(tb.tb_lineno - back, 0), -1):
            m = re.match(r"\s*%s\s*=(.*)" % re.escape(name), linecache.getline(path, i))
            if m is None:
                continue
            for attr in dict.fromkeys(re.findall(r"config\.(\w+)\b", m.group(1))):
                for c in configs:
                    if attr in vars(c) and getattr(c, attr) is None and not any(
                            f.where == type(c).__name__ and f.name == attr for f in fills):
                        fills += _count(c, attr, f"read as {name}; the tiny profile's value for its name")
            break
    return fills


def fill_unset(cfg: Any, err: BaseException) -> list[Fill]:
    """Fill what `err`'s modeling line reads as unset (see the module doc); [] when nothing is known."""
    if cfg is None:
        return []
    configs = configs_in(cfg)
    if isinstance(err, TypeError) and _TUPLE_CONCAT in str(err):
        return _tuples_to_lists(configs)
    tb = _model_frame(err)
    if isinstance(err, RuntimeError) and (m := _SPLIT.search(str(err))):
        src = _source(tb.tb_frame.f_code.co_filename) if tb is not None else ""
        return _rescaled(configs, int(m.group(1)), [int(x) for x in m.group(2).replace(" ", "").split(",") if x], src)
    if tb is None:
        return []
    path = tb.tb_frame.f_code.co_filename
    line, src = _statement(path, tb.tb_lineno), _source(path)
    if isinstance(err, KeyError):
        key = err.args[0] if err.args else None
        return _rekeyed(configs, line, key) or _keyed(configs, line, key)
    if isinstance(err, (AttributeError, ValueError)):  # a sub-config left None (_sub_configs reads which)
        return _sub_configs(configs, line, str(err)) or (
            _documented(configs, line) if "'NoneType' object has no attribute" in str(err) else [])
    if not isinstance(err, TypeError) or "NoneType" not in str(err) and "None" not in str(err):
        return []
    names = set(re.findall(r"\b([A-Za-z_]\w*)\b", line))
    owner = tb.tb_frame.f_locals.get("self")
    fills: list[Fill] = []
    for c in configs:
        subs = getattr(type(c), "sub_configs", None) or {}
        for name in sorted(names):
            if name.startswith("_") or name in subs or name not in vars(c) or getattr(c, name) is not None:
                continue
            if not re.search(r"config\.%s\b" % re.escape(name), line) and tb.tb_frame.f_locals.get(name, 0) is not None:
                continue  # the line does not read this config attribute as None
            if re.search(r"%s\[\s*\w*layer_idx\w*\s*\]" % re.escape(name), src) or name.endswith("_types"):
                n, kinds = _layers(c), _kinds(src, name)
                if n and kinds:
                    # Every kind the code names, in turn, so each branch is built (a hybrid's
                    # attention and convolution layers), as the registry's hybrid layouts do.
                    value = [kinds[i % len(kinds)] for i in range(n)]
                    setattr(c, name, value)
                    fills.append(Fill(type(c).__name__, name, value, "per layer, the kinds the code compares it with"))
                continue
            fills += _count(c, name, "a count the code reads; the tiny profile's value for its name", line)
    if not fills:  # the rules above know the value's kind better than a docstring's example
        fills = _documented(configs, line) or _through_locals(configs, tb, path, line)
    if fills or owner is None:
        return fills
    # Read through a copy: `self.token_budget // self.compress_ratio` where `self.x = config.y`.
    for a in sorted(names):
        if getattr(owner, a, 0) is not None:
            continue
        m = re.search(r"self\.%s\s*=\s*(?:self\.)?config\.(\w+)\b" % re.escape(a), src)
        if m is None:
            continue
        for c in configs:
            if m.group(1) in vars(c) and getattr(c, m.group(1)) is None and not any(
                    f.where == type(c).__name__ and f.name == m.group(1) for f in fills):
                fills += _count(c, m.group(1), f"read as self.{a}; the tiny profile's value for its name", line)
    return fills
