"""Families: VLMs, both directions.

- Peer gets one graph, the project breaks: VLM base models whose vision tower runs (Llava,
  LLaVA-NeXT(-Video), LLaVA-OneVision, Qwen2-VL, Qwen2.5-VL, Qwen3-VL-MoE, GLM-4V(-MoE), Aya
  Vision, Cohere2 Vision, DeepSeek-VL, ERNIE-4.5-VL-MoE, Gemma 3, Ovis2, SAM 3, V-JEPA 2).
- Peer breaks, the project gets one graph: VLM and audio-LM heads (Mistral3, SmolVLM, VipLlava,
  GLM-4.6V, GLM-OCR, LFM2-VL, LightOnOCR, PaddleOCR-VL, VideoLLaMA3, Qwen3-Omni-MoE thinker,
  AudioFlamingo3).

Each model twice: text only (token ids and mask, no image), and with its images / audio and the
placeholder tokens the processor writes (the project's builder: image layout and placeholder
count from the model's own `get_image_features`; no tokenizer is available offline). The row
says which towers ran (forward hooks on the top-level vision/audio sub-modules)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import emit, explain, guarded, main_guard, project_inputs, tiny_model  # noqa: E402

BASES = [("llava", "LlavaModel"), ("llava_next", "LlavaNextModel"), ("llava_next_video", "LlavaNextVideoModel"),
         ("llava_onevision", "LlavaOnevisionModel"), ("qwen2_vl", "Qwen2VLModel"), ("qwen2_5_vl", "Qwen2_5_VLModel"),
         ("qwen3_vl_moe", "Qwen3VLMoeModel"), ("glm4v", "Glm4vModel"), ("glm4v_moe", "Glm4vMoeModel"),
         ("aya_vision", "AyaVisionModel"), ("cohere2_vision", "Cohere2VisionModel"), ("deepseek_vl", "DeepseekVLModel"),
         ("ernie4_5_vl_moe", "Ernie4_5_VLMoeModel"), ("gemma3", "Gemma3Model"), ("ovis2", "Ovis2Model"),
         ("sam3", "Sam3Model"), ("vjepa2", "VJEPA2Model")]
HEADS = [("mistral3", "Mistral3ForConditionalGeneration"), ("smolvlm", "SmolVLMForConditionalGeneration"),
         ("vipllava", "VipLlavaForConditionalGeneration"), ("glm46v", "Glm46VForConditionalGeneration"),
         ("glm_ocr", "GlmOcrForConditionalGeneration"), ("lfm2_vl", "Lfm2VlForConditionalGeneration"),
         ("lighton_ocr", "LightOnOcrForConditionalGeneration"), ("paddleocr_vl", "PaddleOCRVLForConditionalGeneration"),
         ("video_llama_3", "VideoLlama3ForConditionalGeneration"),
         ("qwen3_omni_moe_thinker", "Qwen3OmniMoeThinkerForConditionalGeneration"),
         ("audioflamingo3", "AudioFlamingo3ForConditionalGeneration")]
MEDIA_KEYS = ("pixel_values", "pixel_values_videos", "image_grid_thw", "video_grid_thw", "image_sizes", "input_features",
              "input_features_mask", "feature_attention_mask", "mm_token_type_ids", "token_type_ids",
              "pixel_attention_mask", "image_attention_mask", "spatial_shapes", "pixel_mask")


def towers_run(model, inputs) -> list[str]:
    import torch

    from enablebot.measure.towers import count_towers

    with count_towers(model, model.config) as rep, torch.no_grad():
        model(**inputs)
    return sorted(k for k, v in rep.calls.items() if v and k in rep.towers)


def text_only(x: dict, config) -> dict:
    from enablebot.model.tensors import special_ids

    out = {k: v for k, v in x.items() if k not in MEDIA_KEYS}
    if "input_ids" in out:
        ids = out["input_ids"].clone()
        for s in special_ids(config):
            ids[ids == s] = 5
        out["input_ids"] = ids
    return out


def case(family: str, model_type: str, cls: str) -> None:
    model = tiny_model(model_type, cls)
    full = project_inputs(model_type, model)
    for variant, x in (("text_only", text_only(full, model.config)), ("with_media", full)):
        if variant == "text_only" and "input_ids" not in x:
            continue
        try:
            ran = towers_run(model, x)
        except Exception as e:  # noqa: BLE001
            emit(family, cls, variant, {"verdict": "eager_error", "error": f"{type(e).__name__}: {str(e)[:200]}"})
            continue
        emit(family, cls, variant, explain(model, x), towers_run=ran, inputs=sorted(x))


def main() -> None:
    only = set(sys.argv[1:])
    for family, cases in (("vlm_bases_tower", BASES), ("vlm_heads", HEADS)):
        for model_type, cls in cases:
            if not only or cls in only:
                guarded(family, cls, lambda: case(family, model_type, cls))


if __name__ == "__main__":
    main_guard(main)
