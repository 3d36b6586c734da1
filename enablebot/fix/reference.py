"""Held-out numerics: the patched, compiled model against the UNPATCHED model's eager outputs.

The runner's own numerics compare compiled against eager inside one process, so a patch to
the model code that changes what the model computes would pass there (eager is patched
too). Here the reference comes from a process without the overlay:

  dump   (unpatched child)  build the tiny model, save its weights, the inputs, the eager
                            outputs in the run dtype and the fp64 eager outputs;
  check  (patched child)    build the model with the overlay and the Dynamo settings, load
                            the saved weights (strict: a patch may not change parameters),
                            compile, run on the saved inputs, compare with
                            enablebot.numerics.compare (ref = unpatched eager, fp64 = unpatched fp64).

Run as `python -m enablebot.fix.reference dump|check SPEC.json DATA.pt OUT.json`; the
parent side is `reference_numerics`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..results import Numerics, RunSpec


def _build(spec: RunSpec) -> tuple[Any, dict[str, Any]]:
    from ..prepare import prepare

    p = prepare(spec, reuse=False)
    return p.model.eval(), p.inputs


def _config_text(model: Any) -> str:
    cfg = getattr(model, "config", None)
    return cfg.to_json_string(use_diff=False) if hasattr(cfg, "to_json_string") else ""


def _flat(out: Any) -> dict[str, Any]:
    from ..numerics import flatten

    return {k: v.detach().cpu() for k, v in flatten(out)}


def _dtype(spec: RunSpec) -> Any:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[spec.dtype]


def dump(spec: RunSpec, data_path: str) -> dict[str, Any]:
    import copy

    import torch

    from ..tensors import to_device as _to  # imported late: the overlay goes in before anything imports torch

    model, inputs = _build(spec)
    fp64_model = copy.deepcopy(model).to(device=spec.device, dtype=torch.float64)
    model = model.to(device=spec.device, dtype=_dtype(spec))
    with torch.no_grad():
        eager = _flat(model(**_to(inputs, spec.device, _dtype(spec))))
        fp64 = _flat(fp64_model(**_to(inputs, spec.device, torch.float64)))
    torch.save({"state_dict": {k: v.cpu() for k, v in model.state_dict().items()}, "inputs": inputs,
                "eager": eager, "fp64": fp64, "config": _config_text(model)}, data_path)
    return {"ok": True, "outputs": sorted(eager)}


def check(spec: RunSpec, data_path: str) -> dict[str, Any]:
    import torch

    from ..numerics import compare, default_tol
    from ..runner import apply_dynamo_config as _apply_dynamo_config
    from ..tensors import to_device as _to

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


def main(argv: list[str] | None = None) -> int:
    mode, spec_path, data_path, out_path = (argv or sys.argv[1:])[:4]
    raw = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    if mode == "check" and raw.get("overlay_dir"):
        from .overlay import install_overlay  # before torch / transformers are imported

        install_overlay(raw["overlay_dir"])
    spec = RunSpec.from_dict(raw)
    out = dump(spec, data_path) if mode == "dump" else check(spec, data_path)
    Path(out_path).write_text(json.dumps(out), encoding="utf-8")
    return 0


def _run(mode: str, spec: RunSpec, data_path: Path, timeout_s: float, log_path: Path) -> dict[str, Any]:
    from ..isolation import child_command

    work = Path(tempfile.mkdtemp(prefix="enablebot-ref-"))
    spec_path, out_path = work / "spec.json", work / "out.json"
    spec_path.write_text(json.dumps(spec.to_dict()), encoding="utf-8")
    with open(log_path, "ab") as log:
        # The patched (check) child is sandboxed: it may write only its own work dir, never the dump.
        writable = [work] + ([data_path.parent] if mode == "dump" else [])
        argv, env = child_command([sys.executable, "-m", "enablebot.fix.reference", mode, str(spec_path),
                                   str(data_path), str(out_path)], spec, writable=writable,
                                  readable=[data_path] if mode == "check" else [])
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return {"error": f"{mode}: no result after {timeout_s:.0f} s"}
    if proc.returncode != 0 or not out_path.is_file():
        tail = log_path.read_text(encoding="utf-8", errors="replace")[-1500:]
        return {"error": f"{mode}: the child exited with status {proc.returncode}: {tail}"}
    return json.loads(out_path.read_text(encoding="utf-8"))


def reference_numerics(spec: RunSpec, *, cache_dir: Path, timeout_s: float = 600.0) -> Numerics:
    """Compiled `spec` (with its overlay and Dynamo settings) against the unpatched eager model
    built from the same spec. The unpatched dump is cached in `cache_dir` per model/seed/shape."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    tag = f"{spec.model_id}-{spec.task}-{spec.seed}-{spec.batch_size}x{spec.seq_len}-{spec.dtype}-{spec.device}"
    tag = "".join(c if c.isalnum() or c in "-_." else "_" for c in tag)
    data_path, log_path = cache_dir / f"{tag}.pt", cache_dir / f"{tag}.log"
    if not data_path.is_file():
        plain = RunSpec.from_dict({**spec.to_dict(), "overlay_dir": None, "dynamo_config": {}})
        got = _run("dump", plain, data_path, timeout_s, log_path)
        if "error" in got:
            return Numerics(passed=False, tol=0.0, method="error", message=f"unpatched reference failed: {got['error']}")
    got = _run("check", spec, data_path, timeout_s, log_path)
    if "error" in got:
        return Numerics(passed=False, tol=0.0, method="error", message=got["error"])
    return Numerics.from_dict(got)


if __name__ == "__main__":
    sys.exit(main())
