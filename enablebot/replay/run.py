"""The replay: walk transformers releases in order, as the nightly would have, on pinned torch.

Per release (each step is recorded in OUT/replay.json when it finishes, so a killed or time-boxed
replay resumes where it stopped, and a later run only adds new releases):
  release  fetch the wheel, read its date and its model types (no import)
  env      its own environment: the wheel --no-deps over the pinned base (envs.prepare)
  day0     `sweep --only-new-types`: register the types it added over the previous release through
           the day-0 path (no hand-written knowledge) and run the default Dynamo pass on them
  follow   `sweep --reuse <previous release>` over the earlier releases' types not yet supported:
           an item re-runs only when its model code (the incremental cache key) changed
  inductor the Inductor pass (main model, eval: numerics against fp64) on the types that are
           full graph in this release and not yet supported
  fix      day 0 only: `enablebot fix` on each new type that breaks (recipes, rewrites, the LLM
           when one is configured), time-boxed per type
Every child process runs on the release's environment (envs.child_env); this process never
imports the replayed transformers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..fileio import atomic_write_text
from ..results import Serializable
from . import envs as envs_mod
from .releases import Release, fetch_wheel, read_release
from .timeline import BotFix, TypeRelease, type_release

STATE_FILE = "replay.json"
BOT_FILE = "bot.json"
REGISTRY_FILE = "registry.yaml"
STEPS = ("release", "env", "day0", "follow", "inductor", "fix")


@dataclass
class ReplayOptions:
    out: Path
    versions: list[str]  # in release order
    previous: str  # the release before the first: its types are the starting registry
    wheels: Path
    envs: Path
    jobs: int = 2
    timeout_s: float = 300.0
    max_minutes: float | None = None
    inductor: bool = True
    fix: bool = True
    fix_minutes: float = 15.0
    fix_attempts: int = 1
    fix_samples: int = 2
    fix_max_tokens: int = 800  # completion tokens per LLM call: a small local model on 2 cores writes ~10 tokens/s
    llm_model: str | None = None
    repeats: int = 3
    only: tuple[str, ...] = ()  # follow only these types (a type's history; tests)
    refresh: tuple[str, ...] = ()  # types whose results are redone with today's harness (refresh_types)
    refresh_unbuilt: bool = False  # ... plus every new type that did not build and run eager at day 0


@dataclass
class StepRecord(Serializable):
    wall_s: float = 0.0
    ran: int = 0
    reused: int = 0
    skipped_done: int = 0
    note: str = ""


@dataclass
class ReleaseState(Serializable):
    version: str
    release: Release | None = None
    env: envs_mod.EnvCheck | None = None
    new_types: list[str] = field(default_factory=list)
    steps: dict[str, StepRecord] = field(default_factory=dict)


@dataclass
class Refresh(Serializable):
    """Types whose results were dropped and redone by a later harness (README: a day-0 failure that a
    harness fix since has cured is the harness's, not the release's)."""
    at: str
    harness: str  # the enablebot commit that redid them
    reason: str
    types: list[str] = field(default_factory=list)


@dataclass
class ReplayState(Serializable):
    previous: str = ""
    releases: dict[str, ReleaseState] = field(default_factory=dict)
    refreshes: list[Refresh] = field(default_factory=list)

    @classmethod
    def load(cls, out: Path) -> "ReplayState":
        p = out / STATE_FILE
        if not p.exists():
            return cls()
        data = json.loads(p.read_text(encoding="utf-8"))
        data.pop("bot", None)  # the first replays kept the bot's fixes here; they live in bot.json now
        return cls.from_dict(data, str(p))

    def save(self, out: Path) -> None:
        atomic_write_text(out / STATE_FILE, json.dumps(self.to_dict(), indent=1) + "\n")


@dataclass
class BotState(Serializable):
    """The bot's day-0 fixes, in a file of their own (OUT/bot.json): `replay --fix-only` can work
    through the releases a running replay has finished without writing its state."""
    types: dict[str, BotFix] = field(default_factory=dict)
    releases_done: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, out: Path) -> "BotState":
        p = out / BOT_FILE
        return cls.from_dict(json.loads(p.read_text(encoding="utf-8")), str(p)) if p.exists() else cls()

    def save(self, out: Path) -> None:
        atomic_write_text(out / BOT_FILE, json.dumps(self.to_dict(), indent=1) + "\n")


class Budget:
    def __init__(self, minutes: float | None):
        self.t0, self.minutes = time.time(), minutes

    def left_min(self) -> float | None:
        return None if self.minutes is None else self.minutes - (time.time() - self.t0) / 60.0

    def spent(self) -> bool:
        left = self.left_min()
        return left is not None and left <= 0.05


_RAN = re.compile(r"ran (\d+) \(skipped (\d+) already done, reused (\d+)\)")


class ReplayAborted(RuntimeError):
    """A step cannot be run as the replay means it (its release's environment is not the one
    imported): stop, with the state saved, rather than record it."""


class UnknownRefresh(ValueError):
    """--refresh named a type that no replayed release brought."""


def release_dir(out: Path, version: str) -> Path:
    return out / "releases" / version


def replay(opts: ReplayOptions, say: Callable[[str], None] = print) -> ReplayState:
    out = opts.out
    out.mkdir(parents=True, exist_ok=True)
    state = ReplayState.load(out)
    state.previous = state.previous or opts.previous
    purge_wrong_release(out, state, say)
    if opts.refresh or opts.refresh_unbuilt:
        types = set(opts.refresh) | (set(unbuilt_at_day0(out, state)) if opts.refresh_unbuilt else set())
        # A resumed run with the same flags must not drop what this harness has redone already.
        here = harness_commit()
        types -= {mt for r in state.refreshes if r.harness == here for mt in r.types}
        refresh_types(out, state, sorted(types), "--refresh-unbuilt" if opts.refresh_unbuilt else "--refresh", say,
                      harness=here)
    budget = Budget(opts.max_minutes)
    registry = out / REGISTRY_FILE
    last_ok: str | None = None  # the newest release that ran, for --reuse
    for v in opts.versions:
        if budget.spent():
            say(f"time budget spent: stopping before {v}; rerun the same command to resume")
            break
        rs = state.releases.setdefault(v, ReleaseState(version=v))
        if not _step_release(opts, state, rs, say):
            continue
        if not rs.env.ok:  # its new types show up as new in the next release that imports
            continue
        todo = _pending_steps(opts, out, rs)
        if todo or not registry.exists():  # else nothing is left to do here: its environment is not needed
            env = _release_env(opts, state, rs, say)
            if env is None:
                continue
            if not registry.exists():
                _seed_base(opts, env, registry, say)
            d = release_dir(out, v)
            for step in todo:
                if step == "fix" and v in BotState.load(out).releases_done:
                    continue  # done meanwhile by a `--fix-only` beside this replay
                if budget.spent():
                    break
                t0 = time.time()
                rec = _STEP_FUNCS[step](opts, state, rs, env, registry, d, last_ok, budget, say)
                if rec is None:  # cut short by the budget: not done, resumes next time
                    break
                rec.wall_s = round(rec.wall_s or (time.time() - t0), 1)
                rs.steps[step] = rec
                state.save(out)
                say(f"{v} {step}: {rec.wall_s:.0f} s, ran {rec.ran}, reused {rec.reused}" + (f"; {rec.note}" if rec.note else ""))
        if all(s in rs.steps for s in ("day0", "follow")):
            last_ok = v
        if budget.spent():
            say(f"time budget spent during {v}; rerun the same command to resume")
            break
    state.save(out)
    return state


def _pending_steps(opts: ReplayOptions, out: Path, rs: ReleaseState) -> list[str]:
    """The release's steps still to run. A step left out now (--no-inductor, --no-fix) is not
    recorded, so a later run with it on does it; a fix step `--fix-only` did is done."""
    return [st for st in ("day0", "follow", "inductor", "fix") if st not in rs.steps
            and not (st == "inductor" and not opts.inductor)
            and not (st == "fix" and (not opts.fix or rs.version in BotState.load(out).releases_done))]


def _step_release(opts, state: ReplayState, rs: ReleaseState, say) -> bool:
    if "release" not in rs.steps:
        t0 = time.time()
        try:
            rs.release = read_release(rs.version, opts.wheels)
        except Exception as e:  # noqa: BLE001 - named in the report, the replay goes on
            rs.steps["release"] = StepRecord(wall_s=round(time.time() - t0, 1), note=f"not fetched: {e}")
            state.save(opts.out)
            say(f"{rs.version}: not fetched: {e}")
            return False
        rs.steps["release"] = StepRecord(wall_s=round(time.time() - t0, 1), note=rs.release.date[:10])
        state.save(opts.out)
    if rs.release is None:
        return False
    if "env" not in rs.steps:
        t0 = time.time()
        try:
            rs.env = envs_mod.prepare(Path(rs.release.wheel), opts.envs, rs.version)
        except Exception as e:  # noqa: BLE001
            rs.env = envs_mod.EnvCheck(version=rs.version, path="", ok=False, reason=f"{type(e).__name__}: {e}"[:300])
        note = ("pinned" if rs.env.ok and not rs.env.extra_requirements else
                f"with {', '.join(rs.env.extra_requirements)}" if rs.env.ok else f"not importable: {rs.env.reason}")
        rs.steps["env"] = StepRecord(wall_s=round(time.time() - t0, 1), note=note)
        state.save(opts.out)
        say(f"{rs.version} ({rs.release.date[:10]}): environment {note}")
    return True


def _release_env(opts: ReplayOptions, state: ReplayState, rs: ReleaseState, say, save: bool = True) -> dict | None:
    """The environment of the release's child processes. An environment recorded by an earlier run
    may be gone (another machine, a cleared cache): without its directory the children would import
    the base venv's transformers and record their results under the wrong release, so it is
    installed again first. The children also refuse to start on any other transformers
    (versions.EXPECT_TRANSFORMERS_ENV)."""
    from ..versions import EXPECT_TRANSFORMERS_ENV

    path = envs_mod.env_path(opts.envs, rs.version)
    if not (path / "transformers" / "__init__.py").exists() or rs.env.path != str(path):
        t0 = time.time()
        try:
            rs.release.wheel = str(fetch_wheel(rs.version, opts.wheels))
            check = envs_mod.prepare(Path(rs.release.wheel), opts.envs, rs.version)
        except Exception as e:  # noqa: BLE001 - named, the replay goes on with the next release
            check = envs_mod.EnvCheck(version=rs.version, path="", ok=False, reason=f"{type(e).__name__}: {e}"[:300])
        if not check.ok:
            say(f"{rs.version}: its environment is gone and could not be installed again ({check.reason}); "
                "this release is left as it is")
            return None
        rs.env = check
        if save:
            state.save(opts.out)
        say(f"{rs.version}: environment installed again in {time.time() - t0:.0f} s ({path})")
    env = envs_mod.child_env(path)
    env[EXPECT_TRANSFORMERS_ENV] = rs.version
    return env


def _seed_base(opts: ReplayOptions, env: dict, registry: Path, say) -> None:
    """The starting registry: the first release's catalogue, less the types the previous release
    did not have (those are the first release's new types), all generic entries."""
    from ..model.registry import Registry

    prev = read_release(opts.previous, opts.wheels)
    _cli(["registry", "seed", "--registry", str(registry)], env, registry.parent / "seed.log")
    reg = Registry.load(registry)
    keep = set(prev.model_types)
    for mt in [m for m in reg.entries if m not in keep]:
        del reg.entries[mt]
    reg.save()
    say(f"starting registry: {len(reg.entries)} types of transformers {opts.previous} -> {registry}")


def _cli(args: list[str], env: dict, log: Path, timeout: float | None = None) -> tuple[int, str]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"\n$ enablebot {' '.join(args)}\n")
        f.flush()
        try:
            proc = subprocess.run([sys.executable, "-m", "enablebot.cli", *args], env=env, stdout=f,
                                  stderr=subprocess.STDOUT, text=True, timeout=timeout, start_new_session=True)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = 124
    text = log.read_text(encoding="utf-8", errors="replace")
    text = text[text.rfind("\n$ enablebot "):]
    from ..versions import EXPECT_TRANSFORMERS_ENV

    if rc == 2 and EXPECT_TRANSFORMERS_ENV in text:  # never record a step that ran on the wrong release
        raise ReplayAborted(text.strip().splitlines()[-1][:400])
    return rc, text


