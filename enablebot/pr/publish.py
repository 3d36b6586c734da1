"""Turn fix bundles into pull requests the way tolerated PR bots do (Dependabot, Renovate).

- One PR per fix key, on branch `enablebot/<fix_key>`, updated in place: a changed patch is
  force-pushed as a single commit on the current base, a changed description is edited.
  An unchanged patch is not pushed again (no noise).
- A cap on concurrently open bot PRs (counted by the bot label); updates are not capped.
- A PR closed by a maintainer is not reopened, a merged one is left alone.
- Nothing half-made: if the PR cannot be opened after the branch was pushed, the branch
  is deleted again.

`plan_pr` is pure (bundle directory in, PrPlan out); `Publisher` performs a plan through
PyGithub with the Git Data API (blobs -> tree -> commit -> ref), so no clone is needed.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import unidiff
from github import InputGitTreeElement, UnknownObjectException
from github.PullRequest import PullRequest
from github.Repository import Repository

from ..fix.bundle import FixBundle, read_patch
from ..fix.judge.overlay import PatchApplyError, apply_hunks
from .github_client import GitHubError, explain, read_text_at, step
from .body import PR_META, pr_title, read_meta, render_pr_body, verification_passed
from ..results import Serializable

BOT_LABEL = "enablebot"
BRANCH_PREFIX = "enablebot/"
DEFAULT_MAX_OPEN = 5  # Dependabot's default limit on open PRs
PR_TARGETS = ("dynamo", "inductor", "model-code")

NEEDS_CONTENTS = "needs contents: write"
NEEDS_PULLS = "needs pull-requests: write"
NEEDS_ISSUES = "needs issues: write (labels)"


class NotPrAble(ValueError):
    """The bundle cannot become a code PR (recipe-only, no patch, unknown target)."""


@dataclass
class PrPlan(Serializable):
    fix_key: str
    model_id: str
    target: str
    branch: str
    title: str
    body: str
    labels: list[str]
    files: list[str]
    patch: str
    patch_sha256: str
    commit_message: str


@dataclass
class PrOutcome(Serializable):
    fix_key: str
    repo: str
    branch: str
    action: str  # opened | updated | unchanged | skipped
    number: int | None = None
    url: str | None = None
    reason: str = ""
    pushed: bool = False  # a new commit was pushed to the branch
    labels_added: list[str] = field(default_factory=list)


def parse_patch(patch: str) -> list[unidiff.PatchedFile]:
    """The files of a bundle's patch; bundles only modify existing files (see fix.judge.patchguard)."""
    try:
        files = list(unidiff.PatchSet(patch))
    except unidiff.UnidiffParseError as e:
        raise PatchApplyError(f"patch.diff is not a valid unified diff: {e}") from e
    if not files:
        raise PatchApplyError("patch.diff changes no file")
    for pf in files:
        if pf.is_added_file or pf.is_removed_file or pf.is_rename or pf.is_binary_file:
            raise PatchApplyError(f"{pf.path}: the patch adds, deletes, renames or is binary; only edits are PR-able")
    return files


def apply_patch(patch: str, originals: dict[str, str | None], where: str) -> dict[str, str]:
    """New texts of the patched files, with the same hunk matching that verified the fix."""
    out = {}
    for pf in parse_patch(patch):
        text = originals.get(pf.path)
        if text is None:
            raise PatchApplyError(f"{pf.path}: the patch edits it but it is not in {where}")
        out[pf.path] = apply_hunks(text, pf, pf.path)
    return out


