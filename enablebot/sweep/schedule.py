"""Longest items first, so the slowest models do not start last and decide a sweep's wall time.

Expected seconds per item come from earlier results of the same pass and device (a previous
sweep's results.jsonl, or the checkpoint's own history): the same item, else the same model's
other items, else the median. Without any history the plan's order is kept: replayed on the
committed sweeps (benchmarks/schedule_sim.py), a modality heuristic ranked worse than the plan's
hash order, and so did another pass on another device (CPU Dynamo for H200 Inductor). The same
device's other pass with the same scenarios ranks well: on the H200 Inductor shard 1/6 (12
workers), the H200 Dynamo pass's durations give 193 s, an oracle 182 s, hash order 239 s.
A model's items stay next to each other (ordered by its longest item), which keeps the pool's
same-architecture affinity.

Without --durations-from, a sweep ranks by the committed baseline of its device and pass
(`baselines/<device>-<pass>-torch-<v>.json` keeps each item's seconds): on the H100 side-by-side
run of issue 29 (200 items, 14 workers) that order replays at 52 s against the hash order's 60 s
(an oracle 48 s; benchmarks/schedule_sim.py).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Callable, Iterable, Mapping

from ..results import RunSpec


def item_key(spec: RunSpec) -> str:
    return f"{spec.model_id}|{spec.task or 'default'}|{spec.mode}|{spec.scenario}"


def load_durations(path: Path, *, pass_name: str | None = None, device: str | None = None) -> dict[str, float]:
    """item key (model|task|mode|scenario) -> seconds, from a results.jsonl or a sweep directory holding
    one, keeping only results of the same pass and device when given. A torn checkpoint tail is
    skipped, any other unreadable line raises jsonl.JsonlError; the newest line for an item wins."""
    return {item_key(spec): secs for spec, secs in _timed_specs(path)
            if (pass_name is None or spec.pass_name == pass_name) and (device is None or spec.device == device)}


def durations_for(paths: Iterable[Path], *, pass_name: str, device: str) -> tuple[dict[str, float], str | None]:
    """The durations to rank a sweep by, and the pass they come from: the results in `paths` (the
    shards of one pass, say) of the same pass and device, else their results of other passes on
    the same device (see the module note); ({}, None) when they hold neither. A later path wins
    for an item in several. Raises FileNotFoundError like load_durations."""
    rows = [(spec, secs) for path in paths for spec, secs in _timed_specs(path) if spec.device == device]
    same = {item_key(spec): secs for spec, secs in rows if spec.pass_name == pass_name}
    if same or not rows:
        return same, (pass_name if same else None)
    return {item_key(spec): secs for spec, secs in rows}, "+".join(sorted({spec.pass_name for spec, _ in rows}))


def baseline_durations(baseline_dir: Path, *, pass_name: str, device: str,
                       torch_version: str) -> tuple[dict[str, float], Path | None]:
    """item key -> seconds from the baseline of this device and pass whose torch is closest to
    `torch_version` (the same release, else the newest older, else the oldest newer), and its path;
    ({}, None) when there is none or it keeps no seconds (baselines written before they did)."""
    from ..versions import release_key
    from .baseline import Baseline

    found = sorted(((release_key(p.name.rsplit("-torch-", 1)[1].removesuffix(".json")), p)
                    for p in Path(baseline_dir).glob(f"{device}-{pass_name}-torch-*.json")), key=lambda t: t[0])
    if not found:
        return {}, None
    want = release_key(torch_version)
    older = [t for t in found if t[0] <= want]
    path = (older[-1] if older else found[0])[1]
    try:
        base = Baseline.load(path)
    except (OSError, ValueError):
        return {}, None  # a broken baseline never stops a sweep; `check` reports it
    times = {}
    for key, e in base.entries.items():
        parts = key.split("|")  # model|task|device|mode|dtype|scenario
        if e.seconds and len(parts) == 6:
            times[f"{parts[0]}|{parts[1]}|{parts[3]}|{parts[5]}"] = float(e.seconds)
    return times, (path if times else None)


def _timed_specs(path: Path) -> list[tuple[RunSpec, float]]:
    from .checkpoint import RESULTS_FILE, read_result_rows

    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such results file (pass a results.jsonl or a sweep directory)")
    return [(r.spec, float(r.duration_s)) for r, _ in read_result_rows(path)]


def estimator(history: Mapping[str, float]) -> Callable[[RunSpec], float]:
    """Expected seconds of a spec: its own history, else its model's mean, else the median."""
    by_model: dict[str, list[float]] = {}
    for key, secs in history.items():
        by_model.setdefault(key.split("|", 1)[0], []).append(secs)
    median = statistics.median(history.values()) if history else 0.0

    def expected(spec: RunSpec) -> float:
        own = history.get(item_key(spec))
        if own is not None:
            return own
        seen = by_model.get(spec.model_id)
        return sum(seen) / len(seen) if seen else median

    return expected


def work_order(todo: list[RunSpec], *, durations: Mapping[str, float] | None, history: Mapping[str, float],
               time_boxed: bool) -> list[RunSpec]:
    """The order a sweep runs `todo` in. Durations passed in order it longest first even when the
    sweep is time-boxed (whoever passes them wants the tail short: a sharded pass under a call
    limit); the checkpoint's own `history` only when it is not, since the finished part of a
    time-boxed sweep must sample every family. With neither, the plan's order."""
    merged = {} if time_boxed else dict(history)
    merged.update(durations or {})
    return longest_first(todo, estimator(merged)) if merged else list(todo)


def longest_first(specs: Iterable[RunSpec], expected: Callable[[RunSpec], float]) -> list[RunSpec]:
    """Specs ordered by their model's longest expected item, then the model's items longest first."""
    specs = list(specs)
    secs = [expected(s) for s in specs]
    model_max: dict[str, float] = {}
    for s, t in zip(specs, secs):
        model_max[s.model_id] = max(model_max.get(s.model_id, 0.0), t)
    order = sorted(range(len(specs)), key=lambda i: (-model_max[specs[i].model_id], specs[i].model_id, -secs[i], i))
    return [specs[i] for i in order]
