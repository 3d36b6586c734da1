"""The width an error asks of a generic input, given to it.

A model's first layer often says exactly what it expected of the tensor it was handed:
`Given normalized_shape=[160], ... but got input of size[2, 80, 128]` (two stacked 80-mel
frames), `expected input[2, 32, 70] to have 64 channels` (a codec's latent width),
`mat1 and mat2 shapes cannot be multiplied (160x128 and 320x64)` (a projection of 320
features), `The size of tensor a (128) must match the size of tensor b (560)` (seven stacked
frames). The generic rules by name (tensors.py) cannot know such a width; the error does.

`asked_widths` reads (input, axis, width) candidates from the error, each naming a *generic*
floating-point input whose shape fits what the error reports; layouts.relayout remakes that
input with the asked width on that axis and keeps it only when the trial forward then runs.
Nothing here is per architecture: the patterns are PyTorch's own error messages.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

_NORM = re.compile(r"normalized_shape=\[(\d+)\], expected input with shape \[\*, \d+\], "
                   r"but got input of size\s*\[([\d, ]+)\]")
_CONV = re.compile(r"expected input\[([\d, ]+)\] to have (\d+) channels, but got \d+ channels")
_MATMUL = re.compile(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)")
_SIZE = re.compile(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) "
                   r"at non-singleton dimension (\d+)")
# A width far beyond what tiny models use is a full-size width the shrink missed, not an input's.
MAX_WIDTH = 4096


@dataclass(frozen=True)
class Width:
    arg: str  # the generic input
    axis: int  # its axis the error measured
    width: int  # what the model asked for there

    def note(self, old: int) -> str:
        return f"{self.arg}: axis {self.axis} {old} -> {self.width} (the width the forward asked for)"


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in text.replace(" ", "").split(",") if d)


# Audio inputs whose length a model may derive another length from (Voxtral Realtime: one text
# token per 8 feature frames, so `size of tensor a (32) must match ... b (16)` names no input's size).
_AUDIO = ("input_features", "input_values")


def asked_widths(err: BaseException, inputs: dict[str, Any], generic: set[str],
                 config: Any = None) -> list[Width]:
    """Candidates, most specific first: a generic float input whose shape is the one the error
    reports, with the width the failing layer expected on the axis it measured. A size mismatch
    that names no input's size may be a length derived from an audio input: that input's time
    axis scaled by the two sizes' ratio, longer first."""
    import torch

    text = str(err)
    cands = {n: t for n, t in inputs.items()
             if n in generic and torch.is_tensor(t) and t.is_floating_point() and t.dim() >= 2}
    out: list[Width] = []

    def add(name: str, axis: int, width: int) -> None:
        t = cands[name]
        axis %= t.dim()
        if 0 < axis and 1 <= width <= MAX_WIDTH and width != t.shape[axis]:
            w = Width(name, axis, width)
            if w not in out:
                out.append(w)

    if m := _NORM.search(text):  # LayerNorm over the last axis of exactly this tensor
        got = _shape(m.group(2))
        for n, t in cands.items():
            if tuple(t.shape) == got:
                add(n, -1, int(m.group(1)))
    if m := _CONV.search(text):  # a convolution's channel axis of this tensor (its length maybe padded)
        got = _shape(m.group(1))
        for n, t in cands.items():
            if t.dim() == len(got) and tuple(t.shape[:-1]) == got[:-1]:
                add(n, 1, int(m.group(2)))
    if m := _MATMUL.search(text):  # a Linear on the last axis: rows are the other axes' product
        rows, feats, want = int(m.group(1)), int(m.group(2)), int(m.group(3))
        for n, t in cands.items():
            if t.shape[-1] == feats and math.prod(t.shape[:-1]) == rows:
                add(n, -1, want)
    if m := _SIZE.search(text):  # a broadcast: either side may be the input
        a, b, dim = int(m.group(1)), int(m.group(2)), int(m.group(3))
        for n, t in cands.items():
            if dim < t.dim():
                if t.shape[dim] == a:
                    add(n, dim, b)
                elif t.shape[dim] == b:
                    add(n, dim, a)
        if not out and a != b:
            from .padding import _frames_axis

            for n in (n for n in _AUDIO if n in cands):
                t = cands[n]
                axis = _frames_axis(t, config)
                length = t.shape[axis]
                for num, den in ((max(a, b), min(a, b)), (min(a, b), max(a, b))):
                    if length * num % den == 0:
                        add(n, axis, length * num // den)
    return out


def with_width(inputs: dict[str, Any], w: Width, seed: int = 0) -> dict[str, Any]:
    """`inputs` with `w.arg` remade (normal noise, like every generic float input) at the width."""
    import torch

    t = inputs[w.arg]
    shape = list(t.shape)
    shape[w.axis] = w.width
    gen = torch.Generator().manual_seed(seed)
    out = dict(inputs)
    out[w.arg] = torch.randn(shape, generator=gen, dtype=t.dtype).to(t.device)
    return out
