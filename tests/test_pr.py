"""`enablebot pr` against a GitHub REST server on 127.0.0.1, through the real PyGithub client."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from enablebot.commands import pr as pr_commands
from enablebot.fix.bundle import ClusterRef, FixBundle, Snapshot
from enablebot.fix.judge.custody import sha256_text
from enablebot.fix.judge.overlay import PatchApplyError
from enablebot.pr.publish import NotPrAble, branch_name, plan_pr
from enablebot.pr.body import PR_META, read_meta
from enablebot.testing.fake_github import FakeGitHub

REPO = "acme/transformers"
PATH = "src/transformers/models/jetmoe/modeling_jetmoe.py"

# An excerpt of transformers' modeling_jetmoe.py around the graph break.
MODELING = '''\
import torch
from torch import nn


class JetMoeTopKGating(nn.Module):
    def __init__(self, input_size: int, num_experts: int, top_k: int):
        super().__init__()
        self.num_experts = num_experts
        self.input_size = input_size
        self.top_k = top_k
        self.layer = nn.Linear(input_size, num_experts, bias=False)

    def forward(self, hidden_states):
        # compute the top_k routing decision
        logits = self.layer(hidden_states).float()  # [batch_size x seq_len, num_experts]
        top_k_logits, top_k_indices = logits.topk(self.top_k, dim=1)  # [num_tokens, top_k]
        top_k_gates = torch.softmax(top_k_logits, dim=1).type_as(hidden_states)  # [num_tokens, top_k]

        # compute number of input given to each expert
        zeros = torch.zeros(
            [top_k_gates.size(0), self.num_experts], dtype=top_k_gates.dtype, device=top_k_gates.device
        )  # [num_tokens, num_experts]
        gates = zeros.scatter(1, top_k_indices, 1)  # [num_tokens, num_experts]
        expert_size = gates.long().sum(0)  # [num_experts,]
        expert_size = expert_size.tolist()

        # sort and group input tokens according to expert assignment
        top_k_experts = top_k_indices.flatten()  # [num_tokens * top_k]
        _, index_sorted_experts = top_k_experts.sort(0)  # [num_tokens * top_k]
        batch_index = index_sorted_experts.div(self.top_k, rounding_mode="trunc")  # [num_tokens * top_k]
        top_k_gates = top_k_gates.flatten()  # [num_tokens * top_k]
        batch_gates = top_k_gates[index_sorted_experts]  # [num_tokens * top_k]
        return index_sorted_experts, batch_index, batch_gates, expert_size, logits
'''
FIX_V1 = "        expert_size = torch.bincount(top_k_indices.flatten(), minlength=self.num_experts)\n"
FIX_V2 = "        expert_size = torch.histc(top_k_indices.flatten().float(), bins=self.num_experts, max=self.num_experts - 1).long()\n"
KEY = "jetmoe-GB0124-JetMoeTopKGating.forward"


def patched(fix_line: str, source: str = MODELING) -> str:
    return source.replace("        expert_size = expert_size.tolist()\n", fix_line)


def unified(old: str, new: str, path: str = PATH) -> str:
    return "".join(
        difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}")
    )


def make_bundle(
    d: Path,
    *,
    fix_key: str = KEY,
    fix_line: str = FIX_V1,
    speedup: float = 1.42,
    passed: bool = True,
    kind: str = "patch",
    detail: str = "0 breaks of GB0124 (was 2)",
) -> Path:
    bundle = FixBundle(
        fix_key=fix_key,
        model_id="jetmoe",
        cluster=ClusterRef(
            gb_type="Unsupported Tensor.item() call with capture_scalar_outputs=False",
            registry_id="GB0124",
            filename="modeling_jetmoe.py",
            function="JetMoeTopKGating.forward",
            lineno=25,
        ),
        target="model-code" if kind == "patch" else "config",
        kind=kind,
        recipe={"capture_scalar_outputs": True} if kind == "recipe" else None,
        files=[PATH] if kind == "patch" else [],
        llm_model="gpt-5-mini",
        attempts=2,
        verified=passed,
        versions={"torch": "2.13.0", "transformers": "5.24.0"},
        before=Snapshot(verdict="graph_break", graphs=3, graph_breaks=2, cluster_breaks=2, numerics_passed=True,
                        speedup=1.08, compiled_ms=9.5),
        after=Snapshot(verdict="full_graph", graphs=1, graph_breaks=0, cluster_breaks=0, numerics_passed=True,
                       speedup=speedup, compiled_ms=7.25),
        repro="enablebot run jetmoe --device cpu",
        created_at="2026-09-01T02:00:00Z",
    )
    bundle.save(d)
    custody: dict = {}
    if kind == "patch":
        diff = unified(MODELING, patched(fix_line))
        (d / "patch.diff").write_text(diff, encoding="utf-8")
        # What the verifier records (enablebot.fix.judge.custody.seal) for this patch.
        custody = {"patch_sha256": sha256_text(diff), "files": [PATH],
                   "files_sha256": {PATH: {"installed": sha256_text(MODELING), "patched": sha256_text(patched(fix_line))}}}
    checks = [
        {"name": "graph breaks", "passed": passed, "detail": detail},
        {"name": "numerics vs fp64", "passed": True, "detail": "rmse 1.2e-07 <= 2.0 x eager | ok"},
    ]
    (d / "verification.json").write_text(json.dumps({"passed": passed, "checks": checks, "device": "cpu", **custody}))
    (d / "report.md").write_text("# jetmoe\n\nBefore: 2 breaks. After: 0.\nThanks @octocat, see #123.\n")
    return d


@pytest.fixture
def fake():
    with FakeGitHub() as server:
        server.add_repo(REPO, {PATH: MODELING, "README.md": "transformers\n"})
        yield server


def cli(args: list[str], fake: FakeGitHub | None = None, token: bool = True):
    app = typer.Typer()
    pr_commands.register(app)
    env = {"GITHUB_STEP_SUMMARY": ""}
    if fake is not None:
        env["GITHUB_API_URL"] = fake.base_url
    env["GITHUB_TOKEN"] = fake.token if (fake is not None and token) else ""
    result = CliRunner().invoke(app, args, env=env)
    if fake is not None:
        assert fake.token not in result.output  # the token is never printed
    return result


def push(bundles: list[Path], fake: FakeGitHub, *extra: str):
    return cli(["pr", *map(str, bundles), "--repo", REPO, "--push", "--write-interval", "0", *extra], fake)


def calls(fake: FakeGitHub) -> list[str]:
    return [f"{r.method} {r.path}" for r in fake.requests]


# ---- planning (pure) ---------------------------------------------------------------------------
def test_plan_builds_branch_title_labels_and_body(tmp_path):
    plan = plan_pr(make_bundle(tmp_path / "b"))
    assert plan.branch == f"enablebot/{KEY}"
    assert plan.labels == ["enablebot", "model-code"]
    assert plan.files == [PATH]
    assert plan.title == "[enablebot] jetmoe: remove graph break GB0124 in JetMoeTopKGating.forward"
    body = plan.body
    assert "| graph breaks | 2 | 0 |" in body
    assert "| speedup (eager / compiled) | 1.08x | 1.42x |" in body
    assert "| numerics vs fp64 reference | pass | pass |" in body
    assert "### Verification: passed" in body
    assert "rmse 1.2e-07 <= 2.0 x eager \\| ok" in body  # pipes in details cannot break the table
    assert "```bash\nenablebot run jetmoe --device cpu\n```" in body
    assert "`gpt-5-mini`), the verified one of 2 candidates" in body
    # Untrusted report text cannot ping people or link issues.
    assert "@octocat" not in body and "@\u200bocto" in body
    assert "#123" not in body
    meta = read_meta(body, PR_META)
    assert meta["fix_key"] == KEY and meta["verified"] is True and meta["bundle"]["model_id"] == "jetmoe"
    assert meta["patch_sha256"] == plan.patch_sha256


def test_recipe_bundle_is_not_pr_able(tmp_path):
    with pytest.raises(NotPrAble, match="recipe-only fix .*not PR-able as code"):
        plan_pr(make_bundle(tmp_path / "r", kind="recipe"))


def test_branch_names_are_valid_git_refs():
    assert branch_name("jetmoe:GB0124 @ forward..x.lock") == "enablebot/jetmoe-GB0124-forward.x"
    assert branch_name("a//b/.hidden") == "enablebot/a/b/hidden"


def test_malformed_patch_is_rejected(tmp_path):
    d = make_bundle(tmp_path / "b")
    (d / "patch.diff").write_text("this is not a diff\n")
    with pytest.raises(PatchApplyError):
        plan_pr(d)


# ---- dry run -------------------------------------------------------------------------------------
def test_dry_run_prints_the_plan_and_sends_nothing(tmp_path, fake):
    b = make_bundle(tmp_path / "b")
    res = cli(["pr", str(b), "--repo", REPO], fake)
    assert res.exit_code == 0, res.output
    assert f"branch:  enablebot/{KEY}" in res.output
    assert "labels:  enablebot, model-code" in res.output
    assert "| graph breaks | 2 | 0 |" in res.output
    assert "nothing sent to GitHub" in res.output
    assert fake.requests == []


def test_push_without_token_is_a_usage_error(tmp_path, fake):
    res = cli(["pr", str(make_bundle(tmp_path / "b")), "--repo", REPO, "--push"], fake, token=False)
    assert res.exit_code == 2
    assert "GITHUB_TOKEN is not set" in res.output
    assert fake.requests == []


# ---- opening and updating ----------------------------------------------------------------------------
def test_push_opens_a_pr_with_branch_commit_and_labels(tmp_path, fake):
    b = make_bundle(tmp_path / "b")
    res = push([b], fake)
    assert res.exit_code == 0, res.output
    repo = fake.repos[REPO]
    base_sha = repo.refs["heads/main"]
    branch = f"heads/enablebot/{KEY}"
    assert calls(fake) == [
        f"GET /repos/{REPO}",
        f"GET /repos/{REPO}/pulls",
        f"GET /repos/{REPO}/issues",
        f"GET /repos/{REPO}/git/ref/heads/main",
        f"GET /repos/{REPO}/git/commits/{base_sha}",
        f"GET /repos/{REPO}/contents/{PATH}",
        f"POST /repos/{REPO}/git/blobs",
        f"POST /repos/{REPO}/git/trees",
        f"POST /repos/{REPO}/git/commits",
        f"GET /repos/{REPO}/git/ref/{branch}",
        f"POST /repos/{REPO}/git/refs",
        f"POST /repos/{REPO}/pulls",
        f"POST /repos/{REPO}/issues/1/labels",
    ]
    assert all(r.authorized for r in fake.requests)
    lookup = fake.calls("GET", "/pulls$")[0]
    assert lookup.query == {"state": "all", "head": f"acme:enablebot/{KEY}"}
    assert fake.calls("GET", "/issues$")[0].query == {"state": "open", "labels": "enablebot"}
    assert fake.calls("GET", "/contents/")[0].query == {"ref": base_sha}
    tree = fake.calls("POST", "/git/trees")[0].body
    assert tree["base_tree"] == repo.commits[base_sha]["tree"]
    assert [e["path"] for e in tree["tree"]] == [PATH]
    commit = fake.calls("POST", "/git/commits")[0].body
    assert commit["parents"] == [base_sha]
    assert f"Fix-Key: {KEY}" in commit["message"]
    assert fake.calls("POST", "/git/refs")[0].body["ref"] == f"refs/heads/enablebot/{KEY}"
    created = fake.calls("POST", "/pulls")[0].body
    assert created["head"] == f"enablebot/{KEY}" and created["base"] == "main"
    assert created["title"] == "[enablebot] jetmoe: remove graph break GB0124 in JetMoeTopKGating.forward"
    assert fake.calls("POST", "/labels")[0].body == ["enablebot", "model-code"]

    # The branch holds exactly the patched file on top of the base.
    files = repo.files_at(f"enablebot/{KEY}")
    assert files[PATH] == patched(FIX_V1)
    assert files["README.md"] == "transformers\n"
    (pr,) = repo.pulls()
    assert pr["state"] == "open" and pr["labels"] == ["enablebot", "model-code"]
    assert "opened" in res.output


def test_second_run_updates_the_same_pr_in_place(tmp_path, fake):
    assert push([make_bundle(tmp_path / "b")], fake).exit_code == 0
    repo = fake.repos[REPO]
    # Upstream moves on, and the fix is regenerated with another patch and new figures.
    new_base = repo.commit_files("main", {"README.md": "transformers v2\n"}, "upstream change")
    b = make_bundle(tmp_path / "b", fix_line=FIX_V2, speedup=1.61)
    fake.clear_log()
    res = push([b], fake)
    assert res.exit_code == 0, res.output
    assert not fake.calls("POST", "/pulls$"), "a second PR was opened"
    (update,) = fake.calls("PATCH", "/git/refs/")
    assert update.path == f"/repos/{REPO}/git/refs/heads/enablebot/{KEY}" and update.body["force"] is True
    (edit,) = fake.calls("PATCH", r"/pulls/1$")
    assert "| speedup (eager / compiled) | 1.08x | 1.61x |" in edit.body["body"]
    assert not fake.calls("POST", "/labels")  # labels are already there
    assert len(repo.pulls()) == 1
    files = repo.files_at(f"enablebot/{KEY}")
    assert files[PATH] == patched(FIX_V2)
    assert files["README.md"] == "transformers v2\n"  # rebuilt on the current base
    assert repo.commits[repo.refs[f"heads/enablebot/{KEY}"]]["parents"] == [new_base]
    assert "updated" in res.output

    # Same bundle again: nothing to push, nothing to edit.
    fake.clear_log()
    res = push([b], fake)
    assert res.exit_code == 0, res.output
    assert fake.writes() == []
    assert "unchanged" in res.output


def test_max_open_caps_new_prs_but_not_updates(tmp_path, fake):
    bundles = [make_bundle(tmp_path / f"b{i}", fix_key=f"{KEY}-{i}") for i in range(3)]
    res = push(bundles, fake, "--max-open", "2")
    assert res.exit_code == 0, res.output
    repo = fake.repos[REPO]
    assert len(repo.pulls("open")) == 2
    assert len(fake.calls("POST", "/pulls$")) == 2
    assert "--max-open 2" in res.output
    assert repo.branches() == sorted(["main", f"enablebot/{KEY}-0", f"enablebot/{KEY}-1"])  # no branch for the third

    # At the cap, an existing PR is still updated, and still no new one is opened.
    make_bundle(tmp_path / "b0", fix_key=f"{KEY}-0", fix_line=FIX_V2)
    fake.clear_log()
    res = push(bundles, fake, "--max-open", "2")
    assert res.exit_code == 0, res.output
    assert not fake.calls("POST", "/pulls$") and not fake.calls("POST", "/git/refs$")
    assert len(fake.calls("PATCH", "/git/refs/")) == 1
    assert len(repo.pulls()) == 2


def test_unverified_and_closed_fixes_are_left_alone(tmp_path, fake):
    res = push([make_bundle(tmp_path / "u", passed=False)], fake)
    assert res.exit_code == 0 and "did not pass verification" in res.output
    assert fake.requests == []

    assert push([make_bundle(tmp_path / "b")], fake).exit_code == 0
    repo = fake.repos[REPO]
    repo.items[1]["state"] = "closed"  # a maintainer rejected it
    fake.clear_log()
    res = push([make_bundle(tmp_path / "b", fix_line=FIX_V2)], fake)
    assert res.exit_code == 0
    assert "closed without merging; not reopening" in res.output
    assert fake.writes() == []


# ---- failures: clear messages, nothing half-made -------------------------------------------------------
def test_rate_limit_when_opening_the_pr_deletes_the_new_branch(tmp_path, fake):
    b = make_bundle(tmp_path / "b")
    fake.inject("POST", r"/pulls$", "rate_limit", reset_in_s=1800)
    res = push([b], fake)
    assert res.exit_code == 1
    assert "Traceback" not in res.output
    assert "rate limit reached while trying to open a PR" in res.output
    assert "resets at" in res.output and "retry later" in res.output
    assert "deleted again, so nothing is left half-made" in res.output
    repo = fake.repos[REPO]
    assert fake.calls("POST", "/git/refs$") and fake.calls("DELETE", "/git/refs/")
    assert repo.branches() == ["main"]
    assert repo.pulls() == []

    # Once the limit resets, the same command opens the PR.
    res = push([b], fake)
    assert res.exit_code == 0, res.output
    assert len(repo.pulls("open")) == 1


def test_rate_limit_before_any_write_creates_nothing(tmp_path, fake):
    fake.inject("POST", r"/git/blobs$", "rate_limit")
    res = push([make_bundle(tmp_path / "b")], fake)
    assert res.exit_code == 1 and "rate limit reached" in res.output
    assert fake.repos[REPO].branches() == ["main"]
    assert not fake.calls("POST", "/git/refs$") and not fake.calls("POST", "/pulls$")


def test_permission_error_names_the_missing_permission(tmp_path, fake):
    fake.inject("POST", r"/git/refs$", "forbidden")
    res = push([make_bundle(tmp_path / "b")], fake)
    assert res.exit_code == 1
    assert f"the token lacks permission to push branch enablebot/{KEY} on {REPO}" in res.output
    assert "contents: write" in res.output and "Resource not accessible by integration" in res.output
    assert fake.repos[REPO].branches() == ["main"]


def test_failed_labelling_is_repaired_by_the_next_run(tmp_path, fake):
    b = make_bundle(tmp_path / "b")
    fake.inject("POST", r"/issues/\d+/labels$", "forbidden")
    res = push([b], fake)
    assert res.exit_code == 1 and "issues: write" in res.output
    repo = fake.repos[REPO]
    assert len(repo.pulls()) == 1 and repo.pulls()[0]["labels"] == []
    res = push([b], fake)
    assert res.exit_code == 0, res.output
    assert len(repo.pulls()) == 1 and repo.pulls()[0]["labels"] == ["enablebot", "model-code"]


def test_a_patch_that_no_longer_applies_is_reported(tmp_path, fake):
    repo = fake.repos[REPO]
    repo.commit_files("main", {PATH: MODELING.replace("expert_size.tolist()", "expert_size.cpu().tolist()")}, "up")
    res = push([make_bundle(tmp_path / "b")], fake)
    assert res.exit_code == 1
    assert "the fix no longer applies to acme/transformers at main" in res.output
    assert fake.writes() == []


def test_github_enterprise_base_url_with_path_prefix(tmp_path):
    with FakeGitHub(prefix="/api/v3") as server:
        server.add_repo(REPO, {PATH: MODELING})
        res = push([make_bundle(tmp_path / "b")], server)
        assert res.exit_code == 0, res.output
        assert len(server.repos[REPO].pulls()) == 1


def test_pr_bundle_rebuilds_the_bundle_from_the_branch(tmp_path, fake):
    b = make_bundle(tmp_path / "b")
    assert push([b], fake).exit_code == 0
    out = tmp_path / "from-pr"
    res = cli(["pr-bundle", "--repo", REPO, "--number", "1", "--out", str(out)], fake)
    assert res.exit_code == 0, res.output
    rebuilt = FixBundle.load(out)
    assert rebuilt.fix_key == KEY and rebuilt.model_id == "jetmoe" and rebuilt.files == [PATH]
    assert (out / "patch.diff").read_text() == (b / "patch.diff").read_text()

    fake.repos[REPO].items[2] = dict(fake.repos[REPO].items[1], number=2, body="a human PR")
    res = cli(["pr-bundle", "--repo", REPO, "--number", "2", "--out", str(tmp_path / "x")], fake)
    assert res.exit_code == 2 and "no enablebot metadata" in res.output


def test_leftover_branch_without_a_pr_is_reused(tmp_path, fake):
    repo = fake.repos[REPO]
    repo.refs[f"heads/enablebot/{KEY}"] = repo.refs["heads/main"]  # an interrupted run's leftover
    res = push([make_bundle(tmp_path / "b")], fake)
    assert res.exit_code == 0, res.output
    assert not fake.calls("POST", "/git/refs$")
    assert fake.calls("PATCH", "/git/refs/")[0].body["force"] is True
    assert repo.files_at(f"enablebot/{KEY}")[PATH] == patched(FIX_V1)
    assert len(repo.pulls("open")) == 1


def test_repo_per_target(tmp_path, fake):
    b = make_bundle(tmp_path / "b")
    res = cli(["pr", str(b), "--repo", "dynamo=acme/pytorch"], fake)
    assert res.exit_code == 0 and "no --repo for target 'model-code'" in res.output
    res = cli(["pr", str(b), "--repo", "dynamo=acme/pytorch", "--repo", f"model-code={REPO}"], fake)
    assert res.exit_code == 0 and f"repo:    {REPO}" in res.output
    res = cli(["pr", str(b), "--repo", "not a repo"], fake)
    assert res.exit_code == 2
    res = cli(["pr", str(tmp_path / "missing"), "--repo", REPO], fake)
    assert res.exit_code == 2 and "not a fix bundle" in res.output


def test_a_rejected_token_is_a_clear_error(tmp_path, fake):
    app = typer.Typer()
    pr_commands.register(app)
    env = {"GITHUB_API_URL": fake.base_url, "GITHUB_TOKEN": "ghp_wrong_secret_value"}
    res = CliRunner().invoke(app, ["pr", str(make_bundle(tmp_path / "b")), "--repo", REPO, "--push"], env=env)
    assert res.exit_code == 1
    assert "GitHub rejected the token (401 Bad credentials)" in res.output and "check GITHUB_TOKEN" in res.output
    assert "ghp_wrong_secret_value" not in res.output
    assert [r.authorized for r in fake.requests] == [False]


# ---- chain of custody: pr re-checks what was verified ------------------------------------------
def test_a_bundle_changed_after_verification_is_refused(tmp_path, fake):
    d = make_bundle(tmp_path / "b")
    (d / "patch.diff").write_text(unified(MODELING, patched(FIX_V2)), encoding="utf-8")  # swapped after verify
    with pytest.raises(NotPrAble, match="changed after verification"):
        plan_pr(d)
    result = push([d], fake)
    assert "changed after verification" in result.output
    assert not [c for c in calls(fake) if c.startswith(("POST", "PATCH", "PUT"))]


def test_a_setup_py_bundle_is_refused_even_if_sealed(tmp_path, fake):
    d = make_bundle(tmp_path / "b")
    evil = unified("from setuptools import setup\nsetup()\n", "from setuptools import setup\nimport os\nsetup()\n",
                   path="setup.py")
    (d / "patch.diff").write_text(evil, encoding="utf-8")
    ver = json.loads((d / "verification.json").read_text())
    ver.update(patch_sha256=sha256_text(evil), files=["setup.py"])
    (d / "verification.json").write_text(json.dumps(ver))
    with pytest.raises(NotPrAble, match="path policy.*setup.py"):
        plan_pr(d)
    assert "setup.py" in push([d], fake).output
    assert not [c for c in calls(fake) if c.startswith(("POST", "PATCH", "PUT"))]


def test_unsealed_and_mislabelled_bundles_are_refused(tmp_path):
    d = make_bundle(tmp_path / "unsealed")
    ver = json.loads((d / "verification.json").read_text())
    del ver["patch_sha256"]
    (d / "verification.json").write_text(json.dumps(ver))
    with pytest.raises(NotPrAble, match="no patch_sha256"):
        plan_pr(d)
    d = make_bundle(tmp_path / "target")
    b = FixBundle.load(d)
    b.target = "dynamo"
    b.save(d)
    with pytest.raises(NotPrAble, match="target 'dynamo' does not match"):
        plan_pr(d)
