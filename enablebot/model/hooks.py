"""Registry hooks: code for the rare inputs or models that registry data cannot express.

A registry entry names one as `module:function` (only `enablebot.*`): the entry's `hook:`
gets `model, config` and returns the model; an `inputs: {hook: ...}` recipe gets
`model, config, batch, seq_len, gen, out` (the inputs so far) and returns more inputs.
"""

from __future__ import annotations

import sys
from typing import Any


def _session_class(model: Any) -> type:
    """The `*InferenceSession` class defined next to a video model's class."""
    mod = sys.modules[type(model).__module__]
    for name in dir(mod):
        if name.endswith("VideoInferenceSession"):
            return getattr(mod, name)
    raise ValueError(f"{type(model).__name__}: no *VideoInferenceSession class in {mod.__name__}")


def _image_size(config: Any) -> int:
    for c in (config, getattr(config, "vision_config", None), getattr(config, "prompt_encoder_config", None)):
        size = getattr(c, "image_size", None) if c is not None else None
        if size:
            return int(size[0] if isinstance(size, (list, tuple)) else size)
    raise ValueError("no image_size on the config")


def video_session(*, model: Any, config: Any, batch: int, seq_len: int, gen: Any, out: dict[str, Any]) -> dict[str, Any]:
    """A video-segmentation inference session (SAM2-video lineage), as the processor builds
    one: a short clip of preprocessed frames and, on frame 0, one point prompt per object
    (`batch` objects), in model-image pixel coordinates. The forward then segments frame 0."""
    import torch

    size = _image_size(config)
    frames = 2
    video = torch.randn(frames, 3, size, size, generator=gen)
    session = _session_class(model)(video=video, video_height=size, video_width=size,
                                    inference_device="cpu", dtype=torch.float32)
    if hasattr(session, "add_point_inputs"):
        points = torch.rand(1, batch, 1, 2, generator=gen) * size
        labels = torch.ones(1, batch, 1, dtype=torch.int32)
        for i in range(batch):
            idx = session.obj_id_to_idx(i + 1)
            session.add_point_inputs(idx, 0, {"point_coords": points[:, i:i + 1], "point_labels": labels[:, i:i + 1]})
        session.obj_with_new_inputs = list(range(1, batch + 1))
    if hasattr(session, "add_prompt"):  # text-prompted detection + tracking (SAM3 video)
        vocab = int(getattr(config.get_text_config(), "vocab_size", 100))
        pid = session.add_prompt("object")
        session.prompt_input_ids[pid] = torch.randint(3, vocab, (1, 32), generator=gen)
        session.prompt_attention_masks[pid] = torch.ones(1, 32, dtype=torch.long)
    return {"inference_session": session, "frame_idx": 0}

def main_submodel(*, model: Any, config: Any) -> Any:
    """Composite pipelines whose top class has no forward (Bark, the Qwen Omni models run by
    `generate()` stage by stage): the first sub-model that has one, as built inside the full
    model from its sub-config (Bark's semantic model, Omni's thinker)."""
    import torch.nn as nn
    from transformers import PreTrainedModel

    if type(model).forward is not nn.Module.forward:
        return model
    for child in model.children():
        if isinstance(child, PreTrainedModel) and type(child).forward is not nn.Module.forward:
            return child
    return model