def _sweep(args: list[str], opts: ReplayOptions, env: dict, registry: Path, out: Path, budget: Budget) -> StepRecord | None:
    extra = ["--registry", str(registry), "--out", str(out), "--jobs", str(opts.jobs), "--timeout", str(opts.timeout_s),
             "--no-report"]
    left = budget.left_min()
    if left is not None:
        extra += ["--max-minutes", f"{max(left, 0.1):.2f}"]
    t0 = time.time()
    rc, text = _cli(["sweep", *args, *extra], env, out.parent / f"{out.name}.log")
    rec = StepRecord(wall_s=round(time.time() - t0, 1))
    m = _RAN.search(text)
    if m:
        rec.ran, rec.skipped_done, rec.reused = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if "not started (time budget)" in text:
        return None
    if rc != 0 and "nothing to run" not in text:
        rec.note = f"sweep exit {rc}: {text.strip().splitlines()[-1][:200] if text.strip() else ''}"
    return rec


def _day0(opts, state, rs, env, registry, d, last_ok, budget, say) -> StepRecord | None:
    from ..model.registry import Registry
    from ..sweep.day0 import new_in_release

    only = sum((["-m", mt] for mt in opts.only), [])
    rec = _sweep(["--pass", "dynamo", "--only-new-types", "--release-date", rs.release.date, *only], opts, env,
                 registry, d / "dynamo", budget)
    if rec is None:
        return None
    rs.new_types = [mt for mt in new_in_release(Registry.load(registry), rs.version) if not opts.only or mt in opts.only]
    rec.note = (rec.note + "; " if rec.note else "") + f"{len(rs.new_types)} new types"
    return rec


