"""The one set of option values every command accepts.

Typer shows an Enum's members as the choices in --help and refuses anything else
with exit 2, listing them; so a typo can never reach a result file (or a baseline).
`task` is the one open choice: base/head/main, or a model class name that the
installed transformers knows (checked against the catalog).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer


class Device(str, Enum):
    cpu = "cpu"
    cuda = "cuda"


class Mode(str, Enum):
    eval = "eval"
    train = "train"


class Dtype(str, Enum):
    float32 = "float32"
    bfloat16 = "bfloat16"


class Size(str, Enum):
    tiny = "tiny"
    small = "small"


class TaskKind(str, Enum):
    """`main` is the head where there is one, else the base."""

    base = "base"
    head = "head"
    main = "main"


class Scenario(str, Enum):
    """What a run calls (scenarios.py): a user's padded forward, prefill + a decode step, or two shapes."""

    call = "call"
    decode = "decode"
    dynamic = "dynamic"
    call_unpadded = "call_unpadded"  # diagnostic: call without padding
    call_nocache = "call_nocache"    # diagnostic: call with use_cache=False
    naive = "naive"                  # diagnostic: the naive harness's call (unpadded, defaults), eval and train


class Pass(str, Enum):
    """dynamo: graph breaks (cheap, eager backend); inductor: numerics + speedup; build: build + eager only."""

    dynamo = "dynamo"
    inductor = "inductor"
    build = "build"


# Default outputs live under one ignored folder (/.enablebot/ in .gitignore), never loose in the checkout.
OUTPUT_ROOT = Path(".enablebot")
DEFAULT_SWEEP_OUT = OUTPUT_ROOT / "sweep"
DEFAULT_FIX_OUT = OUTPUT_ROOT / "fixes"

TASK_HELP = "base, head, main (the head, else the base) or a model class name such as LlamaForCausalLM"


def parse_task(value: str | None) -> str | None:
    """Typer callback for --task on run/fix: a TaskKind value or a class name the catalog knows.
    `main` (and no value) mean the registry's default class. Anything else is a usage error (exit 2)."""
    if value is None:
        return None
    if value in {t.value for t in TaskKind}:
        return None if value == TaskKind.main.value else value
    from ..model.catalog import class_index, suggest

    if value in class_index():
        return value
    close = [s for s in suggest(value) if s[:1].isupper()]
    raise typer.BadParameter(
        f"{value!r} is not one of 'base', 'head', 'main' nor a model class of this transformers"
        + (f" (did you mean {', '.join(close)}?)" if close else ""))


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def default_device() -> Device:
    return Device.cuda if cuda_available() else Device.cpu


def require_device(device: Device | str | None) -> str:
    """The device to run on (default: cuda when present). `cuda` on a machine without one is a
    usage error: say so and exit 2 before any work is done."""
    if device is None:
        return default_device().value
    dev = Device(device).value
    if dev == Device.cuda.value and not cuda_available():
        from rich.console import Console

        Console(stderr=True, soft_wrap=True).print("[red]error:[/red] --device cuda: no CUDA device is visible on this machine "
                                   "(use --device cpu, or run on the GPU machine)")
        raise typer.Exit(2)
    return dev


def require_expected_transformers() -> None:
    """A process the replay runs on one release's transformers refuses to start on any other
    (versions.EXPECT_TRANSFORMERS_ENV): say why and exit 2 before any result is recorded."""
    from ..versions import expected_transformers_mismatch

    if why := expected_transformers_mismatch():
        from rich.console import Console

        Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {why}")
        raise typer.Exit(2)
