"""Families: single models where the project breaks and the peer gets one graph, by cause:
CohereAsr (`copy.deepcopy()` of the config when the default cache is built: Dynamo's deepcopy
polyfill, torch 2.12+, removed it) and HiggsAudioV2 (a function Dynamo is told to skip).

Each is called as its model card does with the default cache, then with `use_cache=False`
(which a harness that turns the cache off measures)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import emit, explain, guarded, main_guard, project_inputs, tiny_model  # noqa: E402

FAMILY = "misc_breaks"
CASES = [("cohere_asr", "CohereAsrForConditionalGeneration"), ("higgs_audio_v2", "HiggsAudioV2ForConditionalGeneration")]


def case(model_type: str, cls: str) -> None:
    import inspect

    model = tiny_model(model_type, cls)
    x = project_inputs(model_type, model)
    emit(FAMILY, cls, "eval|default_cache", explain(model, x), inputs=sorted(x))
    if "use_cache" in inspect.signature(model.forward).parameters:
        emit(FAMILY, cls, "eval|use_cache_false", explain(model, {**x, "use_cache": False}), inputs=sorted(x))


def main() -> None:
    only = set(sys.argv[1:])
    for model_type, cls in CASES:
        if not only or cls in only:
            guarded(FAMILY, cls, lambda: case(model_type, cls))


if __name__ == "__main__":
    main_guard(main)
