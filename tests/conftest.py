import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# A baseline of the older minimal harness (cache off, no padding; keys without a scenario).
MINIMAL_BASELINE = ROOT / "tests" / "fixtures" / "baselines" / "cpu-torch-2.13.0-minimal-harness.json"
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no test may reach the real Hub


def installed_versions() -> tuple[str, str]:
    import torch
    import transformers

    return torch.__version__.split("+")[0], transformers.__version__


@pytest.fixture
def versions():
    return installed_versions()
