"""Chain of custody of a fix bundle, from the verifier to the pull request.

The verifier records in verification.json the sha256 of the exact patch it verified and of
each touched file (installed original and patched text). `check_custody` is what `pr` runs
before doing anything: the bundle must have passed verification, its patch.diff must be
byte-identical to the verified one, the patch must pass the path policy again, and the
bundle's target and file list must match what the patch touches. A bundle edited after
verification (by a later job, or by candidate code that escaped) is refused.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bundle import FixBundle, read_patch


class CustodyError(ValueError):
    """The bundle is not the one that was verified, or breaks the policy; never PR it."""


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def seal(patch: str | None, overlay_dir: str | Path | None = None) -> dict[str, Any]:
    """The custody fields the verifier records: patch_sha256 and files_sha256
    ({upstream path: {"installed": sha, "patched": sha}}, from the overlay manifest)."""
    out: dict[str, Any] = {"patch_sha256": sha256_text(patch) if patch else "", "files_sha256": {}}
    if overlay_dir:
        from .overlay import load_overlay

        ov = load_overlay(overlay_dir)
        out["files_sha256"] = {f.upstream: {"installed": f.sha256_installed, "patched": f.sha256_patched}
                               for f in ov.files}
    return out


@dataclass
class Custody:
    bundle: FixBundle
    patch: str
    verification: dict[str, Any]
    files: list[str]


def check_custody(bundle_dir: str | Path, *, model_type: str | None = None) -> Custody:
    """Raise CustodyError saying why `bundle_dir` must not become a PR."""
    from .patchguard import PatchPolicy, PatchRejected, check_patch, target_of

    d = Path(bundle_dir)
    bundle = FixBundle.load(d)
    patch = read_patch(d)
    if patch is None:
        raise CustodyError(f"{d}: no patch.diff")
    try:
        ver = json.loads((d / "verification.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CustodyError(f"{bundle.fix_key}: no readable verification.json ({type(e).__name__}); "
                           "the fix was not verified") from e
    if not isinstance(ver, dict) or ver.get("passed") is not True:
        raise CustodyError(f"{bundle.fix_key}: the fix did not pass verification; see verification.json")
    recorded = ver.get("patch_sha256")
    if not recorded:
        raise CustodyError(f"{bundle.fix_key}: verification.json records no patch_sha256; re-run `enablebot fix` "
                           "(bundles from before the chain of custody are not PR-able)")
    if sha256_text(patch) != recorded:
        raise CustodyError(f"{bundle.fix_key}: patch.diff changed after verification (sha256 {sha256_text(patch)[:12]} "
                           f"!= verified {recorded[:12]}); refusing to PR it")
    mt = model_type if model_type is not None else _model_type(bundle.model_id)
    try:
        # Borrowed files the verifier accepted (the break's own frames, found by its reproduction;
        # `enablebot verify` re-derives them from a fresh run).
        borrowed = tuple(f for f in ver.get("files") or [] if isinstance(f, str) and f.startswith("src/transformers/"))
        checked = check_patch(patch, PatchPolicy(model_type=mt, frame_files=borrowed))
    except PatchRejected as e:
        raise CustodyError(f"{bundle.fix_key}: the patch breaks the path policy: {e}") from e
    files = checked.files
    if bundle.target != target_of(files):
        raise CustodyError(f"{bundle.fix_key}: bundle target {bundle.target!r} does not match the patched files "
                           f"({target_of(files)!r}: {', '.join(files)})")
    for what, listed in (("bundle.json", bundle.files), ("verification.json", ver.get("files") or [])):
        if sorted(listed) != sorted(files):
            raise CustodyError(f"{bundle.fix_key}: {what} lists {sorted(listed)} but the patch touches {sorted(files)}")
    recorded_files = ver.get("files_sha256") or {}
    if sorted(recorded_files) != sorted(files):
        raise CustodyError(f"{bundle.fix_key}: verification.json records hashes of {sorted(recorded_files)}, "
                           f"the patch touches {sorted(files)}")
    _recheck_files(bundle.fix_key, patch, recorded_files)
    return Custody(bundle=bundle, patch=patch, verification=ver, files=files)


def _recheck_files(key: str, patch: str, recorded: dict[str, dict[str, str]]) -> None:
    """Where the installed original is the one verified against, the patch must still give
    the verified text (elsewhere, e.g. a PR job with other versions, patch_sha256 binds it)."""
    from .diffparse import parse
    from .overlay import PatchApplyError, apply_hunks, locate

    for fd in parse(patch):
        pf, path = fd.patched_file, fd.path
        rec = recorded.get(path) or {}
        try:
            _, installed = locate(path)
            original = installed.read_text(encoding="utf-8")
        except (LookupError, OSError, ValueError):
            continue
        if sha256_text(original) != rec.get("installed"):
            continue
        try:
            got = sha256_text(apply_hunks(original, pf, path))
        except PatchApplyError as e:
            raise CustodyError(f"{key}: {path}: the patch no longer applies to the verified original: {e}") from e
        if got != rec.get("patched"):
            raise CustodyError(f"{key}: {path}: the patched file differs from the verified one")


def _model_type(model_id: str) -> str | None:
    from ...model.resolve import resolve

    try:
        return resolve(model_id).model_type
    except Exception:  # noqa: BLE001 - an unresolvable id names its own model type
        return model_id
