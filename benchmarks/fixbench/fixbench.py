"""The fix benchmark: real upstream fixes must be accepted, reward hacks must be rejected, and an
LLM gets a measured fix rate. Every candidate goes through the same guard, overlay and verifier
as `enablebot fix` (enablebot.fix.patchguard / overlay / verify), as if an LLM had proposed it.

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
from enablebot.fix.overlay import PatchApplyError, build_overlay  # noqa: E402
from enablebot.fix.patchguard import PatchPolicy, PatchRejected, check_patch  # noqa: E402
from enablebot.fix.verify import Runner, VerifyOptions, default_runner, verify_candidate  # noqa: E402
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
    patch: str  # file under patches/
    what: str = ""
    expect: str = "accepted"  # accepted | rejected
    why: str = ""  # for an expected rejection of a real fix: the reason, measured
    provenance: dict[str, Any] = field(default_factory=dict)
    spec: dict[str, Any] = field(default_factory=dict)  # RunSpec overrides for this case
    verify: dict[str, Any] = field(default_factory=dict)  # VerifyOptions overrides for this case

    def diff(self) -> str:
        return (HERE / "patches" / self.patch).read_text(encoding="utf-8")


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
    for group in ("real", "hack"):
        for raw in data.get(group, []) or []:
            missing = {"id", "model", "cluster", "patch"} - set(raw)
            if missing:
                raise CaseError(f"{path}: a {group} case lacks {sorted(missing)}: {raw}")
            if raw["id"] in seen:
                raise CaseError(f"{path}: case id {raw['id']!r} appears twice")
            seen.add(raw["id"])
            if not (HERE / "patches" / raw["patch"]).is_file():
                raise CaseError(f"{path}: case {raw['id']}: no patch file patches/{raw['patch']}")
            expect = raw.get("expect", "accepted" if group == "real" else "rejected")
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
    fixed: bool = False
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0
    stopped: str = ""
    feedback: list[str] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)  # per attempt, the stage it reached (llm .. verify)
    finish: list[str] = field(default_factory=list)  # per attempt, why the LLM stopped (stop | length)
    repro_s: float = 0.0  # the unpatched reproduction (0 when reused from --work)
    llm_s: float = 0.0  # waiting for the LLM
    verify_s: float = 0.0  # the verifier's runs


def run_agent_case(case: Case, defaults: dict[str, Any], repro: Reproductions, llm: Any, attempts: int) -> AgentCase:
    """The agent on one real case, answer hidden: it sees what `fix` shows it (the break, the
    source around it, the verifier's feedback), never the case's patch or provenance."""
    from enablebot.fix.agent import run_agent
    from enablebot.fix.context import build_context

    out = AgentCase(id=case.id, model=case.model, cluster=case.cluster)
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
    llm.budget = dataclasses.replace(llm.budget, prompt_tokens=0, completion_tokens=0)

    def verify(overlay_dir: str, patch: Any):
        t = time.time()
        try:
            return verify_candidate(baseline, cluster.ref, overlay_dir=overlay_dir, files=patch.files, options=opts,
                                    runner=repro.run, baselines=repro.baselines)
        finally:
            out.verify_s += time.time() - t

    # Time the LLM calls (a slow local model is most of the wall time) and keep why each reply ended.
    chat = llm.chat

    def timed_chat(messages: list[dict[str, str]]) -> Any:
        t = time.time()
        try:
            reply = chat(messages)
        finally:
            out.llm_s += time.time() - t
        out.finish.append(str(reply.finish_reason))
        return reply

    llm.chat = timed_chat

    cand = Path(tempfile.mkdtemp(prefix=f"agent-{case.id}-", dir=work))
    try:
        result = run_agent(build_context(baseline, cluster, []), llm, PatchPolicy(model_type=baseline.model_type),
                           verify, attempts=attempts, work_dir=cand)
    finally:
        llm.chat = chat
    shutil.rmtree(cand, ignore_errors=True)
    out.fixed = result.best is not None
    out.attempts = len(result.attempts)
    out.prompt_tokens, out.completion_tokens = result.prompt_tokens, result.completion_tokens
    out.stopped = result.stopped
    out.feedback = [f"{a.n} {a.stage}: {a.feedback[:200]}" for a in result.attempts]
    out.stages = [a.stage for a in result.attempts]
    out.llm_s, out.verify_s = round(out.llm_s, 1), round(out.verify_s, 1)
    out.wall_s = round(time.time() - started, 1)
    return out


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
        out["agent"].update(cases=len(agent), fixed=sum(a.fixed for a in agent),
                            fix_rate=round(sum(a.fixed for a in agent) / len(agent), 3),
                            attempts=sum(a.attempts for a in agent),
                            tokens=sum(a.prompt_tokens + a.completion_tokens for a in agent),
                            wall_s=round(sum(a.wall_s for a in agent), 1))
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
        lines += ["", "| agent case | fixed | attempts | tokens (prompt+completion) | wall s (llm / verify) | stages | stopped |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {a.id} | {'yes' if a.fixed else 'no'} | {a.attempts} | {a.prompt_tokens + a.completion_tokens} "
                  f"({a.prompt_tokens}+{a.completion_tokens}) | {a.wall_s:.0f} ({a.llm_s:.0f} / {a.verify_s:.0f}) | "
                  f"{', '.join(a.stages)} | {a.stopped} |" for a in agent]
        ag = s["agent"]
        lines.append(f"\nagent fix rate: {ag['fixed']}/{ag['cases']} ({ag['fix_rate']:.0%}), {ag['attempts']} attempts, "
                     f"{ag['tokens']} tokens, {ag['wall_s']:.0f} s")
    else:
        lines.append(f"\nagent: {s['agent']['note']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None, *, runner: Runner | None = None,
         say: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True)) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=Path, default=CASES)
    ap.add_argument("--only", nargs="*", default=None, help="case ids to run")
    ap.add_argument("--group", choices=("real", "hack"), default=None)
    ap.add_argument("--out", type=Path, default=Path("results/fixbench"))
    ap.add_argument("--llm-model", default=None, help="run the agent over the real cases (needs OPENAI_BASE_URL)")
    ap.add_argument("--attempts", type=int, default=3)
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
    a = ap.parse_args(argv)
    for name in ("attempts", "llm_max_tokens", "llm_timeout", "llm_retries"):
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
    if not a.llm_model:
        note = "skipped: no --llm-model given"
    elif not os.environ.get("OPENAI_BASE_URL"):
        note = "skipped: --llm-model given but OPENAI_BASE_URL is not set (no endpoint)"
    else:
        from enablebot.fix.llm import LLMClient, Transcript

        kw = {k: v for k, v in (("max_tokens", a.llm_max_tokens), ("timeout_s", a.llm_timeout),
                                ("retries", a.llm_retries)) if v is not None}
        transcript = a.out / "agent_transcript.jsonl"
        transcript.write_text("", encoding="utf-8")
        agent_log = a.out / "agent_cases.jsonl"
        agent_log.write_text("", encoding="utf-8")
        llm = LLMClient.from_env(a.llm_model, transcript=Transcript(transcript, (os.environ.get("OPENAI_API_KEY", ""),)),
                                 **kw)
        note = (f"model {a.llm_model} at an OpenAI-compatible endpoint, {a.attempts} attempts per case, answers hidden, "
                f"max_tokens {llm.max_tokens}, timeout {llm.timeout_s:g} s, retries {llm.retries}")
        agent = []
        for case in [c for c in cases if c.group == "real" and c.expect == "accepted"]:
            say(f"agent: {case.id}")
            agent.append(run_agent_case(case, defaults, repro, llm, a.attempts))
            say(f"    {'fixed' if agent[-1].fixed else 'not fixed'} after {agent[-1].attempts} attempt(s)")
            jsonl.append(agent_log, dataclasses.asdict(agent[-1]), sort_keys=True)  # kept when a long run is cut short
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