def _follow(opts, state, rs, env, registry, d, last_ok, budget, say) -> StepRecord | None:
    open_types = [mt for mt in _open_types(opts.out, state, before=rs.version) if mt in set(rs.release.model_types)]
    if not open_types:
        return StepRecord(note="no earlier type to follow")
    # A type's timeout is kept while its code is unchanged: the same code times out again here.
    reuse = ["--reuse", str(release_dir(opts.out, last_ok) / "dynamo"), "--keep-timeouts"] if last_ok else []
    # A type is supported only when every item is full graph: first its main model's eval call (the
    # sentinel); the other items only for the types whose sentinel now compiles to one graph. Most
    # open types still break, so a release costs about one item per open type.
    sentinel = _sweep(["--pass", "dynamo", "--task", "main", "--mode", "eval", "--scenario", "call", *reuse,
                       *sum((["-m", mt] for mt in open_types), [])], opts, env, registry, d / "dynamo", budget)
    if sentinel is None:
        return None
    here = standings(opts.out, rs.version)
    rest = [mt for mt in open_types if mt in here and here[mt].full_graph]
    rec = StepRecord(wall_s=sentinel.wall_s, ran=sentinel.ran, reused=sentinel.reused, note=sentinel.note)
    if rest:
        full = _sweep(["--pass", "dynamo", *reuse, *sum((["-m", mt] for mt in rest), [])], opts, env, registry,
                      d / "dynamo", budget)
        if full is None:
            return None
        rec.wall_s += full.wall_s
        rec.ran += full.ran
        rec.reused += full.reused
        rec.note = "; ".join(x for x in (rec.note, full.note) if x)
    rec.note = (rec.note + "; " if rec.note else "") + f"{len(open_types)} types followed, {len(rest)} in full"
    return rec


