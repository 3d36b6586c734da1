"""Trend lines that compare like with like.

A full-graph share is a property of a sample of runs: the torch 2.15 baseline's 40 types are
not the 2.13 baseline's 2,212 runs, and joining their shares with a line reads as a regression
that is only a change of sample. So a line is drawn over one fixed set of runs (the runs all its
sets hold) and every point on it is its set's share on exactly those runs. Sets whose samples
differ much get lines of their own: the larger sample's line, and a labelled subset line on which
every set that holds (nearly all of) the subset's runs is measured on them, so a release shows
beside the one before it on the same runs.

Pure: works on the loaded result sets (build.ResultSet).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..results import OK_VERDICTS

if TYPE_CHECKING:
    from .build import ResultSet, Row

# Two sets are one sample when each holds this share of the other's runs: a time-boxed nightly
# that skipped a few models stays on the line (measured on the runs both hold), a 40-type subset
# of a 2,000-run sweep does not.
SAME_SAMPLE = 0.8


@dataclass
class TrendPoint:
    set_label: str
    full_graph: int
    compiled: int  # full_graph + graph_break among the line's runs
    runs: int  # the line's runs (every point of a line has the same)
    set_runs: int  # all the set's runs in this device and scenario

    @property
    def rate(self) -> float | None:
        return self.full_graph / self.compiled if self.compiled else None


@dataclass
class TrendLine:
    series: str  # device(s), pass and variant
    device: str
    scenario: str
    runs: int  # the runs every point is computed on
    subset_of: str = ""  # the set whose smaller sample defines a subset line; "" for a group's main line
    points: list[TrendPoint] = field(default_factory=list)

    def name(self, set_number: dict[str, int]) -> str:
        """The legend's name; set_number: set label -> its # on the site (the chart's x axis)."""
        base = self.series + (f" · {self.scenario}" if self.scenario != "call" else "")
        if self.subset_of:
            return f"{base}: subset, the {self.runs:,} runs of #{set_number[self.subset_of]}"
        if len(self.points) == 1:
            return f"{base}: {self.runs:,} runs"
        return f"{base}: the {self.runs:,} runs all {len(self.points)} sets hold"


def _key(r: Row) -> str:
    return r.key  # model|task|mode|scenario|device|dtype: the same run on any version


def _same_sample(a: set[str], b: set[str]) -> bool:
    common = len(a & b)
    return common >= SAME_SAMPLE * len(a) and common >= SAME_SAMPLE * len(b)


def _point(label: str, rows: dict[str, Row], keys: set[str]) -> TrendPoint:
    on = [rows[k] for k in keys]
    return TrendPoint(label, sum(r.verdict == "full_graph" for r in on), sum(r.verdict in OK_VERDICTS for r in on),
                      len(keys), len(rows))


def trend_lines(sets: list[ResultSet]) -> list[TrendLine]:
    """Per series, device and scenario: a main line over the largest sample's family of sets, and a
    subset line for each smaller sample, every point on a line computed on the same runs.
    `sets` are in the site's order (oldest first); the points keep it."""
    groups: dict[tuple[str, str, str], list[tuple[ResultSet, dict[str, Row]]]] = defaultdict(list)
    for s in sets:
        by: dict[tuple[str, str], dict[str, Row]] = defaultdict(dict)
        for r in s.rows:
            by[(r.device, r.scenario)][_key(r)] = r
        for (device, scenario), rows in by.items():
            groups[(s.series, device, scenario)].append((s, rows))
    out = []
    for (series, device, scenario), members in sorted(groups.items()):
        # Families of one sample, the largest first: each family's first set is its anchor.
        families: list[list[int]] = []
        for i in sorted(range(len(members)), key=lambda i: -len(members[i][1])):
            keys = set(members[i][1])
            home = next((f for f in families if _same_sample(set(members[f[0]][1]), keys)), None)
            if home is None:
                families.append([i])
            else:
                home.append(i)
        for n, family in enumerate(families):
            shared = set.intersection(*(set(members[i][1]) for i in family))
            on_line = set(family)
            if n:  # a subset: every other set that holds (nearly) all of its runs is measured on them too
                for j, (_, rows) in enumerate(members):
                    if j not in on_line and len(shared & set(rows)) >= SAME_SAMPLE * len(shared):
                        on_line.add(j)
                        shared &= set(rows)
            if not shared:
                continue
            line = TrendLine(series, device, scenario, len(shared),
                             subset_of=members[family[0]][0].label if n else "")
            line.points = [_point(members[i][0].label, members[i][1], shared) for i in sorted(on_line)]
            out.append(line)
    return out
