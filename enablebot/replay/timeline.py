"""From a replay's per-release results to time to support: pure functions over typed inputs.

Definitions (README "Time to support, replayed"):
- a type is *full graph* in a release when every item of its default Dynamo pass (every task, mode
  and scenario) compiled to one graph;
- it is *supported* when it is full graph and its main model's Inductor run (eval) is full graph
  with numerics passing against fp64;
- *human time to support*: from the release that brought the type to the first release in which
  it is supported, in releases and in days (release dates); 0 when supported at day 0;
- *bot time to support*: the day-0 wall time of the bot's own path (the Dynamo pass of the type,
  then `enablebot fix`: recipes, playbook rewrites, the LLM) to verified fixes of every break
  cluster; "not fixed" otherwise.
"""

from __future__ import annotations

import datetime as _dt
import statistics
from dataclasses import dataclass, field
from typing import Iterable

from ..results import RunResult, Serializable
from ..verdict import Verdict


# Built and ran eager: a compile error comes after the eager step, a timeout or crash may not;
# `eager_ok` is the build pass's word for it (the replay's Dynamo pass never gives it).
RAN_EAGER = (Verdict.FULL_GRAPH, Verdict.GRAPH_BREAK, Verdict.COMPILE_ERROR, Verdict.EAGER_OK)


@dataclass
class TypeRelease(Serializable):
    """One type in one release, from that release's results. `items` counts what coverage counts:
    not the items of a missing optional package, nor scenarios that do not apply."""
    items: int = 0
    missing: int = 0  # items that need an optional package this set-up lacks
    built_and_ran: int = 0
    full_graph_items: int = 0
    breaks: list[str] = field(default_factory=list)  # GBxxxx, sorted, distinct
    errors: list[str] = field(default_factory=list)
    numerics: str | None = None  # the main model's Inductor numerics status: pass | fail | inconclusive
    inductor_verdict: str | None = None
    reused: bool = False  # every item reused from the previous release (model code unchanged)
    seconds: float = 0.0  # worker time of the items run in this release

    @property
    def full_graph(self) -> bool:
        return self.items > 0 and self.full_graph_items == self.items

    @property
    def built(self) -> bool:
        return self.items > 0 and self.built_and_ran == self.items

    @property
    def supported(self) -> bool:
        return self.full_graph and self.inductor_verdict == Verdict.FULL_GRAPH and self.numerics == "pass"


@dataclass
class BotFix(Serializable):
    """The bot's day-0 fix attempt on one breaking type."""
    status: str  # fixed | not_fixed | error | timeout
    seconds: float = 0.0  # the fix command's wall time
    clusters: int = 0
    fixed_clusters: int = 0
    sources: list[str] = field(default_factory=list)  # recipe | rewrite:<entry> | model ...
    note: str = ""
    # the breaking day-0 items (mode, scenario, task) and how each ended: fixed by its own `fix`,
    # or by the bundles together (`verify --together`); empty in older results (the eval call only)
    items: list[dict] = field(default_factory=list)


@dataclass
class TypeRow(Serializable):
    model_type: str
    new_in: str  # version
    first_seen: str  # the release's date
    day0_items: int = 0
    day0_built: bool = False
    day0_full_graph: bool = False
    day0_supported: bool = False
    day0_breaks: list[str] = field(default_factory=list)
    day0_errors: list[str] = field(default_factory=list)
    day0_numerics: str | None = None
    human_supported_in: str | None = None  # version
    human_releases: int | None = None  # releases after the one that brought it (0 = day 0)
    human_days: float | None = None
    last_seen_in: str = ""  # the newest replayed release holding the type
    bot: BotFix | None = None
    bot_seconds: float | None = None  # Dynamo pass of the type + fix, when fixed

    day0_missing: bool = False  # every item needs an optional package the set-up lacks

    @property
    def outcome(self) -> str:
        if self.day0_missing:
            return "missing dependency"
        if self.day0_supported:
            return "supported at day 0"
        if self.human_supported_in:
            return "fixed upstream later"
        if not self.day0_built:
            return "not built at day 0"
        return "never fixed"


@dataclass
class ReleaseRow(Serializable):
    version: str
    date: str
    env: str  # pinned | with extra requirements | not importable: <reason>
    new_types: int = 0
    missing: int = 0  # need an optional package the set-up lacks (not counted in built)
    built: int = 0
    full_graph: int = 0
    supported: int = 0
    bot_fixed: int = 0  # breaking at day 0, fixed by the bot at day 0
    fixed_later: int = 0
    never_fixed: int = 0
    median_releases_later: float | None = None
    median_days_later: float | None = None


def type_release(results: Iterable[RunResult], inductor: Iterable[RunResult], reused: set[str] = frozenset()) -> TypeRelease:
    """One type's standing in one release, from its Dynamo results and its Inductor results."""
    from ..sweep.compare import breaks_by_type

    t = TypeRelease()
    keys = []
    gbs: set[str] = set()
    for r in results:
        keys.append(r.key)
        if not r.verdict.counted:  # a missing optional package, a scenario that does not apply
            t.missing += r.verdict == Verdict.MISSING_DEPENDENCY
            continue
        t.items += 1
        t.built_and_ran += r.verdict in RAN_EAGER
        t.full_graph_items += r.verdict == Verdict.FULL_GRAPH
        gbs.update(breaks_by_type(r))
        if r.key not in reused:
            t.seconds += r.duration_s
        if r.error is not None and not r.verdict.ok:
            t.errors.append(f"{r.spec.task}/{r.spec.mode}/{r.spec.scenario}: {r.error.stage}: {r.error.type}: "
                            f"{r.error.message[:100]}")
    t.breaks = sorted(gbs)
    t.reused = bool(keys) and all(k in reused for k in keys)
    ind = [r for r in inductor if r.spec.mode == "eval"]
    if ind:
        r = ind[0]
        t.inductor_verdict = str(r.verdict)
        t.numerics = r.numerics.status if r.numerics is not None else None
    return t


