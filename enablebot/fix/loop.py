"""`enablebot fix` for one model: reproduce -> recipes -> agent -> bundle, per break cluster."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..fileio import write_text
from ..results import RunResult, RunSpec
from . import clusters as cl
from .agent import AgentOptions, AgentRun, run_agent
from .bundle import ClusterRef, FixBundle
from .candidate import Judgement
from .draft.llm import LLMClient, Transcript
from .draft.retrieval import from_bundles
from .draft.search import SearchOptions
from .judge.patchguard import target_of
from .judge.verify import Runner, Verification, VerifyOptions, default_runner, snapshot, verify_candidate
from .outcome import FixOutcome, RecipeTrial
from .recipes import candidates, settings_text
from .report import render_report, repro_command


@dataclass
class FixOptions:
    out_dir: Path
    cluster: str | None = None
    from_triage: Path | None = None
    attempts: int = 2  # LLM rounds
    samples: int = 3  # LLM samples per round
    spec: dict[str, Any] = field(default_factory=dict)  # RunSpec overrides (device, backend, ...)
    max_clusters: int = 3
    recipes: bool = True
    rewrites: bool = True  # the playbook's rewrites (no LLM needed)
    always_agent: bool = False  # search even when a recipe verified
    history: list[Path] = field(default_factory=list)  # bundle folders retrieval may show (default: out_dir)
    verify: VerifyOptions = field(default_factory=VerifyOptions)


def triage_refs(path: Path, model_id: str) -> list[ClusterRef]:
    """Clusters a triage / run file lists for `model_id`: any object with a `gb_type` (a
    GraphBreak or a ClusterRef), inside the entry of this model when the file has several."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    refs: dict[str, ClusterRef] = {}

    def owner(obj: dict[str, Any]) -> str | None:
        spec = obj.get("spec")
        return obj.get("model_id") or (spec.get("model_id") if isinstance(spec, dict) else None)

    def walk(obj: Any, mine: bool) -> None:
        if isinstance(obj, dict):
            who = owner(obj)
            mine = (who == model_id) if who is not None else mine
            if mine and isinstance(obj.get("gb_type"), str):
                uf = obj.get("user_frame") or {}
                ref = ClusterRef(gb_type=obj["gb_type"], registry_id=obj.get("registry_id"),
                                 filename=Path(obj.get("filename") or uf.get("filename") or "").name or None,
                                 function=obj.get("function") or uf.get("function"),
                                 lineno=obj.get("lineno") or uf.get("lineno"))
                refs.setdefault(cl.key_of(ref), ref)
                return
            for v in obj.values():
                walk(v, mine)
        elif isinstance(obj, list):
            for v in obj:
                walk(v, mine)

    walk(data, owner(data) in (None, model_id) if isinstance(data, dict) else True)
    return list(refs.values())


