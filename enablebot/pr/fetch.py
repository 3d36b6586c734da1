"""Rebuild a fix bundle from one of the bot's pull requests, for `enablebot verify` in CI.

The PR body carries the bundle metadata (hidden JSON written by pr_body); the patch is
recomputed from the PR's head commit against its parent, so what gets verified is what
the branch holds now, not what the description claims. The bot pushes exactly one
commit per PR on top of the base branch.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from github.Repository import Repository

from ..fix.bundle import FixBundle
from .github_client import read_text_at, step
from .body import PR_META, read_meta


class NotABotPr(ValueError):
    pass


def bundle_from_pr(repo: Repository, number: int, out_dir: str | Path) -> FixBundle:
    name = repo.full_name
    with step(f"read PR #{number}", name):
        pr = repo.get_pull(number)
    meta = read_meta(pr.body, PR_META)
    if not meta or not isinstance(meta.get("bundle"), dict):
        raise NotABotPr(f"{name}#{number} carries no enablebot metadata; it was not opened by `enablebot pr`")
    bundle = FixBundle.from_dict(meta["bundle"])
    with step(f"read the commits of PR #{number}", name):
        head = repo.get_git_commit(pr.head.sha)
        if not head.parents:
            raise NotABotPr(f"{name}#{number}: the head commit has no parent")
        parent = head.parents[0].sha
        paths = [f.filename for f in pr.get_files()]
        diffs = []
        for path in paths:
            old = read_text_at(repo, path, parent) or ""
            new = read_text_at(repo, path, head.sha) or ""
            diffs.append(
                "".join(
                    difflib.unified_diff(
                        old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}"
                    )
                )
            )
    out = Path(out_dir)
    bundle.files = paths
    bundle.save(out)
    (out / "patch.diff").write_text("".join(diffs), encoding="utf-8")
    return bundle
