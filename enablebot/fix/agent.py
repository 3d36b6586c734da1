"""The patch agent's attempt loop: ask -> extract -> guard -> apply in an overlay -> verify,
feeding each failure back, up to N attempts under the LLM budget.

The verifier is injected (`verify(overlay_dir, patch) -> Verification`) and runs out of the
agent's reach; the LLM only ever sees its reports. Every candidate is applied to the
original installed files in a fresh overlay directory.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..results import Serializable
from . import prompts
from .context import BreakContext
from .llm import BudgetExceeded, LLMClient, LLMUnavailable
from .overlay import PatchApplyError, build_overlay
from .patchguard import CheckedPatch, PatchPolicy, PatchRejected, check_patch, extract_diff
from .verify import Verification

CandidateVerifier = Callable[[str, CheckedPatch], Verification]


@dataclass
class Attempt(Serializable):
    n: int
    stage: str  # the stage reached: llm | extract | guard | apply | verify
    ok: bool = False
    feedback: str = ""
    files: list[str] = field(default_factory=list)
    diff: str | None = None  # canonical diff (recomputed from the overlay) once it applied
    overlay_dir: str | None = None
    verification: Verification | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class AgentResult(Serializable):
    attempts: list[Attempt] = field(default_factory=list)
    best: Attempt | None = None
    stopped: str = ""  # verified | attempts | budget | llm_unavailable
    prompt_tokens: int = 0
    completion_tokens: int = 0


def _score(a: Attempt) -> tuple:
    """Prefer fewer graphs and breaks, then the faster candidate."""
    after = a.verification.after if a.verification else None
    return (-(after.graphs or 0) if after else 0, -(after.graph_breaks or 0) if after else 0,
            a.verification.speed_ratio or 0.0 if a.verification else 0.0)


def run_agent(ctx: BreakContext, llm: LLMClient, policy: PatchPolicy, verify: CandidateVerifier, *,
              attempts: int, work_dir: Path, stop_on_success: bool = True) -> AgentResult:
    values = ctx.prompt_values()
    messages = [{"role": "system", "content": prompts.render("fix_system", allowed_paths=", ".join(policy.allowed_globs()))},
                {"role": "user", "content": prompts.render("fix_user", **values)}]
    result = AgentResult()
    for n in range(1, attempts + 1):
        why = llm.budget.exhausted()
        if why:
            result.stopped = "budget"
            break
        attempt = Attempt(n=n, stage="llm")
        result.attempts.append(attempt)
        try:
            reply = llm.chat(messages)
        except BudgetExceeded as e:
            attempt.feedback, result.stopped = str(e), "budget"
            break
        except LLMUnavailable as e:
            attempt.feedback, result.stopped = str(e), "llm_unavailable"
            break
        attempt.prompt_tokens, attempt.completion_tokens = reply.prompt_tokens, reply.completion_tokens
        messages.append({"role": "assistant", "content": reply.text})
        _try_candidate(attempt, reply.text, policy, verify, work_dir)
        if attempt.ok:
            if result.best is None or _score(attempt) > _score(result.best):
                result.best = attempt
            if stop_on_success:
                result.stopped = "verified"
                break
        if n < attempts:
            messages.append({"role": "user", "content": prompts.render(
                "fix_retry", attempt=n, stage=attempt.stage, feedback=attempt.feedback)})
    if not result.stopped:
        result.stopped = "verified" if result.best else "attempts"
    result.prompt_tokens = llm.budget.prompt_tokens
    result.completion_tokens = llm.budget.completion_tokens
    # Keep only the best candidate's overlay on disk.
    for a in result.attempts:
        if a.overlay_dir and a is not result.best:
            shutil.rmtree(a.overlay_dir, ignore_errors=True)
    return result


def _try_candidate(attempt: Attempt, text: str, policy: PatchPolicy, verify: CandidateVerifier, work_dir: Path) -> None:
    attempt.stage = "extract"
    diff = extract_diff(text)
    if diff is None:
        attempt.feedback = "the reply contains no unified diff; answer with one ```diff fenced block"
        return
    attempt.stage = "guard"
    try:
        checked = check_patch(diff, policy)
    except PatchRejected as e:
        attempt.feedback = f"patch rejected: {e}"
        return
    attempt.files = checked.files
    attempt.stage = "apply"
    overlay_dir = work_dir / f"attempt-{attempt.n}"
    shutil.rmtree(overlay_dir, ignore_errors=True)
    try:
        overlay = build_overlay(checked.diff, overlay_dir)
    except PatchApplyError as e:
        attempt.feedback = f"patch does not apply: {e}"
        shutil.rmtree(overlay_dir, ignore_errors=True)
        return
    attempt.diff, attempt.overlay_dir = overlay.canonical_diff, str(overlay_dir)
    attempt.stage = "verify"
    ver = verify(str(overlay_dir), checked)
    attempt.verification = ver
    attempt.ok = ver.passed
    attempt.feedback = "verified" if ver.passed else ver.feedback()
