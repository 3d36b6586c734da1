"""Which parts of a model ran: forward calls per top-level submodule, and the towers that did not.

Top-level submodules are the children of the model and of its base model (`model.model`,
`base_model`), named by their path (`model.visual`, `model.language_model`, `lm_head`).
A tower is a top-level submodule whose name says which modality it encodes (the rules
below, data only); a tower ran when any module inside it ran, since some models call a
tower's parts (`vision_tower.encoder`) rather than the tower itself.

Count on an eager run: forward hooks inside a compiled region are traced, not counted.
"""

from __future__ import annotations

import contextlib
import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Iterator

# Name fragments (matched against the last component of a submodule's path) per tower kind.
TOWER_NAME_RULES: dict[str, tuple[str, ...]] = {
    "vision": ("vision", "visual", "image", "pixel", "vit", "siglip", "img"),
    "video": ("video",),
    "audio": ("audio", "speech", "acoustic", "sound", "whisper", "mel", "wav"),
}
# Name fragments that are not towers even when a tower fragment matches (projectors, embeds).
NOT_A_TOWER = ("projector", "projection", "proj", "connector", "merger", "adapter", "embed_tokens", "norm",
               "head", "pos", "token", "newline", "sep", "start", "end")
# A config sub-config that says the model has such a tower.
TOWER_SUBCONFIGS: dict[str, tuple[str, ...]] = {
    "vision": ("vision_config", "image_config", "visual_config"),
    "video": ("video_config",),
    "audio": ("audio_config", "speech_config", "audio_encoder_config"),
}
BASE_ATTRS = ("model", "base_model")


@dataclass
class TowerReport:
    calls: dict[str, int] = field(default_factory=dict)      # top-level submodule -> its forward calls
    active: dict[str, bool] = field(default_factory=dict)    # ... -> any module inside it ran
    towers: dict[str, str] = field(default_factory=dict)     # tower submodule -> kind
    expected: list[str] = field(default_factory=list)        # kinds the config says exist

    @property
    def not_run(self) -> list[str]:
        """Towers none of whose modules ran."""
        return [name for name in self.towers if not self.active.get(name)]

    @property
    def missing_kinds(self) -> list[str]:
        """Kinds the config declares with no tower submodule found or none that ran."""
        ran = {kind for name, kind in self.towers.items() if self.active.get(name)}
        return [k for k in self.expected if k not in ran]


def top_level(model: Any) -> dict[str, Any]:
    """Path -> module for the children of the model and of its base model."""
    out: dict[str, Any] = {}
    bases = []
    for attr in BASE_ATTRS:
        sub = getattr(model, attr, None)
        if sub is not None and sub is not model and hasattr(sub, "named_children") and all(sub is not b for _, b in bases):
            bases.append((attr, sub))
    base_ids = {id(b) for _, b in bases}
    for name, child in model.named_children():
        if id(child) not in base_ids:
            out[name] = child
    for attr, base in bases:
        path = next((n for n, c in model.named_children() if c is base), attr)
        for name, child in base.named_children():
            out[f"{path}.{name}"] = child
    return out


def tower_kind(name: str) -> str | None:
    last = name.rsplit(".", 1)[-1].lower()
    if any(frag in last for frag in NOT_A_TOWER):
        return None
    for kind, frags in TOWER_NAME_RULES.items():
        if any(frag in last for frag in frags):
            return kind
    return None


# The model's own functions that encode one modality: the submodules they call are that
# modality's towers whatever their names (Granite Speech's speech encoder is `encoder`).
FEATURES_FUNCTIONS: dict[str, str] = {"get_image_features": "vision", "get_video_features": "video",
                                      "get_audio_features": "audio"}


def features_calls(model: Any) -> dict[str, str]:
    """Child-module name -> kind, for the submodules a features function of the model (or of its
    base model) calls directly (`self.<name>(...)` in its source), projectors and the like left out."""
    out: dict[str, str] = {}
    for obj in (model, *(getattr(model, a, None) for a in BASE_ATTRS)):
        if obj is None:
            continue
        children = {n for n, _ in obj.named_children()} if hasattr(obj, "named_children") else set()
        for fn_name, kind in FEATURES_FUNCTIONS.items():
            fn = getattr(type(obj), fn_name, None)
            if fn is None:
                continue
            try:
                src = inspect.getsource(fn)
            except (OSError, TypeError):
                continue
            for name in re.findall(r"self\.(\w+)\s*\(", src):
                if name in children and not any(frag in name.lower() for frag in NOT_A_TOWER):
                    out.setdefault(name, kind)
    return out


def expected_kinds(config: Any) -> list[str]:
    return [kind for kind, subs in TOWER_SUBCONFIGS.items() if any(getattr(config, s, None) is not None for s in subs)]


@contextlib.contextmanager
def count_towers(model: Any, config: Any = None) -> Iterator[TowerReport]:
    """Count forward calls per top-level submodule while the block runs (eager)."""
    report = TowerReport()
    tops = top_level(model)
    handles = []

    def own(name: str):
        def hook(_mod: Any, _args: Any, _out: Any) -> None:
            report.calls[name] += 1
        return hook

    def inner(name: str):
        def hook(_mod: Any, _args: Any) -> None:
            report.active[name] = True
        return hook

    called = features_calls(model)
    for name, mod in tops.items():
        report.calls[name] = 0
        report.active[name] = False
        kind = tower_kind(name) or called.get(name.rsplit(".", 1)[-1])
        if kind:
            report.towers[name] = kind
        handles.append(mod.register_forward_hook(own(name)))
        for sub in mod.modules():
            handles.append(sub.register_forward_pre_hook(inner(name)))
    report.expected = expected_kinds(config if config is not None else getattr(model, "config", None))
    try:
        yield report
    finally:
        for h in handles:
            h.remove()
