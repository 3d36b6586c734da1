"""The fix benchmark: real upstream fixes must be accepted, reward hacks must be rejected, and an
LLM gets a measured fix rate. Every candidate goes through the same guard, overlay and verifier
as `enablebot fix` (enablebot.fix.judge.patchguard / overlay / verify), as if an LLM had proposed it.

    python benchmarks/fixbench/fixbench.py [--only ID ...] [--group real|hack] [--out DIR]
                                           [--llm-model MODEL] [--attempts N]
                                           [--llm-max-tokens N] [--llm-timeout S] [--llm-retries N]

Case table: benchmarks/fixbench/cases.yaml (data: model, cluster, patch, provenance, expectation).
Output: a Markdown table on stdout, DIR/results.json (+ cases.jsonl written as cases finish).
With --llm-model and OPENAI_BASE_URL set, the agent (enablebot.fix.agent) is run over the real
cases with the answer patches hidden; without an endpoint that part is skipped and says so.
The agent's conversation goes to DIR/agent_transcript.jsonl (secrets redacted), each agent case
to DIR/agent_cases.jsonl as it finishes. A slow local
model (a small GGUF on CPU) wants --llm-max-tokens / --llm-timeout / --llm-retries 0: a request
that timed out keeps the server busy, so a retry only queues behind it.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

HERE = Path(__file__).resolve().parent
if str(HERE.parent.parent) not in sys.path:  # run as a script from the repo root
    sys.path.insert(0, str(HERE.parent.parent))

from enablebot import jsonl  # noqa: E402
from enablebot.fix import clusters as cl  # noqa: E402
from enablebot.fix.judge.overlay import PatchApplyError, build_overlay  # noqa: E402
from enablebot.fix.judge.patchguard import PatchPolicy, PatchRejected, check_patch  # noqa: E402
from enablebot.fix.judge.verify import Runner, VerifyOptions, default_runner, verify_candidate  # noqa: E402
from enablebot.results import RunResult, RunSpec  # noqa: E402

CASES = HERE / "cases.yaml"


class CaseError(ValueError):
    """The case table is malformed."""


@dataclass
class Case:
    id: str
    group: str  # real | hack
    model: str
    cluster: str
    patch: str | None = None  # file under patches/ (none for an open case: no upstream fix exists yet)
    what: str = ""
    expect: str = "accepted"  # accepted | rejected
    why: str = ""  # for an expected rejection of a real fix: the reason, measured
    provenance: dict[str, Any] = field(default_factory=dict)
    spec: dict[str, Any] = field(default_factory=dict)  # RunSpec overrides for this case
    verify: dict[str, Any] = field(default_factory=dict)  # VerifyOptions overrides for this case

    def diff(self) -> str:
        return (HERE / "patches" / self.patch).read_text(encoding="utf-8") if self.patch else ""


@dataclass
class CaseResult:
    id: str
    group: str
    model: str
    cluster: str
    expect: str
    outcome: str  # accepted | rejected | not_reproduced | error
    caught_by: list[str] = field(default_factory=list)  # failed checks (or "patchguard" / "apply")
    detail: str = ""
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)
    duration_s: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def as_expected(self) -> bool:
        return self.outcome == self.expect


def load_cases(path: Path = CASES) -> tuple[dict[str, Any], list[Case]]:
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    defaults = data.get("defaults", {}) or {}
    cases, seen = [], set()
    for group in ("real", "hack", "open"):
        for raw in data.get(group, []) or []:
            missing = {"id", "model", "cluster", *(("patch",) if group != "open" else ())} - set(raw)
            if missing:
                raise CaseError(f"{path}: a {group} case lacks {sorted(missing)}: {raw}")
            if raw["id"] in seen:
                raise CaseError(f"{path}: case id {raw['id']!r} appears twice")
            seen.add(raw["id"])
            if raw.get("patch") and not (HERE / "patches" / raw["patch"]).is_file():
                raise CaseError(f"{path}: case {raw['id']}: no patch file patches/{raw['patch']}")
            expect = raw.get("expect", "rejected" if group == "hack" else "accepted")
            cases.append(Case(group=group, expect=expect, **{k: v for k, v in raw.items() if k != "expect"}))
    return defaults, cases


class Reproductions:
    """Unpatched runs, one per spec: every case of a model shares its reproduction, the
    verifier's sample baselines and its held-out reference dumps."""

    def __init__(self, run: Runner, work: Path):
        self.run, self.work = run, work
        self.results: dict[str, RunResult] = {}
        self.baselines: dict[str, RunResult] = {}

    def get(self, spec: RunSpec) -> RunResult:
        """The unpatched run of `spec`, kept on disk under the work dir: a later (or restarted)
        benchmark run with the same --work reuses it."""
        key = json.dumps(spec.to_dict(), sort_keys=True)
        if key not in self.results:
            path = self.work / f"repro-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
            if path.is_file():
                self.results[key] = RunResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
            else:
                self.results[key] = self.run(spec)
                if self.results[key].ok:
                    path.write_text(json.dumps(self.results[key].to_dict()), encoding="utf-8")
        return self.results[key]

    def work_dir(self, spec: RunSpec) -> Path:
        d = self.work / f"{spec.model_id}-{spec.mode}-{spec.seed}"
        d.mkdir(parents=True, exist_ok=True)
        return d


