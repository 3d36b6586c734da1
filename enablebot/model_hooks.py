"""Model hooks (registry `hook: enablebot.model_hooks:<function>`): for the rare model that
registry data cannot express. Each gets `model, config` and returns the model to run."""

from __future__ import annotations

from typing import Any


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
