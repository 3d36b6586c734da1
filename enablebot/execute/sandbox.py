"""The sandbox every process that imports candidate (LLM-written) code runs in.

`sandboxed(cmd, ...)` turns a child command into a bubblewrap command line plus an
allow-listed environment:
  - environment: only the variables a model run needs (PATH, LANG, PYTHONPATH, TORCH*/CUDA
    device settings, ...); nothing whose name says token, key, secret or password;
  - no network (`--unshare-net`), own PID/IPC/UTS namespaces, all capabilities dropped;
  - the whole filesystem read-only (`--ro-bind / /`): installed packages and the checkout
    cannot be written; HOME and TMP are private tmpfs that vanish with the process;
  - writable only the child's own output directories (`writable`);
  - `--die-with-parent`, `--new-session` (no terminal injection), and rlimits (address space,
    CPU seconds, file size, open files) set with util-linux `prlimit` around bwrap.

Without bubblewrap there is no sandbox: `require()` refuses to run candidate code unless the
loudly named opt-out ENABLEBOT_UNSAFE_NO_SANDBOX=1 (CLI: --unsafe-no-sandbox) is set; even then
the environment stays allow-listed and the rlimits apply.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

UNSAFE_ENV = "ENABLEBOT_UNSAFE_NO_SANDBOX"
MEMORY_ENV = "ENABLEBOT_CHILD_MEMORY_MB"  # address-space limit of model children; 0: none

# Names a child may inherit (exact, or a prefix ending in "_" / "*").
_ALLOW_EXACT = {"PATH", "LANG", "LANGUAGE", "TZ", "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONHASHSEED",
                "PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "OMP_NUM_THREADS",
                "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "HF_HOME", "HF_HUB_CACHE", "TRANSFORMERS_CACHE",
                "TORCH_TRACE", "ENABLEBOT_OVERLAY", "NVPL_BLAS_DEBUG_CPU_TYPE"}
_ALLOW_PREFIX = ("LC_", "TORCH", "TORCHDYNAMO_", "TORCHINDUCTOR_", "CUDA_", "NVIDIA_", "PYTORCH_", "CUBLAS_",
                 "CUDNN_", "NCCL_", "TRITON_")
# Never passed on, whatever the allow-list says.
_DENY = re.compile(r"TOKEN|KEY|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.I)
# Would point the child at a shared (read-only inside) cache: it uses its private /tmp instead,
# and nothing planted there reaches a later job.
_DROP = {"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE"}

SANDBOX_HOME = "/tmp/home"


class SandboxUnavailable(RuntimeError):
    """No working sandbox and no explicit opt-out."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one child. None: no limit."""

    address_space_mb: int | None = None  # RLIMIT_AS (skipped for CUDA: the driver maps huge ranges)
    cpu_s: int | None = None  # RLIMIT_CPU, CPU seconds of each process (the wall clock is the caller's)
    file_size_mb: int | None = 4096  # RLIMIT_FSIZE: no single file bigger than this
    open_files: int | None = 8192  # RLIMIT_NOFILE

    @staticmethod
    def for_device(device: str, timeout_s: float | None = None) -> "Limits":
        """Sane defaults: address space 75% of RAM (at least 8 GiB) on CPU, none on CUDA;
        ENABLEBOT_CHILD_MEMORY_MB overrides (0: no limit)."""
        env = os.environ.get(MEMORY_ENV)
        if env is not None and env.strip():
            mb: int | None = int(env) or None
        elif device.startswith("cuda"):
            mb = None  # CUDA reserves tens of GiB of virtual address space; RSS is bounded by the pool
        else:
            mb = max(8192, int(_mem_total_mb() * 0.75)) if _mem_total_mb() else None
        cpu = int(timeout_s * 4) + 60 if timeout_s else None  # compile workers run in parallel
        return Limits(address_space_mb=mb, cpu_s=cpu)

    def rlimits(self) -> list[tuple[int, int]]:
        import resource

        out = []
        if self.address_space_mb:
            out.append((resource.RLIMIT_AS, self.address_space_mb * 2**20))
        if self.cpu_s:
            out.append((resource.RLIMIT_CPU, self.cpu_s))
        if self.file_size_mb:
            out.append((resource.RLIMIT_FSIZE, self.file_size_mb * 2**20))
        if self.open_files:
            out.append((resource.RLIMIT_NOFILE, self.open_files))
        return out

    def apply(self) -> None:
        """Set the limits on this process (a pool worker, or the unsafe fallback)."""
        import resource

        for which, value in self.rlimits():
            soft, hard = resource.getrlimit(which)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (value, value if hard == resource.RLIM_INFINITY else hard))

    def prlimit_args(self) -> list[str]:
        """`prlimit` options; never above this process's hard limits (raising them would fail)."""
        import resource

        names = {resource.RLIMIT_AS: "as", resource.RLIMIT_CPU: "cpu", resource.RLIMIT_FSIZE: "fsize",
                 resource.RLIMIT_NOFILE: "nofile"}
        opts = []
        for which, value in self.rlimits():
            hard = resource.getrlimit(which)[1]
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            opts.append(f"--{names[which]}={value}")
        return opts


