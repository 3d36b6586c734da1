"""The judge a drafter is handed: guard -> apply in a fresh overlay -> verify, once per distinct
patch. Everything here is trusted code; the candidate's diff is the only input taken from the
drafter, and it is parsed and policed before anything is written.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Callable

from ..candidate import Candidate, Judge, Judgement, patch_key
from .overlay import PatchApplyError, build_overlay
from .patchguard import CheckedPatch, PatchPolicy, PatchRejected, check_patch
from .verify import Verification

Verify = Callable[[str, CheckedPatch], Verification]


def make_judge(policy: PatchPolicy, verify: Verify, work_dir: Path) -> Judge:
    """A judge that never verifies the same patch twice (an identical candidate gets the first
    judgement back) and keeps each verified candidate's overlay under `work_dir`. Thread-safe:
    a drafter may judge several candidates at once."""
    seen: dict[str, Judgement] = {}
    lock = threading.Lock()
    counter = iter(range(1, 1 << 30))

    def judge(c: Candidate) -> Judgement:
        key = patch_key(c.diff)
        with lock:
            if key in seen:
                return seen[key]
            n = next(counter)
        j = _judge_one(c, policy, verify, Path(work_dir) / f"candidate-{n}")
        with lock:
            seen[key] = j
        return j

    return judge


def _judge_one(c: Candidate, policy: PatchPolicy, verify: Verify, overlay_dir: Path) -> Judgement:
    started = time.time()
    try:
        checked = check_patch(c.diff, policy)
    except PatchRejected as e:
        return Judgement(stage="guard", feedback=f"patch rejected: {e}", duration_s=round(time.time() - started, 2))
    shutil.rmtree(overlay_dir, ignore_errors=True)
    try:
        overlay = build_overlay(checked.diff, overlay_dir)
    except PatchApplyError as e:
        shutil.rmtree(overlay_dir, ignore_errors=True)
        return Judgement(stage="apply", feedback=f"patch does not apply: {e}", files=checked.files,
                         duration_s=round(time.time() - started, 2))
    ver = verify(str(overlay_dir), checked)
    return Judgement(stage="verify", ok=ver.passed, feedback="verified" if ver.passed else ver.feedback(),
                     files=checked.files, diff=overlay.canonical_diff, overlay_dir=str(overlay_dir),
                     graphs=ver.after.graphs, graph_breaks=ver.after.graph_breaks, speed_ratio=ver.speed_ratio,
                     duration_s=round(time.time() - started, 2), verification=ver)
