"""Outgoing links and page names: pure functions, no I/O."""

from __future__ import annotations

import hashlib
import re

# The form torch's own break messages use ("...please visit: <this>").
GB_SITE = "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb{num}.html"
TRANSFORMERS_BLOB = "https://github.com/huggingface/transformers/blob/{ref}/src/{path}#L{line}"
PYTORCH_BLOB = "https://github.com/pytorch/pytorch/blob/{ref}/{path}#L{line}"
_GB_ID = re.compile(r"^GB(\d{4})$", re.I)
_RELEASE = re.compile(r"^\d+\.\d+\.\d+$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def gb_url(registry_id: str | None) -> str | None:
    """GB0033 -> the registry page torch's message names; None for a break without an id."""
    m = _GB_ID.match(registry_id or "")
    return GB_SITE.format(num=m.group(1)) if m else None


def public_version(version: str | None) -> str:
    """'2.11.0+cu130' -> '2.11.0'."""
    return (version or "").split("+")[0]


def release_ref(version: str | None) -> str:
    """The git tag of a release ('5.24.0' -> 'v5.24.0'); dev and nightly builds -> 'main'."""
    v = public_version(version)
    return f"v{v}" if _RELEASE.match(v) else "main"


def source_url(filename: str, lineno: int, *, transformers: str | None, torch: str | None) -> str | None:
    """The file at that line on GitHub, at the tag of the version that ran; None outside
    transformers and torch (user code, the standard library)."""
    parts = filename.replace("\\", "/").split("/")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == "transformers" and i + 1 < len(parts) and (i == 0 or parts[i - 1] in ("site-packages", "src", "dist-packages")):
            path = "/".join(parts[i:])
            return TRANSFORMERS_BLOB.format(ref=release_ref(transformers), path=path, line=lineno)
        if parts[i] == "torch" and i + 1 < len(parts) and (i == 0 or parts[i - 1] in ("site-packages", "dist-packages")):
            return PYTORCH_BLOB.format(ref=release_ref(torch), path="/".join(parts[i:]), line=lineno)
    return None


def slug(text: str) -> str:
    """A file name for a page: readable, and distinct for distinct ids ('org/name' and 'org_name' differ)."""
    safe = _UNSAFE.sub("_", text).strip("._") or "x"
    if safe != text:
        safe += "-" + hashlib.sha1(text.encode()).hexdigest()[:6]
    return safe


def model_page(model_id: str) -> str:
    return f"models/{slug(model_id)}.html"


def cluster_page(cluster_key: str) -> str:
    return f"clusters/{hashlib.sha1(cluster_key.encode()).hexdigest()[:10]}.html"
