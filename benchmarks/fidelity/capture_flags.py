"""Family: peer gets one graph, the project breaks, on a data-dependent call: `.item()` (XLM,
Flaubert, Pixtral's vision model), data-dependent operators (JetMoe's `expert_size.tolist()`)
and dynamic-shape operators (boolean-mask indexing: Idefics2, Gemma 4's vision model, X-MOD).

Each model's user call (tokenizer-style padded text; the project's image inputs for the vision
models) compiled under Dynamo's defaults, which is what `torch.compile(model)` gives a user,
then with `capture_scalar_outputs` and `capture_dynamic_output_shape_ops` on, which removes
exactly these breaks (and which a harness may set globally)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import emit, explain, guarded, main_guard, padded_text, project_inputs, tiny_model  # noqa: E402

FAMILY = "data_dependent_defaults"
CASES = [("xlm", "XLMModel", "text"), ("flaubert", "FlaubertModel", "text"),
         ("pixtral", "PixtralVisionModel", "project"), ("jetmoe", "JetMoeModel", "left"),
         ("idefics2", "Idefics2Model", "project"), ("gemma4_vision", "Gemma4VisionModel", "project"),
         ("xmod", "XmodModel", "text")]
FLAGS = {"capture_scalar_outputs": True, "capture_dynamic_output_shape_ops": True}


def case(model_type: str, cls: str, kind: str) -> None:
    model = tiny_model(model_type, cls)
    if kind == "project":
        x = project_inputs(model_type, model)
    else:
        x = padded_text(model, model.config, left=(kind == "left"))
    x = {k: v for k, v in x.items() if k in __import__("inspect").signature(model.forward).parameters}
    emit(FAMILY, cls, "eval|dynamo_defaults", explain(model, x), inputs=sorted(x))
    emit(FAMILY, cls, "eval|capture_flags_on", explain(model, x, dynamo_config=FLAGS), inputs=sorted(x))


def main() -> None:
    only = set(sys.argv[1:])
    for model_type, cls, kind in CASES:
        if not only or cls in only:
            guarded(FAMILY, cls, lambda: case(model_type, cls, kind))


if __name__ == "__main__":
    main_guard(main)