def fix_model(model_id: str, opts: FixOptions, *, llm: LLMClient | None, runner: Runner | None = None,
              say: Callable[[str], None] = lambda _m: None) -> list[FixOutcome]:
    run = runner or default_runner
    spec = RunSpec.from_dict({"model_id": model_id, **opts.spec})
    say(f"reproducing {model_id} ({spec.device}, backend {spec.backend})")
    baseline = run(spec)
    # A compile error (an op the tracer cannot run, ...) is a cluster like a break: keyed on its
    # type and the frame that calls the op, it goes through recipes, rewrites and the verifier.
    err = cl.error_break(baseline)
    if not baseline.ok and err is None:
        msg = f"{model_id} does not run here ({baseline.verdict}): {baseline.error.message[:300] if baseline.error else ''}"
        return [FixOutcome(model_id=model_id, cluster="*", status="error", message=msg)]
    if err is not None:
        say(f"{model_id} does not compile here ({err.gb_type}, at {err.user_frame.short() if err.user_frame else '?'}): "
            "fixing the compile error")
    found = cl.clusters_of(cl.breaks_of(baseline))
    outcomes: list[FixOutcome] = []
    if opts.from_triage:
        wanted = triage_refs(opts.from_triage, model_id)
        if opts.cluster:
            keys = {c.key for c in cl.select([cl.Cluster(r, []) for r in wanted], opts.cluster)}
            wanted = [r for r in wanted if cl.key_of(r) in keys]
        targets = []
        for ref in wanted:
            match = [c for c in found if any(cl.matches(b, ref) for b in c.breaks)]
            if match:
                targets.extend(m for m in match if m not in targets)
            else:
                outcomes.append(FixOutcome(model_id=model_id, cluster=cl.key_of(ref), status="not_reproduced",
                                           message=f"the triaged break {cl.key_of(ref)} does not reproduce here "
                                                   f"({_versions(baseline)}); not fixing it"))
    else:
        targets = cl.select(found, opts.cluster)
        if opts.cluster and not targets:
            outcomes.append(FixOutcome(model_id=model_id, cluster=opts.cluster, status="not_reproduced",
                                       message=f"no break matching {opts.cluster!r} in {model_id}; found: "
                                               f"{', '.join(c.key for c in found) or 'none'}"))
    whole: FixOutcome | None = None
    for cluster in targets[: opts.max_clusters]:
        if whole is not None:  # e.g. GB0170 and its generic_jump twin at one `if`: one patch fixes both
            say(f"cluster {cluster.key}: fixed by the fix verified for {whole.cluster} (the model is one graph after it)")
            outcomes.append(FixOutcome(model_id=model_id, cluster=cluster.key, status="fixed", kind=whole.kind,
                                       source=whole.source, bundle_dir=whole.bundle_dir, whole_model=True,
                                       message=f"the fix verified for {whole.cluster} leaves the model one graph"))
            continue
        say(f"cluster {cluster.key}: {cluster.count} breaks")
        outcome = _fix_cluster(baseline, cluster, opts, llm, run, say)
        outcomes.append(outcome)
        if outcome.whole_model:
            whole = outcome
    if not found and not outcomes:
        outcomes.append(FixOutcome(model_id=model_id, cluster="*", status="not_reproduced",
                                   message=f"{model_id} has no graph breaks here ({baseline.verdict})"))
    return outcomes


def _versions(r: RunResult) -> str:
    return f"torch {r.versions.torch}, transformers {r.versions.transformers}"


def _fix_cluster(baseline: RunResult, cluster: cl.Cluster, opts: FixOptions, llm: LLMClient | None, run: Runner,
                 say: Callable[[str], None]) -> FixOutcome:
    bdir = Path(opts.out_dir) / _safe(baseline.spec.model_id) / cl.slug(cluster.ref)
    work = bdir / ".work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    vopts = dataclasses.replace(opts.verify, work_dir=work)
    transcript = Transcript(work / "transcript.jsonl", secrets=(llm.api_key or "",) if llm else ())
    transcript.add("reproduce", model_id=baseline.spec.model_id, cluster=cluster.key, breaks=cluster.count,
                   before=snapshot(baseline, cluster.ref).to_dict())
    outcome = FixOutcome(model_id=baseline.spec.model_id, cluster=cluster.key, status="not_fixed")
    baselines: dict[str, RunResult] = {}

    best_recipe: RecipeTrial | None = None
    if opts.recipes:
        for r in candidates(cluster.lead):
            say(f"recipe {r.id}: {settings_text(r.settings)}")
            ver = verify_candidate(baseline, cluster.ref, settings=r.settings, options=vopts, runner=run,
                                   baselines=baselines)
            trial = RecipeTrial(id=r.id, settings=r.settings, note=r.note, passed=ver.passed,
                                feedback="verified" if ver.passed else ver.feedback(), verification=ver)
            outcome.recipes.append(trial)
            transcript.add("recipe", id=r.id, settings=r.settings, passed=ver.passed, feedback=trial.feedback)
            say(f"recipe {r.id}: {'verified' if ver.passed else 'not verified'}")
            if ver.passed and (best_recipe is None or (ver.after.graphs or 0) < (best_recipe.verification.after.graphs or 0)):
                best_recipe = trial

    agent: AgentRun | None = None
    if best_recipe is None or opts.always_agent:
        if llm is not None:
            llm.transcript = transcript
        else:
            say("no LLM configured (set OPENAI_BASE_URL / OPENAI_API_KEY and --llm-model): recipes and rewrites only")

        def verify(overlay_dir: str, patch: Any) -> Verification:
            say(f"verifying a candidate patch to {', '.join(patch.files)}")
            return verify_candidate(baseline, cluster.ref, overlay_dir=overlay_dir, files=patch.files,
                                    options=vopts, runner=run, baselines=baselines)

        tried = [f"{t.id} ({'verified' if t.passed else 'did not verify'})" for t in outcome.recipes]
        history = from_bundles(opts.history or [opts.out_dir])
        aopts = AgentOptions(search=SearchOptions(rounds=opts.attempts if llm else 0, samples=opts.samples),
                             history=history, exclude_models=(baseline.spec.model_id,), rewrites=opts.rewrites)
        agent = run_agent(baseline, cluster, llm=llm, verify=verify, work_dir=work / "candidates",
                          recipes_tried=tried, opts=aopts)
        outcome.agent = agent.result
        transcript.add("agent", stopped=agent.result.stopped, cut=agent.result.cut,
                       candidates=[{"n": c.n, "source": c.source, "round": c.round, "stage": c.stage, "ok": c.ok,
                                    "duplicate_of": c.duplicate_of, "feedback": c.feedback[:500]}
                                   for c in agent.result.candidates],
                       prompt_tokens=agent.result.prompt_tokens, completion_tokens=agent.result.completion_tokens)
        if llm is None and not agent.result.candidates:
            outcome.message = "no LLM configured (set OPENAI_BASE_URL / OPENAI_API_KEY and --llm-model) and no " \
                              "playbook rewrite matched: recipes only"

    _write_bundle(bdir, baseline, cluster, outcome, best_recipe, agent, llm, transcript)
    shutil.rmtree(work, ignore_errors=True)
    return outcome


