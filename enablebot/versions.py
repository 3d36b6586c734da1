"""Versions that decide graph breaks: recorded in every result and baseline."""

from __future__ import annotations

import platform

from packaging.version import InvalidVersion, Version

from .results import Versions

_UNREADABLE = Version("0")


def release_key(version: str | None) -> Version:
    """The sort key of a torch/transformers version in release order (PEP 440, as pip orders them):
    5.26.0.dev0 < 5.26.0rc1 < 5.26.0 < 5.26.0.post1 < 5.26.1. The local build tag is dropped first
    ('2.13.0+cu130' and '2.13.0+cpu' are one release). An empty or unreadable version sorts first."""
    try:
        return Version((version or "").split("+")[0])
    except InvalidVersion:
        return _UNREADABLE


def current(device: str = "cpu") -> Versions:
    import torch
    import transformers

    v = Versions(torch=torch.__version__, transformers=transformers.__version__, python=platform.python_version())
    try:
        import triton  # noqa: F401  (only on CUDA machines)

        v.triton = triton.__version__
    except ImportError:
        pass
    if device.startswith("cuda") and torch.cuda.is_available():
        v.cuda = torch.version.cuda
        v.device_name = torch.cuda.get_device_name()
    else:
        v.device_name = platform.processor() or platform.machine()
    return v


# Set by a caller that runs this process on a chosen transformers (the replay sets it to the
# release it replays): a result recorded under any other version would be attributed to the wrong
# release, so the command refuses to start instead.
EXPECT_TRANSFORMERS_ENV = "ENABLEBOT_EXPECT_TRANSFORMERS"


def expected_transformers_mismatch(environ: dict[str, str] | None = None) -> str | None:
    """Why this process must not run (the transformers it imports is not the one expected), or None."""
    import os

    want = (os.environ if environ is None else environ).get(EXPECT_TRANSFORMERS_ENV, "").strip()
    if not want:
        return None
    import transformers

    have = transformers.__version__
    if have == want:
        return None
    return (f"this process imports transformers {have} from {transformers.__file__}, but "
            f"{EXPECT_TRANSFORMERS_ENV}={want}: the release's environment is missing or shadowed on PYTHONPATH "
            f"(rerun the replay: it reinstalls a missing environment)")
