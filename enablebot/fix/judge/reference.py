"""Held-out numerics: the patched, compiled model against the UNPATCHED model's eager outputs.

The runner's own numerics compare compiled against eager inside one process, so a patch to
the model code that changes what the model computes would pass there (eager is patched
too). Here the reference comes from a process without the overlay:

  dump   (unpatched child)  build the tiny model, save its weights, the inputs, the eager
                            outputs in the run dtype and the fp64 eager outputs;
  check  (patched child)    build the model with the overlay and the Dynamo settings, load
                            the saved weights (strict: a patch may not change parameters),
                            compile, run on the saved inputs, compare with
                            enablebot.measure.numerics.compare (ref = unpatched eager, fp64 = unpatched fp64).

This module is the parent side (`reference_numerics`); the children are the one child entry
point, `python -m enablebot.execute.worker reference-dump|reference-check SPEC.json DATA.pt OUT.json`,
running `enablebot.measure.heldout.dump` / `check`.
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

from ...results import Numerics, RunSpec


def _run(mode: str, spec: RunSpec, data_path: Path, timeout_s: float, log_path: Path) -> dict[str, Any]:
    from ...execute.isolation import child_command

    work = Path(tempfile.mkdtemp(prefix="enablebot-ref-"))
    spec_path, out_path = work / "spec.json", work / "out.json"
    spec_path.write_text(json.dumps(spec.to_dict()), encoding="utf-8")
    with open(log_path, "ab") as log:
        # The patched (check) child is sandboxed: it may write only its own work dir, never the dump.
        writable = [work] + ([data_path.parent] if mode == "dump" else [])
        argv, env = child_command([sys.executable, "-m", "enablebot.execute.worker", f"reference-{mode}", str(spec_path),
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

