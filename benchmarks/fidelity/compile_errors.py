"""Family: the harness's compile_error where the peer ran (transformers 5.17): UDOP, Autoformer,
Informer, BridgeTower.

A compile_error is a finding when a user's call hits it too. Each model compiled (Dynamo,
non-fullgraph, as `torch.compile(model)` runs it) on the project's `call` inputs (UDOP: ids,
boxes and a page image as its processor returns them; the time-series models: past values,
time features and the observed mask as their model cards pass them; BridgeTower: text and image),
and again unpadded (every mask all ones), to show whether the error needs the padding. Eager runs
both first."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import eager_ok, emit, explain, guarded, main_guard, tiny_model  # noqa: E402

FAMILY = "compile_errors_517"
CASES = [("udop", "UdopModel"), ("autoformer", "AutoformerModel"), ("informer", "InformerModel"),
         ("bridgetower", "BridgeTowerModel")]


def case(model_type: str, cls: str) -> None:
    from enablebot.model.inputs import build_inputs
    from enablebot.model.padding import pad_batch
    from enablebot.model.registry import Registry
    from enablebot.model.resolve import resolve

    model = tiny_model(model_type, cls)
    res = resolve(model_type, Registry.load_cached(None))
    raw = build_inputs(model, model.config, res.entry.modality if res.entry else "text",
                       res.entry.inputs if res.entry else None)
    padded, _ = pad_batch(model, model.config, raw)
    for variant, x in (("call_padded", padded), ("unpadded", raw)):
        err = eager_ok(model, x)
        if err:
            emit(FAMILY, cls, variant, {"verdict": "eager_error", "error": err})
            continue
        emit(FAMILY, cls, variant, explain(model, x), inputs=sorted(x))


def main() -> None:
    only = set(sys.argv[1:])
    for model_type, cls in CASES:
        if not only or cls in only:
            guarded(FAMILY, cls, lambda: case(model_type, cls))


if __name__ == "__main__":
    main_guard(main)
