"""The numerics judge, on real tensors (the rules of torch._dynamo.utils.same)."""

import torch

from enablebot.numerics import compare, default_tol, outputs_equal


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