def branch_name(fix_key: str) -> str:
    """A valid git branch for a fix key (git-check-ref-format rules, conservatively)."""
    name = re.sub(r"[^A-Za-z0-9._/-]+", "-", fix_key).strip("-./")
    name = re.sub(r"/+", "/", re.sub(r"\.{2,}", ".", name))
    name = "/".join(p.lstrip(".").removesuffix(".lock") or "x" for p in name.split("/"))
    if not name:
        raise NotPrAble(f"fix key {fix_key!r} gives no usable branch name")
    return BRANCH_PREFIX + name[:200]


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def plan_pr(bundle_dir: str | Path, *, model_type: str | None = None) -> PrPlan:
    """The PR of a bundle. Refuses (NotPrAble) a recipe, an unverified bundle, and one that
    fails the chain of custody: patch changed since verification, path policy, target."""
    from ..fix.judge.custody import CustodyError, check_custody

    d = Path(bundle_dir)
    bundle = FixBundle.load(d)
    patch = read_patch(d)
    if bundle.kind == "recipe" or patch is None:
        what = f"torch._dynamo.config {bundle.recipe}" if bundle.recipe else "no patch.diff"
        raise NotPrAble(
            f"{bundle.fix_key}: recipe-only fix ({what}) is not PR-able as code; "
            "`enablebot dashboard --fixes` lists it instead"
        )
    if bundle.target not in PR_TARGETS:
        raise NotPrAble(f"{bundle.fix_key}: target {bundle.target!r} is not one of {', '.join(PR_TARGETS)}")
    files = [pf.path for pf in parse_patch(patch)]
    verification = _read_json(d / "verification.json")
    if not verification_passed(bundle, verification):
        raise NotPrAble(f"{bundle.fix_key}: the fix did not pass verification; see verification.json")
    try:
        check_custody(d, model_type=model_type)
    except CustodyError as e:
        raise NotPrAble(str(e)) from e
    report = (d / "report.md").read_text(encoding="utf-8") if (d / "report.md").is_file() else None
    digest = hashlib.sha256(patch.encode()).hexdigest()
    title = pr_title(bundle)
    from ..redact import redact

    body = redact(render_pr_body(bundle, verification=verification, report_md=report, files=files, patch_sha256=digest))
    message = (
        f"{title.removeprefix('[enablebot] ')}\n\n"
        f"Drafted by enablebot for {bundle.model_id}; see the pull request for the verification report.\n\n"
        f"Fix-Key: {bundle.fix_key}\n"
    )
    return PrPlan(
        fix_key=bundle.fix_key,
        model_id=bundle.model_id,
        target=bundle.target,
        branch=branch_name(bundle.fix_key),
        title=title,
        body=body,
        labels=[BOT_LABEL, bundle.target],
        files=files,
        patch=patch,
        patch_sha256=digest,
        commit_message=message,
    )


def render_plan(plan: PrPlan, repo: str, base: str | None) -> str:
    """What a dry run prints: exactly what would be sent."""
    return "\n".join(
        [
            f"repo:    {repo}",
            f"base:    {base or '(default branch)'}",
            f"branch:  {plan.branch}",
            f"title:   {plan.title}",
            f"labels:  {', '.join(plan.labels)}",
            f"files:   {', '.join(plan.files)}",
            "body:",
            plan.body,
        ]
    )


