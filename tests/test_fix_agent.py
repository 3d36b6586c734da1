"""The agent loop through the real `openai` client against a local scripted server, with an
injected verifier (the real one runs models; see test_fix_e2e.py). Also: recipes data,
prompt templates and the localisation context."""

from pathlib import Path

import pytest

from enablebot.fix import prompts
from enablebot.fix.agent import run_agent
from enablebot.fix.bundle import Snapshot
from enablebot.fix.clusters import clusters_of, count_in, select
from enablebot.fix.draft.context import build_context
from enablebot.fix.draft.llm import Budget, LLMClient, Transcript
from enablebot.fix.judge.overlay import load_overlay, locate
from enablebot.fix.judge.patchguard import PatchPolicy
from enablebot.fix.recipes import candidates, hinted_settings, load_recipes
from enablebot.fix.judge.verify import Check, Verification
from enablebot.results import CompileStats, GraphBreak, RunResult, RunSpec, UserFrame, Versions
from enablebot.testing.fake_openai import FakeOpenAI, Reply

FIX = Path(__file__).parent / "fixtures" / "fix"
GOOD = (FIX / "switch_transformers_static_experts.diff").read_text()
BAD_NUMERICS = (FIX / "switch_transformers_drops_routing_weights.diff").read_text()
SWITCH_FILE = "src/transformers/models/switch_transformers/modeling_switch_transformers.py"


def switch_result() -> RunResult:
    """A run of switch_transformers as the runner reports it: GB0036 at the experts' nonzero()."""
    _, installed = locate(SWITCH_FILE)
    lines = installed.read_text().splitlines()
    lineno = next(i for i, ln in enumerate(lines, 1) if "expert_hit = torch.greater" in ln)
    frame = UserFrame(str(installed), lineno, "forward", lines[lineno - 1].strip())
    gb = GraphBreak(gb_type="Dynamic shape operator", registry_id="GB0036",
                    explanation="Operator `aten.nonzero.default`'s output shape depends on input Tensor data.",
                    hints=["Enable tracing of dynamic shape operators with "
                           "`torch._dynamo.config.capture_dynamic_output_shape_ops = True`"],
                    context="aten.nonzero.default", user_frame=frame, stack=[frame], count=9,
                    reason="Dynamic shape operator\n  Explanation: Operator `aten.nonzero.default`'s output shape ...")
    return RunResult(spec=RunSpec(model_id="switch_transformers"), verdict="graph_break",
                     versions=Versions(torch="2.13.0", transformers="5.24.0"), model_type="switch_transformers",
                     model_class="SwitchTransformersForConditionalGeneration", graph_breaks=[gb],
                     stats=CompileStats(graphs=21, graph_breaks=22))


class FakeVerifier:
    """Stands in for the model runs: judges the overlay's patched source like the real checks
    would (the real verifier is exercised end to end in test_fix_e2e.py)."""

    def __init__(self):
        self.calls = []

    def __call__(self, overlay_dir, patch):
        self.calls.append(patch.files)
        src = (Path(overlay_dir) / load_overlay(overlay_dir).files[0].copy).read_text()
        ok = "routing_weights[:, 0]" in src
        ref = clusters_of(switch_result().graph_breaks)[0].ref
        return Verification(passed=ok, model_id="switch_transformers", cluster=ref, spec=RunSpec("switch_transformers"),
                            checks=[Check("cluster_gone", True, "9 -> 0"),
                                    Check("heldout_numerics", ok, "" if ok else "rmse(fp64, compiled)=0.2 > 2.0 * 3.7e-07")],
                            after=Snapshot(graphs=1, graph_breaks=0))


def _agent(server, tmp_path, attempts, **budget):
    result = switch_result()
    cluster = clusters_of(result.graph_breaks)[0]
    ctx = build_context(result, cluster, ["capture_dynamic_output_shape_ops (did not verify)"])
    llm = LLMClient(model="fake-coder", base_url=server.base_url, api_key="sk-local-test-key-123456",
                    backoff_s=0.01, budget=Budget(**budget), transcript=Transcript(tmp_path / "t.jsonl"))
    verifier = FakeVerifier()
    out = run_agent(ctx, llm, PatchPolicy(model_type="switch_transformers"), verifier, attempts=attempts,
                    work_dir=tmp_path / "cands")
    return out, verifier


