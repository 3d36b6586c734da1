"""Inputs made by the release's own image processor, for a vision tower no generic input runs.

Some towers registered as types of their own take what only their image processor makes: Gemma 4's
vision model takes flattened patches with their (x, y) positions, MiniCPM-V's takes every image's
patches packed into one row with each image's patch grid (`target_sizes`). Nothing in the tower's
config says how those relate, and where the composite runs text only at day 0 the composite's call
(parent_inputs.py) never reaches the tower. The image processor registered for the tower's type, or
for a composite whose config names the tower's config class, knows: it is the code that makes them
for users. So this runs that processor, at its defaults with the geometry the tiny config shares
with it (`patch_size`, merge sizes), on one small random image per batch item, and passes its
tensors to the forward by name (`image_position_ids` -> `pixel_position_ids` where the forward
calls the image a pixel). Kept only where every required argument is covered and the forward runs.
Processors that need a package this set-up lacks (torchvision) are skipped, PIL ones tried first.

Used by prepare after the composite's call; the item's note names the processor.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

IMAGE_SIDE = 64  # a small source image: the processor resizes it to what its model expects
# Geometry a processor and a vision config share by name: the processor must cut the patches the
# tiny tower was built for.
SHARED = ("patch_size", "temporal_patch_size", "merge_size", "spatial_merge_size")
# Names a processor and a forward give the same tensor: the image is `image_*` in one, `pixel_*`
# in the other.
_SYNONYMS = (("image_", "pixel_"), ("pixel_", "image_"))


@dataclass
class FromProcessor:
    processor: str  # the class name
    owner: str  # the model type it is registered for
    inputs: dict[str, Any]
    renamed: dict[str, str]  # forward name -> processor name, where they differ

    def note(self) -> str:
        names = ", ".join(f"{k} (its {v})" if k in self.renamed else k
                          for k, v in ((k, self.renamed.get(k, k)) for k in sorted(self.inputs)))
        return f"inputs from {self.owner}'s image processor {self.processor}: {names}"


def processor_classes(model_type: str, config_cls: type) -> list[tuple[str, str]]:
    """(owner type, class name) of the image processors registered for the type, then for the
    composites that contain its config (nearest name first); PIL backends before the others."""
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    from .parent_inputs import parent_types

    out: list[tuple[str, str]] = []
    for owner in dict.fromkeys([model_type, *(p for p, _ in parent_types(config_cls))]):
        names = IMAGE_PROCESSOR_MAPPING_NAMES.get(owner)
        if isinstance(names, dict):  # 5.x late: {backend: class}
            ordered = [names.get("pil"), *(v for k, v in names.items() if k != "pil")]
        elif isinstance(names, (tuple, list)):  # 5.x early: (slow PIL class, fast torchvision class)
            ordered = list(names)
        else:
            ordered = [names]
        out += [(owner, n) for n in dict.fromkeys(ordered) if isinstance(n, str) and n]
    return out


def _images(batch: int, gen: Any) -> list[Any]:
    import torch

    return [torch.randint(0, 256, (IMAGE_SIDE, IMAGE_SIDE, 3), generator=gen, dtype=torch.uint8).numpy()
            for _ in range(batch)]


def _by_parameter(out: dict[str, Any], params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    import torch

    args: dict[str, Any] = {}
    renamed: dict[str, str] = {}
    for key, value in out.items():
        if not isinstance(value, torch.Tensor):
            continue
        name = key if key in params else next(
            (b + key[len(a):] for a, b in _SYNONYMS if key.startswith(a) and b + key[len(a):] in params), None)
        if name is not None and name not in args:
            args[name] = value
            if name != key:
                renamed[name] = key
    return args, renamed


def from_processor(model: Any, config: Any, model_type: str, *, batch: int, gen: Any,
                   runs: Callable[[Any, dict[str, Any]], BaseException | None]) -> FromProcessor | None:
    """The first registered image processor whose tensors cover the forward's required arguments
    and run it; None when none does."""
    import transformers

    from .inputs import _required

    params = inspect.signature(model.forward).parameters
    if not any(n in params for n in ("pixel_values", "images")):
        return None  # not an image model
    shared = {k: getattr(config, k) for k in SHARED if isinstance(getattr(config, k, None), int)}
    for owner, name in processor_classes(model_type, type(config)):
        try:
            cls = getattr(transformers, name)
            probe = cls()
            proc = cls(**{k: v for k, v in shared.items() if hasattr(probe, k)}) if shared else probe
            out = proc(images=_images(batch, gen), return_tensors="pt")
        except Exception:  # noqa: BLE001 - a processor that needs a missing package, or refuses, gives nothing
            continue
        args, renamed = _by_parameter(dict(out), params)
        if not set(_required(model)) <= set(args) or "pixel_values" in params and "pixel_values" not in args:
            continue
        if runs(model, args) is None:
            return FromProcessor(processor=name, owner=owner, inputs=args, renamed=renamed)
    return None
