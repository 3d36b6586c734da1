"""The fix agent's candidate search through the real `openai` client against a local scripted
server, judged by the real guard and overlay with an injected verifier (the real verifier runs
models; see test_fix_e2e.py and tests/test_fix_rewrites.py). Also: recipes data, prompt
templates, the prompt budget, retrieval's leave-one-out and the frame-file policy."""

import json
from pathlib import Path

import pytest

from enablebot.fix.bundle import Snapshot
from enablebot.fix.candidate import Candidate
from enablebot.fix.clusters import clusters_of, count_in, select
from enablebot.fix.draft import prompts
from enablebot.fix.draft.context import Example, Idea, build_context
from enablebot.fix.draft.llm import Budget, LLMClient, Transcript
from enablebot.fix.draft.retrieval import Fix, from_bundles, patch_identity, retrieve
from enablebot.fix.draft.search import SearchOptions, search
from enablebot.fix.judge import gates
from enablebot.fix.judge.overlay import load_overlay, locate
from enablebot.fix.judge.patchguard import PatchPolicy, PatchRejected, check_patch, frame_files
from enablebot.fix.judge.pipeline import make_judge
from enablebot.fix.judge.verify import Check, Verification
from enablebot.fix.recipes import candidates, hinted_settings, load_recipes
from enablebot.results import CompileStats, GraphBreak, RunResult, RunSpec, UserFrame, Versions
from enablebot.testing.fake_openai import FakeOpenAI, Reply

FIX = Path(__file__).parent / "fixtures" / "fix"
GOOD_DIFF = (FIX / "switch_transformers_static_experts.diff").read_text()
SWITCH_FILE = "src/transformers/models/switch_transformers/modeling_switch_transformers.py"
PIXTRAL_FILE = "src/transformers/models/pixtral/modeling_pixtral.py"

# The whole corrected method, as the small model is asked to answer (draft.edits parses it).
GOOD_FN = '''```python
class SwitchTransformersExperts:
    def forward(
        self, hidden_states: torch.Tensor, selected_experts: torch.Tensor, routing_weights: torch.Tensor
    ) -> torch.Tensor:
        final_hidden_states = torch.zeros_like(hidden_states)
        expert_mask = selected_experts.permute(2, 1, 0)
        for expert_idx in range(self.num_experts):
            token_weight = (expert_mask[expert_idx, 0] * routing_weights[:, 0]).to(hidden_states.dtype)
            current_hidden_states = self[f"expert_{expert_idx}"](hidden_states) * token_weight[:, None]
            final_hidden_states = final_hidden_states + current_hidden_states.to(hidden_states.dtype)
        return final_hidden_states
```'''
# Keeps the break and drops the routing weights: applies, the verifier rejects it.
BAD_FN = GOOD_FN.replace(" * token_weight[:, None]", "")
# The is_compiling hack: skip the experts under compile.
HACK_FN = GOOD_FN.replace("        for expert_idx in range(self.num_experts):",
                          "        if torch.compiler.is_compiling():\n            return final_hidden_states\n"
                          "        for expert_idx in range(self.num_experts):")
# A search/replace block whose SEARCH text is in the file twice.
TWICE = f"""{SWITCH_FILE}
```python
<<<<<<< SEARCH
        self.num_experts = config.num_experts
=======
        self.num_experts = int(config.num_experts)
>>>>>>> REPLACE
```"""
# A block for a file outside the policy (the model's tests).
OUTSIDE = TWICE.replace(SWITCH_FILE, "tests/models/switch_transformers/test_modeling_switch_transformers.py")