def days_between(a: str, b: str) -> float:
    da, db = _dt.datetime.fromisoformat(a), _dt.datetime.fromisoformat(b)
    return round((db - da).total_seconds() / 86400.0, 1)


def type_rows(releases: list[tuple[str, str]], new_in: dict[str, str],
              standings: dict[str, dict[str, TypeRelease]], bot: dict[str, BotFix]) -> list[TypeRow]:
    """`releases`: (version, date) in release order, replayed ones only; `new_in`: type -> version
    that brought it; `standings`: version -> type -> its standing there (a type not re-run because
    it was already supported is absent from later releases); `bot`: type -> its day-0 fix."""
    order = [v for v, _ in releases]
    dates = dict(releases)
    rows = []
    for mt, v0 in sorted(new_in.items(), key=lambda kv: (order.index(kv[1]) if kv[1] in order else -1, kv[0])):
        day0 = standings.get(v0, {}).get(mt)
        row = TypeRow(model_type=mt, new_in=v0, first_seen=dates.get(v0, ""))
        if day0 is not None:
            row.day0_items, row.day0_built, row.day0_full_graph = day0.items, day0.built, day0.full_graph
            row.day0_supported, row.day0_breaks, row.day0_errors = day0.supported, day0.breaks, day0.errors[:3]
            row.day0_numerics = day0.numerics
            row.day0_missing = day0.items == 0 and day0.missing > 0
        start = order.index(v0) if v0 in order else len(order)
        for i, v in enumerate(order[start:], start=start):
            st = standings.get(v, {}).get(mt)
            if st is None:
                continue
            row.last_seen_in = v
            if st.supported and row.human_supported_in is None:
                row.human_supported_in, row.human_releases = v, i - start
                row.human_days = days_between(dates[v0], dates[v])
        row.bot = bot.get(mt)
        if row.bot is not None and row.bot.status == "fixed":
            row.bot_seconds = round((day0.seconds if day0 else 0.0) + row.bot.seconds, 1)
        rows.append(row)
    return rows


def release_rows(releases: list[tuple[str, str]], envs: dict[str, str], rows: list[TypeRow]) -> list[ReleaseRow]:
    out = []
    for v, date in releases:
        mine = [r for r in rows if r.new_in == v]
        later = [r for r in mine if r.outcome == "fixed upstream later"]
        out.append(ReleaseRow(
            version=v, date=date, env=envs.get(v, ""), new_types=len(mine), missing=sum(r.day0_missing for r in mine),
            built=sum(r.day0_built for r in mine), full_graph=sum(r.day0_full_graph for r in mine),
            supported=sum(r.day0_supported for r in mine),
            bot_fixed=sum(r.bot is not None and r.bot.status == "fixed" for r in mine),
            fixed_later=len(later), never_fixed=sum(r.outcome == "never fixed" for r in mine),
            median_releases_later=_median([r.human_releases for r in later]),
            median_days_later=_median([r.human_days for r in later])))
    return out


@dataclass
class Totals(Serializable):
    releases: int
    new_types: int
    missing: int  # need an optional package the set-up lacks: left out of the built share
    built: int
    full_graph: int
    supported_day0: int
    breaking_day0: int  # built, not full graph
    bot_fixed: int
    fixed_later: int
    never_fixed: int
    bot_fixed_of_fixed_later: int  # of the types humans fixed later, those the bot fixed at day 0
    median_human_releases: float | None  # over the types fixed upstream later
    median_human_days: float | None
    median_bot_seconds: float | None  # over the types the bot fixed

    @property
    def built_share(self) -> float | None:
        n = self.new_types - self.missing
        return round(100.0 * self.built / n, 1) if n else None


def totals(rows: list[TypeRow], n_releases: int) -> Totals:
    later = [r for r in rows if r.outcome == "fixed upstream later"]
    fixed = [r for r in rows if r.bot is not None and r.bot.status == "fixed"]
    return Totals(
        releases=n_releases, new_types=len(rows), missing=sum(r.day0_missing for r in rows),
        built=sum(r.day0_built for r in rows),
        full_graph=sum(r.day0_full_graph for r in rows), supported_day0=sum(r.day0_supported for r in rows),
        breaking_day0=sum(r.day0_built and not r.day0_full_graph for r in rows), bot_fixed=len(fixed),
        fixed_later=len(later), never_fixed=sum(r.outcome == "never fixed" for r in rows),
        bot_fixed_of_fixed_later=sum(r in fixed for r in later),
        median_human_releases=_median([r.human_releases for r in later]),
        median_human_days=_median([r.human_days for r in later]),
        median_bot_seconds=_median([r.bot_seconds for r in fixed]))


def _median(values: list) -> float | None:
    vals = [v for v in values if v is not None]
    return round(float(statistics.median(vals)), 1) if vals else None