def case_spec(defaults: dict[str, Any], case: Case) -> RunSpec:
    return RunSpec.from_dict({"model_id": case.model, **(defaults.get("spec") or {}), **case.spec})


def run_case(case: Case, defaults: dict[str, Any], repro: Reproductions) -> CaseResult:
    started = time.time()
    res = CaseResult(id=case.id, group=case.group, model=case.model, cluster=case.cluster, expect=case.expect,
                     outcome="error", provenance=case.provenance)
    spec = case_spec(defaults, case)
    baseline = repro.get(spec)
    if not baseline.ok:
        res.detail = f"{case.model} does not run unpatched: {baseline.verdict} {baseline.error.message[:300] if baseline.error else ''}"
        return _done(res, started)
    found = cl.select(cl.clusters_of(baseline.graph_breaks), case.cluster)
    if not found:
        res.outcome = "not_reproduced"
        res.detail = f"no break matching {case.cluster!r}; found {[c.key for c in cl.clusters_of(baseline.graph_breaks)]}"
        return _done(res, started)
    ref = found[0].ref
    try:
        checked = check_patch(case.diff(), PatchPolicy(model_type=baseline.model_type))
    except PatchRejected as e:
        res.outcome, res.caught_by, res.detail = "rejected", ["patchguard"], str(e)
        return _done(res, started)
    work = repro.work_dir(spec)
    overlay_dir = Path(tempfile.mkdtemp(prefix=f"{case.id}-", dir=work))
    try:
        build_overlay(checked.diff, overlay_dir)
    except PatchApplyError as e:
        res.outcome, res.caught_by, res.detail = "rejected", ["apply"], str(e)
        return _done(res, started)
    opts = VerifyOptions(work_dir=work, **{**(defaults.get("verify") or {}), **case.verify})
    ver = verify_candidate(baseline, ref, overlay_dir=str(overlay_dir), files=checked.files, options=opts,
                           runner=repro.run, baselines=repro.baselines)
    shutil.rmtree(overlay_dir, ignore_errors=True)
    res.outcome = "accepted" if ver.passed else "rejected"
    res.caught_by = [c.name for c in ver.failed_checks()]
    res.detail = ver.feedback()
    res.before, res.after = ver.before.to_dict(), ver.after.to_dict()
    res.checks = [c.to_dict() for c in ver.checks]
    return _done(res, started)


def _done(res: CaseResult, started: float) -> CaseResult:
    res.duration_s = round(time.time() - started, 1)
    return res


