"""The dashboard issue: rendering from data, and in-place updates through the real PyGithub client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from enablebot.commands import pr as pr_commands
from enablebot.fix.bundle import ClusterRef, FixBundle
from enablebot.pr.body import (
    DASHBOARD_META,
    PR_META,
    ArchRow,
    ClusterRow,
    PrRow,
    RecipeRow,
    meta_comment,
    read_meta,
    render_dashboard,
)
from enablebot.model.registry import ArchEntry, Registry
from enablebot.testing.fake_github import FakeGitHub

BOT_REPO = "acme/enablebot"
PR_REPO = "acme/transformers"


def status(verdict: str, numerics: bool | None = True, speedup: float | None = 1.3) -> dict:
    return {"verdict": verdict, "numerics_passed": numerics, "speedup": speedup}


def write_registry(path: Path, jetmoe_verdict: str = "graph_break") -> Path:
    reg = Registry(path=path)
    reg.upsert(ArchEntry("llama", status={"cpu/eval": status("full_graph"), "cuda/eval": status("full_graph", speedup=2.8)}))
    reg.upsert(ArchEntry("jetmoe", status={"cpu/eval": status(jetmoe_verdict, speedup=1.08)}))
    reg.upsert(ArchEntry("t5", status={"cpu/eval": status("full_graph", numerics=False)}))
    reg.upsert(ArchEntry("newarch", origin="hub"))
    reg.save()
    return path


TRIAGE = [
    {"gb_type": "Data dependent operator", "registry_id": "GB0033", "location": "modeling_mixtral.py:forward",
     "n_models": 3, "models": ["mixtral", "qwen2_moe", "jetmoe"], "classification": "model-code"},
    {"gb_type": "Unsupported Tensor.item() call with capture_scalar_outputs=False", "registry_id": "GB0124",
     "location": "modeling_jetmoe.py:JetMoeTopKGating.forward", "n_models": 7,
     "models": ["jetmoe", "a", "b", "c", "d", "e", "f"], "classification": "config"},
    {"gb_type": "logging.Logger method not supported", "registry_id": "GB0291", "location": "utils.py:warn",
     "n_models": 1, "models": ["@someone-model"], "classification": "dynamo"},
]


def write_recipe(d: Path) -> Path:
    FixBundle(
        fix_key="jetmoe-GB0124-recipe", model_id="jetmoe",
        cluster=ClusterRef(gb_type="Unsupported Tensor.item() call with capture_scalar_outputs=False", registry_id="GB0124"),
        target="config", kind="recipe", recipe={"capture_scalar_outputs": True}, verified=True,
    ).save(d)
    return d


def pr_body(fix_key: str, verified: bool, target: str) -> str:
    return meta_comment(PR_META, {"fix_key": fix_key, "verified": verified, "target": target}) + "\n## a fix\n"


# ---- rendering (pure) ------------------------------------------------------------------------------
def test_render_dashboard_summarises_architectures_clusters_prs_and_recipes():
    archs = [
        ArchRow("llama", {"cpu/eval": status("full_graph"), "cuda/eval": status("full_graph", speedup=2.8)}),
        ArchRow("jetmoe", {"cpu/eval": status("graph_break", speedup=1.08)}),
        ArchRow("t5", {"cpu/eval": status("full_graph", numerics=False)}),
        ArchRow("newarch", {}),
    ]
    clusters = [ClusterRow(**c) for c in TRIAGE]
    prs = [
        PrRow(PR_REPO, 7, "[enablebot] jetmoe: remove graph break GB0124", "https://github.test/acme/transformers/pull/7",
              fix_key="k7", target="model-code", verified=True),
        PrRow(PR_REPO, 9, "[enablebot] x | y", "https://github.test/acme/transformers/pull/9", verified=False),
    ]
    recipes = [RecipeRow("jetmoe-GB0124-recipe", "jetmoe", "Unsupported Tensor.item()", {"capture_scalar_outputs": True}, True)]
    md = render_dashboard(archs, clusters, prs, recipes, updated_at="2026-09-02 03:00 UTC", run_url="https://ci/run/1")

    assert read_meta(md, DASHBOARD_META) == {"updated_at": "2026-09-02 03:00 UTC"}
    assert "## Architectures (4 tracked)" in md
    # per device/mode: counts by verdict, numerics failures, architectures without a result
    assert "| device/mode | full_graph | graph_break | numerics ✗ | not run |" in md
    assert "| cpu/eval | 2 | 1 | 1 | 1 |" in md
    assert "| cuda/eval | 1 | 0 | 0 | 3 |" in md
    assert "Architectures needing attention (2)" in md
    assert "| jetmoe | graph_break · 1.08x | – |" in md
    assert "| t5 | full_graph · numerics ✗ · 1.30x | – |" in md
    assert "| llama |" not in md  # healthy ones stay out of the attention list
    # clusters ordered by how many models they hit
    lines = [line for line in md.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert "GB0124" in lines[0] and "GB0033" in lines[1]
    assert "jetmoe, a, b …" in md
    assert "@someone" not in md  # Hub names cannot mention people
    assert "[acme/transformers#7](https://github.test/acme/transformers/pull/7)" in md
    assert "| passed ✅ |" in md and "| failed ❌ |" in md
    assert "x \\| y" in md
    assert "`capture_scalar_outputs=True`" in md


def test_render_dashboard_without_data_or_token():
    md = render_dashboard([], [], None, [], updated_at="now")
    assert "_No run results in the registry yet._" in md
    assert "_No graph-break clusters in the latest sweep._" in md
    assert "_Not queried (no GITHUB_TOKEN)._" in md


# ---- the issue on GitHub ----------------------------------------------------------------------------
@pytest.fixture
def fake():
    with FakeGitHub() as server:
        server.add_repo(BOT_REPO, {"README.md": "enablebot\n"})
        server.add_repo(PR_REPO, {"README.md": "transformers\n"})
        server.open_pull(PR_REPO, "enablebot/k1", "[enablebot] jetmoe fix", pr_body("k1", True, "model-code"), ["enablebot", "model-code"])
        server.open_pull(PR_REPO, "enablebot/k2", "[enablebot] t5 fix", pr_body("k2", False, "dynamo"), ["enablebot", "dynamo"])
        server.open_pull(PR_REPO, "someone/feature", "a human PR", "hello", [])
        yield server


def cli(args: list[str], fake: FakeGitHub, token: bool = True):
    app = typer.Typer()
    pr_commands.register(app)
    env = {"GITHUB_API_URL": fake.base_url, "GITHUB_TOKEN": fake.token if token else "", "GITHUB_RUN_ID": ""}
    result = CliRunner().invoke(app, args, env=env)
    assert fake.token not in result.output
    return result


def dashboard_args(tmp_path: Path, *extra: str) -> list[str]:
    triage = tmp_path / "triage.json"
    triage.write_text(json.dumps(TRIAGE))
    return [
        "dashboard", "--repo", BOT_REPO, "--pr-repo", PR_REPO,
        "--registry", str(tmp_path / "model_registry.yaml"), "--triage", str(triage),
        "--fixes", str(tmp_path / "fixes"), "--write-interval", "0", *extra,
    ]


def test_dashboard_is_created_once_then_edited_in_place(tmp_path, fake):
    write_registry(tmp_path / "model_registry.yaml")
    write_recipe(tmp_path / "fixes" / "jetmoe-GB0124-recipe")
    res = cli(dashboard_args(tmp_path, "--push"), fake)
    assert res.exit_code == 0, res.output
    assert "dashboard created" in res.output
    repo = fake.repos[BOT_REPO]
    (issue,) = repo.issues()
    assert issue["labels"] == ["enablebot-dashboard"]
    assert issue["title"] == "enablebot dashboard"
    body = issue["body"]
    assert "| cpu/eval | 2 | 1 | 1 | 1 |" in body
    assert "GB0124" in body and "jetmoe-GB0124-recipe" in body
    # the bot PRs of the other repository, with the verification state they carry; not the human one
    assert "acme/transformers#1" in body and "acme/transformers#2" in body and "a human PR" not in body
    assert "| `k1` | passed ✅ |" in body and "| `k2` | failed ❌ |" in body
    create = fake.calls("POST", "/issues$")[0]
    assert create.path == f"/repos/{BOT_REPO}/issues" and create.body["labels"] == ["enablebot-dashboard"]

    # Next night: jetmoe is fixed. The same issue is edited; no second one appears.
    write_registry(tmp_path / "model_registry.yaml", jetmoe_verdict="full_graph")
    fake.clear_log()
    res = cli(dashboard_args(tmp_path, "--push"), fake)
    assert res.exit_code == 0, res.output
    assert "dashboard updated" in res.output
    assert not fake.calls("POST", "/issues$")
    (edit,) = fake.calls("PATCH", r"/issues/\d+$")
    assert edit.path == f"/repos/{BOT_REPO}/issues/1"
    assert len(repo.issues()) == 1
    body = repo.issues()[0]["body"]
    assert "| device/mode | full_graph | numerics ✗ | not run |" in body
    assert "| cpu/eval | 3 | 1 | 1 |" in body


def test_dashboard_found_by_title_when_its_label_was_dropped(tmp_path, fake):
    write_registry(tmp_path / "model_registry.yaml")
    repo = fake.repos[BOT_REPO]
    fake._new_item(repo, "issue", {"title": "enablebot dashboard", "body": "old"})
    res = cli(dashboard_args(tmp_path, "--push"), fake)
    assert res.exit_code == 0, res.output
    assert len(repo.issues()) == 1 and repo.issues()[0]["body"] != "old"


def test_dashboard_dry_run_prints_and_writes_nothing(tmp_path, fake):
    write_registry(tmp_path / "model_registry.yaml")
    res = cli(dashboard_args(tmp_path), fake, token=False)
    assert res.exit_code == 0, res.output
    assert "# enablebot dashboard" in res.output and "_Not queried (no GITHUB_TOKEN)._" in res.output
    assert fake.requests == []


def test_dashboard_rate_limit_is_a_clear_error(tmp_path, fake):
    write_registry(tmp_path / "model_registry.yaml")
    fake.inject("POST", r"/issues$", "rate_limit", reset_in_s=600)
    res = cli(dashboard_args(tmp_path, "--push"), fake)
    assert res.exit_code == 1
    assert "rate limit reached while trying to create the dashboard issue on acme/enablebot" in res.output
    assert "Traceback" not in res.output
    assert fake.repos[BOT_REPO].issues() == []


def test_dashboard_bad_triage_file_is_a_usage_error(tmp_path, fake):
    write_registry(tmp_path / "model_registry.yaml")
    args = dashboard_args(tmp_path)
    (tmp_path / "triage.json").write_text("{not json")
    res = cli(args, fake)
    assert res.exit_code == 2 and "not valid JSON" in res.output


def test_dashboard_missing_registry_is_a_usage_error(tmp_path, fake):
    res = cli(dashboard_args(tmp_path), fake)  # no registry written
    assert res.exit_code == 2 and "no such registry file" in res.output


def test_recipes_are_found_where_fix_writes_them(tmp_path):
    """`fix --out fixes` writes fixes/<model>/<cluster>/; the nightly passes `fixes`."""
    from enablebot.pr.dashboard import load_recipes
    from enablebot.fix.bundle import find_bundles

    write_recipe(tmp_path / "fixes" / "jetmoe" / "GB0124-recipe")
    (tmp_path / "fixes" / "jetmoe" / "notes").mkdir()
    assert find_bundles(tmp_path / "fixes") == [tmp_path / "fixes" / "jetmoe" / "GB0124-recipe"]
    assert [r.model_id for r in load_recipes([tmp_path / "fixes"])] == ["jetmoe"]
    assert [r.model_id for r in load_recipes([tmp_path / "fixes" / "jetmoe"])] == ["jetmoe"]
