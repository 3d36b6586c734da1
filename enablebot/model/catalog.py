"""What the installed transformers knows: model types, their classes, heads and modality.

Read from transformers' auto mappings (`MODEL_*_MAPPING_NAMES`), never from a
hand-kept list, so a newer transformers brings its new architectures with it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import lru_cache

# Main task heads, best first: the first mapping that has a class for a model_type
# gives its `head` and `task`. The modality follows from the task.
HEAD_PRIORITY: tuple[tuple[str, str, str], ...] = (
    # Encoder-decoders first: bart/whisper also have a decoder-only *ForCausalLM.
    ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", "speech-seq2seq", "audio"),
    ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "seq2seq-lm", "text"),
    ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "image-text-to-text", "multimodal"),
    ("MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES", "multimodal-lm", "multimodal"),
    ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "causal-lm", "text"),
    ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "masked-lm", "text"),
    ("MODEL_FOR_CTC_MAPPING_NAMES", "ctc", "audio"),
    ("MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES", "audio-classification", "audio"),
    ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "image-classification", "vision"),
    ("MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES", "video-classification", "video"),
    ("MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES", "semantic-segmentation", "vision"),
    ("MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES", "depth-estimation", "vision"),
    ("MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES", "object-detection", "vision"),
    ("MODEL_FOR_TIME_SERIES_PREDICTION_MAPPING_NAMES", "time-series-prediction", "timeseries"),
    ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "sequence-classification", "text"),
    ("MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES", "token-classification", "text"),
    ("MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES", "question-answering", "text"),
    ("MODEL_FOR_TEXT_TO_WAVEFORM_MAPPING_NAMES", "text-to-waveform", "text"),
    ("MODEL_FOR_TEXT_TO_SPECTROGRAM_MAPPING_NAMES", "text-to-spectrogram", "text"),
)

# Only for types with no base model and none of the heads above (backbones, matting, keypoints,
# retrieval, ...): without these they would silently drop out of "every model_type that has a
# model class". Kept apart so they never displace a base model's usual head.
HEAD_FALLBACK: tuple[tuple[str, str, str], ...] = (
    ("MODEL_FOR_UNIVERSAL_SEGMENTATION_MAPPING_NAMES", "universal-segmentation", "vision"),
    ("MODEL_FOR_KEYPOINT_DETECTION_MAPPING_NAMES", "keypoint-detection", "vision"),
    ("MODEL_FOR_KEYPOINT_MATCHING_MAPPING_NAMES", "keypoint-matching", "vision"),
    ("MODEL_FOR_POSE_ESTIMATION_MAPPING_NAMES", "pose-estimation", "vision"),
    ("MODEL_FOR_IMAGE_MATTING_MAPPING_NAMES", "image-matting", "vision"),
    ("MODEL_FOR_TABLE_RECOGNITION_MAPPING_NAMES", "table-recognition", "vision"),
    ("MODEL_FOR_RETRIEVAL_MAPPING_NAMES", "retrieval", "multimodal"),
    ("MODEL_FOR_BACKBONE_MAPPING_NAMES", "backbone", "vision"),
    ("MODEL_FOR_DECISION_MAPPING_NAMES", "decision", "timeseries"),
    ("MODEL_FOR_PRETRAINING_MAPPING_NAMES", "pretraining", "text"),
)

# Mappings whose presence tells the modality when the head does not.
_MODALITY_HINTS: tuple[tuple[str, str], ...] = (
    ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "multimodal"),
    ("MODEL_FOR_VISUAL_QUESTION_ANSWERING_MAPPING_NAMES", "multimodal"),
    ("MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES", "multimodal"),
    ("MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES", "video"),
    ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", "audio"),
    ("MODEL_FOR_CTC_MAPPING_NAMES", "audio"),
    ("MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES", "audio"),
    ("MODEL_FOR_AUDIO_XVECTOR_MAPPING_NAMES", "audio"),
    ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "vision"),
    ("MODEL_FOR_IMAGE_MAPPING_NAMES", "vision"),
    ("MODEL_FOR_BACKBONE_MAPPING_NAMES", "vision"),
    ("MODEL_FOR_TIME_SERIES_PREDICTION_MAPPING_NAMES", "timeseries"),
    ("MODEL_FOR_TIME_SERIES_CLASSIFICATION_MAPPING_NAMES", "timeseries"),
)


# Head tasks whose users call generate(): these heads also get the `decode` scenario.
GENERATIVE_TASKS = frozenset({"speech-seq2seq", "seq2seq-lm", "image-text-to-text", "multimodal-lm", "causal-lm"})


@dataclass(frozen=True)
class KnownArch:
    model_type: str
    config_class: str
    base: str | None
    head: str | None
    task: str | None
    modality: str
    classes: tuple[str, ...]  # every model class transformers maps this type to


def _mapping(name: str) -> dict[str, object]:
    import transformers.models.auto.modeling_auto as ma

    return dict(getattr(ma, name, {}) or {})


def _first_class(value: object) -> str | None:
    # Some mapping values are tuples of class names.
    if isinstance(value, (tuple, list)):
        return str(value[0]) if value else None
    return str(value) if value else None


@lru_cache(maxsize=1)
def known_architectures() -> dict[str, KnownArch]:
    """Every model_type of the installed transformers that has at least one model class."""
    import transformers.models.auto.modeling_auto as ma
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    all_maps = {n: _mapping(n) for n in dir(ma) if n.startswith("MODEL_") and n.endswith("_MAPPING_NAMES")}
    out: dict[str, KnownArch] = {}
    for mt, cfg_cls in CONFIG_MAPPING_NAMES.items():
        classes = sorted({c for m in all_maps.values() if mt in m for c in _iter_classes(m[mt])})
        if not classes:
            continue
        base = _first_class(all_maps["MODEL_MAPPING_NAMES"].get(mt))
        head, task, modality = _first_head(all_maps, mt, HEAD_PRIORITY)
        if not base and not head:
            head, task, modality = _first_head(all_maps, mt, HEAD_FALLBACK)
        for map_name, mod in _MODALITY_HINTS:
            if mt in all_maps.get(map_name, {}):
                if modality in (None, "text") or (modality == "vision" and mod == "multimodal"):
                    modality = mod
                break
        out[mt] = KnownArch(
            model_type=mt,
            config_class=str(cfg_cls),
            base=base,
            head=head,
            task=task,
            modality=modality or "text",
            classes=tuple(classes),
        )
    return out


def _first_head(all_maps: dict[str, dict[str, object]], mt: str,
                table: tuple[tuple[str, str, str], ...]) -> tuple[str | None, str | None, str | None]:
    """(class, task, modality) from the first mapping in `table` that has a class for `mt`."""
    for map_name, task_name, mod in table:
        cls = _first_class(all_maps.get(map_name, {}).get(mt))
        if cls:
            return cls, task_name, mod
    return None, None, None


def _iter_classes(value: object):
    if isinstance(value, (tuple, list)):
        yield from (str(v) for v in value if v)
    elif value:
        yield str(value)


def class_index() -> dict[str, str]:
    """Model class name -> model_type."""
    idx: dict[str, str] = {}
    for mt, a in known_architectures().items():
        for c in a.classes:
            idx.setdefault(c, mt)
    return idx


def suggest(name: str, n: int = 5) -> list[str]:
    """Close matches among known model types and class names, for 'did you mean'."""
    pool = list(known_architectures()) + list(class_index())
    lowered = {p.lower(): p for p in pool}
    hits = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.6)
    return [lowered[h] for h in hits]
