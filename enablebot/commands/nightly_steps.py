"""The nightly loop as one entry point: watch -> register -> sweep -> merge -> check -> report
-> registry record -> fix the top clusters -> pr -> dashboard.

Each step calls the same library functions as its command; `enablebot nightly --config FILE`
runs them all locally, and the workflow runs them one job at a time (`--step NAME`), so the
two cannot drift. Re-running is safe: the sweep resumes, a model that already has a verified
bundle for these versions is not fixed again, an unchanged PR is not pushed and an unchanged
dashboard is not edited.

Config (YAML; the sections are typed below: a typo, a wrong type or a choice outside its set fails
at load, in one line):
    out: nightly                 # results/ and fixes/ go under it
    registry: model_registry.yaml
    baseline_dir: baselines
    watch:     {limit: 100}      # the Hub is HF_ENDPOINT / HF_TOKEN
    sweep:     {models: [..], pass: dynamo, device: cpu, modes: [eval], tasks: [base, head], jobs: 2, timeout: 300}
    fix:       {top: 5, llm_model: null, backend: inductor, attempts: 3, recipes: true, timing: true,
                heldout: true, sample_models: null, max_clusters: 1, device: cpu}
    pr:        {repos: {model-code: owner/transformers, dynamo: owner/pytorch}, max_open: 5, base: null}
    dashboard: {repo: owner/enablebot, pr_repos: []}
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

from pydantic import Field

from ..validate import DataError, Strict, load_as

STEPS = ("watch", "sweep", "merge", "check", "report", "record", "fix", "pr", "dashboard")


class ConfigError(ValueError):
    """The nightly config is unusable; the message says what to change."""


# The settings of each section, typed: a typo (`jobz`), a wrong type (`jobs: "8"`) or a choice
# outside its set (`device: gpu`) is refused at load time, in one line naming the field, instead
# of a default silently taking its place. An empty section (`sweep:`) means its defaults.
@dataclass
class WatchSettings(Strict):
    limit: int = 100
    endpoint: str | None = None  # default: HF_ENDPOINT


@dataclass
class SweepSettings(Strict):
    pass_: Annotated[Literal["build", "dynamo", "inductor"], Field(alias="pass")] = "dynamo"
    device: Literal["cpu", "cuda"] = "cpu"
    modes: list[Literal["eval", "train"]] = field(default_factory=lambda: ["eval", "train"])
    tasks: list[str] = field(default_factory=lambda: ["base", "head"])  # base | head | main | a class name
    models: list[str] | None = None  # None: every registered architecture
    jobs: int = 2
    timeout: float = 300.0  # seconds per model
    record_task: str = "head"  # the task whose results the registry records (support status)


@dataclass
class FixSettings(Strict):
    top: int = 5  # clusters of the ranked triage to fix
    llm_model: str | None = None  # None: recipes only
    max_total_tokens: int = 200_000
    backend: str = "inductor"
    device: Literal["cpu", "cuda"] = "cpu"
    attempts: int = 2  # LLM rounds
    samples: int = 3  # LLM samples per round; the verifier picks
    max_clusters: int = 1
    recipes: bool = True
    rewrites: bool = True  # the playbook's rewrites (enablebot/data/playbook.yaml), before the LLM
    timing: bool = True
    timeout: float = 900.0
    heldout: bool = True
    sample_models: list[str] | None = None  # None: architectures importing the patched file
    speed_threshold: float = 0.95


@dataclass
class PrSettings(Strict):
    repos: dict[str, str] = field(default_factory=dict)  # target (model-code, dynamo, ..., *) -> owner/name
    max_open: int = 5
    base: str | None = None
    write_interval: float = 1.0  # seconds between GitHub writes


@dataclass
class DashboardSettings(Strict):
    repo: str | None = None
    pr_repos: list[str] = field(default_factory=list)  # default: the PR repositories


@dataclass
class _NightlyFile(Strict):
    """The config file as written; paths are made relative to it by `NightlyConfig.load`."""

    out: str = "nightly"
    registry: str | None = None
    baseline_dir: str = "baselines"
    watch: WatchSettings = field(default_factory=WatchSettings)
    sweep: SweepSettings = field(default_factory=SweepSettings)
    fix: FixSettings = field(default_factory=FixSettings)
    pr: PrSettings = field(default_factory=PrSettings)
    dashboard: DashboardSettings = field(default_factory=DashboardSettings)


@dataclass
class NightlyConfig:
    out: Path = Path("nightly")
    registry: Path | None = None
    baseline_dir: Path = Path("baselines")
    watch: WatchSettings = field(default_factory=WatchSettings)
    sweep: SweepSettings = field(default_factory=SweepSettings)
    fix: FixSettings = field(default_factory=FixSettings)
    pr: PrSettings = field(default_factory=PrSettings)
    dashboard: DashboardSettings = field(default_factory=DashboardSettings)

    @property
    def sweep_dir(self) -> Path:
        return self.out / "results" / "sweep"

    @property
    def merged_dir(self) -> Path:
        return self.out / "results" / "merged"

    @property
    def fixes_dir(self) -> Path:
        return self.out / "fixes"

    @staticmethod
    def load(path: str | Path) -> "NightlyConfig":
        import yaml

        p = Path(path)
        try:
            raw = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"{p}: cannot read the nightly config ({e})") from e
        if not isinstance(raw, dict):
            raise ConfigError(f"{p}: the nightly config must be a mapping")
        raw = {k: v for k, v in _expand(raw).items() if v is not None}
        try:
            doc = load_as(_NightlyFile, raw, str(p))
        except DataError as e:
            raise ConfigError(str(e)) from None
        base = p.parent
        rel = (lambda v: None if v is None else (Path(v) if Path(v).is_absolute() else base / v))
        return NightlyConfig(out=rel(doc.out), registry=rel(doc.registry), baseline_dir=rel(doc.baseline_dir),
                             watch=doc.watch, sweep=doc.sweep, fix=doc.fix, pr=doc.pr, dashboard=doc.dashboard)


def _expand(node: Any) -> Any:
    """${VAR} in string values (the workflow passes repository variables this way); a value
    that expands to nothing is dropped from its mapping (an unset repository)."""
    import os

    if isinstance(node, dict):
        out = {k: _expand(v) for k, v in node.items()}
        return {k: v for k, v in out.items() if v != ""}
    if isinstance(node, list):
        return [_expand(v) for v in node]
    if isinstance(node, str) and "$" in node:
        import re

        return re.sub(r"\$\{(\w+)\}", lambda m: os.environ.get(m.group(1), ""), node).strip()
    return node


@dataclass
class StepLog:
    step: str
    ok: bool
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)


# ---- steps ---------------------------------------------------------------------------------
def step_watch(cfg: NightlyConfig) -> StepLog:
    from ..model.hub import HubClient
    from ..watch.watcher import watch_once

    rep = watch_once(cfg.registry, HubClient(cfg.watch.endpoint), limit=cfg.watch.limit)
    return StepLog("watch", True, f"new architectures: {', '.join(rep.new_architectures) or 'none'}",
                   {"new": list(rep.new_architectures)})


def step_sweep(cfg: NightlyConfig, shard: str | None = None) -> StepLog:
    import transformers

    from ..sweep.day0 import first, new_in_release, register_new_types
    from ..model.registry import Registry
    from ..sweep.engine import SweepOptions, parse_shard, plan, run_sweep

    s = cfg.sweep
    reg = Registry.load(cfg.registry)
    # Day 0: the installed release's types the registry lacks are registered, then run first.
    if register_new_types(reg, transformers_version=transformers.__version__):
        reg.save()
    opts = SweepOptions(pass_=s.pass_, device=s.device, modes=tuple(s.modes), tasks=tuple(s.tasks),
                        timeout_s=s.timeout, registry=str(reg.path))
    items = first(plan(reg, opts, s.models or None, parse_shard(shard)),
                  set(new_in_release(reg, transformers.__version__)))
    out = cfg.sweep_dir if not shard else cfg.out / "results" / f"shard-{shard.split('/')[0]}"
    stats = run_sweep(items, opts, out, jobs=s.jobs)
    return StepLog("sweep", True, f"{stats.ran} ran, {stats.skipped_done} already done: {stats.verdicts}",
                   {"ran": stats.ran, "skipped": stats.skipped_done})


def step_merge(cfg: NightlyConfig, shards: list[Path] | None = None) -> StepLog:
    from ..sweep.checkpoint import RESULTS_FILE, load_results, write_results

    dirs = shards or sorted(p for p in (cfg.out / "results").glob("s*") if (p / RESULTS_FILE).is_file())
    merged: dict = {}
    for d in dirs:
        merged.update(load_results(d / RESULTS_FILE))
    cfg.merged_dir.mkdir(parents=True, exist_ok=True)
    write_results(cfg.merged_dir / RESULTS_FILE, merged.values())
    return StepLog("merge", bool(merged), f"{len(merged)} results from {len(dirs)} shard(s)")


def step_check(cfg: NightlyConfig) -> StepLog:
    from collections import defaultdict

    from ..sweep.baseline import Baseline, baseline_name, compare
    from ..sweep.checkpoint import RESULTS_FILE, load_results

    groups: dict[Path, list] = defaultdict(list)
    for r in load_results(cfg.merged_dir / RESULTS_FILE).values():
        groups[cfg.baseline_dir / baseline_name(r)].append(r)
    failed, notes = False, []
    for path, rs in sorted(groups.items()):
        if not path.is_file():
            notes.append(f"{path.name}: no baseline")
            continue
        rep = compare(rs, Baseline.load(path))
        failed |= rep.failed
        notes.append(f"{path.name}: {'regressions' if rep.failed else 'ok'}")
    # A regression is reported (and fails the workflow's gate) but never stops the loop.
    return StepLog("check", not failed, "; ".join(notes))


def step_report(cfg: NightlyConfig) -> StepLog:
    from ..model.registry import Registry
    from ..sweep.reports import write_reports

    reg = Registry.load(cfg.registry)
    paths = write_reports(cfg.merged_dir, {mt: e.modality for mt, e in reg.entries.items() if e.modality})
    return StepLog("report", True, ", ".join(p.name for p in paths))


def step_record(cfg: NightlyConfig) -> StepLog:
    from ..sweep.checkpoint import RESULTS_FILE, load_results
    from ..model.registry import Registry
    from ..watch.support import record_status

    reg = Registry.load(cfg.registry)
    task = cfg.sweep.record_task
    n = 0
    for r in sorted(load_results(cfg.merged_dir / RESULTS_FILE).values(), key=lambda r: r.started_at):
        entry = reg.get(r.spec.model_id)
        if entry is not None and (r.spec.task or "head") == task:
            record_status(entry, r)
            n += 1
    changed = reg.save()
    return StepLog("record", True, f"{n} statuses; registry {'written' if changed else 'unchanged'}")


def top_models(triage: Path, top: int) -> list[str]:
    """One model per cluster of the ranked triage, the first `top` clusters, deduplicated."""
    data = json.loads(triage.read_text(encoding="utf-8"))
    clusters = data.get("clusters", []) if isinstance(data, dict) else data
    return list(dict.fromkeys(c["models"][0] for c in clusters[:top] if c.get("models")))


def step_fix(cfg: NightlyConfig, say: Callable[[str], None] = lambda _m: None) -> StepLog:
    from ..fix.bundle import FixBundle, find_bundles
    from ..fix.draft.llm import Budget, LLMClient
    from ..fix.loop import FixOptions, fix_model
    from ..fix.judge.verify import VerifyOptions
    from ..execute.isolation import parent_versions
    from ..execute.sandbox import require

    f = cfg.fix
    triage = cfg.merged_dir / "triage.json"
    if not triage.is_file():
        return StepLog("fix", True, "no triage.json: nothing to fix")
    require()  # LLM-written code runs only in the sandbox (or under the loud opt-out)
    llm = LLMClient.from_env(f.llm_model, budget=Budget(max_total_tokens=f.max_total_tokens))
    v = parent_versions()
    have = {"torch": v.torch, "transformers": v.transformers}
    done, fixed = [], []
    for model in top_models(triage, f.top):
        prior = [FixBundle.load(d) for d in find_bundles(cfg.fixes_dir / model)]
        if any(b.verified and _same_versions(b.versions, have) for b in prior):
            done.append(model)  # verified for these versions: no second LLM bill, same PR
            continue
        opts = FixOptions(out_dir=cfg.fixes_dir, from_triage=triage, attempts=f.attempts, samples=f.samples,
                          max_clusters=f.max_clusters, recipes=f.recipes, rewrites=f.rewrites,
                          spec={"device": f.device, "backend": f.backend, "timing": f.timing, "timeout_s": f.timeout},
                          verify=VerifyOptions(heldout=f.heldout, sample_models=f.sample_models,
                                               speed_threshold=f.speed_threshold))
        try:
            outs = fix_model(model, opts, llm=llm, say=lambda m, model=model: say(f"fix {model}: {m}"))
            fixed += [f"{model}: {o.status}" for o in outs]
        except Exception as e:  # noqa: BLE001 - one failing model never stops the others
            fixed.append(f"{model}: error {type(e).__name__}: {e}")
    return StepLog("fix", True, "; ".join(fixed + [f"{m}: already verified" for m in done]) or "nothing to fix")


def _same_versions(a: dict[str, str], b: dict[str, str]) -> bool:
    """torch / transformers equal up to a local build tag (2.13.0+cpu == 2.13.0)."""
    return all((a.get(k) or "").split("+")[0] == (b.get(k) or "").split("+")[0] for k in ("torch", "transformers"))


def step_pr(cfg: NightlyConfig) -> StepLog:
    from ..fix.bundle import find_bundles
    from ..pr.github_client import connect
    from ..pr.publish import NotPrAble, Publisher, plan_pr

    repos = cfg.pr.repos
    if not repos:
        return StepLog("pr", True, "no PR repositories configured")
    gh = connect(write_interval=cfg.pr.write_interval)
    pubs: dict[str, Publisher] = {}
    outcomes, skipped = [], []
    for d in find_bundles(cfg.fixes_dir):
        try:
            plan = plan_pr(d)
        except NotPrAble as e:
            skipped.append(f"{d.name}: {str(e)[:200]}")
            continue
        target = repos.get(plan.target, repos.get("*"))
        if target is None:
            skipped.append(f"{d.name}: no repository for target {plan.target}")
            continue
        if target not in pubs:
            pubs[target] = Publisher(gh.get_repo(target), base=cfg.pr.base, max_open=cfg.pr.max_open)
        outcomes.append(pubs[target].publish(plan))
    detail = "; ".join([f"{o.fix_key}: {o.action}" for o in outcomes] + [f"skip {s}" for s in skipped])
    return StepLog("pr", True, detail or "no bundles", {"outcomes": [o.to_dict() for o in outcomes]})


def step_dashboard(cfg: NightlyConfig) -> StepLog:
    from ..pr.dashboard import arch_rows, bot_prs, load_clusters, load_recipes, publish_dashboard
    from ..pr.github_client import connect
    from ..pr.body import render_dashboard
    from ..model.registry import Registry

    repo = cfg.dashboard.repo
    if not repo:
        return StepLog("dashboard", True, "no dashboard repository configured")
    gh = connect(write_interval=cfg.pr.write_interval)
    prs = []
    for r in cfg.dashboard.pr_repos or list(dict.fromkeys(cfg.pr.repos.values())) or [repo]:
        prs.extend(bot_prs(gh.get_repo(r)))
    triage = cfg.merged_dir / "triage.json"
    body = render_dashboard(arch_rows(Registry.load(cfg.registry)), load_clusters(triage if triage.is_file() else None),
                            prs, load_recipes([cfg.fixes_dir]),
                            updated_at=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    out = publish_dashboard(gh.get_repo(repo), body)
    return StepLog("dashboard", True, f"{out.action}: {out.url}", {"action": out.action})


def run_nightly(cfg: NightlyConfig, steps: tuple[str, ...] = STEPS,
                say: Callable[[str], None] = lambda _m: None, shard: str | None = None) -> list[StepLog]:
    """Run `steps` in order; a failing check is recorded and the loop goes on."""
    fns: dict[str, Callable[[], StepLog]] = {
        "watch": lambda: step_watch(cfg), "sweep": lambda: step_sweep(cfg, shard), "merge": lambda: step_merge(cfg),
        "check": lambda: step_check(cfg), "report": lambda: step_report(cfg), "record": lambda: step_record(cfg),
        "fix": lambda: step_fix(cfg, say), "pr": lambda: step_pr(cfg), "dashboard": lambda: step_dashboard(cfg)}
    logs = []
    for name in steps:
        say(f"{name}: starting")
        log = fns[name]()
        say(f"{name}: {log.detail}")
        logs.append(log)
    return logs
