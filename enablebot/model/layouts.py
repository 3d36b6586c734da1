"""Other layouts of a generic input, tried when the generic one does not run (after the config
attributes the forward reports missing, repairs.py).

Models disagree on the layout of one argument: a waveform is (batch, samples) or (batch, 1,
samples); spectrogram features are (batch, mels, frames) or (batch, frames, mels); a text
recognizer's strided convolutions need an image taller than the generic default. The rules by
name (tensors.py) pick one layout. When the model's forward rejects the inputs, each other layout
of a *generic* tensor (never one a registry recipe shaped) is tried in turn, and the first that
runs is kept: a trial forward decides, not the architecture's name. The choice is recorded in the
item's note. Nothing here is per architecture; the table is per argument name.

Companion tensors stay valid: a mask over frames or samples keeps its length under a transpose or
a channel axis, and an image is only grown where no other input shares its spatial size (a pixel
mask) and the model merges no image placeholders (whose count depends on the image size).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from .trial import trial_forward


def _channel_axis(t: Any) -> Any:
    return t.unsqueeze(1)


def _frames_first(t: Any) -> Any:
    return t.transpose(1, 2).contiguous()


def _grown(factor: int) -> Callable[[Any], Any]:
    def grow(t: Any) -> Any:
        # Repeating pixels keeps the values' distribution (no new statistics from interpolation).
        return t.repeat_interleave(factor, dim=-2).repeat_interleave(factor, dim=-1)
    return grow


@dataclass(frozen=True)
class Layout:
    arg: str  # the forward argument
    rank: int  # the generic tensor's rank this applies to
    name: str  # as the note says it
    apply: Callable[[Any], Any]
    image: bool = False  # grows an image: only without image placeholders or same-sized companions


LAYOUTS: tuple[Layout, ...] = (
    Layout("input_values", 2, "waveform with a channel axis (batch, 1, samples)", _channel_axis),
    Layout("input_features", 3, "features frames first (batch, frames, mels)", _frames_first),
    Layout("pixel_values", 4, "image 2x larger", _grown(2), image=True),
    Layout("pixel_values", 4, "image 4x larger", _grown(4), image=True),
)


def _applies(layout: Layout, inputs: dict[str, Any], generic: set[str], merges_images: bool) -> bool:
    t = inputs.get(layout.arg)
    if layout.arg not in generic or t is None or getattr(t, "dim", None) is None or t.dim() != layout.rank:
        return False
    if layout.image:
        if merges_images:
            return False
        hw = tuple(t.shape[-2:])
        if any(k != layout.arg and getattr(v, "shape", None) is not None and tuple(v.shape[-2:]) == hw
               for k, v in inputs.items()):
            return False
    return True


# "`input_values` length 4000 is not a multiple of 1920", "... to be a multiple of `n_window * 2`
# (100), but got 64": the audio must be whole windows long, as the feature extractor pads it.
_MULTIPLE = re.compile(r"multiple of (?:[^.(]{0,40}\((\d+)\)|(\d+))")
_AUDIO = ("input_values", "input_features")


def _whole_windows(inputs: dict[str, Any], generic: set[str], err: BaseException,
                   config: Any) -> tuple[str, dict[str, Any]] | None:
    """(the generic audio input's name, the inputs with it and every mask over its frames
    zero-padded to the next multiple of the window length the error names); None when the error
    names none or no audio is generic."""
    import torch

    from .padding import _frames_axis

    m = _MULTIPLE.search(str(err))
    name = next((n for n in _AUDIO if n in generic and torch.is_tensor(inputs.get(n))), None)
    n = int(m.group(1) or m.group(2)) if m else 0
    if name is None or n < 2:
        return None
    x = inputs[name]
    axis = _frames_axis(x, config)
    t = x.shape[axis]
    want = -(-t // n) * n
    if want == t or want > 64 * max(t, n):
        return None
    out = dict(inputs)
    out[name] = torch.nn.functional.pad(x.movedim(axis, -1), (0, want - t)).movedim(-1, axis).contiguous()
    out.update(_masks_at(inputs, name, t, want))
    return name, out


def _masks_at(inputs: dict[str, Any], name: str, old: int, new: int) -> dict[str, Any]:
    """Every integer mask over `name`'s `old` steps, made all ones at `new` (an unpadded clip's)."""
    import torch

    return {k: torch.ones(v.shape[0], new, dtype=v.dtype, device=v.device) for k, v in inputs.items()
            if k != name and torch.is_tensor(v) and v.dim() == 2 and v.shape[-1] == old and not v.is_floating_point()}


# "Calculated padded input size per channel: (9). Kernel size: (10). Kernel size can't be greater
# than actual input size": a strided convolution stack (a codec's encoder downsamples 3,200x) needs
# a longer clip than the generic one. The error cannot say how much longer, so the time axis (the
# last: a conv1d's length) is doubled until the forward runs, within MAX_SAMPLES.
_SHORT = re.compile(r"padded input size per channel: \((\d+)\)\. Kernel size: \((\d+)\)")
MAX_SAMPLES = 16384


def _lengthened(model: Any, inputs: dict[str, Any], generic: set[str],
                err: BaseException) -> tuple[dict[str, Any], str] | None:
    """The inputs with one generic float input's last axis doubled until the forward runs (every
    integer mask over the same steps made all ones at the new length), and the note; None when the
    error is not a too-short input or no length within MAX_SAMPLES runs."""
    import torch

    if not _SHORT.search(str(err)):
        return None
    names = [n for n, t in inputs.items()
             if n in generic and torch.is_tensor(t) and t.is_floating_point() and t.dim() >= 2]
    for name in names:
        x = inputs[name]
        t = x.shape[-1]
        n = 2 * t
        gen = torch.Generator().manual_seed(0)
        while n <= MAX_SAMPLES:
            trial = {**inputs, **_masks_at(inputs, name, t, n)}
            trial[name] = torch.randn((*x.shape[:-1], n), generator=gen, dtype=x.dtype).to(x.device)
            e = trial_forward(model, trial)
            if e is None:
                return trial, f"{name}: last axis {t} -> {n} (the forward's convolutions need a longer input)"
            if not _SHORT.search(str(e)):
                break  # another complaint: not a matter of length
            n *= 2
    return None


def relayout(model: Any, inputs: dict[str, Any], generic: set[str], *,
             merges_images: bool) -> tuple[dict[str, Any], list[str], BaseException | None]:
    """`inputs` as they are when they run; else, first, the config attributes the forward says
    are missing (repairs.py, set on the model's config), then the first other layout of one
    generic tensor that runs. Returns the inputs, what was changed, and the trial forward's
    error where nothing ran (None when the inputs run)."""
    from .repairs import repair

    notes: list[str] = []
    err = trial_forward(model, inputs)
    for _ in range(3):
        fixed = repair(getattr(model, "config", None), err) if err is not None else None
        if fixed is None:
            break
        notes.append(str(fixed))
        err = trial_forward(model, inputs)
    if err is None:
        return inputs, notes, None
    whole = _whole_windows(inputs, generic, err, getattr(model, "config", None))
    if whole is not None and trial_forward(model, whole[1]) is None:
        name, padded = whole
        return padded, [*notes, f"{name}: padded to whole windows (the forward asks for a multiple)"], None
    laid = _other_layout(model, inputs, generic, merges_images) or _lengthened(model, inputs, generic, err)
    if laid is not None:
        return laid[0], [*notes, laid[1]], None
    asked = _asked_width(model, inputs, generic, err, merges_images)
    if asked is not None:
        return asked[0], [*notes, *asked[1]], None
    return inputs, notes, err


def _other_layout(model: Any, inputs: dict[str, Any], generic: set[str],
                  merges_images: bool) -> tuple[dict[str, Any], str] | None:
    """The first other layout of one generic tensor that runs, and its note."""
    for lay in (lay for lay in LAYOUTS if _applies(lay, inputs, generic, merges_images)):
        trial = dict(inputs)
        trial[lay.arg] = lay.apply(inputs[lay.arg])
        if trial_forward(model, trial) is None:
            return trial, f"{lay.arg}: {lay.name} (the generic layout did not run)"
    return None


def _asked_width(model: Any, inputs: dict[str, Any], generic: set[str], err: BaseException,
                 merges_images: bool, rounds: int = 3) -> tuple[dict[str, Any], list[str]] | None:
    """The inputs with the widths the errors ask for (asked_width.py), when the forward then
    runs. A width that gets the forward further (another complaint) is kept for the next round,
    which may ask for another width or need another layout of another input (a codec's features
    at the asked width, then its waveform with a channel axis; a codec's waveform at the asked
    single channel, then longer)."""
    from .asked_width import asked_widths, with_width

    trial, changed = inputs, []
    for _ in range(rounds):
        for w in asked_widths(err, trial, generic, getattr(model, "config", None)):
            nxt, note = with_width(trial, w), w.note(trial[w.arg].shape[w.axis])
            e = trial_forward(model, nxt)
            if e is None:
                return nxt, [*changed, note]
            if str(e) != str(err):  # got further: the next layer's complaint, a next round
                trial, err = nxt, e
                changed.append(note)
                laid = _other_layout(model, trial, generic, merges_images) or _lengthened(model, trial, generic, e)
                if laid is not None:
                    return laid[0], [*changed, laid[1]]
                break
        else:
            return None
    return None
