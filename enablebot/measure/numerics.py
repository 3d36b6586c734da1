"""Compiled-vs-eager numerics with an fp64 reference, after torch._dynamo.utils.same.

For every tensor in the output structure (matched by path):
  1. allclose(ref, res, atol=rtol=tol) passes;
  2. else, with an fp64 reference: pass when
       rmse(fp64, res) <= multiplier * rmse(fp64, ref) + tol / 10
     multiplier 2.0; 3.0 for fp16/bf16 results, tensors with < 1000 elements, or tol >= 2e-2;
  3. without an fp64 reference (it failed to run): cosine similarity >= 0.99 over the
     flattened fp32 tensor.
`ref` is the eager result in the run dtype, `res` the compiled result. Integer and bool
tensors must match exactly. The worst output (largest rmse ratio) is reported.

Status pass | fail | inconclusive. When two eager runs are not bitwise equal, they must
still agree within the tolerance (allclose, atol=rtol=tol); if not, the model is not
deterministic beyond the tolerance and compiled-vs-eager is `inconclusive` (never pass:
`passed` is False), whatever the compiled output looks like.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator

from ..results import Numerics

DEFAULT_TOL = {("eval", "float32"): 1e-3, ("train", "float32"): 1e-2,
               ("eval", "bfloat16"): 1e-2, ("train", "bfloat16"): 2e-2}


def default_tol(mode: str, dtype: str) -> float:
    return DEFAULT_TOL.get((mode, dtype), 1e-2)


def flatten(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(path, tensor) pairs of a nested output: ModelOutput, dict, list/tuple, tensors."""
    import torch

    if isinstance(obj, torch.Tensor):
        yield prefix or "output", obj
    elif hasattr(obj, "to_tuple") and hasattr(obj, "keys"):  # transformers ModelOutput
        for k in obj.keys():
            yield from flatten(obj[k], f"{prefix}.{k}" if prefix else k)
    elif isinstance(obj, dict):
        for k in obj:
            yield from flatten(obj[k], f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from flatten(v, f"{prefix}[{i}]")


def rmse(a: Any, b: Any) -> float:
    import torch

    return float(torch.sqrt(torch.mean(torch.square(a.double() - b.double()))).item())


@dataclass
class TensorCheck:
    path: str
    passed: bool
    method: str
    err: float | None = None  # rmse(fp64, res)
    ref_err: float | None = None  # rmse(fp64, ref)
    message: str = ""

    @property
    def ratio(self) -> float:
        if self.err is None:
            return 0.0 if self.passed else math.inf
        return self.err / max(self.ref_err or 0.0, 1e-12)


def check_tensor(path: str, ref: Any, res: Any, fp64: Any | None, tol: float) -> TensorCheck:
    import torch

    if ref.shape != res.shape:
        return TensorCheck(path, False, "mismatch", message=f"shape {tuple(res.shape)} != {tuple(ref.shape)}")
    if not ref.is_floating_point() and not ref.is_complex():
        ok = torch.equal(ref.cpu(), res.cpu())
        return TensorCheck(path, ok, "exact", message="" if ok else "integer outputs differ")
    ref32, res32 = ref.detach().float().cpu(), res.detach().float().cpu()
    finite_ref = torch.isfinite(ref32)
    if not torch.equal(finite_ref, torch.isfinite(res32)):
        return TensorCheck(path, False, "mismatch", message="nan/inf in different places")
    ref32, res32 = ref32[finite_ref], res32[finite_ref]
    if ref32.numel() == 0 or torch.allclose(ref32, res32, atol=tol, rtol=tol):
        return TensorCheck(path, True, "allclose")
    if fp64 is not None and fp64.shape == ref.shape:
        f64 = fp64.detach().double().cpu()[finite_ref]
        res_err, ref_err = rmse(f64, res32), rmse(f64, ref32)
        low_precision = res.dtype in (torch.float16, torch.bfloat16)
        multiplier = 3.0 if (low_precision or ref.numel() < 1000 or tol >= 2e-2) else 2.0
        ok = res_err <= multiplier * ref_err + tol / 10.0
        msg = "" if ok else f"rmse(fp64, compiled)={res_err:.3g} > {multiplier} * rmse(fp64, eager)={ref_err:.3g} + {tol / 10:.1g}"
        return TensorCheck(path, ok, "rmse", res_err, ref_err, msg)
    cos = float(torch.nn.functional.cosine_similarity(ref32.flatten(), res32.flatten(), dim=0, eps=1e-6).item())
    ok = cos >= 0.99
    return TensorCheck(path, ok, "cosine", message=f"cosine similarity {cos:.4f}" + ("" if ok else " < 0.99"))


def compare(ref: Any, res: Any, fp64: Any | None, *, tol: float, eager_deterministic: bool = True,
            eager_again: Any | None = None) -> Numerics:
    """Judge compiled output `res` against eager `ref`, with `fp64` the fp64 eager output.
    `eager_again`: a second eager output that is not bitwise equal to `ref` (see module doc)."""
    n = _compare(ref, res, fp64, tol=tol, eager_deterministic=eager_deterministic)
    if eager_again is None:
        return n
    refs, agains = dict(flatten(ref)), dict(flatten(eager_again))
    errs = [rmse(refs[k], agains[k]) for k in refs if k in agains and refs[k].is_floating_point()
            and refs[k].shape == agains[k].shape]
    n.eager_self_error = max(errs) if errs else None
    n.eager_deterministic = False
    if not eager_consistent(refs, agains, tol):
        n.passed, n.status = False, "inconclusive"
        n.message = (f"eager disagrees with itself beyond tol {tol:g} (rmse(eager, eager) "
                     f"{n.eager_self_error if n.eager_self_error is not None else float('nan'):.3g}): compiled vs eager "
                     f"cannot be judged; compiled vs eager alone: {n.message}")
    return n


def eager_consistent(refs: dict[str, Any], agains: dict[str, Any], tol: float) -> bool:
    """Two eager runs agree within the tolerance: allclose(atol=rtol=tol) on every output.
    No fp64 leniency here: a noisy eager is also noisy in fp64, so the rmse rule would excuse it."""
    import torch

    if set(refs) != set(agains):
        return False
    for k, a in refs.items():
        b = agains[k]
        if a.shape != b.shape:
            return False
        a, b = a.detach().cpu(), b.detach().cpu()
        if not a.is_floating_point():
            if not torch.equal(a, b):
                return False
        elif not torch.allclose(a.float(), b.float(), atol=tol, rtol=tol, equal_nan=True):
            return False
    return True


def _compare(ref: Any, res: Any, fp64: Any | None, *, tol: float, eager_deterministic: bool = True) -> Numerics:
    refs = dict(flatten(ref))
    ress = dict(flatten(res))
    f64s = dict(flatten(fp64)) if fp64 is not None else {}
    if set(refs) != set(ress):
        missing = sorted(set(refs) ^ set(ress))
        return Numerics(passed=False, tol=tol, method="mismatch", eager_deterministic=eager_deterministic,
                        n_tensors=len(refs), message=f"output structure differs at {missing[:5]}")
    checks = [check_tensor(p, refs[p], ress[p], f64s.get(p), tol) for p in refs]
    failed = [c for c in checks if not c.passed]
    pool = failed or [c for c in checks if c.err is not None] or checks
    worst = max(pool, key=lambda c: c.ratio) if pool else None
    methods = sorted({c.method for c in checks})
    return Numerics(
        passed=not failed and bool(checks),
        tol=tol,
        method=worst.method if worst else ",".join(methods),
        eager_deterministic=eager_deterministic,
        n_tensors=len(checks),
        worst_output=worst.path if worst else None,
        worst_error=worst.err if worst else None,
        worst_ref_error=worst.ref_err if worst else None,
        message=(f"{len(failed)}/{len(checks)} outputs fail; worst {worst.path}: {worst.message}" if failed and worst
                 else ("no tensor outputs" if not checks else f"{len(checks)} outputs pass")),
    )


def outputs_equal(a: Any, b: Any) -> bool:
    """Bitwise equality of two eager runs (the harness's `eager_two_runs_differ` check)."""
    import torch

    fa, fb = dict(flatten(a)), dict(flatten(b))
    if set(fa) != set(fb):
        return False
    return all(torch.equal(fa[k].detach().cpu(), fb[k].detach().cpu()) for k in fa)
