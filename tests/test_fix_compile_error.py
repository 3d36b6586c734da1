"""A compile error as a fixable cluster (issue 27): the MoE `_grouped_mm` fake-tensor error that
stopped float32 MoE types from compiling at all in transformers 5.0-5.2 (torch's meta kernel of
`_grouped_mm` takes bfloat16 only; the CPU kernel runs float32).

  - the error becomes a cluster keyed on its type and the frame that calls the op;
  - the playbook's `opaque-grouped-mm` rewrite applies where the pattern is, and nowhere else;
  - the rewritten code compiles whole under real torch.compile (fullgraph) where the original
    raises, and gives the original's values and gradients;
  - the judge (patch guard, static gates) accepts it, and still refuses torch-namespace op
    registrations;
  - the verifier's compile-error branch: fixed only when the candidate's run is one graph and its
    numerics pass (a candidate that changes the numbers, or leaves breaks, is rejected).
The whole `enablebot fix` on the real releases is measured by `enablebot replay --fix-only`
(README, "Time to support")."""

from __future__ import annotations

import ast
import sys
import types

import pytest
import torch

from enablebot.fix import clusters as cl
from enablebot.fix.draft.rewrites import Site, load_playbook, matching_entries, opaque_grouped_mm, propose, rewrite_diff
from enablebot.fix.judge import gates
from enablebot.fix.judge.patchguard import PatchPolicy, check_patch
from enablebot.fix.judge.sideeffects import side_effects
from enablebot.fix.judge.verify import VerifyOptions, verify_candidate
from enablebot.results import CompileStats, ErrorInfo, GraphBreak, Numerics, RunResult, RunSpec, UserFrame, Versions

MOE = "src/transformers/integrations/moe.py"

# The two layouts the releases had: 5.0/5.1 call torch._grouped_mm in `_grouped_linear`; 5.2 has a
# `_grouped_mm` dispatcher (functional.grouped_mm when torch has it, else torch._grouped_mm).
SRC_50 = '''\
from functools import wraps

from ..utils.import_utils import is_torch_available


if is_torch_available():
    import torch


def _batched_linear(input, weight):
    return torch.bmm(input, weight)


def _grouped_linear(input, weight, bias=None, offs=None, is_transposed=False):
    if is_transposed:
        # grouped (num_experts, input_dim, output_dim)
        out = torch._grouped_mm(input, weight, offs=offs)
    else:
        out = torch._grouped_mm(input, weight.transpose(-2, -1), offs=offs)

    if bias is not None:
        out = out + bias

    return out
'''

SRC_52 = '''\
import torch


def _grouped_mm(input, weight, offs=None):
    if hasattr(torch.nn.functional, "grouped_mm"):
        return torch.nn.functional.grouped_mm(input.to(weight.dtype), weight, offs=offs)
    elif hasattr(torch, "_grouped_mm"):
        return torch._grouped_mm(input.to(weight.dtype), weight, offs=offs)
    else:
        raise ImportError("no grouped_mm")


def _grouped_linear(input, weight, bias=None, offs=None, is_transposed=False):
    out = _grouped_mm(input, weight if is_transposed else weight.transpose(-2, -1), offs=offs)
    return out if bias is None else out + bias
'''