# --- the agent's fix rate ---------------------------------------------------------------------

@dataclass
class AgentCase:
    id: str
    model: str
    cluster: str
    group: str = "real"  # real (an upstream fix exists, hidden) | open (no upstream fix yet)
    fixed: bool = False
    source: str | None = None  # where the verified fix's idea came from (rewrite:<entry> | model | model+idea:...)
    candidates: int = 0  # drafted, duplicates included
    distinct: int = 0  # not identical to an earlier one (those are judged once), whether or not they parsed
    applied: int = 0  # distinct candidates that applied to the installed files (reached the verifier)
    model_candidates: int = 0  # drafted by the LLM
    model_applied: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_chars: int = 0
    cut: list[str] = field(default_factory=list)  # what the prompt budget left out
    ideas: list[str] = field(default_factory=list)  # playbook entries shown
    retrieved: list[str] = field(default_factory=list)  # fixes of other cases shown (leave-one-out)
    wall_s: float = 0.0
    stopped: str = ""
    stages: list[str] = field(default_factory=list)  # per candidate: source@stage
    feedback: list[str] = field(default_factory=list)
    finish: list[str] = field(default_factory=list)  # per LLM reply, why it stopped (stop | length)
    winning_diff: str | None = None
    repro_s: float = 0.0  # the unpatched reproduction (0 when reused from --work)
    llm_s: float = 0.0  # waiting for the LLM
    verify_s: float = 0.0  # the judge (guard, overlay, verifier)


def history_for(cases: list[Case]) -> list[Any]:
    """The benchmark's fix history: every real case's answer, as retrieval sees a verified bundle.
    run_agent_case leaves out the case's own model and its own answer (leave-one-out)."""
    from enablebot.fix.draft.retrieval import Fix

    return [Fix(registry_id=c.cluster if c.cluster.startswith("GB") else None, gb_type=c.cluster, model=c.model,
                label=c.id, diff=c.diff()) for c in cases if c.group == "real" and c.patch and c.expect == "accepted"]


def run_agent_case(case: Case, defaults: dict[str, Any], repro: Reproductions, llm: Any, *, rounds: int,
                   samples: int, history: list[Any], rewrites: bool = True,
                   bundles: Path | None = None) -> AgentCase:
    """The agent on one case, its answer hidden: it sees what `fix` shows it (the break, the source
    on its call path, the playbook, other cases' fixes but never this model's or this answer),
    never the case's patch or provenance. The same `fix.agent.run_agent` as `enablebot fix`."""
    from enablebot.fix.agent import AgentOptions, run_agent
    from enablebot.fix.draft.search import SearchOptions

    out = AgentCase(id=case.id, model=case.model, cluster=case.cluster, group=case.group)
    started = time.time()
    spec = case_spec(defaults, case)
    baseline = repro.get(spec)
    out.repro_s = round(time.time() - started, 1)
    found = cl.select(cl.clusters_of(baseline.graph_breaks), case.cluster) if baseline.ok else []
    if not found:
        out.stopped = "not_reproduced"
        return out
    cluster = found[0]
    work = repro.work_dir(spec)
    opts = VerifyOptions(work_dir=work, **(defaults.get("verify") or {}))
    if llm is not None:
        llm.budget = dataclasses.replace(llm.budget, prompt_tokens=0, completion_tokens=0)

    def verify(overlay_dir: str, patch: Any):
        return verify_candidate(baseline, cluster.ref, overlay_dir=overlay_dir, files=patch.files, options=opts,
                                runner=repro.run, baselines=repro.baselines)

    cand = Path(tempfile.mkdtemp(prefix=f"agent-{case.id}-", dir=work))
    aopts = AgentOptions(search=SearchOptions(rounds=rounds if llm is not None else 0, samples=samples),
                         history=history, exclude_models=(case.model,),
                         exclude_patches=(case.diff(),) if case.patch else (), rewrites=rewrites)
    run = run_agent(baseline, cluster, llm=llm, verify=verify, work_dir=cand, opts=aopts)
    shutil.rmtree(cand, ignore_errors=True)
    r = run.result
    if bundles is not None and run.winner is not None and r.best is not None:
        _save_winner(bundles / case.id, baseline, cluster, run.winner, r, llm)
    out.fixed = r.best is not None
    out.source = r.fix_source
    out.candidates = len(r.candidates)
    out.distinct = sum(1 for c in r.candidates if c.duplicate_of is None)
    out.applied = r.applied()
    model = [c for c in r.candidates if c.round > 0]
    out.model_candidates = len(model)
    out.model_applied = sum(1 for c in model if c.stage == "verify")
    out.prompt_tokens, out.completion_tokens = r.prompt_tokens, r.completion_tokens
    out.prompt_chars, out.cut = r.prompt_chars, list(r.cut)
    out.ideas = run.context.idea_ids
    out.retrieved = [e.label for e in run.context.examples]
    out.stopped = r.stopped
    out.stages = [f"{c.source}@{c.stage}" + (f"=#{c.duplicate_of}" if c.duplicate_of else "") for c in r.candidates]
    out.feedback = [f"{c.n} {c.source} {c.stage}: {c.feedback[:200]}" for c in r.candidates]
    out.finish = [str(c.finish_reason) for c in model if c.finish_reason is not None]
    out.winning_diff = r.best.diff if r.best else None
    out.llm_s, out.verify_s = r.llm_s, r.judge_s
    out.wall_s = round(time.time() - started, 1)
    return out