def switch_result(stack_extra: list[UserFrame] | None = None) -> RunResult:
    """A run of switch_transformers as the runner reports it: GB0036 at the experts' nonzero()."""
    _, installed = locate(SWITCH_FILE)
    lines = installed.read_text().splitlines()
    lineno = next(i for i, ln in enumerate(lines, 1) if "expert_hit = torch.greater" in ln)
    frame = UserFrame(str(installed), lineno, "forward", lines[lineno - 1].strip())
    gb = GraphBreak(gb_type="Dynamic shape operator", registry_id="GB0036",
                    explanation="Operator `aten.nonzero.default`'s output shape depends on input Tensor data.",
                    hints=["Enable tracing of dynamic shape operators with "
                           "`torch._dynamo.config.capture_dynamic_output_shape_ops = True`"],
                    context="aten.nonzero.default", user_frame=frame, stack=[*(stack_extra or []), frame], count=9,
                    reason="Dynamic shape operator\n  Explanation: Operator `aten.nonzero.default`'s output shape ...")
    return RunResult(spec=RunSpec(model_id="switch_transformers"), verdict="graph_break",
                     versions=Versions(torch="2.13.0", transformers="5.24.0"), model_type="switch_transformers",
                     model_class="SwitchTransformersForConditionalGeneration", graph_breaks=[gb],
                     stats=CompileStats(graphs=21, graph_breaks=22))


class FakeVerifier:
    """Stands in for the model runs: the real static gates on the overlay, then a source check
    in place of the numerics the real verifier measures (end to end: test_fix_e2e.py)."""

    def __init__(self):
        self.calls = []

    def __call__(self, overlay_dir, patch):
        self.calls.append(patch.files)
        ov = load_overlay(overlay_dir)
        texts = [(f.upstream, Path(f.installed).read_text(), (Path(overlay_dir) / f.copy).read_text()) for f in ov.files]
        static = gates.static(ov.canonical_diff, texts)
        src = texts[0][2]
        gone = ".nonzero()" not in src
        numerics = "token_weight[:, None]" in src
        checks = [Check(g.name, g.passed, g.detail) for g in static] + [
            Check("cluster_gone", gone, "9 -> 0" if gone else "9 -> 9"),
            Check("heldout_numerics", numerics, "" if numerics else "rmse(fp64, compiled)=0.2 > 2.0 * 3.7e-07")]
        ref = clusters_of(switch_result().graph_breaks)[0].ref
        return Verification(passed=all(c.passed for c in checks), model_id="switch_transformers", cluster=ref,
                            spec=RunSpec("switch_transformers"), checks=checks, after=Snapshot(graphs=1, graph_breaks=0))


def _search(server, tmp_path, *, rounds=2, samples=3, rewrites=(), examples=(), budget=None, **kw):
    result = switch_result()
    cluster = clusters_of(result.graph_breaks)[0]
    ctx = build_context(result, cluster, ["capture_dynamic_output_shape_ops (did not verify)"],
                        ideas=[Idea("dense-experts", "Loop over every expert with a dense mask.", "x[m]", "x * m")],
                        examples=list(examples), **({"budget_chars": budget} if budget else {}))
    llm = LLMClient(model="fake-coder", base_url=server.base_url, api_key="sk-local-test-key-123456",
                    backoff_s=0.01, budget=Budget(**kw), transcript=Transcript(tmp_path / "t.jsonl"))
    verifier = FakeVerifier()
    policy = PatchPolicy(model_type="switch_transformers")
    sources = {SWITCH_FILE: locate(SWITCH_FILE)[1].read_text()}
    res = search(ctx, make_judge(policy, verifier, tmp_path / "cands"), llm=llm, rewrites=list(rewrites),
                 sources=sources, opts=SearchOptions(rounds=rounds, samples=samples))
    return res, verifier, ctx


