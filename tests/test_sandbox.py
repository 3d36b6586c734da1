"""The sandbox around candidate code, attacked from inside: an import-time payload in an
allowed modeling file (riding on the real switch_transformers fix) tries to read the bot's
keys, write into site-packages, the checkout and /tmp, and open a socket. Every attempt must
fail (or land in the child's private tmpfs) and the model run itself must still work."""

import difflib
import hashlib
import json
import os
import socket
import threading
from pathlib import Path

import pytest

from enablebot.execute import sandbox
from enablebot.fix.judge.overlay import build_overlay, locate
from enablebot.fix.judge.patchguard import PatchPolicy, check_patch
from enablebot.execute.isolation import run_in_child
from enablebot.results import RunSpec

FIX = Path(__file__).parent / "fixtures" / "fix"
SWITCH = (FIX / "switch_transformers_static_experts.diff").read_text()
SWITCH_FILE = "src/transformers/models/switch_transformers/modeling_switch_transformers.py"
ROOT = Path(__file__).resolve().parent.parent



def test_the_sandbox_is_available_here():
    """Not a skip: the guards below must run. scripts/setup.sh installs bubblewrap as root."""
    assert sandbox.available(), "bubblewrap is required: apt-get install -y bubblewrap (scripts/setup.sh does it)"

PAYLOAD = '''
def _enablebot_payload():
    import json as _j, os as _o, socket as _s, sys as _y
    got = {{"env": {{k: _o.environ.get(k) for k in ("OPENAI_API_KEY", "GITHUB_TOKEN", "HF_TOKEN")}}}}
    def _try(name, fn):
        try:
            fn()
            got[name] = "ok"
        except BaseException as e:  # noqa
            got[name] = type(e).__name__ + ": " + str(e)[:120]
    def _w(p, mode="w"):
        with open(p, mode) as f:
            f.write("# pwned\\n")
    import transformers as _t
    tdir = _o.path.dirname(_t.__file__)
    _try("site_packages_new", lambda: _w(_o.path.join(tdir, "enablebot_pwned.py")))
    _try("site_packages_append", lambda: _w(_o.path.join(tdir, "models", "gpt2", "modeling_gpt2.py"), "a"))
    _try("checkout", lambda: _w({root!r} + "/enablebot_pwned.txt"))
    _try("tmp", lambda: _w("/tmp/{tag}"))
    _try("parent_environ", lambda: open("/proc/{ppid}/environ", "rb").read(1) or (_ for _ in ()).throw(OSError("empty")))
    def _net():
        c = _s.create_connection(("127.0.0.1", {port}), timeout=3)
        c.sendall(b"pwned")
        c.close()
    _try("socket", _net)
    print("PAYLOAD " + _j.dumps(got), file=_y.stderr, flush=True)
_enablebot_payload()
'''


def _payload_diff(tag: str, port: int) -> str:
    """The real switch fix plus an import-time payload, as one diff of the allowed file."""
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="enablebot-payload-"))
    fixed = build_overlay(check_patch(SWITCH, PatchPolicy(model_type="switch_transformers")).diff, tmp / "ov")
    text = (tmp / "ov" / fixed.files[0].copy).read_text()
    evil = text + PAYLOAD.format(root=str(ROOT), tag=tag, ppid=os.getpid(), port=port)
    _, installed = locate(SWITCH_FILE)
    orig = installed.read_text()
    return "".join(difflib.unified_diff(orig.splitlines(True), evil.splitlines(True), f"a/{SWITCH_FILE}", f"b/{SWITCH_FILE}"))


def _hash_tree(pkg: str) -> dict[str, str]:
    import importlib

    root = Path(importlib.import_module(pkg).__file__).parent
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*.py"))}


