"""The fix agent for one break cluster: the glue that hands the drafting side (`fix/draft/`) the
context, the playbook's ideas and rewrites, the retrieved fixes and a `Judge`, and hands the
judging side (`fix/judge/`) nothing but candidate diffs. Neither side imports the other.

    policy   <- the reproduction's break frames (judge.patchguard.frame_files), never the model
    context  <- the break, the functions on its call path, playbook ideas, retrieved fixes
    search   <- rewrites first, then LLM rounds (draft.search), each candidate judged once
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..results import RunResult
from .candidate import Judgement
from .clusters import Cluster
from .draft import rewrites as rw
from .draft.context import BreakContext, Idea, build_context
from .draft.llm import LLMClient
from .draft.retrieval import Fix, retrieve
from .draft.search import SearchOptions, SearchResult, search
from .draft.sites import sites_of
from .judge.patchguard import PatchPolicy, frame_files
from .judge.pipeline import Verify, make_judge
from .sources import SourceNotFound, read_upstream


@dataclass
class AgentOptions:
    search: SearchOptions = field(default_factory=SearchOptions)
    history: list[Fix] = field(default_factory=list)  # verified fixes retrieval may show
    exclude_models: tuple[str, ...] = ()  # leave-one-out: what this run must not be shown
    exclude_patches: tuple[str, ...] = ()
    rewrites: bool = True  # playbook rewrites (scaffolding); False measures the model alone
    ideas: bool = True  # playbook ideas in the prompt
    budget_chars: int | None = None


@dataclass
class AgentRun:
    result: SearchResult
    winner: Judgement | None
    context: BreakContext
    policy: PatchPolicy


def run_agent(baseline: RunResult, cluster: Cluster, *, llm: LLMClient | None, verify: Verify, work_dir: Path,
              recipes_tried: list[str] | None = None, opts: AgentOptions | None = None) -> AgentRun:
    o = opts or AgentOptions()
    policy = PatchPolicy(model_type=baseline.model_type, frame_files=frame_files(cluster.breaks))
    playbook = rw.load_playbook()
    sites = sites_of(cluster.lead)  # outermost first, with each file's text
    entries = rw.matching_entries(cluster.ref.gb_type, cluster.ref.registry_id, sites, playbook) if o.ideas else []
    examples = retrieve(o.history, cluster.ref.registry_id, cluster.ref.gb_type, exclude_models=o.exclude_models,
                        exclude_patches=o.exclude_patches)
    kw = {"budget_chars": o.budget_chars} if o.budget_chars else {}
    ctx = build_context(baseline, cluster, recipes_tried,
                        ideas=[Idea(id=e.id, idea=e.idea, before=e.before, after=e.after) for e in entries],
                        examples=examples, **kw)
    sources = _editable(policy, ctx)
    rewrites = rw.propose(cluster.ref.gb_type, cluster.ref.registry_id, sites, playbook) if o.rewrites else []
    judge = make_judge(policy, verify, Path(work_dir))
    judged: dict[int, Judgement] = {}
    result = search(ctx, judge, llm=llm, rewrites=rewrites, sources=sources, opts=o.search,
                    keep=lambda rec, j: judged.__setitem__(rec.n, j))
    winner = judged.get(result.best.n) if result.best else None
    for j in judged.values():  # keep only the winner's overlay on disk
        if j.overlay_dir and j is not winner:
            shutil.rmtree(j.overlay_dir, ignore_errors=True)
    return AgentRun(result=result, winner=winner, context=ctx, policy=policy)


def _editable(policy: PatchPolicy, ctx: BreakContext) -> dict[str, str]:
    """Upstream path -> installed text of every concrete file the model may edit: the model's
    file, the break's frame files, and the torch file that raises the break."""
    paths = [g for g in policy.allowed_globs() if "*" not in g]
    if ctx.torch_source and ctx.torch_source.path.startswith("torch/"):
        paths.append(ctx.torch_source.path)
    out: dict[str, str] = {}
    for p in paths:
        try:
            out[p] = read_upstream(p)
        except (SourceNotFound, OSError):
            continue
    return out