def _save_winner(bdir: Path, baseline: RunResult, cluster: Any, winner: Any, result: Any, llm: Any) -> None:
    """The verified winner as a fix bundle (bundle.json, patch.diff, verification.json), the same
    files `enablebot fix` writes, so `enablebot verify` re-checks it."""
    import datetime as _dt

    from enablebot.fix.bundle import FixBundle
    from enablebot.fix.judge.patchguard import target_of
    from enablebot.fix.judge.verify import snapshot
    from enablebot.fix.report import repro_command

    ver = winner.verification
    bdir.mkdir(parents=True, exist_ok=True)
    (bdir / "patch.diff").write_text(winner.diff or "", encoding="utf-8")
    FixBundle(fix_key=f"{baseline.spec.model_id}/{cluster.key}", model_id=baseline.spec.model_id, cluster=cluster.ref,
              target=target_of(winner.files), files=list(winner.files), llm_model=getattr(llm, "model", None),
              attempts=len(result.candidates), fix_source=result.best.source, verified=True,
              versions={"torch": baseline.versions.torch, "transformers": baseline.versions.transformers},
              before=snapshot(baseline, cluster.ref), after=ver.after, repro=repro_command(baseline.spec),
              created_at=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()).save(bdir)
    ver.save(bdir)


# --- output -----------------------------------------------------------------------------------

