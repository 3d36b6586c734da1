"""The dashboard issue (like Renovate's Dependency Dashboard): one issue, rewritten in place.

Data comes from the registry (architectures and their status), the sweep's triage file
(graph-break clusters), fix bundles (recipe-only fixes) and GitHub (open bot PRs);
pr_body.render_dashboard turns it into Markdown. The issue is found again by its label
and the hidden marker in its body, falling back to its title, so a run never opens a
second one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from github.Issue import Issue
from github.Repository import Repository

from ..fix.bundle import FixBundle
from .github_client import step
from .publish import BOT_LABEL
from .body import (
    DASHBOARD_META,
    DASHBOARD_TITLE,
    PR_META,
    ArchRow,
    ClusterRow,
    PrRow,
    RecipeRow,
    read_meta,
)
from ..model.registry import Registry
from ..results import Serializable

DASHBOARD_LABEL = "enablebot-dashboard"


class DataError(ValueError):
    """An input file is missing or malformed (the CLI exits 2)."""


# ---- inputs ------------------------------------------------------------------------------
def arch_rows(registry: Registry) -> list[ArchRow]:
    return [ArchRow(model_type=mt, status=dict(e.status)) for mt, e in sorted(registry.entries.items())]


def load_clusters(path: str | Path | None) -> list[ClusterRow]:
    """Read the sweep's triage.json (a list of clusters, or {"clusters": [...]})."""
    if path is None:
        return []
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: no such triage file; run `enablebot merge` (it writes triage.json)")
    try:
        data: Any = json.loads(p.read_text(encoding="utf-8"))
    except ValueError as e:
        raise DataError(f"{p}: not valid JSON ({e})") from e
    if isinstance(data, dict):
        data = data.get("clusters", [])
    if not isinstance(data, list):
        raise DataError(f"{p}: expected a list of clusters")
    rows = []
    for raw in data:
        if not isinstance(raw, dict) or not raw.get("gb_type"):
            continue
        models = [str(m) for m in raw.get("models") or []]
        rows.append(
            ClusterRow(
                gb_type=str(raw["gb_type"]),
                registry_id=raw.get("registry_id"),
                location=raw.get("location"),
                n_models=int(raw.get("n_models") or len(models)),
                models=models,
                classification=raw.get("classification"),
            )
        )
    return rows


def load_recipes(fix_dirs: list[Path]) -> list[RecipeRow]:
    """Recipe-only fix bundles under the given directories: a bundle, a model's directory of
    bundles, or the `fixes/` root (fixes/<model>/<cluster>/, as `fix --out` writes them)."""
    from ..fix.bundle import find_bundles

    rows = []
    for root in fix_dirs:
        for d in find_bundles(root):
            b = FixBundle.load(d)
            if b.kind == "recipe":
                rows.append(RecipeRow(b.fix_key, b.model_id, b.cluster.gb_type, dict(b.recipe or {}), b.verified))
    return rows


def bot_prs(repo: Repository) -> list[PrRow]:
    """Open PRs carrying the bot label, with the verification state the bot recorded."""
    rows = []
    with step(f"list open PRs labelled {BOT_LABEL!r}", repo.full_name):
        for issue in repo.get_issues(state="open", labels=[BOT_LABEL]):
            if issue.pull_request is None:
                continue
            meta = read_meta(issue.body, PR_META) or {}
            rows.append(
                PrRow(
                    repo=repo.full_name,
                    number=issue.number,
                    title=issue.title,
                    url=issue.html_url,
                    fix_key=meta.get("fix_key"),
                    target=meta.get("target"),
                    verified=meta.get("verified") if isinstance(meta.get("verified"), bool) else None,
                    updated_at=issue.updated_at.strftime("%Y-%m-%d %H:%M") if issue.updated_at else None,
                )
            )
    return rows


# ---- the issue ----------------------------------------------------------------------------------
@dataclass
class DashboardOutcome(Serializable):
    repo: str
    action: str  # created | updated | unchanged
    number: int
    url: str


def find_dashboard(repo: Repository) -> Issue | None:
    with step("look for the dashboard issue", repo.full_name):
        for issue in repo.get_issues(state="open", labels=[DASHBOARD_LABEL]):
            if issue.pull_request is None and read_meta(issue.body, DASHBOARD_META) is not None:
                return issue
        # Labels are dropped silently when the token may not set them; the title still finds it.
        for issue in repo.get_issues(state="open"):
            if issue.pull_request is None and issue.title == DASHBOARD_TITLE:
                return issue
    return None


def _content(body: str | None) -> str:
    """The dashboard without its update time (meta comment and the "Updated ..." line)."""
    import re

    text = re.sub(r"<!--.*?-->", "", body or "", flags=re.S)
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith("Updated ")).strip()


def publish_dashboard(repo: Repository, body: str) -> DashboardOutcome:
    from ..redact import redact

    body = redact(body)
    issue = find_dashboard(repo)
    if issue is None:
        with step("create the dashboard issue", repo.full_name, "needs issues: write"):
            issue = repo.create_issue(title=DASHBOARD_TITLE, body=body, labels=[DASHBOARD_LABEL])
        return DashboardOutcome(repo.full_name, "created", issue.number, issue.html_url)
    if _content(issue.body) == _content(body):  # only the time changed: skip the no-op write
        return DashboardOutcome(repo.full_name, "unchanged", issue.number, issue.html_url)
    with step(f"update dashboard issue #{issue.number}", repo.full_name, "needs issues: write"):
        issue.edit(body=body)
    return DashboardOutcome(repo.full_name, "updated", issue.number, issue.html_url)