def test_import_time_payload_in_an_allowed_file_is_contained(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET-openai-0123456789")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_testSECRETgithub0123456789")
    monkeypatch.setenv("HF_TOKEN", "hf_testSECREThub0123456789")
    hits: list[bytes] = []
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(0.5)
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
                hits.append(c.recv(100))
                c.close()
            except OSError:
                pass

    threading.Thread(target=accept, daemon=True).start()
    tag = f"enablebot-pwned-{os.getpid()}"
    diff = _payload_diff(tag, srv.getsockname()[1])
    overlay = tmp_path / "overlay"
    build_overlay(diff, overlay)
    before = {**_hash_tree("transformers"), **_hash_tree("torch")}
    spec = RunSpec(model_id="switch_transformers", fast=True, numerics=False, timing=False, overlay_dir=str(overlay),
                   timeout_s=600)
    result = run_in_child(spec, log_dir=tmp_path / "logs")
    stop.set()
    log = next((tmp_path / "logs").glob("*.log")).read_text()
    line = next(ln for ln in log.splitlines() if ln.startswith("PAYLOAD "))
    got = json.loads(line[len("PAYLOAD "):])
    print(json.dumps(got, indent=1))  # the report of every attempt

    # The run itself works in the sandbox (the real fix removes the graph break).
    assert result.ok, (result.verdict, result.error, result.log_tail[-2000:])
    # No key reached the candidate code.
    assert got["env"] == {"OPENAI_API_KEY": None, "GITHUB_TOKEN": None, "HF_TOKEN": None}
    assert "SECRET" not in log
    # Writes into site-packages and the checkout fail: read-only file system.
    for k in ("site_packages_new", "site_packages_append", "checkout"):
        assert "Read-only file system" in got[k], (k, got[k])
    # /tmp is the child's private tmpfs: the write "works" but nothing reaches the host's /tmp.
    assert not Path("/tmp", tag).exists()
    # The parent's environment is invisible (own PID namespace) and there is no network.
    assert got["parent_environ"] != "ok"
    assert got["socket"] != "ok" and not hits
    # Verify by outcome: every .py of torch and transformers is byte-for-byte unchanged.
    assert {**_hash_tree("transformers"), **_hash_tree("torch")} == before
    assert not (ROOT / "enablebot_pwned.txt").exists()


def test_env_is_allow_listed():
    env = sandbox.child_env({"PATH": "/bin", "OPENAI_API_KEY": "x", "GITHUB_TOKEN": "y", "TORCH_LOGS": "z",
                             "CUDA_VISIBLE_DEVICES": "0", "AWS_SECRET_ACCESS_KEY": "s", "TORCH_AUTH_KEY": "k",
                             "TORCHINDUCTOR_CACHE_DIR": "/shared", "RANDOM": "r"})
    assert env["PATH"] == "/bin" and env["TORCH_LOGS"] == "z" and env["CUDA_VISIBLE_DEVICES"] == "0"
    for k in ("OPENAI_API_KEY", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "TORCH_AUTH_KEY", "TORCHINDUCTOR_CACHE_DIR",
              "RANDOM"):
        assert k not in env
    assert env["HOME"] == sandbox.SANDBOX_HOME


def test_argv_has_the_isolation_flags(tmp_path):
    sb = sandbox.sandboxed(["true"], writable=[tmp_path], limits=sandbox.Limits(address_space_mb=4096, cpu_s=10))
    a = sb.argv
    for flag in ("--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session"):
        assert flag in a
    assert a[a.index("--ro-bind") + 1: a.index("--ro-bind") + 3] == ["/", "/"]
    assert ["--bind", str(tmp_path.resolve()), str(tmp_path.resolve())] == a[a.index("--bind"): a.index("--bind") + 3]
    assert any(x.startswith("--as=") for x in a)
    import subprocess

    assert subprocess.run(a, env=sb.env, timeout=60).returncode == 0


def test_no_sandbox_refuses_candidates_unless_opted_out(monkeypatch):
    monkeypatch.setattr(sandbox, "available", lambda: False)
    monkeypatch.delenv(sandbox.UNSAFE_ENV, raising=False)
    with pytest.raises(sandbox.SandboxUnavailable, match="unsafe-no-sandbox"):
        sandbox.sandboxed(["true"])
    monkeypatch.setenv(sandbox.UNSAFE_ENV, "1")
    sb = sandbox.sandboxed(["true"])
    assert not sb.sandboxed and "OPENAI_API_KEY" not in sb.env


def test_address_space_limit_stops_a_huge_allocation(tmp_path):
    import subprocess
    import sys

    code = "import torch; torch.empty(3 * 2**30, dtype=torch.uint8).fill_(1); print('allocated')"
    sb = sandbox.sandboxed([sys.executable, "-c", code], limits=sandbox.Limits(address_space_mb=2048))
    out = subprocess.run(sb.argv, env={**sb.env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "allocated" not in out.stdout
    assert "memory" in out.stderr.lower()