def test_rounds_of_samples_are_judged_once_and_a_different_approach_is_asked_for(tmp_path):
    script = ["I think the router should avoid nonzero(); let me know.",  # no edit
              TWICE,  # a SEARCH that matches twice: feedback names both places
              OUTSIDE,  # a file outside the policy: the guard refuses it
              BAD_FN,  # applies, the verifier rejects it (numerics)
              BAD_FN,  # identical: never verified twice
              HACK_FN,  # skips the experts under compile: the static gate refuses it
              Reply(status=429, retry_after=0), GOOD_FN,  # a rate limit, retried; then the fix
              GOOD_FN, "no"]  # the round's other samples: a duplicate of the fix, and nothing
    with FakeOpenAI(script=script) as server:
        res, verifier, _ = _search(server, tmp_path, rounds=3, samples=3)
        reqs = server.chat_requests
    assert res.stopped == "verified" and res.best is not None and res.best.n == 7
    assert [c.stage for c in res.candidates] == ["edit", "edit", "edit", "verify", "verify", "verify", "verify",
                                                 "verify", "edit"]
    assert [c.ok for c in res.candidates] == [False] * 6 + [True, True, False]
    assert res.candidates[7].duplicate_of == 7
    assert "no edit" in res.candidates[0].feedback
    assert res.candidates[1].feedback.count("lines ") >= 2  # both places, by line number
    assert "test_modeling_switch_transformers.py" in res.candidates[2].feedback and SWITCH_FILE in res.candidates[2].feedback
    assert res.candidates[4].duplicate_of == 4 and "not judged again" in res.candidates[4].feedback
    assert "compile_guards" in res.candidates[5].feedback
    assert len(verifier.calls) == 3  # BAD once, HACK, GOOD: the guard and the edit step stop the rest
    assert res.best.source == "model+idea:dense-experts" and "range(self.num_experts)" in res.best.diff
    # Round 1's three samples: greedy first, then a temperature with distinct seeds.
    bodies = [r.body for r in reqs]
    assert [b["temperature"] for b in bodies[:3]] == [0.0, 0.8, 0.8]
    assert len({b["seed"] for b in bodies}) == 9  # one seed a sample (the 429 retry repeats its request)
    # Round 2 shows what round 1 tried and why it failed, and asks for something different.
    retry = bodies[3]["messages"][-1]["content"]
    assert "Round 1 was not accepted" in retry and "different approach" in retry
    assert "test_modeling_switch_transformers.py" in retry
    retry3 = bodies[6]["messages"][-1]["content"]  # round 3: round 2's numerics and hack failures
    assert "Round 2 was not accepted" in retry3 and "heldout_numerics" in retry3 and "compile_guards" in retry3
    assert len(bodies[3]["messages"]) == 2  # one user turn: the question, then the failures
    # Only the verified candidate's overlay is kept by the caller; the judge wrote one per distinct patch.
    assert res.applied() == 3


def test_identical_candidates_from_the_judge_side_are_judged_once(tmp_path):
    calls = []

    def verify(overlay_dir, patch):
        calls.append(overlay_dir)
        return FakeVerifier()(overlay_dir, patch)

    judge = make_judge(PatchPolicy(model_type="switch_transformers"), verify, tmp_path)
    a = judge(Candidate(diff=GOOD_DIFF, source="model"))
    b = judge(Candidate(diff=GOOD_DIFF.replace("\n", "  \n"), source="model"))  # trailing blanks: same patch
    assert a.ok and b is a and len(calls) == 1


def test_first_prompt_has_the_break_site_the_ideas_and_the_format(tmp_path):
    with FakeOpenAI(script=["no idea"]) as server:
        _search(server, tmp_path, rounds=1, samples=1)
        system, user = server.chat_requests[0].body["messages"]
    assert SWITCH_FILE in system["content"] and "WHOLE corrected function" in system["content"]
    text = user["content"]
    lineno = switch_result().graph_breaks[0].user_frame.lineno
    for needle in ("GB0036", "Dynamic shape operator", "aten.nonzero.default", "capture_dynamic_output_shape_ops",
                   SWITCH_FILE, "SwitchTransformersExperts.forward",
                   "expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()",
                   f"The break is at line {lineno}: `expert_hit = ", "dense-experts", "Loop over every expert",
                   "torch/_dynamo/", 'gb_type="Dynamic shape operator"', "21 graphs, 22 graph breaks",
                   "did not verify", "torch 2.13.0", "```python"):
        assert needle in text, needle
    assert "$" not in text.replace("$ ", "")  # every placeholder was filled


