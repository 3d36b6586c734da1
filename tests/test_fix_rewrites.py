"""The fix playbook and its rewrites (enablebot.fix.draft.rewrites) on the real installed transformers
sources: each codemod matches its pattern on several models, its output parses, changes only
the target function, and the rewritten code computes what the original did (run on small
tensors, eager and, for the MoE loop, under torch.compile with fullgraph=True)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from enablebot.fix.judge.patchguard import PatchPolicy, check_patch
from enablebot.fix.draft.rewrites import (CODEMODS, PlaybookError, Site, load_playbook, matching_entries, propose,
                                    rewrite_diff)
from enablebot.fix.draft.sites import sites_of
from enablebot.results import GraphBreak

REPO = Path(__file__).resolve().parent.parent
BASELINE = REPO / "results" / "cpu-dynamo-default" / "results.jsonl"


def _site(model: str, needle: str, nth: int = 0) -> tuple[object, Site]:
    mod = importlib.import_module(f"transformers.models.{model}.modeling_{model}")
    text = Path(mod.__file__).read_text(encoding="utf-8")
    lines = [i for i, ln in enumerate(text.splitlines(), 1) if needle in ln]
    assert lines, f"{needle!r} not in the installed modeling_{model}.py"
    return mod, Site(path=f"src/transformers/models/{model}/modeling_{model}.py", text=text, lineno=lines[nth],
                     function="?")


def _func_span(text: str, lineno: int) -> tuple[int, int]:
    best = None
    for n in ast.walk(ast.parse(text)):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno <= lineno <= n.end_lineno:
            if best is None or n.lineno > best.lineno:
                best = n
    first = min([d.lineno for d in best.decorator_list] + [best.lineno])
    return first, best.end_lineno


def _assert_only_function_changed(site: Site, new_text: str) -> None:
    ast.parse(new_text)
    old, new = site.text.splitlines(keepends=True), new_text.splitlines(keepends=True)
    first, last = _func_span(site.text, site.lineno)
    tail = len(old) - last
    assert new[: first - 1] == old[: first - 1], "lines before the function changed"
    assert new[len(new) - tail:] == old[len(old) - tail:], "lines after the function changed"
    assert new != old


def _load(mod, new_text: str, tmp_path: Path, monkeypatch):
    """The rewritten file imported as a sibling module of the original (relative imports work;
    registered for the test's duration, Dynamo looks the module up while tracing)."""
    name = mod.__name__ + "_rewritten"
    path = tmp_path / (mod.__name__.rsplit(".", 1)[1] + "_rewritten.py")
    path.write_text(new_text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def _forward(cls):
    """The class's own forward (under `@use_experts_implementation`'s dispatch wrapper)."""
    return getattr(cls.forward, "__wrapped__", cls.forward)


# --- the playbook ---------------------------------------------------------------------------

def test_playbook_loads_and_every_entry_has_a_source_and_a_known_rewrite():
    book = load_playbook()
    ids = {e.id for e in book}
    assert {"guard-logging", "dense-experts", "check-not-raise", "branch-to-where", "item-tolist-to-tensor-ops",
            "contextvar-get-hoist", "deepcopy", "experts-implementation", "unique-tolist-loop",
            "general-path-when-compiling", "past-tokens-from-mask-length"} <= ids
    for e in book:
        assert e.source.strip() and e.idea.strip() and e.pattern.strip(), e.id
        assert e.gb_ids or e.gb_types, e.id
        assert e.rewrite is None or e.rewrite in CODEMODS, e.id
        assert e.rewrite is not None or e.site_regex, e.id
    # every codemod is reachable from some entry
    assert set(CODEMODS) <= {e.rewrite for e in book}
    text = next(e for e in book if e.id == "dense-experts").prompt_text()
    assert text.startswith("Fix idea `dense-experts`:") and "Before:\n" in text and "After:\n" in text


def test_playbook_refuses_an_unknown_codemod_and_an_entry_without_source(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("entries:\n- {id: x, gb_ids: [GB0001], pattern: p, idea: i, source: s, rewrite: no-such}\n")
    with pytest.raises(PlaybookError, match="no codemod"):
        load_playbook(bad)
    bad.write_text("entries:\n- {id: x, gb_ids: [GB0001], pattern: p, idea: i, rewrite: guard-logging}\n")
    with pytest.raises(PlaybookError, match="source"):
        load_playbook(bad)


# --- guard-logging --------------------------------------------------------------------------

@pytest.mark.parametrize("model", ["longformer", "nemotron_asr_streaming", "voxtral_realtime"])
def test_guard_logging_wraps_only_the_logging_statement(model):
    _, site = _site(model, "logger.warning_once(")
    [rw] = propose("logging.Logger method not supported for non-Logger object", "GB0291", [site], load_playbook())
    assert rw.entry == "guard-logging" and rw.path == site.path
    _assert_only_function_changed(site, rw.new_text)
    old, new = site.text.splitlines(), rw.new_text.splitlines()
    i = site.lineno - 1
    guard = new[i]
    assert guard.strip() in ("if not torch.compiler.is_compiling():", "if not is_torchdynamo_compiling():")
    assert len(guard) - len(guard.lstrip()) == len(old[i]) - len(old[i].lstrip())
    # the call is moved one level in, unchanged; everything else stays
    n = len(new) - len(old) - 1
    assert n == 0
    stmt_end = next(j for j in range(i, len(old)) if old[j].strip() == ")")
    assert new[i + 1: stmt_end + 2] == ["    " + ln for ln in old[i: stmt_end + 1]]
    assert new[stmt_end + 2:] == old[stmt_end + 1:]
    check_patch(rewrite_diff(rw, site.text), PatchPolicy(model_type=model))  # the guard accepts the candidate


def test_guard_logging_refuses_a_compute_line_and_other_break_types():
    mod, site = _site("longformer", "logger.warning_once(")
    compute = Site(site.path, site.text, site.lineno + 3, site.function)  # `if input_ids is not None:` / padding
    assert CODEMODS["guard-logging"](compute) is None
    assert propose("Data dependent operator", "GB0033", [site], load_playbook()) == []
    # a statement that logs AND computes is not purely a logging call
    text = ("import torch\nimport logging\nlogger = logging.getLogger(__name__)\n\ndef f(x):\n"
            "    y = logger.info(x) or x\n    return y\n")
    assert CODEMODS["guard-logging"](Site("src/transformers/models/z/modeling_z.py", text, 6, "f")) is None
    # no torch import, no guard
    text = "import logging\nlogger = logging.getLogger(__name__)\n\ndef f(x):\n    logger.info(x)\n    return x\n"
    assert CODEMODS["guard-logging"](Site("src/transformers/models/z/modeling_z.py", text, 5, "f")) is None


def test_guard_logging_leaves_a_multiline_string_unchanged_or_refuses():
    text = ('import torch\nimport logging\nlogger = logging.getLogger(__name__)\n\ndef f(x):\n'
            '    logger.warning("""first\nsecond""")\n    return x\n')
    assert CODEMODS["guard-logging"](Site("src/transformers/models/z/modeling_z.py", text, 6, "f")) is None


# --- dense-experts --------------------------------------------------------------------------

def _dense(model: str):
    mod, site = _site(model, "expert_hit = ")
    [rw] = propose("Dynamic shape operator", "GB0036", [site], load_playbook())
    assert rw.entry == "dense-experts"
    _assert_only_function_changed(site, rw.new_text)
    first, last = _func_span(rw.new_text, site.lineno)
    body = "\n".join(rw.new_text.splitlines()[first - 1:last])
    assert "nonzero" not in body and "torch.where(expert_mask" not in body and "for expert_idx in range(" in body
    check_patch(rewrite_diff(rw, site.text), PatchPolicy(model_type=model))
    return mod, rw


def test_dense_experts_switch_transformers_same_output_and_one_graph(tmp_path, monkeypatch):
    from transformers import SwitchTransformersConfig

    mod, rw = _dense("switch_transformers")
    assert rw.function == "SwitchTransformersExperts.forward"
    new = _load(mod, rw.new_text, tmp_path, monkeypatch)
    torch.manual_seed(0)
    experts = mod.SwitchTransformersExperts(SwitchTransformersConfig(d_model=16, d_ff=32, num_experts=4)).eval()
    tokens = 10
    h = torch.randn(tokens, 16)
    choice = torch.tensor([0, 0, 2, 2, 2, 0, 1, 1, 0, 2])  # expert 3 gets no token
    selected = torch.nn.functional.one_hot(choice, 4).view(tokens, 1, 4)
    weights = torch.rand(tokens, 1)
    want = experts(h, selected, weights)
    got = _forward(new.SwitchTransformersExperts)(experts, h, selected, weights)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch._dynamo.reset()
    rewritten = _forward(new.SwitchTransformersExperts)
    explained = torch._dynamo.explain(lambda *a: rewritten(experts, *a))(h, selected, weights)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    torch._dynamo.reset()
    before = torch._dynamo.explain(lambda *a: experts(*a))(h, selected, weights)
    assert before.graph_break_count >= 1  # the original does break here: the test can fail


def test_dense_experts_dbrx_top2_fused_weights_same_output(tmp_path, monkeypatch):
    from transformers import DbrxConfig

    mod, rw = _dense("dbrx")
    # dbrx's mask has a sentinel class (num_classes = experts + 1) and no skip in the loop:
    # the static loop must stop before it (there are no weights at that index)
    assert "for expert_idx in range(self.num_experts):" in rw.new_text
    new = _load(mod, rw.new_text, tmp_path, monkeypatch)
    cfg = DbrxConfig(d_model=16, n_heads=2, ffn_config={"ffn_hidden_size": 24, "moe_num_experts": 4, "moe_top_k": 2})
    torch.manual_seed(0)
    experts = mod.DbrxExperts(cfg.ffn_config)
    for p in experts.parameters():
        torch.nn.init.normal_(p, std=0.2)
    idx = torch.tensor([[0, 2], [2, 0], [1, 2], [0, 1], [2, 1]])  # expert 3 unused
    w, h = torch.rand(5, 2), torch.randn(5, 16)
    torch.testing.assert_close(_forward(new.DbrxExperts)(experts, h, idx, w), experts(h, idx, w), rtol=1e-5, atol=1e-5)


def test_dense_experts_openai_privacy_filter_same_output(tmp_path, monkeypatch):
    from transformers import OpenAIPrivacyFilterConfig

    mod, rw = _dense("openai_privacy_filter")
    # span edits: the untouched lines of the loop keep their comments and layout
    assert "            # skip masking index\n" in rw.new_text and "            gate_up = (\n" in rw.new_text
    assert "expert_idx only have 1 element" not in rw.new_text  # the comment of the deleted `e = e[0]`
    new = _load(mod, rw.new_text, tmp_path, monkeypatch)
    cfg = OpenAIPrivacyFilterConfig(hidden_size=16, intermediate_size=24, num_local_experts=4, num_experts_per_tok=2)
    torch.manual_seed(0)
    experts = mod.OpenAIPrivacyFilterExperts(cfg)
    for p in experts.parameters():
        torch.nn.init.normal_(p, std=0.2)
    idx, w, h = torch.tensor([[0, 2], [2, 0], [1, 2]]), torch.rand(3, 2), torch.randn(3, 16)
    want = _forward(mod.OpenAIPrivacyFilterExperts)(experts, h, idx, w)
    torch.testing.assert_close(_forward(new.OpenAIPrivacyFilterExperts)(experts, h, idx, w), want, rtol=1e-5, atol=1e-6)


def test_dense_experts_applies_to_every_installed_copy_of_the_loop():
    """The loop's variations (names, `e = e[0]`, `.squeeze(0)`, a sentinel skip, torch.no_grad
    blocks, token dropout) across the installed modeling files: every copy is rewritten."""
    root = Path(importlib.import_module("transformers").__file__).parent / "models"
    found = done = 0
    for path in sorted(root.glob("*/modeling_*.py")):
        text = path.read_text(encoding="utf-8")
        for i, ln in enumerate(text.splitlines(), 1):
            if "expert_hit = " in ln and ".nonzero()" in ln:
                found += 1
                done += CODEMODS["dense-experts"](Site(f"src/transformers/models/{path.parent.name}/{path.name}",
                                                       text, i, "forward")) is not None
    assert found >= 60 and done == found


def test_dense_experts_refuses_a_loop_it_does_not_understand():
    text = ("import torch\n\ndef f(h, mask, w, experts):\n    out = torch.zeros_like(h)\n"
            "    hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()\n    for e in hit:\n        e = e[0]\n"
            "        pos, tok = torch.where(mask[e])\n        out[tok] += experts[e](h[tok]) * pos[:, None]\n"
            "    return out\n")
    # the top-k position is used outside the routing-weight index: no dense equivalent is built
    assert CODEMODS["dense-experts"](Site("src/transformers/models/z/modeling_z.py", text, 5, "f")) is None


# --- branch-to-where ------------------------------------------------------------------------

@pytest.mark.parametrize("model", ["rt_detr", "d_fine", "mask2former"])
def test_branch_to_where_matches_the_clamp_branch(model):
    _, site = _site(model, "if not torch.isfinite(hidden_states).all():")
    [rw] = propose("Data-dependent branching", "GB0170", [site], load_playbook())
    assert rw.entry == "branch-to-where"
    _assert_only_function_changed(site, rw.new_text)
    assert "hidden_states = torch.where(take_branch, torch.clamp(" in rw.new_text
    check_patch(rewrite_diff(rw, site.text), PatchPolicy(model_type=model))


def test_branch_to_where_rt_detr_layer_same_output_in_train_mode(tmp_path, monkeypatch):
    from transformers import RTDetrConfig

    mod, site = _site("rt_detr", "if not torch.isfinite(hidden_states).all():")
    rw = CODEMODS["branch-to-where"](site)
    new = _load(mod, rw.new_text, tmp_path, monkeypatch)
    cfg = RTDetrConfig(encoder_hidden_dim=16, encoder_ffn_dim=32, encoder_attention_heads=2, dropout=0.0,
                       activation_dropout=0.0)
    torch.manual_seed(0)
    layer = mod.RTDetrEncoderLayer(cfg).train()  # the clamp branch only exists in training
    x = torch.randn(2, 5, 16)
    for inp in (x, x.clone().index_fill_(1, torch.tensor([1]), float("inf"))):  # both sides of the branch
        want = layer(inp, attention_mask=None)
        got = new.RTDetrEncoderLayer.forward(layer, inp, attention_mask=None)
        want, got = (want[0], got[0]) if isinstance(want, tuple) else (want, got)
        torch.testing.assert_close(got, want, equal_nan=True)


def test_branch_to_where_refuses_in_place_bodies_and_python_conditions():
    head = "import torch\n\ndef f(h, n):\n"
    inplace = head + "    if h.isnan().any():\n        h = h.clamp_(0, 1)\n    return h\n"
    assert CODEMODS["branch-to-where"](Site("src/transformers/models/z/modeling_z.py", inplace, 4, "f")) is None
    python = head + "    if n > 3:\n        h = torch.relu(h)\n    return h\n"
    assert CODEMODS["branch-to-where"](Site("src/transformers/models/z/modeling_z.py", python, 4, "f")) is None
    branch_only = head + "    if h.isnan().any():\n        g = torch.relu(h)\n    return g\n"
    assert CODEMODS["branch-to-where"](Site("src/transformers/models/z/modeling_z.py", branch_only, 4, "f")) is None


# --- check-not-raise ------------------------------------------------------------------------

@pytest.mark.parametrize("needle", ["if (audio_lengths == 0).any():",
                                    "if (padding_mask.long().diff(dim=-1) > 0).any():"])
def test_check_not_raise_on_real_validations(needle):
    _, site = _site("apertus1p5", needle)
    [rw] = propose("Data-dependent branching", "GB0170", [site], load_playbook())
    assert rw.entry == "check-not-raise"
    _assert_only_function_changed(site, rw.new_text)
    new_line = rw.new_text.splitlines()[site.lineno - 1].strip()
    assert new_line.startswith("torch_compilable_check(torch.logical_not(")
    assert new_line.endswith("error_type=ValueError)")
    check_patch(rewrite_diff(rw, site.text), PatchPolicy(model_type="apertus1p5"))


def test_check_not_raise_keeps_the_error_in_eager_and_traces_with_capture_scalar_outputs(tmp_path, monkeypatch):
    text = ("import torch\n\n\ndef f(x):\n    if not torch.isfinite(x).all():\n"
            "        raise ValueError('x has inf or nan')\n    return x * 2\n")
    edit = CODEMODS["check-not-raise"](Site("src/transformers/models/z/modeling_z.py", text, 5, "f"))
    assert edit is not None and "torch._check_tensor_all_with(ValueError" in edit.new_text
    ns: dict = {}
    exec(compile(edit.new_text, "<rewritten>", "exec"), ns)
    with pytest.raises(ValueError, match="inf or nan"):
        ns["f"](torch.tensor([1.0, float("inf")]))
    assert torch.equal(ns["f"](torch.ones(2)), torch.full((2,), 2.0))
    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        assert torch._dynamo.explain(ns["f"])(torch.ones(3)).graph_break_count == 0
    # an f-string message over tensors cannot be traced as a closure: without transformers'
    # torch_compilable_check in the file the codemod declines
    fmsg = text.replace("'x has inf or nan'", "f'bad {x}'")
    assert CODEMODS["check-not-raise"](Site("src/transformers/models/z/modeling_z.py", fmsg, 5, "f")) is None


# --- the committed CPU baseline -------------------------------------------------------------

def _baseline_break(model_type: str, registry_id: str) -> dict:
    with BASELINE.open(encoding="utf-8") as fh:
        for ln in fh:
            if f'"model_type":"{model_type}"' not in ln and f'"model_type": "{model_type}"' not in ln:
                continue
            r = json.loads(ln)
            for gb in r.get("graph_breaks") or []:
                if gb.get("registry_id") == registry_id:
                    return gb
    raise AssertionError(f"no {registry_id} break of {model_type} in {BASELINE}")


def _sites(gb: dict) -> list[Site]:
    return sites_of(GraphBreak.from_dict(gb))


def test_baseline_switch_transformers_break_gets_the_dense_rewrite():
    gb = _baseline_break("switch_transformers", "GB0036")
    sites = _sites(gb)
    assert sites and sites[-1].path == "src/transformers/models/switch_transformers/modeling_switch_transformers.py"
    rws = propose(gb["gb_type"], gb["registry_id"], sites, load_playbook())
    assert [r.entry for r in rws] == ["dense-experts"]
    ideas = [e.id for e in matching_entries(gb["gb_type"], gb["registry_id"], sites, load_playbook())]
    assert "dense-experts" in ideas and "guard-logging" not in ideas


def test_baseline_kolibri_unique_tolist_break_gets_an_idea_but_no_rewrite():
    gb = _baseline_break("kolibri1_1", "GB0036")
    sites = _sites(gb)
    assert propose(gb["gb_type"], gb["registry_id"], sites, load_playbook()) == []
    ideas = [e.id for e in matching_entries(gb["gb_type"], gb["registry_id"], sites, load_playbook())]
    assert ideas == ["unique-tolist-loop"]


@pytest.mark.parametrize("model,needle,gb", [
    ("switch_transformers", "expert_hit = ", ("Dynamic shape operator", "GB0036")),
    ("led", "logger.warning_once(", ("logging.Logger method", "GB0291"))])
def test_rewrite_diff_applies_in_an_overlay_to_the_rewritten_text(model, needle, gb, tmp_path):
    from enablebot.fix.judge.overlay import build_overlay

    _, site = _site(model, needle)
    [rw] = propose(gb[0], gb[1], [site], load_playbook())
    overlay = build_overlay(check_patch(rewrite_diff(rw, site.text), PatchPolicy(model_type=model)).diff, tmp_path)
    [f] = overlay.files
    assert f.upstream == site.path
    assert (tmp_path / f.copy).read_text(encoding="utf-8") == rw.new_text


def test_baseline_contextvar_break_innermost_site_is_the_get_not_the_user_frame():
    """mistral3's GB0156: the recorded user frame is a caller (pixtral's attention call); the
    innermost frame of the stack is the ContextVar.get() the idea is about."""
    gb = _baseline_break("mistral3", "GB0156")
    sites = _sites(gb)
    assert sites[-1].path == "src/transformers/utils/output_capturing.py" and sites[-1].function == "get"
    ideas = [e.id for e in matching_entries(gb["gb_type"], gb["registry_id"], sites, load_playbook())]
    assert ideas == ["contextvar-get-hoist"]
    assert propose(gb["gb_type"], gb["registry_id"], sites, load_playbook()) == []


def test_experts_implementation_idea_only_for_the_standard_layout_without_the_decorator():
    book = load_playbook()
    # mixtral's class has the layout and the decorator; dbrx has fused w1/v1/w2; switch a ModuleDict
    for model in ("mixtral", "dbrx", "switch_transformers", "openai_privacy_filter"):
        _, site = _site(model, "expert_hit = ")
        ids = [e.id for e in matching_entries("Dynamic shape operator", "GB0036", [site], book)]
        assert "dense-experts" in ids and "experts-implementation" not in ids, model
    # the same class without its decorator is what the idea is for
    _, site = _site("mixtral", "expert_hit = ")
    text = site.text.replace("@use_experts_implementation\nclass MixtralExperts", "class MixtralExperts")
    assert text != site.text
    undecorated = Site(site.path, text, site.lineno - 1, site.function)
    ids = [e.id for e in matching_entries("Dynamic shape operator", "GB0036", [undecorated], book)]
    assert "experts-implementation" in ids


def test_idea_entries_tell_a_numpy_draw_from_a_tensor_item():
    book = load_playbook()
    _, site = _site("wav2vec2", "epsilon = np.random.rand(1).item()")
    ideas = [e.id for e in matching_entries("Data dependent operator", "GB0033", [site], book)]
    assert ideas == ["numpy-random-in-forward"]
    _, site = _site("wav2vec2", "attention_mask.detach().sum(-1).tolist()")
    ideas = [e.id for e in matching_entries("Data dependent operator", "GB0033", [site], book)]
    assert ideas == ["item-tolist-to-tensor-ops"]


# --- general-path-when-compiling --------------------------------------------------------------

_SHORTCUT = '''import torch


def recurrent_mask(attention_mask, has_cache):
    """Left padding zeroes the recurrent state; no need when nothing is padded."""
    mask = attention_mask
    if has_cache or (
        attention_mask is not None and torch.all(attention_mask == 1)
    ):
        mask = None
    return mask


def mix(h, attention_mask, has_cache=False):
    mask = recurrent_mask(attention_mask, has_cache)
    if mask is not None:
        h = h * mask[:, :, None]
    return torch.cumsum(h, dim=1)
'''


def test_general_path_when_compiling_keeps_the_mask_under_compile_and_the_shortcut_in_eager():
    site = Site("src/transformers/models/z/modeling_z.py", _SHORTCUT, 9, "recurrent_mask")
    [rw] = propose("Data-dependent branching", "GB0170", [site], load_playbook())
    assert rw.entry == "general-path-when-compiling"
    _assert_only_function_changed(site, rw.new_text)
    assert "not torch.compiler.is_compiling() and torch.all(attention_mask == 1)" in rw.new_text
    assert "has_cache or" in rw.new_text  # the Python part of the condition is left as it was
    check_patch(rewrite_diff(rw, site.text), PatchPolicy(model_type="z"))
    old_ns, new_ns = {}, {}
    exec(compile(_SHORTCUT, "old.py", "exec"), old_ns)
    exec(compile(rw.new_text, "new.py", "exec"), new_ns)
    h = torch.randn(2, 6, 4)
    padded = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    ones = torch.ones(2, 6, dtype=torch.long)
    torch._dynamo.reset()
    with pytest.raises(Exception):  # the original breaks on the tensor test
        torch.compile(old_ns["mix"], backend="eager", fullgraph=True)(h, ones)
    torch._dynamo.reset()
    compiled = torch.compile(new_ns["mix"], backend="eager", fullgraph=True)
    for m in (padded, ones):  # one graph for padded and unpadded batches, the eager numbers
        torch.testing.assert_close(compiled(h, m), old_ns["mix"](h, m))
        torch.testing.assert_close(new_ns["mix"](h, m), old_ns["mix"](h, m))
    assert new_ns["recurrent_mask"](ones, False) is None  # eager keeps the shortcut


def test_general_path_when_compiling_refuses_what_is_not_a_shortcut():
    head = "import torch\n\ndef f(m, h):\n    g = m\n"
    computes = head + "    if torch.all(m == 1):\n        g = h * 2\n    return g\n"
    assert CODEMODS["general-path-when-compiling"](Site("src/transformers/models/z/modeling_z.py", computes, 5, "f")) is None
    negated = head + "    if not (m is not None and torch.all(m == 1)):\n        g = None\n    return g\n"
    assert CODEMODS["general-path-when-compiling"](Site("src/transformers/models/z/modeling_z.py", negated, 5, "f")) is None
    python = head + "    if h > 3:\n        g = None\n    return g\n"
    assert CODEMODS["general-path-when-compiling"](Site("src/transformers/models/z/modeling_z.py", python, 5, "f")) is None


# --- past-tokens-from-mask-length -------------------------------------------------------------

# The recurrent layers' padding-mask helper as transformers 5.2-5.3 wrote it (qwen3_5, olmo_hybrid:
# `_update_linear_attn_mask`; nemotron_h: `_update_mamba_mask` with `cache_position is not None and`),
# with a consumer that multiplies the mask in as `apply_mask_to_padding_states` does and a recurrent
# state carried from the prefill to a decode step.
_RECURRENT = '''import torch


def apply_mask_to_padding_states(hidden_states, attention_mask):
    if attention_mask is not None and attention_mask.shape[1] > 1 and attention_mask.shape[0] > 1:
        hidden_states = (hidden_states * attention_mask[:, :, None]).to(hidden_states.dtype)
    return hidden_states


def update_linear_attn_mask(attention_mask, cache_position):
    """No need for zeroing states when 1. cached forward 2. attending to all inputs."""
    linear_attn_mask = attention_mask
    if cache_position[0] > 0 or (attention_mask is not None and torch.all(attention_mask == 1)):
        linear_attn_mask = None
    return linear_attn_mask


def layer(h, attention_mask, cache_position, state):
    mask = update_linear_attn_mask(attention_mask, cache_position)
    h = apply_mask_to_padding_states(h, mask)
    out = torch.cumsum(torch.cat([state, h], dim=1), dim=1)[:, 1:]
    return out, out[:, -1:]
'''


def _recurrent_site(text: str = _RECURRENT) -> Site:
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.lstrip().startswith("if ") and "> " in ln
                and "attention_mask.shape" not in ln)
    return Site("src/transformers/models/z/modeling_z.py", text, line, "update_linear_attn_mask")


def test_past_tokens_from_mask_length_compiles_prefill_padded_and_decode_to_the_eager_numbers():
    site = _recurrent_site()
    [rw] = propose("generic_jump TensorVariable()", None, [site], load_playbook())
    assert rw.entry == "past-tokens-from-mask-length"  # general-path-when-compiling defers to it here
    _assert_only_function_changed(site, rw.new_text)
    assert "attention_mask.shape[-1] > cache_position.shape[0]" in rw.new_text
    assert "not torch.compiler.is_compiling() and torch.all(attention_mask == 1)" in rw.new_text
    assert "cache_position[0]" not in rw.new_text
    check_patch(rewrite_diff(rw, site.text), PatchPolicy(model_type="z"))
    old_ns, new_ns = {}, {}
    exec(compile(_RECURRENT, "old.py", "exec"), old_ns)
    exec(compile(rw.new_text, "new.py", "exec"), new_ns)
    torch.manual_seed(0)
    padded = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    ones = torch.ones(2, 6, dtype=torch.long)
    torch._dynamo.reset()
    with pytest.raises(Exception):  # the original breaks on `cache_position[0] > 0`
        torch.compile(old_ns["layer"], backend="eager", fullgraph=True)(
            torch.randn(2, 6, 4), ones, torch.arange(6), torch.zeros(2, 1, 4))
    torch._dynamo.reset()
    compiled = torch.compile(new_ns["layer"], backend="eager", fullgraph=True)
    for mask in (padded, ones, None):
        h, step = torch.randn(2, 6, 4), torch.randn(2, 1, 4)
        zero = torch.zeros(2, 1, 4)
        ref, ref_state = old_ns["layer"](h, mask, torch.arange(6), zero)  # prefill, eager original
        got, got_state = compiled(h, mask, torch.arange(6), zero)
        torch.testing.assert_close(got, ref)
        # the decode step: the mask spans the 6 cached tokens and the new one
        dmask = None if mask is None else torch.cat([mask, torch.ones(2, 1, dtype=mask.dtype)], dim=1)
        ref_d, _ = old_ns["layer"](step, dmask, torch.tensor([6]), ref_state)
        got_d, _ = compiled(step, dmask, torch.tensor([6]), got_state)
        assert got_d.shape == ref_d.shape == (2, 1, 4)
        torch.testing.assert_close(got_d, ref_d)
        torch.testing.assert_close(new_ns["layer"](step, dmask, torch.tensor([6]), ref_state)[0], ref_d)
    # eager keeps both shortcuts: no mask while decoding, none for an all-ones batch
    assert new_ns["update_linear_attn_mask"](ones, torch.arange(6)) is None
    assert new_ns["update_linear_attn_mask"](torch.cat([padded, torch.ones(2, 1, dtype=torch.long)], 1),
                                             torch.tensor([6])) is None
    assert new_ns["update_linear_attn_mask"](padded, torch.arange(6)) is padded


def test_past_tokens_from_mask_length_reads_the_multiline_guarded_form():
    text = _RECURRENT.replace(
        "    if cache_position[0] > 0 or (attention_mask is not None and torch.all(attention_mask == 1)):\n",
        "    if (cache_position is not None and cache_position[0] > 0) or (\n"
        "        attention_mask is not None and torch.all(attention_mask == 1)\n"
        "    ):\n")
    first = next(i for i, ln in enumerate(text.splitlines(), 1) if "cache_position[0] > 0" in ln)
    for line in (first, first + 1):  # the break at either line of the test
        site = Site("src/transformers/models/z/modeling_z.py", text, line, "update_linear_attn_mask")
        [rw] = propose("Data-dependent branching", "GB0170", [site], load_playbook())
        assert rw.entry == "past-tokens-from-mask-length"
        assert "cache_position is not None and (attention_mask is not None and attention_mask.shape[-1] > " \
               "cache_position.shape[0])" in rw.new_text
        ns = {}
        exec(compile(rw.new_text, "new.py", "exec"), ns)
        assert ns["update_linear_attn_mask"](torch.ones(2, 3), None) is None
        m = torch.tensor([[0.0, 1, 1]])
        assert ns["update_linear_attn_mask"](m, None) is m


def test_past_tokens_from_mask_length_refuses_where_the_shape_test_could_change_the_result():
    mod = CODEMODS["past-tokens-from-mask-length"]
    swap = lambda old, new: _RECURRENT.replace(old, new)  # noqa: E731
    cases = {
        # the dropped name is not the mask: with no mask the branch would drop something real
        "not the mask": swap("    linear_attn_mask = attention_mask\n", "    linear_attn_mask = cache_position\n"),
        # the mask is rebound before the test
        "mask rebound": swap("    linear_attn_mask = attention_mask\n",
                             "    linear_attn_mask = attention_mask\n    attention_mask = attention_mask[:, -1:]\n"),
        # the body computes instead of dropping
        "computes": swap("        linear_attn_mask = None\n", "        linear_attn_mask = attention_mask * 2\n"),
        # another position than the first, another threshold: not "are tokens cached"
        "index 1": swap("cache_position[0] > 0", "cache_position[1] > 0"),
        "threshold": swap("cache_position[0] > 0", "cache_position[0] > 4"),
        # the position is not a parameter
        "local": swap("    linear_attn_mask = attention_mask\n",
                      "    linear_attn_mask = attention_mask\n    pos = cache_position + 1\n").replace(
            "cache_position[0] > 0", "pos[0] > 0"),
        # bound twice: which value the body drops depends on the path
        "bound twice": swap("    linear_attn_mask = attention_mask\n",
                            "    linear_attn_mask = None\n    linear_attn_mask = attention_mask\n"),
    }
    for why, text in cases.items():
        assert text != _RECURRENT, why
        assert mod(_recurrent_site(text)) is None, why
    # without the position test it is not this pattern: the general-path rewrite takes the all-ones part
    text = swap("cache_position[0] > 0 or ", "")
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "torch.all(attention_mask == 1)" in ln)
    site = Site("src/transformers/models/z/modeling_z.py", text, line, "update_linear_attn_mask")
    assert mod(site) is None
    assert [r.entry for r in propose("Data-dependent branching", "GB0170", [site], load_playbook())] == \
        ["general-path-when-compiling"]


def test_keeping_the_mask_while_decoding_would_change_the_result():
    """Why the position test is read from shapes and not dropped under compile like the all-ones test:
    the general path while decoding multiplies a [B, 1, H] step by the [B, past + 1] mask."""
    ns = {}
    exec(compile(_RECURRENT, "old.py", "exec"), ns)
    dmask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    step = torch.randn(2, 1, 4)
    assert ns["apply_mask_to_padding_states"](step, dmask).shape == (2, 3, 4)  # not the step's shape
    assert ns["update_linear_attn_mask"](dmask, torch.tensor([2])) is None  # the original drops it


# --- dense-segment-loop -----------------------------------------------------------------------

_SEGMENTS = '''import torch
from torch import nn


class Experts(nn.ModuleList):
    def __init__(self, n, d):
        super().__init__()
        for _ in range(n):
            self.append(nn.Sequential(nn.Linear(d, 2 * d), nn.SiLU(), nn.Linear(2 * d, d)))

    def forward(self, hidden, selected, weights):
        flat = hidden.view(-1, hidden.shape[-1])
        top_k = selected.shape[-1]
        token_indices = torch.arange(flat.shape[0]).repeat_interleave(top_k)
        expert_indices = selected.reshape(-1)
        weights = weights.reshape(-1)
        sorting = torch.argsort(expert_indices, stable=True)
        token_indices, expert_indices, weights = token_indices[sorting], expert_indices[sorting], weights[sorting]
        dispatched = flat.index_select(0, token_indices)
        expert_outputs = torch.zeros_like(dispatched)

        unique_experts, counts = torch.unique_consecutive(expert_indices, return_counts=True)
        start = 0
        for expert_id, count in zip(unique_experts.tolist(), counts.tolist()):
            if count == 0:
                continue
            end = start + count
            expert_input = dispatched[start:end]
            expert_output = self[expert_id](expert_input)
            expert_outputs[start:end] = expert_output
            start = end

        weighted = expert_outputs * weights.unsqueeze(-1)
        out = torch.zeros_like(flat)
        out.scatter_add_(0, token_indices.unsqueeze(-1).expand_as(weighted), weighted)
        return out.view(hidden.shape)
'''


def _segments_site(text: str = _SEGMENTS) -> Site:
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "torch.unique_consecutive" in ln)
    return Site("src/transformers/models/z/modeling_z.py", text, line, "Experts.forward")