def _inductor(opts, state, rs, env, registry, d, last_ok, budget, say) -> StepRecord | None:
    here = standings(opts.out, rs.version)
    todo = sorted(mt for mt, st in here.items() if st.full_graph and mt in _tracked(state)
                  and not _supported_before(opts.out, state, mt, rs.version))
    if not todo:
        return StepRecord(note="no full-graph type to check")
    args = ["--pass", "inductor", "--task", "main", "--mode", "eval", "--repeats", str(opts.repeats),
            *sum((["-m", mt] for mt in todo), [])]
    prev = _last_with(opts.out, state, rs.version, "inductor")
    if prev:
        args += ["--reuse", str(prev), "--keep-timeouts"]
    rec = _sweep(args, opts, env, registry, d / "inductor", budget)
    if rec is not None:
        rec.note = (rec.note + "; " if rec.note else "") + f"{len(todo)} types"
    return rec


def _fix(opts, state, rs, env, registry, d, last_ok, budget, say) -> StepRecord | None:
    """The bot at day 0: `enablebot fix` on each new type that built and broke, in OUT/bot.json."""
    bot = BotState.load(opts.out)
    here = standings(opts.out, rs.version)
    breaking = [mt for mt in rs.new_types if mt in here and here[mt].built and not here[mt].full_graph
                and (not opts.only or mt in opts.only)]
    total = StepRecord()
    for mt in breaking:
        if mt in bot.types and not opts.only:  # named with --type: tried again (a new playbook entry)
            continue
        left = budget.left_min()
        if left is not None and left < 1.0:
            return None
        cap = opts.fix_minutes * 60 if left is None else min(opts.fix_minutes * 60, left * 60)
        fix = run_fix(opts, env, registry, d / "fix", mt, cap, breaking_items(opts.out, rs.version, mt))
        bot = BotState.load(opts.out)
        bot.types[mt] = fix
        bot.save(opts.out)
        say(f"  fix {mt}: {fix.status} in {fix.seconds:.0f} s" + (f" ({', '.join(fix.sources)})" if fix.sources else ""))
        total.ran += 1
    bot = BotState.load(opts.out)
    if rs.version not in bot.releases_done and not opts.only:  # --type: the release is not done for the others
        bot.releases_done.append(rs.version)
        bot.save(opts.out)
    total.note = f"{sum(bot.types[m].status == 'fixed' for m in breaking)} of {len(breaking)} breaking types fixed"
    return total