def test_the_prompt_budget_cuts_retrieved_fixes_then_torch_then_outer_frames():
    outer = UserFrame(str(locate(SWITCH_FILE)[1]), 200, "forward")  # another function of the same file
    result = switch_result(stack_extra=[outer])
    cluster = clusters_of(result.graph_breaks)[0]
    example = Example("other: GB0036", "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n" * 30)
    ctx = build_context(result, cluster, ideas=[Idea("dense-experts", "Loop over every expert.")],
                        examples=[example], budget_chars=100_000)
    full = ctx.prompt()
    assert ctx.cut == [] and "A verified fix of another model" in full and "Where torch raises it" in full
    assert len(ctx.sites) == 2
    order = []
    for budget in (len(full) - 1, 1):
        ctx.budget_chars = budget
        text = ctx.prompt()
        order.append(list(ctx.cut))
    assert order[0] == ["retrieved fix other: GB0036"]
    assert order[1][:3] == ["retrieved fix other: GB0036", "torch source", f"frame {SWITCH_FILE}:{ctx.sites[1].function}"]
    # What is never cut: the break site's own function and the playbook ideas.
    assert "expert_hit = torch.greater" in text and "Loop over every expert" in text


def test_rewrites_come_first_and_a_verified_one_needs_no_llm(tmp_path):
    from enablebot.fix.draft.rewrites import Rewrite

    src = locate(SWITCH_FILE)[1].read_text()
    with FakeOpenAI(script=["never asked"]) as server:
        # One rewrite that verifies: the LLM is never asked.
        from enablebot.fix.draft.edits import apply_edits, parse_reply

        news = apply_edits(parse_reply(GOOD_FN), {SWITCH_FILE: src})
        rw = Rewrite(entry="dense-experts", path=SWITCH_FILE, new_text=news[SWITCH_FILE],
                     function="SwitchTransformersExperts.forward", note="dense mask")
        res, verifier, _ = _search(server, tmp_path, rewrites=[rw])
        assert server.chat_requests == []
    assert res.stopped == "verified" and res.best.source == "rewrite:dense-experts" and res.best.round == 0


def test_budget_and_an_unreachable_llm_stop_the_search(tmp_path):
    with FakeOpenAI(script=[Reply("nothing", usage={"prompt_tokens": 900, "completion_tokens": 200}), "never"]) as server:
        res, _, _ = _search(server, tmp_path / "b", rounds=3, samples=2, max_total_tokens=1000)
        assert res.stopped == "budget" and len(server.chat_requests) == 1
        assert res.prompt_tokens == 900 and res.completion_tokens == 200
    with FakeOpenAI(script=[Reply(status=500)] * 8) as server:
        llm_res, _, _ = _search(server, tmp_path / "c", rounds=2, samples=1)
    assert llm_res.stopped == "llm_unavailable" and llm_res.best is None


def test_retrieval_leaves_out_the_case_its_model_and_its_answer(tmp_path):
    logger = (FIX / "dynamo_reorder_logger_calls.diff").read_text()
    switch = GOOD_DIFF
    history = [Fix("GB0291", "logging.Logger method", "longformer", "longformer-case", logger),
               Fix("GB0291", "logging.Logger method", "led", "led-case", logger),  # the same answer, another model
               Fix("GB0036", "Dynamic shape operator", "switch_transformers", "switch-case", switch)]
    # A logger case sees no logger fix: its siblings share its answer.
    assert retrieve(history, "GB0291", "", exclude_models=["longformer"], exclude_patches=[logger]) == []
    # Without the answer excluded, the sibling's copy would leak it: leave-one-out is by patch too.
    assert [e.label for e in retrieve(history, "GB0291", "", exclude_models=["longformer"])] == ["led: led-case"]
    assert patch_identity(switch) == patch_identity(switch.replace("@@ -171,12 +171,12 @@", "@@ -170,12 +170,12 @@"))
    # Bundles on disk: only verified patch bundles count.
    for name, verified in (("a", True), ("b", False)):
        d = tmp_path / name
        d.mkdir()
        (d / "bundle.json").write_text(json.dumps({"verified": verified, "kind": "patch", "model_id": name,
                                                   "fix_key": name, "cluster": {"gb_type": "x", "registry_id": "GB0036"}}))
        (d / "patch.diff").write_text(switch)
    assert [f.model for f in from_bundles([tmp_path])] == ["a"]