def test_dense_segment_loop_compiles_to_one_graph_with_the_eager_numbers():
    site = _segments_site()
    rws = propose("Dynamic shape operator", "GB0036", [site], load_playbook())
    assert [r.entry for r in rws] == ["dense-segment-loop"]
    rw = rws[0]
    _assert_only_function_changed(site, rw.new_text)
    assert "unique_consecutive" not in rw.new_text and "for expert_id in range(len(self)):" in rw.new_text
    check_patch(rewrite_diff(rw, site.text), PatchPolicy(model_type="z"))
    old_ns, new_ns = {}, {}
    exec(compile(_SEGMENTS, "old.py", "exec"), old_ns)
    exec(compile(rw.new_text, "new.py", "exec"), new_ns)
    torch.manual_seed(0)
    old = old_ns["Experts"](4, 8)
    new = new_ns["Experts"](4, 8)
    new.load_state_dict(old.state_dict())
    hidden = torch.randn(2, 5, 8)
    selected = torch.tensor([[[0, 2], [2, 1], [0, 1], [2, 0], [1, 2]], [[2, 1], [0, 2], [2, 0], [1, 0], [2, 1]]])  # expert 3 unused
    weights = torch.rand(2, 5, 2)
    ref = old(hidden, selected, weights)
    torch._dynamo.reset()
    with pytest.raises(Exception):
        torch.compile(old, backend="eager", fullgraph=True)(hidden, selected, weights)
    torch._dynamo.reset()
    got = torch.compile(new, backend="eager", fullgraph=True)(hidden, selected, weights)
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(new(hidden, selected, weights), ref)