def fix_pass(opts: ReplayOptions, say: Callable[[str], None] = print) -> BotState:
    """`replay --fix-only`: the bot's day-0 fixes over the releases the replay has run so far (it may
    still be running: this writes only OUT/bot.json and the fix directories)."""
    state = ReplayState.load(opts.out)
    budget = Budget(opts.max_minutes)
    registry = opts.out / REGISTRY_FILE
    for v in _order(state):
        rs = state.releases[v]
        done = v in BotState.load(opts.out).releases_done and not opts.only
        if done or "day0" not in rs.steps or not (rs.env and rs.env.ok):
            continue
        if budget.spent():
            say("time budget spent; rerun to resume")
            break
        if opts.only and not set(opts.only) & set(rs.new_types):
            continue
        # A replay may be running beside this pass: its state file is not written from here.
        env = _release_env(opts, state, rs, say, save=False)
        if env is None:
            continue
        t0 = time.time()
        rec = _fix(opts, state, rs, env, registry, release_dir(opts.out, v), None, budget, say)
        if rec is None:
            say(f"{v} fix: cut short by the time budget; rerun to resume")
            break
        say(f"{v} fix: {time.time() - t0:.0f} s; {rec.note}")
    return BotState.load(opts.out)


def breaking_items(out: Path, version: str, mt: str) -> list[dict[str, str | None]]:
    """The day-0 items of a type that are not one graph (a break or a compile error), as `fix`
    options: eval before train, the padded call before the other scenarios."""
    from ..sweep.checkpoint import RESULTS_FILE, load_results

    f = release_dir(out, version) / "dynamo" / RESULTS_FILE
    rs = [r for r in (load_results(f).values() if f.exists() else []) if r.spec.model_id == mt
          and r.verdict in ("graph_break", "compile_error")]
    items = {(r.spec.mode, r.spec.scenario_name, r.spec.task) for r in rs}
    order = sorted(items, key=lambda t: (t[0] != "eval", t[1] != "call", str(t[2])))
    return [{"mode": m, "scenario": sc, "task": t} for m, sc, t in order]


def _item_slug(item: dict) -> str:
    return "-".join(str(item.get(k) or "main") for k in ("task", "mode", "scenario"))


def _item_args(item: dict) -> list[str]:
    args = ["--mode", str(item.get("mode") or "eval"), "--scenario", str(item.get("scenario") or "call")]
    return args + (["--task", str(item["task"])] if item.get("task") else [])