class Publisher:
    """Opens or updates the PRs of one repository, keeping the open-PR count for --max-open."""

    def __init__(self, repo: Repository, *, base: str | None = None, max_open: int = DEFAULT_MAX_OPEN) -> None:
        self.repo = repo
        self.name = repo.full_name
        self.base = base or repo.default_branch
        self.max_open = max_open
        self._open_count: int | None = None

    # ---- reads -------------------------------------------------------------------------
    def open_bot_prs(self) -> int:
        if self._open_count is None:
            with step(f"list open PRs labelled {BOT_LABEL!r}", self.name):
                issues = self.repo.get_issues(state="open", labels=[BOT_LABEL])
                self._open_count = sum(1 for i in issues if i.pull_request is not None)
        return self._open_count

    def find_pr(self, branch: str) -> PullRequest | None:
        """The open PR of this branch, else the newest closed one (None if there never was one)."""
        with step(f"look up the PR of branch {branch}", self.name):
            pulls = list(self.repo.get_pulls(state="all", head=f"{self.repo.owner.login}:{branch}"))
        for pr in pulls:
            if pr.state == "open":
                return pr
        return max(pulls, key=lambda p: p.number) if pulls else None

    def _branch_ref(self, branch: str):
        with step(f"look up branch {branch}", self.name):
            try:
                return self.repo.get_git_ref(f"heads/{branch}")
            except UnknownObjectException:
                return None

    # ---- the commit ----------------------------------------------------------------------
    def _commit(self, plan: PrPlan) -> str:
        """Create the fix commit on the current base; returns its sha. Writes only git objects."""
        with step(f"read branch {self.base}", self.name):
            base_sha = self.repo.get_git_ref(f"heads/{self.base}").object.sha
            base_commit = self.repo.get_git_commit(base_sha)
            originals = {p: read_text_at(self.repo, p, base_sha) for p in plan.files}
        where = f"{self.name} at {self.base} ({base_sha[:12]})"
        try:
            new_files = apply_patch(plan.patch, originals, where)
        except PatchApplyError as e:
            raise PatchApplyError(f"the fix no longer applies to {where}; regenerate it with `enablebot fix`. {e}") from e
        with step(f"create the commit for {plan.branch}", self.name, NEEDS_CONTENTS):
            elements = []
            for path, text in sorted(new_files.items()):
                blob = self.repo.create_git_blob(text, "utf-8")
                elements.append(InputGitTreeElement(path, "100644", "blob", sha=blob.sha))
            tree = self.repo.create_git_tree(elements, base_tree=base_commit.tree)
            commit = self.repo.create_git_commit(plan.commit_message, tree, [base_commit])
        return commit.sha

    # ---- one plan -----------------------------------------------------------------------------
    def publish(self, plan: PrPlan) -> PrOutcome:
        out = PrOutcome(fix_key=plan.fix_key, repo=self.name, branch=plan.branch, action="skipped")
        pr = self.find_pr(plan.branch)
        if pr is not None and pr.state != "open":
            out.number, out.url = pr.number, pr.html_url
            out.reason = (
                f"already merged in #{pr.number}"
                if pr.merged
                else f"#{pr.number} was closed without merging; not reopening it"
            )
            return out
        if pr is None and self.open_bot_prs() >= self.max_open:
            out.reason = f"{self.open_bot_prs()} bot PRs are open (--max-open {self.max_open}); not opening another"
            return out

        old = read_meta(pr.body, PR_META) if pr is not None else None
        same_patch = bool(old) and old.get("patch_sha256") == plan.patch_sha256  # type: ignore[union-attr]
        if not same_patch:
            sha = self._commit(plan)
            self._push(plan, sha, has_pr=pr is not None)
            out.pushed = True
        try:
            if pr is None:
                with step(f"open a PR from {plan.branch} into {self.base}", self.name, NEEDS_PULLS):
                    pr = self.repo.create_pull(
                        base=self.base,
                        head=plan.branch,
                        title=plan.title,
                        body=plan.body,
                        maintainer_can_modify=True,
                    )
                out.action = "opened"
                self._open_count = self.open_bot_prs() + 1
            elif pr.title != plan.title or pr.body != plan.body:
                with step(f"update PR #{pr.number}", self.name, NEEDS_PULLS):
                    pr.edit(title=plan.title, body=plan.body)
                out.action = "updated"
            else:
                out.action = "updated" if out.pushed else "unchanged"
        except BaseException as e:  # also Ctrl-C: a pushed branch must not outlive a failed PR
            if pr is None:
                cleanup = self._remove_branch(plan.branch)
                if isinstance(e, GitHubError):
                    raise GitHubError(f"{e} {cleanup}") from e
            raise
        out.number, out.url = pr.number, pr.html_url
        have = {label.name for label in pr.labels}
        missing = [name for name in plan.labels if name not in have]
        if missing:
            # A PR without its labels is repaired by the next run (it finds the PR by branch).
            with step(f"label PR #{pr.number} ({', '.join(missing)})", self.name, NEEDS_ISSUES):
                pr.add_to_labels(*missing)
            out.labels_added = missing
        return out

    def _push(self, plan: PrPlan, sha: str, *, has_pr: bool) -> None:
        ref = self._branch_ref(plan.branch)
        try:
            with step(f"push branch {plan.branch}", self.name, NEEDS_CONTENTS):
                if ref is None:
                    self.repo.create_git_ref(f"refs/heads/{plan.branch}", sha)
                else:
                    ref.edit(sha, force=True)
        except GitHubError as e:
            if ref is not None and not has_pr:
                # A branch without a PR is a leftover of an interrupted run; do not keep it.
                raise GitHubError(f"{e} {self._remove_branch(plan.branch)}") from e
            raise

    def _remove_branch(self, branch: str) -> str:
        """Delete a branch that has no PR; returns a sentence for the error message."""
        try:
            ref = self.repo.get_git_ref(f"heads/{branch}")
            ref.delete()
        except UnknownObjectException:
            return f"No branch {branch} was left behind."
        except Exception as e:  # the original error matters more; say what is left
            return f"Removing branch {branch} also failed ({explain(e, 'delete it', self.name)}); delete it by hand."
        return f"Branch {branch} was deleted again, so nothing is left half-made."
