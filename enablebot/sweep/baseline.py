"""Expected results per torch version and device, and the regression check against them.

A baseline maps each run key to what it gave: verdict, graph breaks, numerics. `check`
fails on a regression (a full_graph model that now breaks or errors, a model that ran
and now errors, numerics that passed and now fail, more breaks than expected) and
reports improvements, which ask for a baseline refresh. Keys marked `flaky` are
reported, never failed on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..fileio import atomic_write_text
from ..results import RunResult, Serializable
from ..validate import load_as
from ..verdict import Verdict


@dataclass
class Expected(Serializable):
    verdict: str
    graph_breaks: int | None = None
    numerics_passed: bool | None = None
    flaky: bool = False
    note: str | None = None
    # The item's wall seconds in the run the baseline was made from: never judged, only used to
    # run the next sweep's longest items first (schedule.baseline_durations).
    seconds: float | None = None


@dataclass
class Baseline(Serializable):
    device: str
    torch: str
    transformers: str
    entries: dict[str, Expected] = field(default_factory=dict)
    pass_name: str | None = None  # dynamo | inductor | build; None in baselines written before it was recorded
    scenarios: list[str] = field(default_factory=list)  # the scenarios its entries cover (keys carry each one)

    def kind(self) -> str:
        """The pass of this baseline. Older files did not record it: only the Inductor pass judges
        numerics, so entries with numerics mark an Inductor baseline."""
        inferred = "inductor" if any(e.numerics_passed is not None for e in self.entries.values()) else "dynamo"
        return self.pass_name or inferred

    @property
    def predates_scenarios(self) -> bool:
        """Keys without a scenario: made by the older minimal harness (cache off, no padding)."""
        return any(k.count("|") == 4 for k in self.entries)

    @staticmethod
    def load(path: Path) -> "Baseline":
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: no such baseline; create it with `enablebot check RESULTS --baseline {path} --update`")
        except ValueError as e:
            raise ValueError(f"{path}: not a baseline file (not JSON: {e})") from e
        # A wrong field raises DataError (a ValueError): `FILE: entry KEY: field F: expected ...`.
        return load_as(Baseline, data, str(path), entries="entries")

    def save(self, path: Path) -> None:
        d = self.to_dict()
        d["entries"] = {k: {kk: vv for kk, vv in v.items() if vv not in (None, False)} for k, v in sorted(d["entries"].items())}
        atomic_write_text(Path(path), json.dumps(d, indent=1, sort_keys=False) + "\n")


def baseline_name(r: RunResult) -> str:
    """One baseline per device, pass and torch version: cpu-dynamo-torch-2.13.0.json (the nightly
    checks the Dynamo pass on CPU and the Inductor pass on CUDA; each meets its own baseline)."""
    return f"{r.spec.device}-{r.spec.pass_name}-torch-{r.versions.torch.split('+')[0]}.json"


def expected_from(r: RunResult) -> Expected:
    return Expected(verdict=r.verdict, graph_breaks=r.stats.graph_breaks if r.stats else None,
                    # inconclusive numerics claim nothing either way
                    numerics_passed=None if not r.numerics or r.numerics.status == "inconclusive"
                    else r.numerics.status == "pass",
                    seconds=round(float(r.duration_s), 1) if r.duration_s else None)


def baseline_from(results: list[RunResult], old: Baseline | None = None) -> Baseline:
    """A refreshed baseline; `flaky` marks and notes of the old one are kept."""
    first = results[0] if results else None
    b = Baseline(device=first.spec.device if first else "cpu", torch=first.versions.torch if first else "",
                 transformers=first.versions.transformers if first else "",
                 pass_name=first.spec.pass_name if first else None,
                 scenarios=sorted({r.spec.scenario_name for r in results}))
    for r in results:
        e = expected_from(r)
        if old and r.key in old.entries:
            e.flaky, e.note = old.entries[r.key].flaky, old.entries[r.key].note
        b.entries[r.key] = e
    return b


def kinds(results: list[RunResult]) -> set[str]:
    return {r.spec.pass_name for r in results}


def incomparable(results: list[RunResult], base: Baseline | None, path: Path | str = "the baseline", *,
                 updating: bool = False) -> str | None:
    """Why these results cannot be checked against (or, `updating`, written into) `base`, or None.
    A Dynamo-pass baseline has no numerics and counts breaks with the eager backend: checking
    Inductor results against it reports false changes, so the pass must match. Scenarios may
    mix: every key carries its scenario, so an item is only ever compared with the same scenario.
    A baseline that predates scenarios is only refused for checking: refreshing it is the fix."""
    found = kinds(results)
    if len(found) > 1:
        return f"the results mix passes ({', '.join(sorted(found))}): check each sweep directory on its own"
    if base is None or not found:
        return None
    p, bp = next(iter(found)), base.kind()
    if p != bp:
        return (f"the results are the {p} pass but {path} is the {bp} pass: give --baseline a file made "
                f"from the {p} pass (`enablebot check RESULTS --baseline FILE --update`)")
    if base.predates_scenarios and not updating and any(k.count("|") == 5 for k in (r.key for r in results)):
        return (f"{path} predates scenarios (the minimal harness: cache off, no padding); its items are not the "
                "scenarios these results ran: refresh it with `enablebot check RESULTS --baseline FILE --update`")
    return None


@dataclass
class Change(Serializable):
    key: str
    kind: str  # regression | improvement
    what: str
    flaky: bool = False


@dataclass
class CheckReport(Serializable):
    regressions: list[Change] = field(default_factory=list)
    improvements: list[Change] = field(default_factory=list)
    flaky: list[Change] = field(default_factory=list)
    new: list[str] = field(default_factory=list)  # run but not in the baseline
    missing: list[str] = field(default_factory=list)  # in the baseline, not run
    version_note: str = ""

    @property
    def failed(self) -> bool:
        return bool(self.regressions)

    def markdown(self) -> str:
        lines = ["## Baseline check: " + ("FAILED" if self.failed else "passed"), ""]
        if self.version_note:
            lines += [f"> {self.version_note}", ""]
        for title, items in (("Regressions", self.regressions), ("Improvements (refresh the baseline)", self.improvements),
                             ("Flaky (not failed on)", self.flaky)):
            if items:
                lines += [f"### {title} ({len(items)})", ""] + [f"- `{c.key}`: {c.what}" for c in items] + [""]
        if self.new:
            lines += [f"New runs not in the baseline: {len(self.new)}", ""]
        if self.missing:
            lines += [f"Baseline runs missing from these results: {len(self.missing)}", ""]
        if not (self.regressions or self.improvements or self.flaky):
            lines.append("No change against the baseline.")
        return "\n".join(lines) + "\n"


def compare(results: list[RunResult], base: Baseline) -> CheckReport:
    rep = CheckReport()
    seen = set()
    for r in results:
        seen.add(r.key)
        exp = base.entries.get(r.key)
        if exp is None:
            rep.new.append(r.key)
            continue
        now = expected_from(r)
        changes: list[tuple[str, str]] = []
        v_now, v_exp = Verdict.of(now.verdict), Verdict.of(exp.verdict)
        if v_now.rank < v_exp.rank or (v_exp.ok and not v_now.ok):
            changes.append(("regression", f"{exp.verdict} -> {now.verdict}"))
        elif v_now.rank > v_exp.rank:
            changes.append(("improvement", f"{exp.verdict} -> {now.verdict}"))
        if exp.numerics_passed is True and now.numerics_passed is False:
            changes.append(("regression", "numerics pass -> fail"))
        elif exp.numerics_passed is False and now.numerics_passed is True:
            changes.append(("improvement", "numerics fail -> pass"))
        if exp.graph_breaks is not None and now.graph_breaks is not None and now.verdict == exp.verdict:
            if now.graph_breaks > exp.graph_breaks:
                changes.append(("regression", f"graph breaks {exp.graph_breaks} -> {now.graph_breaks}"))
            elif now.graph_breaks < exp.graph_breaks:
                changes.append(("improvement", f"graph breaks {exp.graph_breaks} -> {now.graph_breaks}"))
        for kind, what in changes:
            c = Change(key=r.key, kind=kind, what=what, flaky=exp.flaky)
            if exp.flaky:
                rep.flaky.append(c)
            else:
                (rep.regressions if kind == "regression" else rep.improvements).append(c)
    rep.missing = sorted(k for k in base.entries if k not in seen)
    if results:
        v = results[0].versions
        if (v.torch, v.transformers) != (base.torch, base.transformers):
            rep.version_note = (f"baseline from torch {base.torch} / transformers {base.transformers}; "
                                f"results from torch {v.torch} / transformers {v.transformers}")
    return rep
