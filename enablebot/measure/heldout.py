"""The children of the held-out numerics check (`fix.judge.reference.reference_numerics` is the parent):

  dump   (unpatched child)  build the tiny model, save its weights, the inputs, the eager
                            outputs in the run dtype and the fp64 eager outputs;
  check  (patched child)    build the model with the overlay and the Dynamo settings, load
                            the saved weights (strict: a patch may not change parameters),
                            compile, run on the saved inputs, compare with numerics.compare
                            (ref = unpatched eager, fp64 = unpatched fp64).

Both run inside `python -m enablebot.execute.worker reference-dump|reference-check ...`, the one child
entry point, which installs the overlay (sandboxed) before torch is imported.
"""

from __future__ import annotations

from typing import Any

from ..results import Numerics, RunSpec


def _build(spec: RunSpec) -> tuple[Any, dict[str, Any]]:
    from ..model.prepare import prepare

    p = prepare(spec, reuse=False)
    return p.model.eval(), p.inputs


def _config_text(model: Any) -> str:
    cfg = getattr(model, "config", None)
    return cfg.to_json_string(use_diff=False) if hasattr(cfg, "to_json_string") else ""


def _flat(out: Any) -> dict[str, Any]:
    from .numerics import flatten

    return {k: v.detach().cpu() for k, v in flatten(out)}


def _dtype(spec: RunSpec) -> Any:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[spec.dtype]


def dump(spec: RunSpec, data_path: str) -> dict[str, Any]:
    import copy

    import torch

    from .tensors import to_device as _to  # imported late: the overlay goes in before anything imports torch

    model, inputs = _build(spec)
    fp64_model = copy.deepcopy(model).to(device=spec.device, dtype=torch.float64)
    model = model.to(device=spec.device, dtype=_dtype(spec))
    with torch.no_grad():
        eager = _flat(model(**_to(inputs, spec.device, _dtype(spec))))
        try:
            fp64 = _flat(fp64_model(**_to(inputs, spec.device, torch.float64)))
        except Exception:  # noqa: BLE001 - some ops have no fp64 kernel (CPU grouped_mm of MoE experts):
            fp64 = None  # compare without the fp64 reference, as the runner's own numerics do
    torch.save({"state_dict": {k: v.cpu() for k, v in model.state_dict().items()}, "inputs": inputs,
                "eager": eager, "fp64": fp64, "config": _config_text(model)}, data_path)
    return {"ok": True, "outputs": sorted(eager)}


def check(spec: RunSpec, data_path: str) -> dict[str, Any]:
    import torch

    from .numerics import compare, default_tol
    from .runner import apply_dynamo_config as _apply_dynamo_config
    from .tensors import to_device as _to

    _apply_dynamo_config(spec.dynamo_config)
    saved = torch.load(data_path, weights_only=False)  # written by our own dump child
    model, _ = _build(spec)
    if _config_text(model) != saved.get("config"):
        # The builder (shrink rules, registry) changed since the reference was made: the two
        # models would differ for reasons other than the patch.
        msg = "the model config differs from the reference's; re-run to rebuild the reference"
        return Numerics(passed=False, tol=0.0, method="error", message=msg).to_dict()
    try:
        model.load_state_dict(saved["state_dict"], strict=True)
    except RuntimeError as e:
        msg = f"the patched model's parameters differ from the unpatched model's: {str(e)[:500]}"
        return Numerics(passed=False, tol=0.0, method="mismatch", message=msg).to_dict()
    model = model.to(device=spec.device, dtype=_dtype(spec))
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=spec.backend, dynamic=spec.dynamic or None)
    with torch.no_grad():
        out = _flat(compiled(**_to(saved["inputs"], spec.device, _dtype(spec))))
    return compare(saved["eager"], out, saved["fp64"], tol=default_tol("eval", spec.dtype)).to_dict()
