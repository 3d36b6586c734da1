"""Family: audio encoders in eval (peer breaks, the project gets one graph).

Wav2Vec2, Wav2Vec2-BERT, Wav2Vec2-Conformer, HuBERT, WavLM, SEW, UniSpeech, UniSpeech-SAT and
Xcodec, called on two waveforms of different lengths through their feature extractor (built
from its defaults, padding=True): as the extractor returns by default, and with
return_attention_mask=True. Each in eval mode (what `from_pretrained` returns) and, beside it,
the same forward with the module left in training mode (what `cls(config)` / `from_config`
returns before `.eval()`), under no_grad: SpecAugment's `_compute_mask_indices` (numpy, data
dependent) runs only in training mode, and its break is the one the peer reports in "eval".
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import emit, explain, guarded, main_guard, tiny_model  # noqa: E402

FAMILY = "audio_encoders_eval"
CASES = [
    ("wav2vec2", "Wav2Vec2Model", "Wav2Vec2FeatureExtractor"),
    ("wav2vec2-bert", "Wav2Vec2BertModel", "SeamlessM4TFeatureExtractor"),
    ("wav2vec2-conformer", "Wav2Vec2ConformerModel", "Wav2Vec2FeatureExtractor"),
    ("hubert", "HubertModel", "Wav2Vec2FeatureExtractor"),
    ("wavlm", "WavLMModel", "Wav2Vec2FeatureExtractor"),
    ("sew", "SEWModel", "Wav2Vec2FeatureExtractor"),
    ("unispeech", "UniSpeechModel", "Wav2Vec2FeatureExtractor"),
    ("unispeech-sat", "UniSpeechSatModel", "Wav2Vec2FeatureExtractor"),
    ("xcodec", "XcodecModel", "DacFeatureExtractor"),
]


def audio_inputs(extractor: str, model, mask: bool) -> dict:
    import numpy as np
    import transformers

    fe = getattr(transformers, extractor)()
    sr = getattr(fe, "sampling_rate", 16000)
    rng = np.random.default_rng(0)
    hop = int(getattr(getattr(model, "config", None), "hop_length", 0) or 320)
    n = 16 * hop  # two clips, the second a quarter shorter
    clips = [rng.standard_normal(n).astype("float32"), rng.standard_normal(n - n // 4).astype("float32")]
    takes = "return_attention_mask" in __import__("inspect").signature(fe.__call__).parameters
    kw = {"return_attention_mask": True} if mask and takes else {}
    out = dict(fe(clips, sampling_rate=sr, padding=True, return_tensors="pt", **kw))
    params = set(__import__("inspect").signature(model.forward).parameters)
    return {k: v for k, v in out.items() if k in params}


def case(model_type: str, cls: str, extractor: str) -> None:
    seen = set()
    for mask in (False, True):
        for variant, train in (("eval", False), ("train_mode_no_grad", True)):
            model = tiny_model(model_type, cls, train=train)
            inputs = audio_inputs(extractor, model, mask)
            tag = f"{variant}|{'mask' if 'attention_mask' in inputs or 'padding_mask' in inputs else 'no_mask'}"
            if tag in seen:
                continue  # the extractor's default already had (or cannot give) a mask
            seen.add(tag)
            emit(FAMILY, cls, tag, explain(model, inputs), inputs=sorted(inputs))


def main() -> None:
    only = set(sys.argv[1:])
    for model_type, cls, extractor in CASES:
        if not only or cls in only:
            guarded(FAMILY, cls, lambda: case(model_type, cls, extractor))


if __name__ == "__main__":
    main_guard(main)
