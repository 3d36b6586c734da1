"""The candidate search: the fix ideas the scaffolding can supply, then rounds of LLM samples,
every distinct candidate judged by the `Judge` this module is handed, the best one kept.

Where the ideas come from, in order:
1. **playbook rewrites** (`draft.rewrites`): a playbook entry matched on the GB id *and* the code
   at the break site, applied as an executable rewrite. No LLM needed; the judge decides.
2. **model drafts**: each round asks the LLM for N samples (the first greedy, the rest at a
   temperature with distinct seeds), with the break, the source around every break frame, the
   matching playbook ideas and verified fixes of other clusters (`draft.retrieval`). Replies may
   use whole functions, search/replace blocks or a unified diff (`draft.edits`); the tool, not
   the model, turns them into the diff the judge parses. Identical candidates are judged once.
   A retry round shows the failed candidates and why, and asks for a different approach.
Every candidate records its source, so a fix rate says what did the work.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from ...results import Serializable
from ..candidate import Candidate, Judge, Judgement, patch_key
from . import edits as ed
from . import prompts
from .context import BreakContext
from .llm import BudgetExceeded, LLMClient, LLMUnavailable
from .rewrites import Rewrite, rewrite_diff


@dataclass
class SearchOptions:
    rounds: int = 2  # LLM rounds (0: rewrites only)
    samples: int = 3  # LLM samples per round
    temperature: float = 0.8  # for every sample but a round's first (greedy)
    seed: int = 1234  # sample k of round r uses seed + 100 * r + k
    parallel: int = 1  # candidates judged at once (each verification runs child processes)
    stop_on_success: bool = True  # stop after the first stage (rewrites, a round) that verified


@dataclass
class CandidateRecord(Serializable):
    n: int
    source: str  # rewrite:<entry> | model | model+idea:<entries>
    round: int = 0  # 0: rewrites; 1..: LLM rounds
    stage: str = "llm"  # the stage reached: llm | edit | guard | apply | verify
    ok: bool = False
    feedback: str = ""
    files: list[str] = field(default_factory=list)
    diff: str | None = None  # the candidate as the judge saw it (the canonical diff once it applied)
    duplicate_of: int | None = None  # identical to candidate N: not judged again
    seed: int | None = None
    temperature: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    llm_s: float = 0.0
    judge_s: float = 0.0
    graphs: int | None = None
    graph_breaks: int | None = None
    speed_ratio: float | None = None


@dataclass
class SearchResult(Serializable):
    candidates: list[CandidateRecord] = field(default_factory=list)
    best: CandidateRecord | None = None
    stopped: str = ""  # verified | exhausted | budget | llm_unavailable | no_llm
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_s: float = 0.0
    judge_s: float = 0.0
    prompt_chars: int = 0  # the first user prompt, after the budget cut
    cut: list[str] = field(default_factory=list)  # what the prompt budget left out

    @property
    def fix_source(self) -> str | None:
        return self.best.source if self.best else None

    def applied(self) -> int:
        """Distinct candidates that applied to the installed files (reached the verifier)."""
        return sum(1 for c in self.candidates if c.stage == "verify" and c.duplicate_of is None)


def search(ctx: BreakContext, judge: Judge, *, llm: LLMClient | None, rewrites: list[Rewrite],
           sources: dict[str, str], opts: SearchOptions | None = None,
           keep: Callable[[CandidateRecord, Judgement], None] | None = None) -> SearchResult:
    """Rewrites first, then LLM rounds; `sources` maps the upstream paths a model may edit to
    their installed text (the originals every edit applies to). `keep(record, judgement)` sees
    each judged candidate (the caller keeps the winner's verification and overlay)."""
    o = opts or SearchOptions()
    res = SearchResult()
    seen: dict[str, int] = {}  # patch identity -> first candidate number
    judgements: dict[int, Judgement] = {}

    def add(rec: CandidateRecord, diff: str | None) -> bool:
        """Record a candidate; False when it is a duplicate (and so not to be judged)."""
        rec.n = len(res.candidates) + 1
        res.candidates.append(rec)
        if diff is None:
            return False
        key = patch_key(diff)
        if key in seen:
            rec.duplicate_of = seen[key]  # its judgement is copied once the first one is judged
            return False
        seen[key] = rec.n
        rec.diff = diff
        return True

    def judge_all(batch: list[tuple[CandidateRecord, Candidate]]) -> None:
        def one(item: tuple[CandidateRecord, Candidate]) -> tuple[CandidateRecord, Judgement]:
            t = time.time()
            j = judge(item[1])
            item[0].judge_s = round(time.time() - t, 1)
            return item[0], j

        with ThreadPoolExecutor(max_workers=max(1, o.parallel)) as pool:
            for rec, j in pool.map(one, batch):
                rec.stage, rec.ok, rec.feedback, rec.files = j.stage, j.ok, j.feedback, list(j.files)
                rec.diff = j.diff or rec.diff
                rec.graphs, rec.graph_breaks, rec.speed_ratio = j.graphs, j.graph_breaks, j.speed_ratio
                res.judge_s += rec.judge_s
                judgements[rec.n] = j
                if keep:
                    keep(rec, j)
                if j.ok and (res.best is None or j.score() > judgements[res.best.n].score()):
                    res.best = rec
        for rec in res.candidates:  # an identical candidate shares its first copy's judgement
            if rec.duplicate_of is not None:
                first = res.candidates[rec.duplicate_of - 1]
                rec.stage, rec.ok, rec.files = first.stage, first.ok, list(first.files)
                rec.feedback = f"identical to candidate {first.n}: not judged again ({first.feedback[:200]})"

    # 1. Playbook rewrites: ideas the scaffolding supplies, judged like any candidate.
    batch = []
    for rw in rewrites:
        diff = rewrite_diff(rw, sources[rw.path]) if rw.path in sources else None
        rec = CandidateRecord(n=0, source=f"rewrite:{rw.entry}", round=0, stage="edit" if diff is None else "guard",
                              feedback="" if diff else f"{rw.path}: not among the files this break may touch")
        if add(rec, diff):
            batch.append((rec, Candidate(diff=diff, source=rec.source, note=rw.note)))
    judge_all(batch)
    if res.best and o.stop_on_success:
        res.stopped = "verified"
        return _finish(res)
    if llm is None or o.rounds <= 0:
        res.stopped = "no_llm" if llm is None else "exhausted"
        return _finish(res)

    # 2. LLM rounds.
    system = prompts.render("fix_system", allowed_paths="\n".join(f"- {p}" for p in sources))
    user, res.cut = ctx.prompt(), list(ctx.cut)
    res.prompt_chars = len(user)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    idea = "model+idea:" + ",".join(ctx.idea_ids) if ctx.idea_ids else "model"
    for r in range(1, o.rounds + 1):
        batch = []
        this_round: list[CandidateRecord] = []
        for k in range(o.samples):
            why = llm.budget.exhausted()
            if why:
                res.stopped = "budget"
                break
            temperature = 0.0 if k == 0 else o.temperature
            seed = o.seed + 100 * r + k
            rec = CandidateRecord(n=0, source=idea, round=r, seed=seed, temperature=temperature)
            t = time.time()
            try:
                reply = llm.chat(messages, temperature=temperature, seed=seed)
            except BudgetExceeded as e:
                rec.feedback, res.stopped = str(e), "budget"
                add(rec, None)
                break
            except LLMUnavailable as e:
                rec.feedback, res.stopped = str(e), "llm_unavailable"
                add(rec, None)
                break
            rec.llm_s = round(time.time() - t, 1)
            res.llm_s += rec.llm_s
            rec.prompt_tokens, rec.completion_tokens = reply.prompt_tokens, reply.completion_tokens
            rec.finish_reason = reply.finish_reason
            rec.stage = "edit"
            try:
                # The tool, not the model, writes the diff (draft.edits); EditError is feedback.
                diff = ed.reply_to_diff(reply.text, sources, default_path=ctx.default_path, anchor=ctx.anchor)
            except ed.EditError as e:
                rec.feedback = str(e)
                add(rec, None)
                this_round.append(rec)
                continue
            if add(rec, diff):
                rec.stage = "guard"
                batch.append((rec, Candidate(diff=diff, source=rec.source)))
            this_round.append(rec)
        judge_all(batch)
        if res.stopped in ("budget", "llm_unavailable"):
            break
        if res.best and o.stop_on_success:
            res.stopped = "verified"
            break
        if r < o.rounds:
            # One user turn: the question, then what failed and why, and a request for something
            # different (the shared prefix keeps a local server's prompt cache warm).
            messages = [messages[0], {"role": "user", "content": user + "\n\n" + _retry_text(r, this_round)}]
    if not res.stopped:
        res.stopped = "verified" if res.best else "exhausted"
    res.prompt_tokens, res.completion_tokens = llm.budget.prompt_tokens, llm.budget.completion_tokens
    return _finish(res)


def _finish(res: SearchResult) -> SearchResult:
    res.llm_s, res.judge_s = round(res.llm_s, 1), round(res.judge_s, 1)
    return res


def _retry_text(r: int, tried: list[CandidateRecord]) -> str:
    lines = []
    for c in tried:
        what = f"candidate {c.n}" + (f" (same as candidate {c.duplicate_of})" if c.duplicate_of else "")
        lines.append(f"### {what}: stopped at {c.stage}\n{(c.feedback or '')[:700]}")
        if c.diff and not c.duplicate_of:
            lines.append("```diff\n" + _clip(c.diff, 40) + "\n```")
    return prompts.render("fix_retry", round=r, tried="\n\n".join(lines))


def _clip(text: str, n: int) -> str:
    lines = text.splitlines()
    return "\n".join(lines[:n] + ([f"... ({len(lines) - n} more lines)"] if len(lines) > n else []))
