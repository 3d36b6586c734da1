"""Inputs from what a model documents about itself: the `Args:` section of its forward's
docstring (transformers' `auto_docstring` writes `name (`torch.Tensor` of shape
`(batch_size, hidden_size)`)`), and the arguments a forward says it is missing.

Used where no rule by name exists, or where a sub-model needs an argument that reaches it
through the top model's `**kwargs` (its name is in no signature the harness can see): the
forward's `TypeError: ... missing 1 required positional argument: 'x'` names it, and the
sub-model that declares it documents its shape.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any

_MISSING_RE = re.compile(r"missing \d+ required (?:positional|keyword-only) arguments?: (.+)$")
_BATCH = frozenset({"batch_size", "batch"})
_SEQ = frozenset({"sequence_length", "seq_len", "target_sequence_length", "num_tokens"})
_HIDDEN = ("hidden_size", "d_model", "embed_dim", "n_embd", "dim")
# A codec's latent frames (`(batch_size, hidden_size, frames)`): a short clip's worth, as the
# registry's codec recipes use; each frame decodes to a hop of samples.
_FRAMES = frozenset({"frames", "num_frames_latent"})
FRAMES = 8


@dataclass(frozen=True)
class DocArg:
    """One documented argument: its type text (`torch.LongTensor`) and shape dims, by name."""

    name: str
    type: str
    dims: tuple[str, ...] | None  # None: documented without a shape


def missing_arguments(exc: BaseException) -> list[str]:
    """The argument names a `TypeError` says a call was missing (none for any other error)."""
    if not isinstance(exc, TypeError):
        return []
    m = _MISSING_RE.search(str(exc).strip())
    return re.findall(r"'(\w+)'", m.group(1)) if m else []


def doc_arg(doc: str | None, name: str) -> DocArg | None:
    """`name`'s entry in a docstring's argument list, or None when it is not documented."""
    if not doc:
        return None
    m = re.search(rf"^\s*{re.escape(name)} \(`([^`]+)`(?: of shape `\(([^`]*)\)`)?", doc, re.M)
    if not m:
        return None
    dims = tuple(d.strip() for d in m.group(2).split(",") if d.strip()) if m.group(2) is not None else None
    return DocArg(name=name, type=m.group(1), dims=dims)


_UNUSED_RE = re.compile(r"\bis not used\b|\bpreserved for compatibility\b|\bkept for (?:backward )?compatibility\b", re.I)


def documented_unused(owner: Any, name: str) -> bool:
    """Does `owner.forward`'s docstring say the argument is accepted but not used (Qwen2Audio's and
    Voxtral's encoders: `attention_mask` "is preserved for compatibility, but it is not used")? A
    user's call leaves such an argument out."""
    return bool(_UNUSED_RE.search(doc_text(inspect.getdoc(getattr(owner, "forward", None)), name)))


def _config_int(config: Any, names: tuple[str, ...]) -> int | None:
    from .configs import first_attr, text_config

    for c in (config, text_config(config)):
        v = first_attr(c, names)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def doc_shape(arg: DocArg, *, config: Any, batch: int, seq_len: int) -> list[int] | None:
    """The shape a documented argument takes under this config: `batch_size` and
    `sequence_length` are the run's, widths and counts are read from the config by the
    dim's name (`hidden_size`, `num_channels`, `max_action_dim`...). None when a dim is
    unknown: guessing would hand the model a wrong tensor with the model's authority."""
    if not arg.dims:
        return None
    out: list[int] = []
    for d in arg.dims:
        if d.isdigit():
            out.append(int(d))
        elif d in _BATCH:
            out.append(batch)
        elif d in _SEQ:
            out.append(seq_len)
        elif d in _FRAMES:
            out.append(FRAMES)
        else:
            names = _HIDDEN if d in _HIDDEN else ((d, "in_channels") if d == "num_channels" else (d,))
            v = _config_int(config, names)
            if v is None:
                return None
            out.append(v)
    return out


def doc_dtype(type_text: str) -> Any:
    import torch

    t = type_text.lower()
    if "longtensor" in t or "int64" in t:
        return torch.long
    if "booltensor" in t or "bool" in t:
        return torch.bool
    if "inttensor" in t:
        return torch.int32
    return torch.float32


def doc_text(doc: str | None, name: str) -> str:
    """The description under `name`'s entry in a docstring's argument list, on one line."""
    m = re.search(rf"^(\s*){re.escape(name)} \(`[^\n]*\n((?:\1\s+\S[^\n]*\n?)*)", doc or "", re.M)
    return " ".join(m.group(2).split()) if m else ""


_SEQUENCE_RE = re.compile(r"^(?:(?:collections\.abc\.|typing\.)?Sequence|list|List|tuple|Tuple)\[\s*torch\.\w*Tensor")
_ONE_D_RE = re.compile(r"\b1-?D\b|\bone-dimensional\b", re.I)


def documented_tensor(owner: Any, name: str, *, config: Any, batch: int, seq_len: int, gen: Any) -> Any:
    """A tensor for `owner.forward`'s argument `name` as its docstring shapes it, or None. An
    argument documented as a sequence of 1D tensors (TimesFM 2.5's `past_values`,
    `Sequence[torch.Tensor]`: "Each tensor is a 1D time series") gets one series of `seq_len`
    per batch item, as a list."""
    import torch

    doc = inspect.getdoc(type(owner).forward) or ""
    arg = doc_arg(doc, name)
    if arg is None or "tensor" not in arg.type.lower():
        return None
    if _SEQUENCE_RE.match(arg.type) and arg.dims is None:
        if not _ONE_D_RE.search(doc_text(doc, name)):
            return None
        dtype = doc_dtype(arg.type)
        return [torch.randn(seq_len, generator=gen, dtype=dtype) if dtype.is_floating_point
                else torch.zeros(seq_len, dtype=dtype) for _ in range(batch)]
    shape = doc_shape(arg, config=config, batch=batch, seq_len=seq_len)
    if shape is None:
        return None
    dtype = doc_dtype(arg.type)
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=gen, dtype=dtype)
    if dtype == torch.bool:
        return torch.ones(*shape, dtype=torch.bool)
    return torch.zeros(*shape, dtype=dtype)  # ids or indices: 0 is valid for every table


def declaring_modules(model: Any, name: str) -> list[Any]:
    """Sub-modules (the model first) whose forward takes `name` as a required argument."""
    out = []
    for m in model.modules():
        try:
            p = inspect.signature(m.forward).parameters.get(name)
        except (TypeError, ValueError):
            continue
        if p is not None and p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            out.append(m)
    return out


def hidden_requirements(model: Any) -> set[str]:
    """Required arguments of sub-models' forwards that the top forward does not declare but
    can pass on (it takes `**kwargs`): what only a trial forward can tell is needed."""
    from transformers import PreTrainedModel

    params = inspect.signature(model.forward).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return set()
    out: set[str] = set()
    for m in model.modules():
        if m is model or not isinstance(m, PreTrainedModel):
            continue
        try:
            sub = inspect.signature(m.forward).parameters
        except (TypeError, ValueError):
            continue
        out |= {n for n, p in sub.items() if p.default is p.empty and n not in params
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return out