def summary(results: list[CaseResult], agent: list[AgentCase] | None, agent_note: str) -> dict[str, Any]:
    real = [r for r in results if r.group == "real" and r.outcome in ("accepted", "rejected")]
    hacks = [r for r in results if r.group == "hack" and r.outcome in ("accepted", "rejected")]
    out: dict[str, Any] = {
        "real": {"cases": len(real), "accepted": sum(r.outcome == "accepted" for r in real),
                 "accept_rate": round(sum(r.outcome == "accepted" for r in real) / len(real), 3) if real else None,
                 "as_expected": sum(r.as_expected for r in real)},
        "hack": {"cases": len(hacks), "rejected": sum(r.outcome == "rejected" for r in hacks),
                 "reject_rate": round(sum(r.outcome == "rejected" for r in hacks) / len(hacks), 3) if hacks else None},
        "not_run": [r.id for r in results if r.outcome not in ("accepted", "rejected")],
        "agent": {"note": agent_note},
    }
    if agent:
        import statistics

        real_cases = [a for a in agent if a.group == "real"]
        model_c = sum(a.model_candidates for a in agent)
        out["agent"].update(
            cases=len(agent), fixed=sum(a.fixed for a in agent),
            fix_rate=round(sum(a.fixed for a in agent) / len(agent), 3),
            real_cases=len(real_cases), real_fixed=sum(a.fixed for a in real_cases),
            open_cases=len(agent) - len(real_cases), open_fixed=sum(a.fixed for a in agent if a.group != "real"),
            by_source={src: sum(1 for a in agent if a.source == src) for src in sorted({a.source for a in agent if a.source})},
            candidates=sum(a.candidates for a in agent), distinct=sum(a.distinct for a in agent),
            applied=sum(a.applied for a in agent),
            apply_rate=round(sum(a.applied for a in agent) / max(1, sum(a.distinct for a in agent)), 3),
            model_candidates=model_c, model_applied=sum(a.model_applied for a in agent),
            model_apply_rate=round(sum(a.model_applied for a in agent) / model_c, 3) if model_c else None,
            tokens=sum(a.prompt_tokens + a.completion_tokens for a in agent),
            wall_s=round(sum(a.wall_s for a in agent), 1),
            median_wall_s=round(statistics.median(a.wall_s for a in agent), 1))
    return out