def run_fix(opts: ReplayOptions, env: dict, registry: Path, out: Path, mt: str, cap_s: float,
            items: list[dict] | None = None) -> BotFix:
    """The bot on one type: `enablebot fix` on its first breaking item; every other breaking item
    is then judged with the verified bundles applied together (`verify --together`), and fixed in
    its own right where they do not make it one graph. The type counts as fixed only when every
    breaking item is one graph with numerics passing under the bundles together."""
    items = items or [{"mode": "eval", "scenario": "call", "task": None}]
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    deadline = t0 + cap_s
    bundles: list[str] = []
    outcomes_all: list[dict] = []
    done: list[dict] = []
    sources: set[str] = set()

    def left() -> float:
        return deadline - time.time()

    def finish(status: str, note: str) -> BotFix:
        fixed = [o for o in outcomes_all if o.get("status") == "fixed"]
        return BotFix(status=status, seconds=round(time.time() - t0, 1), clusters=len(outcomes_all),
                      fixed_clusters=len(fixed), sources=sorted(sources), note=note[:300], items=done)

    for n, item in enumerate(items):
        slug = _item_slug(item)
        if bundles:
            ok, why = _judge_together(env, out, mt, bundles, item, left())
            if ok is None:
                return finish("timeout", f"no verified fix within {cap_s / 60:.0f} min ({slug} not judged)")
            if ok:
                done.append({**item, "status": "fixed", "by": "together"})
                continue
        # The first item's bundles keep the historical layout (OUT/<type>/<cluster>); a later
        # item's go beside them, so that a cluster key both items share is not overwritten.
        item_out = out if n == 0 else out / f"{mt}.{slug}"
        js = out / (f"{mt}.outcomes.json" if n == 0 else f"{mt}.{slug}.outcomes.json")
        args = ["fix", mt, "--registry", str(registry), "--out", str(item_out), "--device", "cpu", *_item_args(item),
                "--attempts", str(opts.fix_attempts), "--samples", str(opts.fix_samples),
                "--max-tokens", str(opts.fix_max_tokens), "--json", str(js)]
        if opts.llm_model:
            args += ["--llm-model", opts.llm_model]
        js.unlink(missing_ok=True)
        if left() <= 0:
            return finish("timeout", f"no verified fix within {cap_s / 60:.0f} min ({slug} not tried)")
        rc, text = _cli(args, env, out / f"{mt}.log", timeout=left())
        if rc == 124:
            return finish("timeout", f"no verified fix within {cap_s / 60:.0f} min")
        try:
            outcomes = json.loads(js.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            tail = text.strip().splitlines()[-1][:200] if text.strip() else ""
            return finish("error", f"fix exit {rc}: {tail}")
        outcomes_all += outcomes
        fixed = [o for o in outcomes if o.get("status") == "fixed"]
        sources |= {o.get("source") or o.get("kind") or "?" for o in fixed}
        if not outcomes or len(fixed) != len(outcomes):
            done.append({**item, "status": "not_fixed", "by": "fix"})
            return finish("not_fixed", "; ".join(f"{slug} {o.get('cluster')}: {o.get('status')}" for o in outcomes
                                                 if o.get("status") != "fixed") or f"{slug}: no outcome")
        bundles += [b for b in dict.fromkeys(o.get("bundle_dir") for o in fixed) if b and b not in bundles]
        if n > 0:  # this item's bundles with the earlier ones: judged together once more
            ok, why = _judge_together(env, out, mt, bundles, item, left())
            if not ok:
                done.append({**item, "status": "not_fixed", "by": "together"})
                return finish("timeout" if ok is None else "not_fixed", f"{slug}: the bundles together: {why}")
        done.append({**item, "status": "fixed", "by": "fix"})
    return finish("fixed", "" if len(items) == 1 else f"{len(items)} breaking items, each one graph with the bundles")


def _judge_together(env: dict, out: Path, mt: str, bundles: list[str], item: dict,
                    left_s: float) -> tuple[bool | None, str]:
    """`enablebot verify --together` on one item: (passed, why not); None when out of time."""
    if left_s <= 0:
        return None, "out of time"
    js = out / f"{mt}.{_item_slug(item)}.together.json"
    js.unlink(missing_ok=True)
    rc, text = _cli(["verify", *bundles, "--together", "--device", "cpu", *_item_args(item), "--json", str(js)],
                    env, out / f"{mt}.log", timeout=left_s)
    if rc == 124:
        return None, "out of time"
    try:
        res = json.loads(js.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False, (text.strip().splitlines() or [f"verify exit {rc}"])[-1][:200]
    why = "; ".join(f"{c['name']}: {c['detail'][:120]}" for c in res.get("checks", []) if not c.get("passed"))
    return bool(res.get("passed")), why


_STEP_FUNCS = {"day0": _day0, "follow": _follow, "inductor": _inductor, "fix": _fix}


# ---- reading results back --------------------------------------------------------------------

def _tracked(state: ReplayState) -> set[str]:
    return {mt for rs in state.releases.values() for mt in rs.new_types}


def _drop_results(out: Path, version: str, drop: Callable[[dict], bool]) -> int:
    """Remove the results `drop` selects from a release's Dynamo and Inductor result files; how many."""
    from ..sweep.checkpoint import RESULTS_FILE

    dropped = 0
    for sub in ("dynamo", "inductor"):
        f = release_dir(out, version) / sub / RESULTS_FILE
        if not f.exists():
            continue
        lines = [ln for ln in f.read_text(encoding="utf-8").splitlines() if ln.strip()]
        keep = [ln for ln in lines if not drop(json.loads(ln))]
        if len(keep) != len(lines):
            atomic_write_text(f, "".join(ln + "\n" for ln in keep))
            dropped += len(lines) - len(keep)
    return dropped


def purge_wrong_release(out: Path, state: ReplayState, say: Callable[[str], None] = print) -> list[str]:
    """Drop results a release's folder holds from a *later* transformers (a run whose release
    environment was missing imported the base venv's). A result from an earlier release is a
    legitimate reuse (its model code did not change) and stays. The steps that wrote them, and the
    follow and Inductor steps of every later release (which followed the standings they decided),
    are un-recorded so the next run redoes them; results that stay are reused, not re-run.
    Returns the releases that held such results."""
    from ..versions import release_key

    tainted: list[str] = []
    for v in _order(state):
        n = _drop_results(out, v, lambda r: release_key(r.get("versions", {}).get("transformers")) > release_key(v))
        if n:
            say(f"{v}: dropped {n} results recorded under a later transformers")
            tainted.append(v)
    if not tainted:
        return []
    first = min(tainted, key=release_key)
    for v in _order(state):
        if release_key(v) < release_key(first):
            continue
        steps = state.releases[v].steps
        for step in ("follow", "inductor") + (("day0",) if v in tainted else ()):
            steps.pop(step, None)
    state.save(out)
    say(f"the follow and Inductor steps from {first} on will be redone")
    return tainted


def unbuilt_at_day0(out: Path, state: ReplayState) -> list[str]:
    """The new types that did not build and run eager at day 0 (those that need a missing optional
    package excepted: a re-run cannot change that)."""
    return sorted(mt for v in _order(state) if "day0" in state.releases[v].steps
                  for mt in state.releases[v].new_types
                  if (st := standings(out, v).get(mt)) is not None and not st.built and st.items > 0)


def refresh_types(out: Path, state: ReplayState, types: list[str], reason: str,
                  say: Callable[[str], None] = print, harness: str | None = None) -> list[str]:
    """Redo `types` with today's harness: drop their results in every release from the one that
    brought them, and un-record the day-0 step of those releases and the follow and Inductor steps
    of every release from the first of them, so the next run redoes them. The other types' results
    stay (`skipped_done`); a refreshed type is re-run at day 0 and then, in each later release,
    reused while its model code is unchanged, as in the first replay. The incremental cache key
    does not hash the harness on purpose (every commit would redo the whole replay): a harness fix
    is applied by naming what it changes. Returns the releases touched."""
    from ..versions import release_key

    brought = {mt: v for v in _order(state) for mt in state.releases[v].new_types}
    unknown = [mt for mt in types if mt not in brought]
    if unknown:
        raise UnknownRefresh(f"not a new type of any replayed release: {', '.join(unknown)}")
    if not types:
        say("refresh: no type to redo")
        return []
    first = min((brought[mt] for mt in types), key=release_key)
    wanted = set(types)
    touched: list[str] = []
    for v in _order(state):
        if release_key(v) < release_key(first):
            continue
        if _drop_results(out, v, lambda r: r["spec"]["model_id"] in wanted):
            touched.append(v)
        steps = state.releases[v].steps
        for step in ("follow", "inductor") + (("day0",) if wanted & set(state.releases[v].new_types) else ()):
            steps.pop(step, None)
    _STANDINGS.clear()
    state.refreshes.append(Refresh(at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                   harness=harness or harness_commit(), reason=reason, types=sorted(types)))
    state.save(out)
    say(f"refresh: {len(types)} types dropped from {len(touched)} releases; day 0 of their releases and the "
        f"follow and Inductor steps from {first} on will be redone")
    return touched


def harness_commit() -> str:
    """The enablebot commit running now ("unknown" outside a git checkout); "+dirty" with local edits."""
    src = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(src), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--", "enablebot"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def _order(state: ReplayState) -> list[str]:
    from ..versions import release_key

    return sorted(state.releases, key=release_key)


def standings(out: Path, version: str) -> dict[str, TypeRelease]:
    """Each type's standing in `version`, from the release's result files (read again only when
    one of them changed)."""
    d = release_dir(out, version)
    files = [d / "dynamo" / "results.jsonl", d / "inductor" / "results.jsonl", d / "dynamo" / "incremental.json"]
    stamp = tuple((f.stat().st_mtime_ns, f.stat().st_size) if f.exists() else None for f in files)
    hit = _STANDINGS.get(str(d))
    if hit is None or hit[0] != stamp:
        hit = _STANDINGS[str(d)] = (stamp, _read_standings(d))
    return hit[1]


_STANDINGS: dict[str, tuple] = {}


def _read_standings(d: Path) -> dict[str, TypeRelease]:
    from ..sweep.checkpoint import RESULTS_FILE, load_results
    from ..sweep.incremental import DECISIONS_FILE

    dyn = load_results(d / "dynamo" / RESULTS_FILE) if (d / "dynamo" / RESULTS_FILE).exists() else {}
    ind = load_results(d / "inductor" / RESULTS_FILE) if (d / "inductor" / RESULTS_FILE).exists() else {}
    reused: set[str] = set()
    inc = d / "dynamo" / DECISIONS_FILE
    if inc.exists():
        reused = {x["key"] for x in json.loads(inc.read_text(encoding="utf-8")).get("decisions", [])
                  if x.get("action") == "reuse"}
    by_type: dict[str, list] = {}
    for r in dyn.values():
        by_type.setdefault(r.spec.model_id, []).append(r)
    ind_by: dict[str, list] = {}
    for r in ind.values():
        ind_by.setdefault(r.spec.model_id, []).append(r)
    return {mt: type_release(rs, ind_by.get(mt, []), reused) for mt, rs in by_type.items()}


def _supported_before(out: Path, state: ReplayState, mt: str, version: str) -> bool:
    from ..versions import release_key

    return any(standings(out, v).get(mt, TypeRelease()).supported
               for v in _order(state) if release_key(v) < release_key(version) and "day0" in state.releases[v].steps)


def _open_types(out: Path, state: ReplayState, *, before: str) -> list[str]:
    """Types of earlier releases not yet supported in any release before `before`."""
    from ..versions import release_key

    earlier = [v for v in _order(state) if release_key(v) < release_key(before)]
    done: set[str] = set()
    for v in earlier:
        for mt, st in standings(out, v).items():
            if st.supported:
                done.add(mt)
    return sorted({mt for v in earlier for mt in state.releases[v].new_types} - done)


def _last_with(out: Path, state: ReplayState, before: str, sub: str) -> Path | None:
    from ..versions import release_key

    for v in reversed(_order(state)):
        if release_key(v) < release_key(before) and (release_dir(out, v) / sub / "results.jsonl").exists():
            return release_dir(out, v) / sub
    return None