def _line(text: str, needle: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


def _message(frames: list[tuple[str, int, str, str]]) -> str:
    """A compile_error's message as Dynamo words it (trimmed)."""
    tail = "".join(f'  File "{f}", line {n}, in {fn}\n    {src}\n' for f, n, fn, src in frames)
    return ("RuntimeError when making fake tensor call\n  Explanation: Dynamo failed to run FX node with fake tensors: "
            "call_function <built-in method _grouped_mm of type object at 0x7f>(...): got RuntimeError('Expected "
            "inputs of BF16 type but got mat_a.dtype=torch.float32 and mat_b.dtype=torch.float32.')\n"
            "  Hint: Your code may result in an error when running in eager.\n\n  Developer debug context: \n\n"
            " For more details about this graph break, please visit: "
            "https://meta-pytorch.github.io/compile-graph-break-site/gb/gb4315.html\n\nfrom user code:\n" + tail)


ENV = "/envs/5.0.0/transformers"
FRAMES = [(f"{ENV}/models/glm4_moe_lite/modeling_glm4_moe_lite.py", 300, "forward",
           "hidden_states = self.experts(hidden_states, topk_indices, topk_weights)"),
          (f"{ENV}/integrations/moe.py", 350, "forward", "return experts_forward(self, *args, **kwargs)"),
          (f"{ENV}/integrations/moe.py", 240, "grouped_mm_experts_forward", "gate_up_out = _grouped_linear("),
          (f"{ENV}/integrations/moe.py", 191, "_grouped_linear",
           "out = torch._grouped_mm(input, weight.transpose(-2, -1), offs=offs)"),
          ("/venv/lib/python3.11/site-packages/torch/nn/functional.py", 7139, "grouped_mm",
           "return torch._grouped_mm(mat_a, mat_b, offs=offs)")]


def _result(verdict: str, *, error: str | None = None, graphs: int | None = None, breaks: list[GraphBreak] | None = None,
            numerics: bool | None = None, spec: RunSpec | None = None) -> RunResult:
    return RunResult(spec=spec or RunSpec(model_id="glm4_moe_lite", timing=False), verdict=verdict,
                     versions=Versions(torch="2.13.0", transformers="5.0.0"), model_type="glm4_moe_lite",
                     graph_breaks=list(breaks or []),
                     stats=CompileStats(graphs=graphs, graph_breaks=sum(b.count for b in breaks or []))
                     if graphs is not None else None,
                     error=ErrorInfo(stage="trace", type="TorchRuntimeError", message=error) if error else None,
                     numerics=Numerics(passed=numerics, tol=1e-3, method="allclose") if numerics is not None else None)


# --- the error as a cluster -----------------------------------------------------------------

def test_a_compile_error_becomes_a_cluster_keyed_on_its_type_and_the_frame_that_calls_the_op():
    r = _result("compile_error", error=_message(FRAMES))
    eb = cl.error_break(r)
    assert eb is not None and eb.registry_id == "GB4315" and eb.gb_type == "RuntimeError when making fake tensor call"
    # the innermost frame outside torch: the library line that calls the op, not the modeling file
    assert (eb.user_frame.function, eb.user_frame.lineno) == ("_grouped_linear", 191)
    assert not any("/torch/" in f.filename for f in eb.stack)
    (c,) = cl.clusters_of(cl.breaks_of(r))
    assert c.key == "GB4315@moe.py:_grouped_linear" and c.ref.kind == "compile_error"
    # a graph break of the same type at the same frame is another cluster, never this one
    twin = GraphBreak(gb_type=eb.gb_type, registry_id="GB4315", user_frame=eb.user_frame)
    assert not cl.matches(twin, c.ref) and cl.matches(eb, c.ref)
    # only a compile error: an eager failure, or an error without the user-code frames, is no cluster
    assert cl.error_break(_result("eager_error", error=_message(FRAMES))) is None
    assert cl.error_break(_result("compile_error", error="RuntimeError: something")) is None


# --- the rewrite ----------------------------------------------------------------------------

def _site(text: str, needle: str, path: str = MOE) -> Site:
    return Site(path=path, text=text, lineno=_line(text, needle), function="?")


@pytest.mark.parametrize("src,needle,calls", [(SRC_50, "weight.transpose(-2, -1), offs=offs)", 2),
                                              (SRC_52, "return torch._grouped_mm(", 2),
                                              (SRC_52, "return torch.nn.functional.grouped_mm(", 2)])
def test_opaque_grouped_mm_routes_every_grouped_mm_call_of_the_function(src, needle, calls):
    edit = opaque_grouped_mm(_site(src, needle))
    assert edit is not None and f"{calls} grouped-mm call(s)" in edit.note
    new = edit.new_text
    ast.parse(new)
    assert new.count("_compilable_grouped_mm(torch.") == calls
    assert '@torch.library.custom_op("transformers::grouped_mm_fallback", mutates_args=())' in new
    # the rest of the file is byte-for-byte: the module's head, and every other function
    old_lines, new_lines = src.splitlines(), new.splitlines()
    head = _line(src, "def _grouped_linear" if src is SRC_50 else "def _grouped_mm") - 1
    assert new_lines[:head] == old_lines[:head]
    assert "def _batched_linear(input, weight):\n    return torch.bmm(input, weight)" in new or src is SRC_52


def test_opaque_grouped_mm_is_not_offered_where_the_pattern_is_absent():
    # a frame without a grouped-mm call at its line (the caller of the failing function)
    assert opaque_grouped_mm(_site(SRC_52, "out = _grouped_mm(input, weight if")) is None
    # torch's own file: the model-side fix only
    assert opaque_grouped_mm(_site(SRC_50, "weight.transpose(-2, -1), offs=offs)",
                                   path="torch/nn/functional.py")) is None
    # already routed (the op is there): nothing to do
    done = opaque_grouped_mm(_site(SRC_50, "weight.transpose(-2, -1), offs=offs)")).new_text
    assert opaque_grouped_mm(_site(done, "out = _compilable_grouped_mm(torch._grouped_mm, input, weight.t")) is None
    # the playbook entry is keyed on the error id and the code: another GB4315 elsewhere gets nothing
    pb = load_playbook()
    elsewhere = [_site(SRC_50, "return torch.bmm(input, weight)")]
    assert not [e for e in matching_entries("RuntimeError when making fake tensor call", "GB4315", elsewhere, pb)
                if e.id == "opaque-grouped-mm"]
    at_call = [_site(SRC_50, "weight.transpose(-2, -1), offs=offs)")]
    assert [r.entry for r in propose("RuntimeError when making fake tensor call", "GB4315", at_call, pb)] == \
        ["opaque-grouped-mm"]
    # and a graph break of another id at the same call is not its key
    assert not propose("Data dependent operator", "GB0033", at_call, pb)


def _module(text: str, ns: str, monkeypatch) -> types.ModuleType:
    """The rewritten file run as a module. transformers >= 5.3 (installed here) registers the same
    op name itself, so the test's copy takes a namespace of its own."""
    text = text.replace("transformers::grouped_mm_fallback", f"{ns}::grouped_mm_fallback") \
        .replace("torch.ops.transformers.", f"torch.ops.{ns}.").replace("from ..utils.import_utils import is_torch_available", "is_torch_available = lambda: True")
    mod = types.ModuleType(f"moe_{ns}")
    monkeypatch.setitem(sys.modules, mod.__name__, mod)  # Dynamo looks a traced function's module up
    exec(compile(text, f"<{ns}>", "exec"), mod.__dict__)
    return mod


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    offs = torch.tensor([3, 3, 7, 10], dtype=torch.int32)  # an empty group too
    x = torch.randn(10, 8, generator=g, requires_grad=True)
    w = torch.randn(4, 6, 8, generator=g, requires_grad=True)  # (experts, out, in): not transposed
    return x, w, offs


def test_the_rewrite_compiles_whole_where_the_original_fails_and_computes_the_same(monkeypatch):
    torch._dynamo.reset()
    old = _module(SRC_50, "eb_test_old", monkeypatch)
    new = _module(opaque_grouped_mm(_site(SRC_50, "weight.transpose(-2, -1), offs=offs)")).new_text, "eb_test_new",
                  monkeypatch)
    x, w, offs = _inputs()
    # the original, as the releases had it: eager runs float32 on CPU, tracing does not
    ref = old._grouped_linear(x, w, offs=offs)
    with pytest.raises(Exception, match="BF16"):
        torch.compile(old._grouped_linear, backend="eager", fullgraph=True)(x, w, offs=offs)
    torch._dynamo.reset()
    out = torch.compile(new._grouped_linear, backend="aot_eager", fullgraph=True)(x, w, offs=offs)
    torch.testing.assert_close(out, ref)
    # gradients through the op's autograd formula equal those of a plain per-group loop
    bounds = [0, *offs.tolist()]
    dense = torch.cat([x[a:b] @ w[i].transpose(-2, -1) for i, (a, b) in enumerate(zip(bounds, bounds[1:]))])
    torch.testing.assert_close(dense, ref)
    gx, gw = torch.autograd.grad(dense.square().sum(), (x, w))
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    nx, nw = torch.autograd.grad(new._grouped_linear(x2, w2, offs=offs).square().sum(), (x2, w2))
    torch.testing.assert_close(nx, gx)
    torch.testing.assert_close(nw, gw)
    # and compiled (AOT autograd traces the backward: the gradient op is opaque too)
    torch._dynamo.reset()
    x3, w3 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    step = torch.compile(lambda a, b: new._grouped_linear(a, b, offs=offs).square().sum(), backend="aot_eager",
                         fullgraph=True)
    cx, cw = torch.autograd.grad(step(x3, w3), (x3, w3))
    torch.testing.assert_close(cx, gx)
    torch.testing.assert_close(cw, gw)
    # bfloat16 keeps grouped_mm itself (eager here: the CPU kernel)
    xb, wb = x.detach().bfloat16(), w.detach().bfloat16()
    torch.testing.assert_close(new._grouped_linear(xb, wb, offs=offs), old._grouped_linear(xb, wb, offs=offs))
    torch._dynamo.reset()


# --- the judge ------------------------------------------------------------------------------

def test_the_judge_accepts_the_rewrite_and_still_refuses_torch_namespace_registrations():
    edit = opaque_grouped_mm(_site(SRC_50, "weight.transpose(-2, -1), offs=offs)"))
    diff = rewrite_diff(types.SimpleNamespace(path=MOE, new_text=edit.new_text), SRC_50)
    checked = check_patch(diff, PatchPolicy(model_type="glm4_moe_lite", frame_files=(MOE,)),
                          read_original=lambda p: SRC_50 if p == MOE else None)
    assert checked.files == [MOE]
    static = {g.name: g for g in gates.static(diff, [(MOE, SRC_50, edit.new_text)])}
    assert all(g.passed for g in static.values()), {n: g.detail for n, g in static.items() if not g.passed}
    # the same registration for one of torch's own ops changes every model: refused by both checks
    for line in ('torch.library.register_autograd("aten::mm", _bwd, setup_context=_ctx)',
                 'torch.library.impl("aten::mm", "cpu")(_fake_mm)',
                 'torch.library.register_fake("prims::add", _f)',
                 # an own-namespace registration whose argument runs code at import
                 'torch.library.register_fake("transformers::x", __import__("os").system("id"))',
                 'torch.library.register_fake("transformers::x", lambda t=print("x"): t)'):
        bad = edit.new_text.replace('torch.library.register_autograd(\n    "transformers::grouped_mm_fallback"',
                                    line + '\ntorch.library.register_autograd(\n    "transformers::grouped_mm_fallback"')
        assert bad != edit.new_text
        bad_diff = rewrite_diff(types.SimpleNamespace(path=MOE, new_text=bad), SRC_50)
        assert not gates.import_effects(bad_diff).passed
        lineno = _line(bad, line.split("(")[0] + '("')
        assert side_effects(MOE, bad, frozenset({lineno}))


class _Runner:
    """The candidate's run as the real runner would report it (the real runs: replay --fix-only)."""

    def __init__(self, after: RunResult):
        self.after, self.specs = after, []

    def __call__(self, spec):
        self.specs.append(spec)
        r = self.after
        r.spec = spec
        return r


@pytest.mark.parametrize("after,passed,failing", [
    (_result("full_graph", graphs=1, numerics=True), True, set()),
    # compiles, but the candidate changed the numbers: rejected
    (_result("full_graph", graphs=1, numerics=False), False, {"numerics"}),
    # compiles, with breaks: not the one graph a break-free model is
    (_result("graph_break", graphs=3, numerics=True,
             breaks=[GraphBreak(gb_type="Data-dependent branching", registry_id="GB0170", count=2,
                                user_frame=UserFrame("/x/models/m/modeling_m.py", 10, "forward"))]), False, {"full_graph"}),
    # the same compile error is still raised
    (_result("compile_error", error=_message(FRAMES)), False, {"runs"}),
])
def test_the_verifier_fixes_a_compile_error_only_with_one_graph_and_passing_numerics(after, passed, failing):
    baseline = _result("compile_error", error=_message(FRAMES))
    (c,) = cl.clusters_of(cl.breaks_of(baseline))
    v = verify_candidate(baseline, c.ref, settings={"some": 1}, runner=_Runner(after),
                         options=VerifyOptions(heldout=False, fail_fast=False))
    assert v.passed is passed
    assert {ch.name for ch in v.failed_checks()} >= failing
    if after.verdict == "compile_error":
        return
    gone = next(ch for ch in v.checks if ch.name == "cluster_gone")
    assert gone.passed and "gone" in gone.detail
