"""A width the shrink left at full size where it meets a shrunk one.

A composite config can name one width twice: a diarization head's `audio_hidden_size` is the
audio encoder's `hidden_size` under another name. The shrink rules follow the names they know;
when they miss one, the tiny model's forward fails where the two meet, with
`mat1 and mat2 shapes cannot be multiplied (AxB and CxD)`: a Linear made for C features gets B.
The larger of B and C is the width left at full size. Each width-like config attribute holding
exactly that value is a candidate; the model is rebuilt with the candidate set to the smaller
width, and the first candidate with which the forward runs is kept (prepare.py). Only widths
are candidates (names as shrink.py reads them), never counts, positions or vocabularies, and
only a model that failed this way gets here.
"""

from __future__ import annotations

import re
from typing import Any

from .shrink import _NOT_WIDTH, _WIDTH_NAME

_MATMUL = re.compile(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)")
MAX_CANDIDATES = 4


def _walk(d: dict[str, Any], prefix: str = ""):
    for k, v in d.items():
        if not isinstance(k, str):
            continue
        if isinstance(v, dict):
            yield from _walk(v, f"{prefix}{k}.")
        else:
            yield prefix + k, k, v


def mismatch_candidates(cfg: Any, err: BaseException | None) -> list[tuple[str, int]]:
    """(dotted config key, the smaller width) for each width attribute that holds the larger
    width of the failed product; empty when `err` is not such a failure."""
    m = _MATMUL.search(str(err or ""))
    if m is None:
        return []
    got, want = int(m.group(2)), int(m.group(3))
    if got == want:
        return []
    big, small = max(got, want), min(got, want)
    out = []
    for key, name, v in _walk(cfg.to_dict()):
        if isinstance(v, bool) or v != big or not _WIDTH_NAME.search(name) or _NOT_WIDTH.search(name):
            continue
        out.append((key, small))
    return out[:MAX_CANDIDATES]