def test_dense_segment_loop_refuses_loops_it_cannot_make_static():
    mod = CODEMODS["dense-segment-loop"]
    cases = {
        # the run's rows go in whole, not sliced: not a per-run module call
        "unsliced": _SEGMENTS.replace("expert_output = self[expert_id](expert_input)",
                                      "expert_output = self[expert_id](dispatched)"),
        # the count is read after the loop
        "read after": _SEGMENTS.replace("        weighted = expert_outputs", "        print(count)\n        weighted = expert_outputs"),
        # the body does more than the run
        "extra work": _SEGMENTS.replace("            start = end\n", "            dispatched = dispatched * 2\n            start = end\n"),
        # counts of another tensor
        "no counts": _SEGMENTS.replace(", return_counts=True", ", return_inverse=True"),
    }
    for why, text in cases.items():
        assert text != _SEGMENTS, why
        assert mod(_segments_site(text)) is None, why


# --- draw-only-when-enabled (LayerDrop drawn as a tensor) ---------------------------------------

_LAYERDROP_FORMS = {
    # lasr / omniasr: the draw under `if self.training:`
    "nested": ("            to_drop = False\n            if self.training:\n"
               "                dropout_probability = torch.rand([])\n"
               "                if dropout_probability < self.layerdrop:  # skip the layer\n"
               "                    to_drop = True\n            if not to_drop:\n",
               "if dropout_probability < self.layerdrop", "if self.training and self.layerdrop > 0.0:\n"),
    # hubert / wav2vec2: drawn every layer, the flag a conjunction
    "flag": ("            dropout_probability = torch.rand([])\n"
             "            to_drop = self.training and dropout_probability < self.config.layerdrop\n"
             "            if not to_drop:\n",
             "if not to_drop", "self.training and self.config.layerdrop > 0.0 and dropout_probability"),
    # audioflamingo3: one expression
    "inline": ("            to_drop = self.training and torch.rand([]) < self.layerdrop\n            if not to_drop:\n",
               "if not to_drop", "self.training and self.layerdrop > 0.0 and torch.rand([])"),
}


