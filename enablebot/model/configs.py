"""Reading a transformers config: the text sub-config, the first of several attribute names.
Shared by the input rules (inputs.py, documented.py) and padding, which must not import each other."""

from __future__ import annotations

from typing import Any


def text_config(config: Any) -> Any:
    get = getattr(config, "get_text_config", None)
    try:
        return get(decoder=True) if get else config
    except TypeError:
        return get()


def configs_in(cfg: Any) -> list[Any]:
    """`cfg` and every sub-config under it, each once."""
    from transformers import PretrainedConfig

    out, seen, todo = [], set(), [cfg]
    while todo:
        c = todo.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        out.append(c)
        todo += [v for v in vars(c).values() if isinstance(v, PretrainedConfig)]
    return out


def first_attr(config: Any, names: tuple[str, ...], subs: tuple[str, ...] = (), default: Any = None) -> Any:
    """The first of `names` set on the config or on one of its `subs` sub-configs."""
    for c in [config] + [getattr(config, s, None) for s in subs]:
        if c is None:
            continue
        for n in names:
            v = getattr(c, n, None)
            if v is not None and not isinstance(v, bool):
                return v
    return default