def test_failures_are_fed_back_until_a_patch_verifies(tmp_path):
    forbidden = GOOD.replace(SWITCH_FILE, "tests/models/switch_transformers/test_modeling_switch_transformers.py")
    stale = GOOD.replace("         expert_mask = selected_experts.permute(2, 1, 0)",
                         "         expert_mask = selected_experts.permute(2, 0, 1)")
    script = ["I think the router should avoid nonzero(); let me know.",  # no diff
              f"```diff\n{forbidden}```",  # forbidden path
              f"```diff\n{stale}```",  # context does not match the installed file
              f"Here:\n```diff\n{BAD_NUMERICS}```",  # removes the break, breaks numerics
              Reply(status=429, retry_after=0), f"```diff\n{GOOD}```\nLoops over experts statically."]
    with FakeOpenAI(script=script) as server:
        out, verifier = _agent(server, tmp_path, attempts=6)
        reqs = server.chat_requests
    assert out.stopped == "verified"
    assert [a.stage for a in out.attempts] == ["extract", "guard", "apply", "verify", "verify"]
    assert [a.ok for a in out.attempts] == [False, False, False, False, True]
    assert out.best is out.attempts[-1] and out.best.files == [SWITCH_FILE]
    assert "range(self.num_experts)" in out.best.diff
    assert len(verifier.calls) == 2  # the guard and the apply step stop bad patches before any run
    # Each retry carries the previous failure; the conversation keeps the earlier turns.
    feedback = [r.body["messages"][-1]["content"] for r in reqs[1:]]
    assert "no unified diff" in feedback[0]
    assert "forbidden" in feedback[1]
    assert "does not apply" in feedback[2] and "hunk 1" in feedback[2]
    assert "heldout_numerics" in feedback[3] and "rmse" in feedback[3]
    assert len(reqs) == 6 and len(reqs[-1].body["messages"]) == 2 + 2 * 4
    # Only the verified candidate's overlay is kept.
    assert sorted(p.name for p in (tmp_path / "cands").iterdir()) == ["attempt-5"]


def test_first_prompt_has_what_is_needed_to_localise(tmp_path):
    with FakeOpenAI(script=["no idea"]) as server:
        _agent(server, tmp_path, attempts=1)
        system, user = server.chat_requests[0].body["messages"]
    assert "torch/_dynamo" in system["content"] and SWITCH_FILE in system["content"]
    text = user["content"]
    for needle in ("GB0036", "Dynamic shape operator", "aten.nonzero.default", "capture_dynamic_output_shape_ops",
                   SWITCH_FILE, "def forward(", "expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()",
                   "torch/_dynamo/utils.py", 'gb_type="Dynamic shape operator"', "21 graphs, 22 graph breaks",
                   "did not verify", "torch 2.13.0"):
        assert needle in text, needle
    assert "$" not in text.replace("$ ", "")  # every placeholder was filled


def test_attempt_cap_and_budget(tmp_path):
    with FakeOpenAI(script=["nothing", "still nothing", "never asked"]) as server:
        out, _ = _agent(server, tmp_path, attempts=2)
        assert out.stopped == "attempts" and out.best is None and len(server.chat_requests) == 2
    with FakeOpenAI(script=[Reply("nothing", usage={"prompt_tokens": 900, "completion_tokens": 200}), "never"]) as server:
        out, _ = _agent(server, tmp_path / "b", attempts=5, max_total_tokens=1000)
        assert out.stopped == "budget" and len(server.chat_requests) == 1
        assert out.prompt_tokens == 900 and out.completion_tokens == 200


def test_unreachable_llm_stops_the_agent(tmp_path):
    with FakeOpenAI(script=[Reply(status=500)] * 6) as server:
        out, _ = _agent(server, tmp_path, attempts=3)
    assert out.stopped == "llm_unavailable" and out.best is None


def test_recipes_data_and_hints():
    recipes = load_recipes()
    assert len({r.id for r in recipes}) == len(recipes)
    gb = GraphBreak(gb_type="Data dependent operator", registry_id="GB0033",
                    hints=["Enable tracing of data-dependent output operators with "
                           "`torch._dynamo.config.capture_scalar_outputs = True`"])
    ids = [r.id for r in candidates(gb)]
    assert ids[0] == "capture_scalar_outputs" and "hint:capture_scalar_outputs" not in ids
    odd = GraphBreak(gb_type="Something new", hints=["set `torch._dynamo.config.some_new_flag = True`"])
    assert [(r.id, r.settings, r.source) for r in candidates(odd)] == [("hint:some_new_flag", {"some_new_flag": True}, "hint")]
    assert hinted_settings(["torch._dynamo.config.allow_rnn = True"]) == {"allow_rnn": True}
    rnn = candidates(GraphBreak(gb_type="Attempted to wrap RNN, GRU, or LSTM", registry_id="GB0014"))
    assert rnn[0].settings == {"allow_rnn": True}
    import torch._dynamo.config as cfg

    for r in recipes:  # every setting exists in the installed torch
        for name in r.settings:
            assert hasattr(cfg, name), (r.id, name)


def test_prompt_templates_are_files_and_fully_rendered():
    result = switch_result()
    ctx = build_context(result, clusters_of(result.graph_breaks)[0])
    values = ctx.prompt_values()
    assert prompts.placeholders("fix_user") <= set(values)
    assert prompts.placeholders("fix_retry") == {"attempt", "stage", "feedback"}
    with pytest.raises(KeyError):
        prompts.render("fix_retry", attempt=1)


def test_cluster_selection_and_matching():
    result = switch_result()
    (cluster,) = clusters_of(result.graph_breaks)
    assert cluster.key == "GB0036@modeling_switch_transformers.py:forward"
    assert select([cluster], "GB0036") == [cluster] and select([cluster], "dynamic shape") == [cluster]
    assert select([cluster], "GB0033") == []
    moved = GraphBreak(gb_type="Dynamic shape operator", registry_id="GB0036", count=2,
                       user_frame=UserFrame("/x/modeling_switch_transformers.py", 999, "forward"))
    assert count_in([moved], cluster.ref) == 2  # a patch that moves lines keeps the cluster identity