def _layerdrop_module(form: str) -> str:
    body, _, _ = _LAYERDROP_FORMS[form]
    return ("import types\n\nimport torch\n\n\nclass Encoder(torch.nn.Module):\n    def __init__(self, layerdrop=0.0):\n"
            "        super().__init__()\n        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))\n"
            "        self.layerdrop = layerdrop\n        self.config = types.SimpleNamespace(layerdrop=layerdrop)\n\n"
            "    def forward(self, hidden_states):\n        for layer in self.layers:\n" + body
            + "                hidden_states = layer(hidden_states)\n        return hidden_states\n")


@pytest.mark.parametrize("form", sorted(_LAYERDROP_FORMS))
def test_draw_only_when_enabled_makes_training_one_graph_and_keeps_layerdrop(form):
    text = _layerdrop_module(form)
    _, needle, expect = _LAYERDROP_FORMS[form]
    site = Site(path="src/transformers/models/z/modeling_z.py", text=text,
                lineno=next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln), function="forward")
    [rw] = propose("Data-dependent branching", "GB0170", [site], load_playbook())
    assert rw.entry == "draw-only-when-enabled"
    assert expect in rw.new_text, rw.new_text
    _assert_only_function_changed(site, rw.new_text)
    check_patch(rewrite_diff(rw, site.text), PatchPolicy(model_type="z"))
    old_ns, new_ns = {}, {}
    exec(compile(text, "old.py", "exec"), old_ns)
    exec(compile(rw.new_text, "new.py", "exec"), new_ns)
    torch.manual_seed(0)
    old, new = old_ns["Encoder"]().train(), new_ns["Encoder"]().train()
    new.load_state_dict(old.state_dict())
    x = torch.randn(2, 4)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="Data-dependent branching"):  # the tensor draw branches
        torch.compile(old, backend="eager", fullgraph=True)(x)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(new, backend="aot_eager", fullgraph=True)(x), old(x))
    # a real LayerDrop (p > 0) still draws and skips: the branch stays, eager unchanged
    new.layerdrop = new.config.layerdrop = 1.0
    assert torch.equal(new(x), x)


