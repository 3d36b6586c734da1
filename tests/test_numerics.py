"""The numerics judge, on real tensors (the rules of torch._dynamo.utils.same)."""

import torch

from enablebot.measure.numerics import compare, default_tol, outputs_equal


def _fp64_and_fp32(seed=0, n=4096):
    g = torch.Generator().manual_seed(seed)
    ref64 = torch.randn(n, generator=g, dtype=torch.float64)
    return ref64, ref64.float()


def test_identical_outputs_pass_allclose():
    ref64, ref = _fp64_and_fp32()
    n = compare({"logits": ref}, {"logits": ref.clone()}, {"logits": ref64}, tol=1e-3)
    assert n.passed and n.method == "allclose" and n.n_tensors == 1


def test_rmse_rule_accepts_error_comparable_to_eager_and_rejects_larger():
    ref64, ref = _fp64_and_fp32()
    # eager itself is off by ~1e-2 from fp64; compiled as far: passes by the rmse rule
    eager = ref + 1e-2 * torch.randn_like(ref)
    close = ref + 1e-2 * torch.randn_like(ref)
    n = compare({"x": eager}, {"x": close}, {"x": ref64}, tol=1e-3)
    assert n.passed and n.method == "rmse"
    far = ref + 1e-1 * torch.randn_like(ref)
    n = compare({"x": eager}, {"x": far}, {"x": ref64}, tol=1e-3)
    assert not n.passed and n.worst_output == "x" and n.worst_error > 0.05


def test_cosine_fallback_without_fp64_reference():
    _, ref = _fp64_and_fp32()
    assert compare([ref], [ref * 1.01 + 1e-3], None, tol=1e-3).method == "cosine"
    bad = compare([ref], [torch.randn_like(ref)], None, tol=1e-3)
    assert not bad.passed and "cosine" in bad.message


def test_structure_and_integer_mismatch_fail():
    a = {"ids": torch.arange(4), "x": torch.ones(3)}
    assert not compare(a, {"x": torch.ones(3)}, None, tol=1e-3).passed
    assert not compare(a, {"ids": torch.arange(4) + 1, "x": torch.ones(3)}, None, tol=1e-3).passed


def test_nan_in_compiled_only_fails():
    ref64, ref = _fp64_and_fp32()
    res = ref.clone()
    res[3] = float("nan")
    assert not compare(ref, res, ref64, tol=1e-3).passed


def test_default_tolerances_follow_the_harness():
    assert default_tol("eval", "float32") == 1e-3
    assert default_tol("train", "float32") == 1e-2


def test_outputs_equal_is_bitwise():
    x = torch.randn(5)
    assert outputs_equal({"a": x}, {"a": x.clone()})
    assert not outputs_equal({"a": x}, {"a": x + 1e-7})


def test_eager_that_disagrees_with_itself_beyond_tolerance_is_inconclusive_never_pass():
    from enablebot.measure.render import numerics_text
    from enablebot.sweep.reports import accuracy
    from enablebot.results import Numerics, RunResult, RunSpec

    ref64, ref = _fp64_and_fp32()
    again = ref + 0.4 * torch.randn_like(ref)  # vilt: rmse(eager, eager) 0.386
    n = compare({"x": ref}, {"x": ref.clone()}, {"x": ref64}, tol=1e-3, eager_deterministic=False, eager_again={"x": again})
    assert n.status == "inconclusive" and n.passed is False and not n.eager_deterministic
    assert 0.3 < n.eager_self_error < 0.5 and "eager disagrees with itself" in n.message
    r = RunResult(spec=RunSpec(model_id="vilt"), verdict="full_graph", numerics=n)
    text = numerics_text(r)
    assert text.startswith("INCONCLUSIVE") and "pass" not in text.lower()
    assert accuracy(r) == "eager_two_runs_differ"
    # the state survives JSON; results written before `status` existed derive it from `passed`
    assert Numerics.from_dict(n.to_dict()).status == "inconclusive"
    assert Numerics.from_dict({"passed": True, "tol": 1e-3}).status == "pass"
    # eager that differs only within tolerance is still judged: pass
    tiny = ref + 1e-6 * torch.randn_like(ref)
    n = compare({"x": ref}, {"x": ref.clone()}, {"x": ref64}, tol=1e-3, eager_deterministic=False, eager_again={"x": tiny})
    assert n.status == "pass" and n.passed and "within tolerance" in numerics_text(
        RunResult(spec=RunSpec(model_id="x"), verdict="full_graph", numerics=n))
