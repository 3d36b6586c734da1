"""One cached environment per replayed release: the release's wheel installed with `--no-deps` into
its own directory, put first on PYTHONPATH over the pinned base (torch and every other package
stay the pinned ones, as the set-up does for the newest release). Nothing in the main venv changes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..results import Serializable
from ..shipped import PACKAGE_DIR

NOTE_FILE = "ENABLEBOT_ENV.json"  # why the directory exists: the pinned-only import error, what was added
_PROBE = ("import torch, transformers, enablebot.sweep.engine, enablebot.model.catalog as c; "
          "print(transformers.__version__); print(len(c.known_architectures()))")


@dataclass
class EnvCheck(Serializable):
    version: str
    path: str
    ok: bool
    imported_version: str = ""
    known_types: int = 0
    reason: str = ""  # why it does not import (the error's last line)
    pinned_reason: str = ""  # why it did not import over today's pins alone, when it did not
    extra_requirements: list[str] = field(default_factory=list)  # what the release's env added, and why


def env_path(root: Path, version: str) -> Path:
    return root / version


def install(wheel: Path, root: Path, version: str) -> Path:
    """Install `wheel` into root/version (once; a half-written install is never left in place)."""
    dest = env_path(root, version)
    if (dest / "transformers" / "__init__.py").exists():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=root))
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--disable-pip-version-check",
           "--target", str(tmp), str(wheel)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"pip install --target failed for {wheel.name}: {(proc.stderr or proc.stdout).strip()[-300:]}")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return dest


def deps_path(env_dir: Path) -> Path:
    return env_dir.parent / f"{env_dir.name}-deps"


def child_env(env_dir: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process that runs on the release: its directory first on the import
    path, then the requirements it added (if any), then this checkout (so the child runs this
    enablebot), then whatever was there."""
    env = dict(os.environ if base is None else base)
    deps = deps_path(env_dir)
    parts = [str(env_dir), *([str(deps)] if deps.is_dir() else []), str(PACKAGE_DIR.parent)]
    parts += [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def check(env_dir: Path, version: str, *, timeout: float = 300.0) -> EnvCheck:
    """Does the release import over today's pins, with the parts of enablebot a sweep needs?"""
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=timeout,
                          env=child_env(env_dir))
    res = EnvCheck(version=version, path=str(env_dir), ok=False)
    lines = proc.stdout.split()
    if proc.returncode == 0 and len(lines) >= 2:
        res.imported_version, res.known_types = lines[0], int(lines[1])
        res.ok = res.imported_version == version
        if not res.ok:
            res.reason = f"imported transformers {res.imported_version}, not {version} (is it shadowed on PYTHONPATH?)"
    else:
        tail = [ln for ln in (proc.stderr or "").strip().splitlines() if ln.strip()]
        res.reason = (tail[-1] if tail else f"exit {proc.returncode}")[:300]
    return res


def unmet_requirements(wheel: Path) -> list[tuple[str, str]]:
    """The release's own requirements (no extras) that the pinned base does not satisfy:
    (requirement, what the base has)."""
    import zipfile
    from email.parser import Parser
    from importlib.metadata import PackageNotFoundError, version as installed

    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        msg = Parser().parsestr(z.read(meta).decode("utf-8"))
    out = []
    for line in msg.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = installed(req.name)
        except PackageNotFoundError:
            out.append((str(req), "missing"))
            continue
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            out.append((str(req), have))
    return out


def install_requirements(reqs: list[str], dest: Path) -> list[str]:
    """Install `reqs` (with their dependencies) into `dest`, then drop every distribution the base
    already has that `reqs` did not name: the release gets what it lacks, and nothing else of the
    base is shadowed. Returns "name version" of what stays."""
    import re as _re
    from importlib.metadata import PackageNotFoundError, version as installed

    from packaging.requirements import Requirement

    named = {_canon(Requirement(r).name) for r in reqs}
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-compile", "--disable-pip-version-check",
           "--target", str(tmp), *reqs]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"pip could not install {', '.join(reqs)}: {(proc.stderr or proc.stdout).strip()[-300:]}")
    kept = []
    for info in sorted(tmp.glob("*.dist-info")):
        m = _re.match(r"(.+?)-([^-]+)\.dist-info$", info.name)
        if not m:
            continue
        name, ver = m.group(1), m.group(2)
        try:
            installed(name)
            in_base = True
        except PackageNotFoundError:
            in_base = False
        if in_base and _canon(name) not in named:
            _remove_dist(tmp, info)
        else:
            kept.append(f"{name} {ver}")
    shutil.rmtree(tmp / "bin", ignore_errors=True)
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return kept


def _canon(name: str) -> str:
    import re as _re

    return _re.sub(r"[-_.]+", "-", name).lower()


def _remove_dist(root: Path, info: Path) -> None:
    record = info / "RECORD"
    if record.exists():
        for line in record.read_text(encoding="utf-8").splitlines():
            rel = line.split(",")[0]
            if rel and not rel.startswith(".."):
                (root / rel).unlink(missing_ok=True)
    shutil.rmtree(info, ignore_errors=True)
    for d in sorted((p for p in root.iterdir() if p.is_dir()), reverse=True):
        if not any(f.is_file() for f in d.rglob("*")):
            shutil.rmtree(d, ignore_errors=True)


def prepare(wheel: Path, root: Path, version: str) -> EnvCheck:
    """The release's environment, ready to run: over today's pins when it imports there; else with
    the release's own unmet requirements added beside it (said in the result), else the reason."""
    env_dir = install(wheel, root, version)
    deps = deps_path(env_dir)
    note = deps / NOTE_FILE
    if note.exists():  # an earlier run added them: its findings travel with the directory
        res = check(env_dir, version)
        saved = json.loads(note.read_text(encoding="utf-8"))
        res.pinned_reason, res.extra_requirements = saved["pinned_reason"], saved["extra_requirements"]
        return res
    shutil.rmtree(deps, ignore_errors=True)  # a half-made one, from a killed run
    res = check(env_dir, version)
    if res.ok:
        return res
    unmet = unmet_requirements(wheel)
    if not unmet:
        return res
    pinned_reason = res.reason
    kept = install_requirements([r for r, _ in unmet], deps)
    res = check(env_dir, version)
    res.pinned_reason = pinned_reason
    have = dict(unmet)
    res.extra_requirements = [f"{k} (needs {r}; the base has {have[r]})" for r in have
                              for k in kept if _canon(k.split()[0]) == _canon(_req_name(r))] + \
        [k for k in kept if not any(_canon(k.split()[0]) == _canon(_req_name(r)) for r in have)]
    (deps / NOTE_FILE).write_text(json.dumps({"pinned_reason": res.pinned_reason,
                                              "extra_requirements": res.extra_requirements}) + "\n", encoding="utf-8")
    return res


def _req_name(req: str) -> str:
    from packaging.requirements import Requirement

    return Requirement(req).name