def test_the_policy_allows_the_break_frames_files_and_nothing_else():
    pix = locate(PIXTRAL_FILE)[1]
    borrowed = UserFrame(str(pix), 10, "forward")
    gb = switch_result(stack_extra=[borrowed]).graph_breaks[0]
    files = frame_files([gb])
    assert files == (SWITCH_FILE, PIXTRAL_FILE) or set(files) == {SWITCH_FILE, PIXTRAL_FILE}
    text = pix.read_text().splitlines()
    first = next(i for i, ln in enumerate(text) if ln.strip() and not ln.startswith("#"))
    diff = (f"--- a/{PIXTRAL_FILE}\n+++ b/{PIXTRAL_FILE}\n@@ -{first + 1},1 +{first + 1},2 @@\n {text[first]}\n"
            "+# borrowed file, allowed because the break's stack runs through it\n")
    assert check_patch(diff, PatchPolicy(model_type="mistral3", frame_files=files)).files == [PIXTRAL_FILE]
    with pytest.raises(PatchRejected, match="outside the allowed paths"):
        check_patch(diff, PatchPolicy(model_type="mistral3"))
    # A test file on the stack never becomes allowed.
    tests_frame = UserFrame("/somewhere/transformers/tests/test_x.py", 1, "t")
    assert all("test" not in f for f in frame_files([GraphBreak(gb_type="x", user_frame=tests_frame)]))


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
    assert prompts.placeholders("fix_user") <= {*ctx.values(), "sections"}
    assert prompts.placeholders("fix_retry") == {"round", "tried"}
    with pytest.raises(KeyError):
        prompts.render("fix_retry", round=1)


def test_cluster_selection_and_matching():
    result = switch_result()
    (cluster,) = clusters_of(result.graph_breaks)
    assert cluster.key == "GB0036@modeling_switch_transformers.py:forward"
    assert select([cluster], "GB0036") == [cluster] and select([cluster], "dynamic shape") == [cluster]
    assert select([cluster], "GB0033") == []
    moved = GraphBreak(gb_type="Dynamic shape operator", registry_id="GB0036", count=2,
                       user_frame=UserFrame("/x/modeling_switch_transformers.py", 999, "forward"))
    assert count_in([moved], cluster.ref) == 2  # a patch that moves lines keeps the cluster identity


def test_the_drafting_side_and_the_judge_never_import_each_other():
    """The trust line in the tree: fix/draft/ sees the judge only through the Judge callable it is
    handed (fix/candidate.py); fix/judge/ never imports the drafter."""
    root = Path(__file__).resolve().parents[1] / "enablebot" / "fix"

    def imports(path: Path) -> set[str]:
        import ast

        pkg = "enablebot.fix." + path.parent.name
        out = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)] if node.level else []
                out.add(".".join(base + ([node.module] if node.module else [])))
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
        return out

    for side, other in (("draft", "judge"), ("judge", "draft")):
        files = sorted((root / side).glob("*.py"))
        assert len(files) >= 5
        for f in files:
            bad = [m for m in imports(f) if m.startswith(f"enablebot.fix.{other}")]
            assert not bad, f"{f.name} imports {bad}"


def test_the_break_site_shown_first_is_the_innermost_frame_even_when_the_user_frame_is_a_caller():
    """mistral3's recorded user frame is pixtral's layer (a caller); the break is deeper, in
    output_capturing.py. The prompt's first function and the edit anchor must be the innermost."""
    result = switch_result()
    gb = result.graph_breaks[0]
    caller = UserFrame(str(locate(PIXTRAL_FILE)[1]), 20, "forward")
    gb.stack = [caller, gb.user_frame]  # outermost first, ending at the break
    gb.user_frame = caller
    ctx = build_context(result, clusters_of(result.graph_breaks)[0])
    assert ctx.sites[0].path == SWITCH_FILE and ctx.anchor == (SWITCH_FILE, gb.stack[-1].lineno)
    assert "The break is at line" in ctx.prompt().split(PIXTRAL_FILE)[0]