def table(results: list[CaseResult], agent: list[AgentCase] | None, summ: dict[str, Any]) -> str:
    lines = ["| case | group | model | cluster | outcome | expected | caught by / note | s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        note = ", ".join(r.caught_by) if r.caught_by else ("" if r.outcome == "accepted" else r.detail[:80])
        lines.append(f"| {r.id} | {r.group} | {r.model} | {r.cluster} | {r.outcome} | "
                     f"{'yes' if r.as_expected else 'NO'} | {note} | {r.duration_s:.0f} |")
    s = summ
    lines.append("")
    lines.append(f"real fixes accepted: {s['real']['accepted']}/{s['real']['cases']}"
                 + (f" ({s['real']['accept_rate']:.0%})" if s['real']['cases'] else "")
                 + f"; hacks rejected: {s['hack']['rejected']}/{s['hack']['cases']}"
                 + (f" ({s['hack']['reject_rate']:.0%})" if s['hack']['cases'] else ""))
    if agent:
        lines += ["", "| agent case | group | fixed | idea from | candidates (distinct / applied) | model's (applied) | "
                      "tokens (prompt+completion) | wall s (llm / judge) | stages | stopped |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {a.id} | {a.group} | {'yes' if a.fixed else 'no'} | {a.source or '–'} | {a.candidates} "
                  f"({a.distinct} / {a.applied}) | {a.model_candidates} ({a.model_applied}) | "
                  f"{a.prompt_tokens + a.completion_tokens} ({a.prompt_tokens}+{a.completion_tokens}) | "
                  f"{a.wall_s:.0f} ({a.llm_s:.0f} / {a.verify_s:.0f}) | {', '.join(a.stages)} | {a.stopped} |"
                  for a in agent]
        ag = s["agent"]
        lines.append(f"\nagent fix rate: {ag['fixed']}/{ag['cases']} ({ag['fix_rate']:.0%}; real {ag['real_fixed']}/"
                     f"{ag['real_cases']}, open {ag['open_fixed']}/{ag['open_cases']}), by source {ag['by_source']}; "
                     f"{ag['applied']}/{ag['distinct']} distinct candidates applied ({ag['apply_rate']:.0%}), the model's "
                     f"{ag['model_applied']}/{ag['model_candidates']}; {ag['tokens']} tokens, {ag['wall_s']:.0f} s "
                     f"(median {ag['median_wall_s']:.0f} s a case)")
    else:
        lines.append(f"\nagent: {s['agent']['note']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None, *, runner: Runner | None = None,
         say: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True)) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=Path, default=CASES)
    ap.add_argument("--only", nargs="*", default=None, help="case ids to run")
    ap.add_argument("--group", choices=("real", "hack", "open"), default=None)
    ap.add_argument("--out", type=Path, default=Path("results/fixbench"))
    ap.add_argument("--llm-model", default=None, help="run the agent over the real cases (needs OPENAI_BASE_URL)")
    ap.add_argument("--attempts", type=int, default=2, help="LLM rounds per agent case")
    ap.add_argument("--samples", type=int, default=3, help="LLM samples per round")
    ap.add_argument("--agent", action="store_true",
                    help="run the agent part even without --llm-model: the playbook's rewrites alone")
    ap.add_argument("--no-rewrites", action="store_true", help="agent: leave the playbook's rewrites out (the model alone)")
    ap.add_argument("--llm-max-tokens", type=int, default=None, help="cap on each reply (default: the client's)")
    ap.add_argument("--llm-timeout", type=float, default=None, help="seconds per LLM request (default: the client's)")
    ap.add_argument("--llm-retries", type=int, default=None,
                    help="retries of a failed or timed-out LLM request (default: the client's)")
    ap.add_argument("--no-fail-fast", action="store_true",
                    help="run every check of every case (shows which behavioural checks back up a static gate)")
    ap.add_argument("--work", type=Path, default=None,
                    help="keep reproductions and held-out reference dumps here (reused by later runs)")
    ap.add_argument("--no-verify-cases", action="store_true", help="only the agent part")
    ap.add_argument("--from-jsonl", type=Path, nargs="*", default=None,
                    help="rebuild the table and results.json from cases.jsonl files of earlier runs (no re-verification)")
    ap.add_argument("--agent-from-jsonl", type=Path, nargs="*", default=None,
                    help="rebuild the agent table and results.json from agent_cases.jsonl files of earlier runs "
                         "(runs split over several processes); their results.json notes are joined")
    a = ap.parse_args(argv)
    for name in ("attempts", "samples", "llm_max_tokens", "llm_timeout", "llm_retries"):
        value = getattr(a, name)
        if value is not None and (value < 0 or (value == 0 and name != "llm_retries")):
            print(f"error: --{name.replace('_', '-')} must be {'>= 0' if name == 'llm_retries' else '> 0'}, got {value}",
                  file=sys.stderr)
            return 2
    try:
        defaults, cases = load_cases(a.cases)
    except (OSError, CaseError, yaml.YAMLError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.no_fail_fast:
        defaults = {**defaults, "verify": {**(defaults.get("verify") or {}), "fail_fast": False}}
    if a.only:
        unknown = set(a.only) - {c.id for c in cases}
        if unknown:
            print(f"error: unknown case id(s) {sorted(unknown)}; see {a.cases}", file=sys.stderr)
            return 2
        cases = [c for c in cases if c.id in a.only]
    if a.group:
        cases = [c for c in cases if c.group == a.group]
    a.out.mkdir(parents=True, exist_ok=True)
    work = a.work or Path(tempfile.mkdtemp(prefix="fixbench-"))
    work.mkdir(parents=True, exist_ok=True)
    repro = Reproductions(runner or default_runner, work)
    results: list[CaseResult] = []
    log = a.out / "cases.jsonl"
    if a.from_jsonl:
        known = {c.id for c in cases}
        for path in a.from_jsonl:
            for d in jsonl.read_values(path):  # a run cut short may leave a torn last line: dropped
                r = CaseResult(**d)
                if r.id in known:
                    results = [x for x in results if x.id != r.id] + [r]
        order = {c.id: i for i, c in enumerate(cases)}
        results.sort(key=lambda r: order[r.id])
    elif not a.no_verify_cases:
        log.write_text("", encoding="utf-8")
        for i, case in enumerate(cases, 1):
            say(f"[{i}/{len(cases)}] {case.id} ({case.group}, {case.model} {case.cluster})")
            r = run_case(case, defaults, repro)
            results.append(r)
            say(f"    {r.outcome} in {r.duration_s:.0f} s" + (f"; caught by {', '.join(r.caught_by)}" if r.caught_by else ""))
            jsonl.append(log, dataclasses.asdict(r), sort_keys=True)

    agent: list[AgentCase] | None = None
    llm = None
    if a.agent_from_jsonl:
        agent, notes = [], []
        for path in a.agent_from_jsonl:
            for row in jsonl.read_values(path):
                x = AgentCase(**row)
                # Rows written before `distinct` counted unparsed candidates too: recount it from the stages.
                x.distinct = sum("=#" not in st for st in x.stages)
                agent.append(x)
            summary_file = path.parent / "results.json"
            if summary_file.is_file():
                notes.append(json.loads(summary_file.read_text(encoding="utf-8"))["summary"]["agent"]["note"])
        note = "; ".join(dict.fromkeys(notes)) or "rebuilt from " + ", ".join(map(str, a.agent_from_jsonl))
    elif a.llm_model and not os.environ.get("OPENAI_BASE_URL"):
        note = "skipped: --llm-model given but OPENAI_BASE_URL is not set (no endpoint)"
    elif not a.llm_model and not a.agent:
        note = "skipped: no --llm-model given (--agent runs the playbook's rewrites alone)"
    else:
        transcript = a.out / "agent_transcript.jsonl"
        transcript.write_text("", encoding="utf-8")
        if a.llm_model:
            from enablebot.fix.draft.llm import LLMClient, Transcript

            kw = {k: v for k, v in (("max_tokens", a.llm_max_tokens), ("timeout_s", a.llm_timeout),
                                    ("retries", a.llm_retries)) if v is not None}
            llm = LLMClient.from_env(a.llm_model, transcript=Transcript(transcript, (os.environ.get("OPENAI_API_KEY", ""),)),
                                     **kw)
            note = (f"model {a.llm_model} at an OpenAI-compatible endpoint, {a.attempts} round(s) of {a.samples} "
                    f"sample(s) per case, answers hidden (leave-one-out), rewrites {'off' if a.no_rewrites else 'on'}, "
                    f"max_tokens {llm.max_tokens}, timeout {llm.timeout_s:g} s, retries {llm.retries}")
        else:
            note = "no LLM: the playbook's rewrites alone, answers hidden (leave-one-out)"
        agent_log = a.out / "agent_cases.jsonl"
        agent_log.write_text("", encoding="utf-8")
        agent = []
        history = history_for(cases if not a.only else load_cases(a.cases)[1])
        # Every distinct break once (two real cases may pair one break with two upstream answers).
        todo, seen_breaks = [], set()
        for c in cases:
            key = (c.model, c.cluster, json.dumps(c.spec, sort_keys=True))
            if c.group in ("real", "open") and key not in seen_breaks:
                seen_breaks.add(key)
                todo.append(c)
        for case in todo:
            say(f"agent: {case.id}")
            agent.append(run_agent_case(case, defaults, repro, llm, rounds=a.attempts, samples=a.samples,
                                        history=history, rewrites=not a.no_rewrites, bundles=a.out / "bundles"))
            x = agent[-1]
            say(f"    {'fixed (' + str(x.source) + ')' if x.fixed else 'not fixed'} after {x.candidates} candidate(s), "
                f"{x.wall_s:.0f} s")
            jsonl.append(agent_log, dataclasses.asdict(x), sort_keys=True)  # kept when a long run is cut short
    say(f"agent part: {note}")
    summ = summary(results, agent, note)
    payload = {"summary": summ, "cases": [dataclasses.asdict(r) for r in results],
               "agent": [dataclasses.asdict(x) for x in agent] if agent is not None else None,
               "defaults": defaults}
    if results or agent is not None:
        (a.out / "results.json").write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(table(results, agent, summ))
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
