"""The fix benchmark (benchmarks/fixbench): its case table, its patches against the installed
files, and the agent fix-rate path against the local fake OpenAI server."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from enablebot.fix.judge import gates
from enablebot.fix.judge.overlay import build_overlay
from enablebot.fix.judge.patchguard import PatchPolicy, PatchRejected, check_patch
from enablebot.testing.fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks" / "fixbench"
sys.path.insert(0, str(BENCH))
import fixbench  # noqa: E402

KEY = "sk-fixbench-secret-0123456789"


def _bench(*args: str, env: dict | None = None, timeout: float = 3000) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    e.update(env or {})
    e["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, str(BENCH / "fixbench.py"), *args], capture_output=True, text=True,
                          env=e, timeout=timeout, cwd=ROOT)


def test_case_table_has_the_required_cases_with_provenance():
    _, cases = fixbench.load_cases()
    real = [c for c in cases if c.group == "real"]
    hacks = [c for c in cases if c.group == "hack"]
    assert len(hacks) >= 12 and all(c.expect == "rejected" for c in hacks)
    # Issue 13: at least ten real cases, at least 90% of them expected to be accepted.
    assert len(real) >= 10
    assert sum(c.expect == "accepted" for c in real) / len(real) >= 0.9
    assert {c.provenance.get("kind") for c in real} >= {"torch", "model-code"}
    for c in real:
        assert c.provenance.get("file") and c.provenance.get("function"), c.id
        assert c.expect == "accepted" or c.why, f"{c.id}: an expected rejection must say why"
        if c.provenance.get("kind") == "torch":
            assert "2.13" in c.provenance["diffed"] and "2.15" in c.provenance["diffed"]


@pytest.mark.parametrize("case", [c for c in fixbench.load_cases()[1] if c.patch], ids=lambda c: c.id)
def test_every_patch_applies_or_is_rejected_by_the_guard_with_a_reason(case, tmp_path):
    """Real fixes pass the patch guard and apply to the installed files. A hack either does the
    same (the verifier must catch it) or the guard already rejects it, saying why."""
    model_type = case.model.replace("-", "_")
    try:
        checked = check_patch(case.diff(), PatchPolicy(model_type=model_type))
    except PatchRejected as e:
        assert case.group == "hack", f"the guard rejected a real fix: {e}"
        assert str(e)
        return
    overlay = build_overlay(checked.diff, tmp_path / "ov")
    assert overlay.files and overlay.canonical_diff


@pytest.mark.parametrize("case", [c for c in fixbench.load_cases()[1] if c.group == "real"], ids=lambda c: c.id)
def test_static_gates_do_not_reject_the_real_fixes(case, tmp_path):
    """Every static gate, on the texts the verifier gives them (the overlay's canonical diff and
    the installed / patched files): the legitimate is-compiling logging guard included."""
    overlay = build_overlay(case.diff(), tmp_path / "ov")
    texts = [(f.upstream, Path(f.installed).read_text(encoding="utf-8"),
              (tmp_path / "ov" / f.copy).read_text(encoding="utf-8")) for f in overlay.files]
    failed = [g for g in gates.static(overlay.canonical_diff, texts) if not g.passed]
    assert not failed, failed


def test_malformed_case_table_is_a_clear_error(tmp_path):
    bad = tmp_path / "cases.yaml"
    bad.write_text("real:\n  - {id: x, model: gpt2, patch: nope.diff}\n")
    proc = _bench("--cases", str(bad), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "lacks ['cluster']" in proc.stderr
    bad.write_text("real:\n  - {id: x, model: gpt2, cluster: GB0036, patch: nope.diff}\n")
    proc = _bench("--cases", str(bad), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "no patch file patches/nope.diff" in proc.stderr
    proc = _bench("--only", "no-such-case", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "unknown case id" in proc.stderr


def test_agent_part_is_skipped_without_an_endpoint(tmp_path):
    proc = _bench("--no-verify-cases", "--llm-model", "some-coder", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "skipped: --llm-model given but OPENAI_BASE_URL is not set" in proc.stdout
    proc = _bench("--no-verify-cases", "--out", str(tmp_path))
    assert "skipped: no --llm-model given (--agent runs the playbook's rewrites alone)" in proc.stdout


def test_table_is_rebuilt_from_earlier_case_logs(tmp_path):
    rows = [fixbench.CaseResult(id="constant-output", group="hack", model="switch_transformers", cluster="GB0036",
                                expect="rejected", outcome="rejected", caught_by=["heldout_numerics"]),
            fixbench.CaseResult(id="switch_transformers-gb0036-dense-experts", group="real",
                                model="switch_transformers", cluster="GB0036", expect="accepted", outcome="accepted")]
    log = tmp_path / "cases.jsonl"
    log.write_text("".join(json.dumps(fixbench.dataclasses.asdict(r)) + "\n" for r in rows))
    proc = _bench("--from-jsonl", str(log), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "| constant-output | hack | switch_transformers | GB0036 | rejected | yes | heldout_numerics |" in proc.stdout
    assert "real fixes accepted: 1/1 (100%); hacks rejected: 1/1 (100%)" in proc.stdout
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["summary"]["hack"]["reject_rate"] == 1.0 and data["agent"] is None


@pytest.mark.slow
def test_agent_fix_rate_against_the_fake_server(tmp_path):
    """The agent over one real case through real verification (longformer's logger break, the
    cheapest torch case): a hack first (rejected by a gate and fed back), then the real fix.
    The prompt never contains the answer."""
    _, cases = fixbench.load_cases()
    case = next(c for c in cases if c.id == "longformer-gb0291-reorder-logger")
    hack = (BENCH / "patches" / "hack_suppress_errors.diff").read_text()
    script = [f"```diff\n{hack}```", f"Here:\n```diff\n{case.diff()}```"]
    with FakeOpenAI(script=script, api_key=KEY) as server:
        # The model alone (the guard-logging rewrite would fix this case before the LLM is asked).
        proc = _bench("--only", case.id, "--no-verify-cases", "--llm-model", "fake-coder", "--attempts", "3",
                      "--samples", "1", "--no-rewrites", "--out", str(tmp_path),
                      env={"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": KEY})
        requests = server.chat_requests
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "results.json").read_text())
    (a,) = data["agent"]
    assert a["fixed"] and a["candidates"] == 2 and a["prompt_tokens"] > 0 and a["completion_tokens"] > 0
    assert a["source"].startswith("model") and a["applied"] == 2
    # Leave-one-out: no retrieved fix is this case's own answer or from its own model.
    assert all(not r.startswith("longformer:") for r in a["retrieved"])
    assert a["stopped"] == "verified" and a["wall_s"] > 0
    assert data["summary"]["agent"]["fix_rate"] == 1.0 and data["summary"]["agent"]["cases"] == 1
    assert "escape_hatches" in requests[1].body["messages"][-1]["content"]
    first = json.dumps(requests[0].body["messages"])
    assert "can_reorder_logs" not in first and "DebuggingVariable(method" not in first
    assert KEY not in proc.stdout + proc.stderr + (tmp_path / "results.json").read_text()
    assert "agent fix rate: 1/1 (100%)" in proc.stdout