def test_draw_only_when_enabled_refuses_what_is_not_a_layer_skip():
    base = _layerdrop_module("nested")
    cases = {
        # no training test to extend: the draw is not LayerDrop's
        "untrained": base.replace("if self.training:", "if True:"),
        # a probability that is a tensor (a parameter), not a Python number on the module
        "tensor p": base.replace("dropout_probability < self.layerdrop", "dropout_probability < torch.tensor(0.1)"),
        # a draw that is not uniform-in-[0, 1) as a whole
        "not a draw": base.replace("torch.rand([])", "torch.randn([]).abs()"),
    }
    for name, text in cases.items():
        site = Site(path="src/transformers/models/z/modeling_z.py", text=text,
                    lineno=next(i for i, ln in enumerate(text.splitlines(), 1) if "if dropout_probability" in ln),
                    function="forward")
        assert CODEMODS["draw-only-when-enabled"](site) is None, name


def test_a_break_only_the_fullgraph_check_saw_is_a_cluster_and_the_rewrite_makes_omniasr_training_one_graph(tmp_path):
    """omniasr (transformers 5.25) draws LayerDrop as a tensor: training breaks on every layer, yet
    the explain pass records no break (the verdict rests on the fullgraph=True check). The fix
    loop must see that break as a cluster, and the playbook's rewrite, applied in an overlay,
    must make the real training item one graph."""
    from enablebot.fix.clusters import breaks_of, clusters_of
    from enablebot.fix.judge.overlay import build_overlay
    from enablebot.fix.judge.verify import default_runner, with_candidate
    from enablebot.results import RunSpec

    spec = RunSpec(model_id="omniasr_audio", mode="train", pass_name="dynamo", timing=False, numerics=False)
    before = default_runner(spec)
    assert before.verdict == "graph_break" and before.fullgraph_ok is False
    [cluster] = clusters_of(breaks_of(before))
    assert cluster.ref.registry_id == "GB0170" and cluster.ref.filename == "modeling_omniasr.py"
    sites = sites_of(cluster.lead)
    [rw] = propose(cluster.lead.gb_type, cluster.lead.registry_id, sites, load_playbook())
    assert rw.entry == "draw-only-when-enabled"
    old = next(s.text for s in sites if s.path == rw.path)
    checked = check_patch(rewrite_diff(rw, old), PatchPolicy(model_type="omniasr"))
    build_overlay(checked.diff, tmp_path / "overlay")
    after = default_runner(with_candidate(spec, str(tmp_path / "overlay"), None))
    assert after.verdict == "full_graph", (after.verdict, after.error)
    assert breaks_of(after) == []
