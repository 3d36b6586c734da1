"""End to end on real graph breaks of the installed torch 2.13 / transformers 5.24, through the
CLI, the real runner in child processes, and the real `openai` client against a scripted
OpenAI-compatible server on 127.0.0.1. The scripted answers are patches found to work.

Slow (minutes): run with `pytest -m slow tests/test_fix_e2e.py`.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from enablebot.fix.judge.overlay import locate
from enablebot.testing.fake_openai import FakeOpenAI

pytestmark = pytest.mark.slow

FIX = Path(__file__).parent / "fixtures" / "fix"
SWITCH_GOOD = (FIX / "switch_transformers_static_experts.diff").read_text()
SWITCH_BAD_NUMERICS = (FIX / "switch_transformers_drops_routing_weights.diff").read_text()
SWITCH_SLOW = (FIX / "switch_transformers_static_experts_slow.diff").read_text()
LOGGER = (FIX / "dynamo_reorder_logger_calls.diff").read_text()
SWITCH_FILE = "src/transformers/models/switch_transformers/modeling_switch_transformers.py"
KEY = "sk-e2e-secret-key-0123456789"
FAST = ["--backend", "aot_eager", "--repeats", "5"]  # Dynamo breaks are the same; no C++ compile
WATCHED = [SWITCH_FILE, "torch/_dynamo/variables/misc.py", "src/transformers/models/jetmoe/modeling_jetmoe.py",
           "src/transformers/models/longformer/modeling_longformer.py", "torch/_dynamo/config.py"]


def _hashes() -> dict[str, str]:
    return {p: hashlib.sha256(locate(p)[1].read_bytes()).hexdigest() for p in WATCHED}


INSTALLED = _hashes()


def _cli(*args: str, env: dict | None = None, timeout: float = 2400) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "GITHUB_STEP_SUMMARY"))}
    e.update(env or {})
    e["COLUMNS"] = "200"
    return subprocess.run([sys.executable, "-m", "enablebot.cli", *args], capture_output=True, text=True,
                          env=e, timeout=timeout)


def _bundle(root: Path, model: str) -> Path:
    (bundle,) = [p.parent for p in (root / model).glob("*/bundle.json")]
    return bundle


def _llm_env(server: FakeOpenAI) -> dict:
    return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": KEY}


# --- recipe: jetmoe, capture_scalar_outputs, default torch.compile (inductor) ---------------

@pytest.fixture(scope="module")
def jetmoe_fix(tmp_path_factory):
    out = tmp_path_factory.mktemp("jetmoe")
    proc = _cli("fix", "jetmoe", "--out", str(out), "--cluster", "GB0033", "--repeats", "5")
    return out, proc


def test_recipe_removes_jetmoe_data_dependent_breaks(jetmoe_fix):
    out, proc = jetmoe_fix
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no LLM configured" in proc.stderr
    bdir = _bundle(out, "jetmoe")
    bundle = json.loads((bdir / "bundle.json").read_text())
    ver = json.loads((bdir / "verification.json").read_text())
    print("jetmoe before", bundle["before"], "after", bundle["after"])
    assert bundle["kind"] == "recipe" and bundle["target"] == "config" and bundle["verified"]
    assert bundle["recipe"] == {"capture_scalar_outputs": True}
    assert bundle["cluster"]["registry_id"] == "GB0033" and bundle["cluster"]["filename"] == "modeling_jetmoe.py"
    assert bundle["before"]["cluster_breaks"] > 0 and bundle["before"]["graph_breaks"] > 0
    assert bundle["after"]["cluster_breaks"] == 0 and bundle["after"]["graph_breaks"] == 0
    assert bundle["after"]["graphs"] == 1 and bundle["after"]["verdict"] == "full_graph"
    assert ver["spec"]["backend"] == "inductor"
    checks = {c["name"]: c["passed"] for c in ver["checks"]}
    assert checks["numerics"] and checks["heldout_numerics"] and checks["cluster_gone"] and all(checks.values())
    assert ver["heldout"]["passed"] and ver["heldout_seed"] != ver["spec"]["seed"]
    report = (bdir / "report.md").read_text()
    assert "torch._dynamo.config.capture_scalar_outputs = True" in report and "enablebot run jetmoe" in report
    assert not (bdir / "patch.diff").exists()


def test_verify_passes_on_the_recipe_bundle(jetmoe_fix, tmp_path):
    out, _ = jetmoe_fix
    summary = tmp_path / "summary.md"
    proc = _cli("verify", str(_bundle(out, "jetmoe")), "--json", str(tmp_path / "v.json"),
                env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (entry,) = json.loads((tmp_path / "v.json").read_text())
    assert entry["verification"]["passed"] and entry["verification"]["kind"] == "recipe"
    assert "| pass |" in summary.read_text()
    assert _hashes() == INSTALLED


# --- model-code patch: switch_transformers GB0036 through the agent -------------------------

@pytest.fixture(scope="module")
def switch_fix(tmp_path_factory):
    """The model alone (--no-rewrites), one sample a round: a forbidden path, a patch that breaks
    numerics, then the real fix, each round told why the last one failed."""
    out = tmp_path_factory.mktemp("switch")
    forbidden = "```diff\n" + SWITCH_GOOD.replace(
        SWITCH_FILE, "tests/models/switch_transformers/test_modeling_switch_transformers.py") + "```"
    script = [forbidden, f"```diff\n{SWITCH_BAD_NUMERICS}```", f"Fix:\n```diff\n{SWITCH_GOOD}```"]
    with FakeOpenAI(script=script, api_key=KEY) as server:
        proc = _cli("fix", "switch_transformers", "--out", str(out), "--cluster", "GB0036", "--attempts", "3",
                    "--samples", "1", "--no-rewrites", "--llm-model", "fake-coder", *FAST, env=_llm_env(server))
        requests = server.chat_requests
    return out, proc, requests


def test_agent_patch_to_model_code_is_verified(switch_fix):
    out, proc, requests = switch_fix
    assert proc.returncode == 0, proc.stderr[-3000:]
    bdir = _bundle(out, "switch_transformers")
    bundle = json.loads((bdir / "bundle.json").read_text())
    ver = json.loads((bdir / "verification.json").read_text())
    print("switch before", bundle["before"], "after", bundle["after"])
    assert bundle["verified"] and bundle["kind"] == "patch" and bundle["target"] == "model-code"
    assert bundle["files"] == [SWITCH_FILE] and bundle["attempts"] == 3 and bundle["llm_model"] == "fake-coder"
    assert bundle["fix_source"].startswith("model")
    assert bundle["before"]["cluster_breaks"] > 0 and bundle["after"]["cluster_breaks"] == 0
    assert bundle["after"]["graphs"] < bundle["before"]["graphs"]
    assert all(c["passed"] for c in ver["checks"]) and ver["heldout"]["passed"]
    patch = (bdir / "patch.diff").read_text()
    assert patch.startswith(f"--- a/{SWITCH_FILE}\n+++ b/{SWITCH_FILE}\n") and "range(self.num_experts)" in patch
    assert _hashes() == INSTALLED


def test_bad_candidates_were_rejected_with_feedback(switch_fix):
    out, _, requests = switch_fix
    assert len(requests) == 3
    fed_back = [r.body["messages"][-1]["content"] for r in requests[1:]]
    assert "forbidden" in fed_back[0] and "different approach" in fed_back[0]
    assert "heldout_numerics" in fed_back[1]  # the break was gone, but outputs changed
    report = (_bundle(out, "switch_transformers") / "report.md").read_text()
    assert report.count("| rejected |") == 2 and "| 3 | verify | verified |" in report


def test_a_playbook_rewrite_fixes_switch_without_an_llm(tmp_path):
    """No LLM configured: recipes, then the playbook's rewrites; the dense-experts rewrite
    verifies, and the bundle says where the idea came from."""
    proc = _cli("fix", "switch_transformers", "--out", str(tmp_path), "--cluster", "GB0036", "--no-recipes", *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    bdir = _bundle(tmp_path, "switch_transformers")
    bundle = json.loads((bdir / "bundle.json").read_text())
    assert bundle["verified"] and bundle["fix_source"] == "rewrite:dense-experts" and bundle["llm_model"] is None
    assert bundle["after"]["cluster_breaks"] == 0 and bundle["after"]["graphs"] < bundle["before"]["graphs"]
    assert "Fix idea from: **rewrite:dense-experts**" in (bdir / "report.md").read_text()
    assert _hashes() == INSTALLED


def test_dynamic_shape_recipe_is_reported_as_not_fixing_switch(switch_fix):
    out, _, requests = switch_fix
    report = (_bundle(out, "switch_transformers") / "report.md").read_text()
    row = next(ln for ln in report.splitlines() if ln.startswith("| capture_dynamic_output_shape_ops |"))
    assert "does not fix it" in row and "no_new_breaks" in row and "torch._check" in row
    first_prompt = requests[0].body["messages"][1]["content"]
    assert "capture_dynamic_output_shape_ops (did not verify)" in first_prompt


def test_transcript_has_the_conversation_but_no_secret(switch_fix):
    out, _, _ = switch_fix
    text = (_bundle(out, "switch_transformers") / "transcript.jsonl").read_text()
    records = [json.loads(ln) for ln in text.splitlines()]
    assert [r["kind"] for r in records].count("llm_call") == 3
    assert KEY not in text


def test_verify_passes_the_good_bundle_and_fails_bad_ones(switch_fix, tmp_path):
    out, _, _ = switch_fix
    good = _bundle(out, "switch_transformers")
    summary = tmp_path / "summary.md"
    proc = _cli("verify", str(good), "--backend", "aot_eager", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "| pass |" in summary.read_text()

    bad, slow = tmp_path / "bad-numerics", tmp_path / "slow"
    for d, diff in ((bad, SWITCH_BAD_NUMERICS), (slow, SWITCH_SLOW)):
        shutil.copytree(good, d)
        (d / "patch.diff").write_text(diff)
    proc = _cli("verify", str(bad), str(slow), "--backend", "aot_eager", "--json", str(tmp_path / "v.json"),
                "--summary", str(tmp_path / "bad.md"))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = {Path(e["bundle"]).name: {c["name"]: c["passed"] for c in e["verification"]["checks"]}
           for e in json.loads((tmp_path / "v.json").read_text())}
    assert got["bad-numerics"]["heldout_numerics"] is False and got["bad-numerics"]["cluster_gone"] is True
    assert got["slow"]["speed"] is False and got["slow"]["heldout_numerics"] is True
    assert "**FAIL**" in (tmp_path / "bad.md").read_text()
    assert _hashes() == INSTALLED


# --- torch-side patch: longformer's logger call (GB0291) -----------------------------------

def test_agent_patch_to_torch_dynamo_is_verified(tmp_path):
    with FakeOpenAI(script=[f"```diff\n{LOGGER}```"], api_key=KEY) as server:
        proc = _cli("fix", "longformer", "--out", str(tmp_path), "--cluster", "GB0291", "--attempts", "2",
                    "--llm-model", "fake-coder", *FAST, env=_llm_env(server))
        assert len(server.chat_requests) == 1
    assert proc.returncode == 0, proc.stderr[-3000:]
    bdir = _bundle(tmp_path, "longformer")
    bundle = json.loads((bdir / "bundle.json").read_text())
    ver = json.loads((bdir / "verification.json").read_text())
    print("longformer before", bundle["before"], "after", bundle["after"], "samples",
          [(s["model_id"], s["detail"]) for s in ver["samples"]])
    assert bundle["verified"] and bundle["target"] == "dynamo" and bundle["files"] == ["torch/_dynamo/variables/misc.py"]
    assert bundle["cluster"]["registry_id"] == "GB0291"
    assert bundle["before"]["cluster_breaks"] > 0 and bundle["after"]["cluster_breaks"] == 0
    assert bundle["after"]["graphs"] < bundle["before"]["graphs"]
    assert {s["model_id"] for s in ver["samples"]} == {"gpt2", "bert"} and all(s["passed"] for s in ver["samples"])
    assert all(c["passed"] for c in ver["checks"])
    assert (bdir / "patch.diff").read_text().startswith("--- a/torch/_dynamo/variables/misc.py\n")
    assert _hashes() == INSTALLED
