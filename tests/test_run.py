"""`enablebot run` on real tiny transformers models through real torch.compile (CPU)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from enablebot.execute.isolation import run_in_child
from enablebot.model.registry import ArchEntry, Registry
from enablebot.results import RunResult, RunSpec
from enablebot.measure.runner import run_spec

from conftest import ROOT, installed_versions

# Graph breaks depend on the versions; these are what the pinned CI versions give
# (torch 2.13 + transformers 5.24), and what the GPU machine's versions give.
_MOE_BREAKS = {
    "switch_transformers": ("GB0036", "Dynamic shape operator", "modeling_switch_transformers.py", "nonzero"),
    "jetmoe": ("GB0033", "Data dependent operator", "modeling_jetmoe.py", "tolist"),
}
KNOWN_BREAKS = {  # checked on each pinned pair; 5.25 kept both breaks where they were
    ("2.13.0", "5.24.0"): _MOE_BREAKS,
    ("2.13.0", "5.25.0"): _MOE_BREAKS,
}


def expected(model_type):
    table = KNOWN_BREAKS.get(installed_versions())
    if table is None:
        pytest.fail(f"no graph-break expectations recorded for torch/transformers {installed_versions()}: "
                    "add them to KNOWN_BREAKS (README's set-up pins the versions CI uses)")
    return table[model_type]


def spec(model_id, **kw):
    base = dict(model_id=model_id, device="cpu", backend="eager", timing=False, repeats=2, warmup=1)
    base.update(kw)
    return RunSpec(**base)


def test_inductor_run_of_a_full_graph_model():
    r = run_spec(spec("gpt2", backend="inductor", timing=True, repeats=3))
    assert r.verdict == "full_graph", r.error
    assert r.model_class == "GPT2LMHeadModel" and r.modality == "text"
    assert r.fullgraph_ok is True and r.graph_breaks == []
    assert r.stats.graphs == 1 and r.stats.graph_breaks == 0 and r.stats.fallbacks_to_eager == 0
    assert r.numerics.passed and r.numerics.eager_deterministic and r.numerics.n_tensors >= 1
    assert r.timing.repeats == 3 and r.timing.eager_ms > 0 and r.timing.compiled_ms > 0
    assert r.timing.speedup == pytest.approx(r.timing.eager_ms / r.timing.compiled_ms)
    assert r.timing.compile_s > 0
    # the spread is reported, and 3 repeats are too few to trust
    assert r.timing.eager_p10_ms <= r.timing.eager_ms <= r.timing.eager_p90_ms
    assert "few_repeats" in r.timing.flags and r.timing.noise == "noisy" and not r.timing.trustworthy
    assert r.timing.compile_cache in ("warm", "cold", "partial")
    assert r.versions.torch == torch.__version__ and r.versions.transformers
    # the JSON round trip keeps everything
    assert RunResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r


def test_dynamic_shape_operator_break_at_the_router():
    gid, gb_type, filename, src = expected("switch_transformers")
    r = run_spec(spec("switch_transformers"))
    assert r.verdict == "graph_break" and r.fullgraph_ok is False
    b = r.graph_breaks[0]
    assert (b.registry_id, b.gb_type) == (gid, gb_type)
    assert b.user_frame.filename.endswith(filename) and src in b.user_frame.source
    assert b.user_frame.function == "forward" and b.user_frame.lineno > 0
    assert b.hints and "capture_dynamic_output_shape_ops" in " ".join(b.hints)
    assert r.stats.breaks_by_type[gb_type] >= 10 and r.stats.graphs > 10
    # fullgraph=True gets past the nonzero() and fails on the data-dependent loop over its result,
    # asking for torch._check in the model code: recorded as its own finding
    fg = r.fullgraph_error
    assert fg.gb_type and fg.user_frame.filename.endswith(filename)
    assert fg.registry_id == gid or "torch._check" in fg.explanation
    assert r.numerics.passed


def test_data_dependent_break_where_explain_and_fullgraph_disagree():
    gid, gb_type, filename, src = expected("jetmoe")
    r = run_spec(spec("jetmoe"))
    assert r.verdict == "graph_break"
    assert {b.registry_id for b in r.graph_breaks} == {gid}
    b = r.graph_breaks[0]
    assert b.gb_type == gb_type and b.user_frame.filename.endswith(filename) and src in b.user_frame.source
    assert r.stats.breaks_by_type[gb_type] >= 10
    # fullgraph=True captures the .tolist() that the default compile breaks on: both are recorded
    assert r.fullgraph_ok is True and r.explain_fullgraph_disagree is True


_COMPILED: list = []  # graphs the counting backend compiled
_FAIL_NOW = [False]  # set: compiled code raises


@torch._dynamo.register_backend
def enablebot_test_counting(gm, example_inputs):
    """Counts the graphs compiled; its compiled code raises while `_FAIL_NOW[0]` is set."""
    _COMPILED.append(gm)

    def run(*args):
        if _FAIL_NOW[0]:
            raise RuntimeError("compiled code failed while timing")
        return gm(*args)
    return run


def test_timing_reuses_the_traced_code_of_a_breaking_model():
    # The fullgraph check resets Dynamo; before it moved after timing, timing recompiled every
    # graph of a breaking model a second time.
    _COMPILED.clear()
    r = run_spec(spec("switch_transformers", backend="enablebot_test_counting", timing=True, repeats=2))
    assert r.verdict == "graph_break" and r.timing.compiled_ms > 0 and r.error is None
    assert len(_COMPILED) == sum(s.graphs for s in r.steps) == r.stats.graphs > 10
    assert r.fullgraph_ok is False and r.fullgraph_error.gb_type


def test_a_failing_timing_stage_still_gets_the_fullgraph_check(monkeypatch):
    from enablebot.measure import runner

    real = runner.timing.interleaved

    def failing_from_now_on(*args, **kw):  # the real timing, with compiled code that now raises
        _FAIL_NOW[0] = True
        return real(*args, **kw)

    monkeypatch.setattr(runner.timing, "interleaved", failing_from_now_on)
    try:
        r = run_spec(spec("switch_transformers", backend="enablebot_test_counting", timing=True, repeats=2))
    finally:
        _FAIL_NOW[0] = False
    assert r.error.stage == "timing" and "failed while timing" in r.error.message
    assert r.timing.compiled_ms is None and r.numerics.passed
    assert r.verdict == "graph_break" and r.fullgraph_ok is False and r.fullgraph_error.gb_type


@torch._dynamo.register_backend
def enablebot_test_perturb(gm, example_inputs):
    """A backend that really changes results: each float output gets 5% relative noise."""
    def run(*args):
        outs = gm(*args)
        return type(outs)(o + 0.05 * o.abs().mean() * torch.randn_like(o)
                          if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in outs)
    return run


def test_numerics_judge_fails_a_backend_that_perturbs_outputs():
    r = run_spec(spec("gpt2", backend="enablebot_test_perturb"))
    assert r.verdict == "full_graph"
    assert r.numerics.passed is False and r.numerics.method == "rmse"
    assert r.numerics.worst_output == "logits" and r.numerics.worst_error > r.numerics.worst_ref_error * 2


def test_a_model_whose_eager_disagrees_with_itself_gets_inconclusive_numerics(tmp_path):
    from enablebot.sweep.baseline import expected_from
    from enablebot.measure.render import rich_summary
    from rich.console import Console

    reg = Registry.load(ROOT / "model_registry.yaml")
    reg.upsert(ArchEntry.from_dict({**reg.get("gpt2").to_dict(), "hook": "enablebot.testing.faults:nondeterministic"}))
    reg.save(tmp_path / "reg.yaml")
    r = run_spec(spec("gpt2", registry=str(tmp_path / "reg.yaml")))
    assert r.verdict == "full_graph", r.error
    assert r.numerics.status == "inconclusive" and r.numerics.passed is False
    assert r.numerics.eager_self_error > 0.5
    console = Console(record=True, width=200)
    console.print(rich_summary(r))
    line = next(ln for ln in console.export_text().splitlines() if ln.startswith("numerics"))
    assert "INCONCLUSIVE" in line and "pass" not in line.lower()
    assert expected_from(r).numerics_passed is None  # a baseline records no claim either way


def test_train_mode_compares_loss_and_gradients():
    r = run_spec(spec("bert", mode="train", backend="aot_eager"))
    assert r.verdict in ("full_graph", "graph_break"), r.error
    assert r.numerics.passed and r.numerics.n_tensors > 10  # loss + outputs + one grad per parameter
    assert r.numerics.tol == 1e-2


def _fault_registry(tmp_path, hook):
    reg = Registry.load(ROOT / "model_registry.yaml")
    e = reg.get("gpt2")
    reg.upsert(ArchEntry.from_dict({**e.to_dict(), "hook": f"enablebot.testing.faults:{hook}"}))
    path = tmp_path / "registry.yaml"
    reg.save(path)
    return str(path)


def test_child_that_aborts_is_a_crash_with_its_log(tmp_path):
    r = run_in_child(spec("gpt2", registry=_fault_registry(tmp_path, "abort"), timeout_s=120))
    assert r.verdict == "crash" and "SIGABRT" in r.error.message
    assert r.versions.torch  # recorded even though the child died
    assert "building the tiny model" in r.log_tail


def test_child_that_hangs_is_a_timeout(tmp_path):
    r = run_in_child(spec("gpt2", registry=_fault_registry(tmp_path, "hang"), timeout_s=15))
    assert r.verdict == "timeout" and 15 <= r.duration_s < 60
    assert "building the tiny model" in r.log_tail


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "enablebot.cli", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=600)


def test_cli_unknown_model_id_suggests_close_matches():
    p = cli("run", "lama", "--device", "cpu")
    assert p.returncode == 2
    assert "unknown model id 'lama'" in p.stderr and "llama" in p.stderr


@pytest.mark.parametrize("content, message", [
    ("{not json", "malformed config.json"),
    ('{"model_type": "brand_new_arch_2027", "architectures": ["X"]}', "needs a newer transformers"),
    ('{"hidden_size": 8}', "has no 'model_type'"),
    ('{"model_type": "llama", "auto_map": {"AutoModel": "m.Model"}}', "remote code"),
    ('{"model_type": "llama", "num_attention_heads": "four"}', "malformed config"),
])
def test_cli_bad_configs_give_a_clear_error(tmp_path, content, message):
    f = tmp_path / "config.json"
    f.write_text(content)
    p = cli("run", str(f), "--device", "cpu", "--backend", "eager", "--repeats", "1", "--timeout", "120")
    if message == "malformed config":  # detected when the child builds it: still a completed run
        assert p.returncode == 0 and "create_error" in p.stdout
    else:
        assert p.returncode == 2, p.stdout + p.stderr
        assert message in p.stderr


def test_cli_run_from_local_config_writes_json(tmp_path):
    import transformers

    cfg = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=500)
    cfg.save_pretrained(tmp_path / "model")
    out = tmp_path / "r.json"
    p = cli("run", str(tmp_path / "model" / "config.json"), "--device", "cpu", "--backend", "aot_eager",
            "--repeats", "2", "--warmup", "1", "--json", str(out), "--trace", str(tmp_path / "trace"))
    assert p.returncode == 0, p.stderr
    data = json.loads(out.read_text())
    assert data["verdict"] == "full_graph" and data["model_class"] == "LlamaForCausalLM"
    assert data["versions"]["torch"] and data["versions"]["transformers"]
    assert data["timing"]["speedup"] > 0 and data["numerics"]["passed"] is True
    assert "full_graph" in p.stdout and "speedup" in p.stdout
    # --trace keeps torch's structured trace (what tlparse reads) and the JSON points to it
    assert data["trace_dir"] == str(tmp_path / "trace")
    logs = list((tmp_path / "trace").glob("*.log"))
    assert logs and "dynamo_start" in logs[0].read_text()


def test_dynamo_pass_without_the_guard_latency_profile_finds_the_same_breaks(monkeypatch):
    """The Dynamo pass skips Dynamo's metrics-only guard-latency profile (a cache flush per graph):
    the breaks, graphs, ops and recompiles must be what the unchanged compile finds."""
    import contextlib
    import torch._dynamo.guards as guards
    from enablebot.measure import guard_profile

    original = guards.profile_guard_manager
    s = spec("switch_transformers", pass_name="dynamo", numerics=False, fullgraph_check=False)
    skipped = run_spec(s)
    assert guards.profile_guard_manager is original  # restored after the trace
    monkeypatch.setattr(guard_profile, "skipped", lambda: contextlib.nullcontext(False))
    kept = run_spec(s)
    assert skipped.verdict == kept.verdict == "graph_break"
    assert skipped.explain_graphs == kept.explain_graphs > 10
    assert skipped.ops_captured == kept.ops_captured
    assert [(b.registry_id, b.user_frame.lineno, b.count) for b in skipped.graph_breaks] == \
        [(b.registry_id, b.user_frame.lineno, b.count) for b in kept.graph_breaks]
    assert [(st.name, st.graphs, st.recompiles) for st in skipped.steps] == \
        [(st.name, st.graphs, st.recompiles) for st in kept.steps]