@dataclass
class Sandboxed:
    argv: list[str]
    env: dict[str, str]
    sandboxed: bool  # False only under the explicit unsafe opt-out
    limits: Limits = field(default_factory=Limits)

    def preexec(self):  # noqa: ANN201 - a callable for subprocess.Popen(preexec_fn=...)
        """rlimits for the unsafe path without prlimit (with bwrap the argv carries them)."""
        return None if self.argv[0].endswith("prlimit") else self.limits.apply


def child_env(base: Mapping[str, str] | None = None, *, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed environment of a sandboxed child."""
    src = dict(os.environ if base is None else base)
    env = {k: v for k, v in src.items()
           if (k in _ALLOW_EXACT or k.startswith(_ALLOW_PREFIX)) and k not in _DROP and not _DENY.search(k)}
    env.update({"HOME": SANDBOX_HOME, "TMPDIR": "/tmp", "PYTHONUNBUFFERED": "1",
                # No network inside: say so to the Hub clients instead of letting them time out.
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
                # transformers copies a repo's remote code here before importing it: private and
                # writable (under HF_HOME it would be read-only, or shared with later jobs).
                "HF_MODULES_CACHE": "/tmp/hf_modules"})
    for k, v in (extra or {}).items():
        if not _DENY.search(k):
            env[k] = v
    return env


def unsafe_opted_out() -> bool:
    return os.environ.get(UNSAFE_ENV, "").strip().lower() in ("1", "true", "yes")


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether bubblewrap works here (it may be installed but forbidden user namespaces)."""
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return False
    try:
        probe = subprocess.run([bwrap, *_base_args("cpu"), "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def require() -> bool:
    """True when the sandbox is available; False under the explicit unsafe opt-out (with a loud
    warning); raises SandboxUnavailable otherwise."""
    if available():
        return True
    if unsafe_opted_out():
        print(f"WARNING: {UNSAFE_ENV}=1: running LLM-written candidate code WITHOUT a sandbox; it can read "
              "files, reach the network and write anywhere this user can", file=sys.stderr, flush=True)
        return False
    raise SandboxUnavailable(
        "no sandbox: bubblewrap (`bwrap`) is missing or cannot create namespaces here, so LLM-written code "
        "will not run. Install it (`apt-get install -y bubblewrap`), or, only on a throwaway machine, pass "
        f"--unsafe-no-sandbox / set {UNSAFE_ENV}=1")


def _base_args(device: str) -> list[str]:
    dev = ["--dev-bind", "/dev", "/dev", "--tmpfs", "/dev/shm"] if device.startswith("cuda") else ["--dev", "/dev"]
    return ["--ro-bind", "/", "/", *dev, "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp",
            "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--cap-drop", "ALL", "--die-with-parent", "--new-session"]


def sandboxed(cmd: Sequence[str], *, writable: Sequence[str | Path] = (), readable: Sequence[str | Path] = (),
              device: str = "cpu",
              limits: Limits | None = None, env: Mapping[str, str] | None = None,
              extra_env: Mapping[str, str] | None = None) -> Sandboxed:
    """The one way to start a process that imports candidate code: `cmd` wrapped in bubblewrap
    with an allow-listed env and rlimits. `writable` directories (the child's own output) are
    the only places it can write outside its private tmpfs; `readable` paths (the overlay, inputs)
    are bound read-only where tmpfs would hide them (under /tmp or HOME). Raises SandboxUnavailable (see
    `require`)."""
    lim = limits or Limits.for_device(device)
    cenv = child_env(env, extra=extra_env)
    use_bwrap = require()
    prlimit = shutil.which("prlimit")
    wrap = [prlimit, *lim.prlimit_args(), "--"] if prlimit and lim.prlimit_args() else []
    if not use_bwrap:
        return Sandboxed(argv=[*wrap, *cmd], env=cenv, sandboxed=False, limits=lim)
    argv = [*wrap, shutil.which("bwrap") or "bwrap", *_base_args(device), "--dir", SANDBOX_HOME]
    home = os.path.expanduser("~")
    if home not in ("/", "") and os.path.isdir(home) and not _under(home, "/tmp"):
        # The real HOME holds credentials (~/.netrc, ~/.git-credentials, the HF token): hide it,
        # then bind back read-only what the run needs from it (checkout, venv, Hub cache).
        argv += ["--tmpfs", home]
        for keep in _needed_under(home, cenv):
            argv += ["--ro-bind", keep, keep]
    # A checkout or venv that lives under /tmp (a CI clone) is hidden by the private /tmp: bind
    # back read-only what the run needs from there.
    for keep in _needed_under("/tmp", cenv):
        argv += ["--ro-bind", keep, keep]
    for r in readable:
        p = str(Path(r).resolve())
        if os.path.exists(p):
            argv += ["--ro-bind", p, p]
    for w in writable:
        p = str(Path(w).resolve())
        os.makedirs(p, exist_ok=True)
        argv += ["--bind", p, p]
    for secret in _token_files():
        # The tmpfs over HOME hides the Hub token only when it lives there; HF_HOME or HF_TOKEN_PATH
        # elsewhere (a shared disk) would leave it readable under the read-only root: mask it with
        # /dev/null (a device bind: it reads as empty, so huggingface_hub finds no token, no error).
        argv += ["--dev-bind", "/dev/null", secret]
    argv += ["--chdir", os.getcwd(), "--", *cmd]
    return Sandboxed(argv=argv, env=cenv, sandboxed=True, limits=lim)


def _token_files() -> list[str]:
    """The Hub token files huggingface_hub would read (HF_TOKEN_PATH; HF_HOME/token and
    stored_tokens, HF_HOME defaulting to ~/.cache/huggingface) that exist, resolved. Masked even
    under HOME: a checkout that is HOME itself (under /tmp on CI) is bound back whole."""
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
    cands = [os.environ.get("HF_TOKEN_PATH") or "", os.path.join(home, "token"), os.path.join(home, "stored_tokens")]
    return sorted({str(Path(c).resolve()) for c in cands if c and os.path.isfile(c)})


def _needed_under(home: str, env: Mapping[str, str]) -> list[str]:
    """Directories under `home` the child reads: the checkout, the interpreter's prefix, the
    import path and the Hub cache (not the token beside it). Outermost only, sorted."""
    from ..shipped import PACKAGE_DIR

    root = str(PACKAGE_DIR.parent)
    hub = env.get("HF_HUB_CACHE") or os.path.join(env.get("HF_HOME", os.path.join(home, ".cache", "huggingface")), "hub")
    cands = [os.getcwd(), root, sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)), hub,
             *sys.path, *env.get("PYTHONPATH", "").split(os.pathsep)]
    keep: list[str] = []
    for c in sorted({str(Path(c).resolve()) for c in cands if c and os.path.isdir(c)}, key=len):
        if _under(c, home) and c != str(Path(home).resolve()) and not any(_under(c, k) for k in keep):
            keep.append(c)
    return keep


def _under(path: str, root: str) -> bool:
    try:
        Path(path).resolve().relative_to(Path(root).resolve())
        return True
    except ValueError:
        return False


def _mem_total_mb() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError):
        pass
    return 0
