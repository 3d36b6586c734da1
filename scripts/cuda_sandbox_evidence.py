"""The sandbox on CUDA, measured on the GPU machine (which has no bubblewrap of its own).

Debian's bubblewrap binary and the three libraries it links (`scripts/fetch_bwrap.sh` puts them in
.gl/bwrap, an ignored folder the device tool carries; .gl/pylib holds the pure-Python `unidiff` wheel
the verifier needs and the GPU machine lacks) go on PATH / LD_LIBRARY_PATH; then:
  1. probe: inside the sandbox's own bwrap command line (enablebot.execute.sandbox, device cuda),
     a child checks that CUDA works, the planted token is gone, the network is gone and the
     checkout is read-only;
  2. `enablebot fix switch_transformers --device cuda`, the LLM scripted on 127.0.0.1 with the
     dense-experts patch (the candidate runs sandboxed, on CUDA), which writes a bundle;
  3. `enablebot verify BUNDLE --device cuda` re-verifies that bundle in the sandbox.
Writes OUT/cuda-sandbox/{probe.json,fix.log,verify.json,verify.log,bundle/} as it goes.

    python scripts/cuda_sandbox_evidence.py OUT_DIR [DEVICE [BUNDLE_DIR]]

With BUNDLE_DIR, step 2 is skipped and that bundle is verified.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-cuda-sandbox-planted-0123456789"
PROBE = r"""
import json, os, socket, sys
import torch
out = {"cuda_available": torch.cuda.is_available()}
if out["cuda_available"]:
    x = torch.randn(256, 256, device="cuda")
    out["device"] = torch.cuda.get_device_name(0)
    out["matmul_ok"] = bool(torch.isfinite(x @ x).all().item())
    f = torch.compile(lambda t: torch.nn.functional.gelu(t) * 2)
    out["compile_max_abs_diff"] = float((f(x) - torch.nn.functional.gelu(x) * 2).abs().max())
out["token_seen"] = any(k in os.environ for k in ("OPENAI_API_KEY", "GITHUB_TOKEN", "HF_TOKEN"))
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3).close()
    out["network"] = "connected"
except OSError as e:
    out["network"] = f"refused: {type(e).__name__}"
try:
    open(sys.argv[2], "w").write("x")
    out["checkout_write"] = "written"
except OSError as e:
    out["checkout_write"] = f"refused: {type(e).__name__}"
out["home"] = os.environ.get("HOME")
print(json.dumps(out))
"""


def main(out_root: str, device: str = "cuda", bundle: str | None = None) -> int:
    out = Path(out_root) / "cuda-sandbox"
    out.mkdir(parents=True, exist_ok=True)
    bw = REPO / ".gl" / "bwrap"
    (bw / "bin" / "bwrap").chmod(0o755)
    env = dict(os.environ, PATH=f"{bw / 'bin'}:{os.environ.get('PATH', '')}",
               LD_LIBRARY_PATH=f"{bw / 'lib'}:{os.environ.get('LD_LIBRARY_PATH', '')}".rstrip(":"),
               PYTHONPATH=f"{REPO}:{REPO / '.gl' / 'pylib'}", HF_HUB_OFFLINE="1", COLUMNS="200",
               GITHUB_TOKEN="ghp_planted_never_seen_0123456789", HF_TOKEN="hf_planted_never_seen_0123")
    os.environ.update(env)
    sys.path[:0] = [str(REPO), str(REPO / ".gl" / "pylib")]
    from enablebot.execute import sandbox
    from enablebot.testing.fake_openai import FakeOpenAI

    summary: dict = {"bwrap": shutil.which("bwrap"), "sandbox_available": sandbox.available()}
    print(summary, flush=True)
    diff = (REPO / "tests/fixtures/fix/switch_transformers_static_experts.diff").read_text()
    with FakeOpenAI(script=[f"```diff\n{diff}```"], api_key=KEY) as server:
        env.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY=KEY)
        port = server.base_url.split(":")[-1].split("/")[0]
        sb = sandbox.sandboxed([sys.executable, "-c", PROBE, port, str(REPO / "planted.txt")], device=device)
        t0 = time.time()
        p = subprocess.run(sb.argv, env=sb.env, capture_output=True, text=True, timeout=300)
        probe = {"argv": sb.argv, "rc": p.returncode, "wall_s": round(time.time() - t0, 1),
                 "result": json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else None,
                 "stderr_tail": p.stderr[-2000:], "planted_file_exists": (REPO / "planted.txt").exists()}
        (out / "probe.json").write_text(json.dumps(probe, indent=1))
        print(json.dumps(probe["result"]), flush=True)
        if bundle:  # made elsewhere (the GPU machine has no openai client for the scripted LLM)
            return _verify(summary, out, env, Path(bundle), device)
        t0 = time.time()
        fix = subprocess.run([sys.executable, "-m", "enablebot.cli", "fix", "switch_transformers", "--device", device,
                              "--out", str(out / "fix"), "--cluster", "GB0036", "--attempts", "1", "--no-recipes",
                              "--llm-model", "fake-coder", "--backend", "inductor", "--repeats", "10"],
                             env=env, capture_output=True, text=True, timeout=540)
        summary["fix"] = {"rc": fix.returncode, "wall_s": round(time.time() - t0, 1)}
        (out / "fix.log").write_text(fix.stdout + "\n--- stderr ---\n" + fix.stderr)
    bundles = [p.parent for p in (out / "fix").glob("*/*/bundle.json")]
    print(summary, bundles, flush=True)
    return _verify(summary, out, env, bundles[0], device) if bundles else 1


def _verify(summary: dict, out: Path, env: dict, bundle: Path, device: str) -> int:
    t0 = time.time()
    ver = subprocess.run([sys.executable, "-m", "enablebot.cli", "verify", str(bundle), "--device", device,
                          "--json", str(out / "verify.json")], env=env, capture_output=True, text=True, timeout=540)
    summary["verify"] = {"rc": ver.returncode, "wall_s": round(time.time() - t0, 1)}
    (out / "verify.log").write_text(ver.stdout + "\n--- stderr ---\n" + ver.stderr)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary), flush=True)
    return 0 if summary.get("verify", {}).get("rc") == 0 else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
