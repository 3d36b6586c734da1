"""Family: "others" where the peer breaks in eval and the project gets one graph: FSMT, RT-DETR,
PP-DocLayoutV3. Their breaks sit behind `if self.training:` (RT-DETR's finite-value clamp,
`modeling_rt_detr.py`; FSMT's LayerDrop `random.uniform`), so they show only when the module is
in training mode. Each model in eval mode (what `from_pretrained` returns) and the same forward,
under no_grad, in training mode (what `from_config` returns before `.eval()`)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import emit, explain, guarded, main_guard, padded_text, tiny_model  # noqa: E402

FAMILY = "train_mode_in_eval"
CASES = [("fsmt", "FSMTModel", "text"), ("fsmt", "FSMTForConditionalGeneration", "text"),
         ("rt_detr", "RTDetrModel", "image"), ("rt_detr", "RTDetrForObjectDetection", "image"),
         ("pp_doclayout_v3", "PPDocLayoutV3Model", "image"), ("pp_doclayout_v3", "PPDocLayoutV3ForObjectDetection", "image")]


def inputs_for(model, kind: str) -> dict:
    import torch

    if kind == "text":  # a tokenizer's right-padded source batch; the decoder gets the shifted target
        x = padded_text(model, model.config, left=False)
        x["decoder_input_ids"] = x["input_ids"][:, :12].clone()
        return x
    size = 64  # an image processor's output: (batch, 3, H, W), normalised
    return {"pixel_values": torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))}


def case(model_type: str, cls: str, kind: str) -> None:
    for variant, train in (("eval", False), ("train_mode_no_grad", True)):
        model = tiny_model(model_type, cls, train=train)
        emit(FAMILY, cls, variant, explain(model, inputs_for(model, kind)))


def main() -> None:
    only = set(sys.argv[1:])
    for model_type, cls, kind in CASES:
        if not only or cls in only:
            guarded(FAMILY, cls, lambda: case(model_type, cls, kind))


if __name__ == "__main__":
    main_guard(main)
