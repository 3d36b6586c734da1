"""enablebot installs beside the torch a compiler maintainer runs: a venv that already holds the
newest torch the registry serves keeps it through `pip install <checkout>`, and the installed
CLI measures a model with it.

Slow (a multi-GB CUDA build of torch is downloaded: about 17 minutes on 2 loaded cores, 10 when
the venv already holds the torch): `pytest -m slow tests/test_install_newest_torch.py`.
ENABLEBOT_NEW_TORCH_VENV names a venv to create or reuse (one that already holds the torch skips
its download); ENABLEBOT_NEW_TORCH picks the torch (default 2.15.0); ENABLEBOT_INSTALL_RECORD
names a JSON file for the measured steps (results/install-torch2.15/ holds one).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
TORCH = os.environ.get("ENABLEBOT_NEW_TORCH", "2.15.0")


def _pin(path: Path, name: str) -> str:
    for line in path.read_text().splitlines():
        if re.match(rf"{name}==", line.strip()):
            return line.strip()
    raise AssertionError(f"{name} is not pinned in {path}")


def _maintainer_env() -> dict[str, str]:
    # A maintainer's pip: no config file (this machine's caps torch at 2.14.1, and pins
    # nothing a maintainer would have), no PYTHONPATH pointing at the checkout.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_DEFAULT_TIMEOUT"] = "180"
    return env


def _torch_version(py: Path, env: dict[str, str]) -> str | None:
    p = subprocess.run([str(py), "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True,
                       env=env)
    return p.stdout.strip() if p.returncode == 0 else None


def _release(version: str | None) -> str | None:
    return version.split("+")[0] if version else None  # 2.15.0+cu132 is the 2.15.0 release


def test_install_keeps_the_newest_torch_and_runs(tmp_path):
    env = _maintainer_env()
    env_dir = Path(os.environ.get("ENABLEBOT_NEW_TORCH_VENV") or tmp_path / "venv")
    py = env_dir / "bin" / "python"
    record: dict = {"torch_wanted": TORCH, "venv": str(env_dir), "steps_s": {}}
    steps = record["steps_s"]

    def step(name: str, *cmd: str, timeout: float = 1800) -> subprocess.CompletedProcess:
        t = time.monotonic()
        p = subprocess.run(list(cmd), capture_output=True, text=True, env=env, timeout=timeout, cwd=tmp_path)
        steps[name] = round(time.monotonic() - t, 1)
        assert p.returncode == 0, f"{name} failed:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
        return p

    start = time.monotonic()
    if not py.exists():
        venv.create(env_dir, with_pip=True)
    before = _torch_version(py, env)
    record["venv_reused_with_torch"] = before
    if _release(before) != TORCH:
        # The maintainer's torch, installed first, as a maintainer's venv already holds it.
        step("install_torch", str(py), "-m", "pip", "install", "-q", f"torch=={TORCH}")
        before = _torch_version(py, env)
    assert _release(before) == TORCH, before
    record["torch_before"] = before

    # enablebot from the checkout, with the base transformers of requirements-ci.txt; then the
    # transformers enablebot runs on, --no-deps as scripts/setup.sh does (5.25 declares
    # `kernels`, which the registry lacks).
    step("install_enablebot", str(py), "-m", "pip", "install", "-q", str(ROOT),
         _pin(ROOT / "requirements-ci.txt", "transformers"))
    step("install_transformers", str(py), "-m", "pip", "install", "-q", "--no-deps",
         _pin(ROOT / "requirements-transformers.txt", "transformers"))
    record["torch_after"] = after = _torch_version(py, env)
    assert after == before, f"installing enablebot moved torch {before} -> {after}"

    cli = env_dir / "bin" / "enablebot"
    version = step("version", str(cli), "--version").stdout.splitlines()
    record["enablebot_version"] = version
    assert f"torch {before}" in version, version

    out = tmp_path / "llama.json"
    step("run_llama", str(cli), "run", "llama", "--device", "cpu", "--json", str(out), timeout=900)
    result = json.loads(out.read_text())
    record["run"] = {"model_class": result.get("model_class"), "verdict": result.get("verdict"),
                     "pass": (result.get("spec") or {}).get("pass_name"), "versions": result.get("versions")}
    record["wall_s"] = round(time.monotonic() - start, 1)
    du = subprocess.run(["du", "-sm", str(env_dir)], capture_output=True, text=True)
    record["venv_mb"] = int(du.stdout.split()[0]) if du.returncode == 0 else None
    if os.environ.get("ENABLEBOT_INSTALL_RECORD"):
        Path(os.environ["ENABLEBOT_INSTALL_RECORD"]).write_text(json.dumps(record, indent=2) + "\n")
    assert result["versions"]["torch"] == before, result["versions"]
    assert result["verdict"] == "full_graph" and result["model_class"] == "LlamaForCausalLM", record["run"]
