"""Longest items first, so the slowest models do not start last and decide a sweep's wall time.

Expected seconds per item come from earlier results (a previous sweep's results.jsonl, or the
checkpoint's own history): the same item, else the same model's other items, else a cheap
heuristic from the modality. Only the order matters, so durations from another machine or
pass still rank well. A model's items stay next to each other (ordered by its longest item),
which keeps the pool's same-architecture affinity.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterable, Mapping

from .results import RunSpec

# Mean seconds per item relative to text, from the committed CPU Dynamo sweep
# (results/cpu-dynamo, 2,180 items): multimodal and vision models build and trace more.
MODALITY_WEIGHT = {"multimodal": 2.0, "vision": 1.4, "video": 1.3, "audio": 1.2, "text": 1.0, "timeseries": 0.7}
TRAIN_WEIGHT = 1.1
HEURISTIC_BASE_S = 1.0


def item_key(spec: RunSpec) -> str:
    return f"{spec.model_id}|{spec.task or 'default'}|{spec.mode}"


def load_durations(path: Path) -> dict[str, float]:
    """item key (model|task|mode) -> seconds, from a results.jsonl or a sweep directory holding one.
    Unreadable lines are skipped (a torn checkpoint tail); the newest line for an item wins."""
    from .checkpoint import RESULTS_FILE

    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such results file (pass a results.jsonl or a sweep directory)")
    out: dict[str, float] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                d = json.loads(line)
                out[item_key(RunSpec.from_dict(d["spec"]))] = float(d["duration_s"])
            except (ValueError, TypeError, KeyError):
                continue
    return out


def estimator(history: Mapping[str, float], modalities: Mapping[str, str]) -> Callable[[RunSpec], float]:
    """expected seconds of a spec: its own history, else its model's mean, else the heuristic."""
    by_model: dict[str, list[float]] = {}
    for key, secs in history.items():
        by_model.setdefault(key.split("|", 1)[0], []).append(secs)

    def expected(spec: RunSpec) -> float:
        own = history.get(item_key(spec))
        if own is not None:
            return own
        seen = by_model.get(spec.model_id)
        if seen:
            return sum(seen) / len(seen)
        weight = MODALITY_WEIGHT.get(modalities.get(spec.model_id, "text"), 1.0)
        return HEURISTIC_BASE_S * weight * (TRAIN_WEIGHT if spec.mode == "train" else 1.0)

    return expected


def longest_first(specs: Iterable[RunSpec], expected: Callable[[RunSpec], float]) -> list[RunSpec]:
    """Specs ordered by their model's longest expected item, then the model's items longest first."""
    specs = list(specs)
    secs = [expected(s) for s in specs]
    model_max: dict[str, float] = {}
    for s, t in zip(specs, secs):
        model_max[s.model_id] = max(model_max.get(s.model_id, 0.0), t)
    order = sorted(range(len(specs)), key=lambda i: (-model_max[specs[i].model_id], specs[i].model_id, -secs[i], i))
    return [specs[i] for i in order]
