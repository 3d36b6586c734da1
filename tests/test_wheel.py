"""The wheel carries what the bot reads at run time (registry, prompts, data), so an install
works from any directory, not only from the checkout."""

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_installs_and_runs_outside_the_checkout(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(wheels), str(ROOT)], check=True, timeout=300)
    whl = next(wheels.glob("enablebot-*.whl"))
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    # The dependencies come from the test's own environment (no download); enablebot only from the wheel.
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    deps = [p for p in sys.path if p.endswith("site-packages")]
    Path(site, "deps.pth").write_text("\n".join(deps) + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(whl)], check=True,
                   timeout=300)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run([str(py), "-c", "import enablebot, enablebot.shipped as s; print(enablebot.__file__); "
                            "print(s.shipped('model_registry.yaml')); print(s.shipped('prompts'))"],
                           cwd=outside, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert where[0].startswith(site), where  # the installed copy, not the checkout
    assert Path(where[1]).is_file() and (Path(where[2]) / "fix_system.md").is_file(), where
    cli = env_dir / "bin" / "enablebot"
    out = outside / "llama.json"
    p = subprocess.run([str(cli), "run", "llama", "--device", "cpu", "--pass", "dynamo", "--json", str(out)],
                       cwd=outside, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["verdict"] == "full_graph" and result["model_class"] == "LlamaForCausalLM"
    p = subprocess.run([str(cli), "fix", "--help"], cwd=outside, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "MODEL_ID" in p.stdout, p.stderr[-2000:]