def _write_bundle(bdir: Path, baseline: RunResult, cluster: cl.Cluster, outcome: FixOutcome,
                  best_recipe: RecipeTrial | None, agent: AgentRun | None, llm: LLMClient | None,
                  transcript: Transcript) -> None:
    win: Judgement | None = agent.winner if agent else None
    best = agent.result.best if agent else None
    for stale in ("patch.diff", "verification.json", "transcript.jsonl", "report.md"):
        (bdir / stale).unlink(missing_ok=True)
    if win is not None and best is not None:
        ver, kind, source = win.verification, "patch", best.source
        # Redacted like every file: a patch carrying a key then fails the chain of custody.
        write_text(bdir / "patch.diff", win.diff or "")
        target = target_of(win.files)
    elif best_recipe is not None:
        ver, kind, target, source = best_recipe.verification, "recipe", "config", "recipe"
    else:
        tried = [t.verification for t in outcome.recipes if t.verification]
        ver, kind, target, source = (tried[-1] if tried else None), None, "config", None
    outcome.status = "fixed" if kind else "not_fixed"
    outcome.kind, outcome.source = kind, source
    outcome.whole_model = bool(kind and ver and ver.after and ver.after.verdict == "full_graph"
                               and not ver.after.graph_breaks)
    bundle = FixBundle(
        fix_key=f"{baseline.spec.model_id}/{cluster.key}", model_id=baseline.spec.model_id, cluster=cluster.ref,
        target=target, kind=kind or "patch", recipe=best_recipe.settings if (kind == "recipe" and best_recipe) else None,
        files=list(win.files) if win else [], llm_model=llm.model if llm else None,
        attempts=len(agent.result.candidates) if agent else 0, fix_source=source, verified=kind is not None,
        versions={"torch": baseline.versions.torch, "transformers": baseline.versions.transformers},
        before=snapshot(baseline, cluster.ref), after=ver.after if ver else snapshot(baseline, cluster.ref),
        repro=repro_command(baseline.spec), created_at=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
    )
    bundle.save(bdir)
    if ver is not None:
        ver.save(bdir)
    src = transcript.path
    if src and src.is_file():
        write_text(bdir / "transcript.jsonl", src.read_text(encoding="utf-8"))
    else:
        (bdir / "transcript.jsonl").write_text("", encoding="utf-8")
    write_text(bdir / "report.md", render_report(bundle, ver, outcome, win.diff if win else None))
    outcome.bundle_dir = str(bdir)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80]
