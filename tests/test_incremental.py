"""Incremental sweeps: the cache key follows the model's code, versions and spec, and nothing else."""

import json
import shutil

import pytest

from enablebot.sweep.checkpoint import RESULTS_FILE, load_results
from enablebot.sweep.incremental import (DECISIONS_FILE, KEYS_FILE, CacheKey, cache_key, decide, import_closure,
                                   class_module_file, load_keys, transformers_root)
from enablebot.model.registry import ArchEntry, Registry
from enablebot.results import RunResult, RunSpec
from enablebot.sweep.engine import SweepOptions, plan, run_sweep

from conftest import ROOT

DERIVED = '''"""A model that reuses llama's code, as modular transformers models do."""
from ..llama.modeling_llama import LlamaMLP  # relative, within models/
from transformers.models.llama.configuration_llama import LlamaConfig  # absolute
from ...modeling_utils import PreTrainedModel  # outside models/: covered by the version
from ..auto import AutoModel  # the name index: not followed


class DerivedModel(PreTrainedModel):
    config_class = LlamaConfig

    def helper(self):
        from . import configuration_derived  # a function-level import of a submodule
        return configuration_derived
'''


@pytest.fixture
def tree(tmp_path):
    """A copy of two real model packages from the installed transformers, plus one derived from llama."""
    real = transformers_root()
    root = tmp_path / "transformers"
    for pkg in ("llama", "bert"):
        shutil.copytree(real / "models" / pkg, root / "models" / pkg)
    (root / "models" / "derived").mkdir()
    (root / "models" / "derived" / "__init__.py").write_text("")
    (root / "models" / "derived" / "modeling_derived.py").write_text(DERIVED)
    (root / "models" / "derived" / "configuration_derived.py").write_text("X = 1\n")
    (root / "models" / "auto").mkdir()
    (root / "models" / "auto" / "__init__.py").write_text("MAPPING = {}\n")
    (root / "modeling_utils.py").write_text("class PreTrainedModel: pass\n")
    return root


def _key(root, cls, mt, **kw):
    spec = kw.pop("spec", None) or RunSpec(model_id=mt, task="base", backend="eager", fast=True)
    return cache_key(spec, cls, torch_version=kw.pop("torch", "2.13.0+cpu"),
                     transformers_version=kw.pop("transformers", "5.24.0"), root=root, **kw)


def _edit(path, text="\n# a one-line change\n"):
    path.write_text(path.read_text() + text)


def test_closure_follows_relative_and_absolute_imports_within_models(tree):
    f = class_module_file(tree, "DerivedModel", "derived")
    files = {str(p.relative_to(tree)) for p in import_closure(f, tree)}
    assert {"models/derived/modeling_derived.py", "models/derived/configuration_derived.py",
            "models/llama/modeling_llama.py", "models/llama/configuration_llama.py"} <= files
    assert not any(p.startswith(("models/auto", "models/bert", "modeling_utils")) for p in files)
    assert class_module_file(tree, "LlamaModel", "llama") == tree / "models/llama/modeling_llama.py"


def test_key_changes_when_a_modeling_file_changes_and_not_otherwise(tree):
    before = {mt: _key(tree, cls, mt) for mt, cls in (("llama", "LlamaModel"), ("bert", "BertModel"),
                                                        ("derived", "DerivedModel"))}
    # Unrelated edits: another package's non-model file, the auto index, core transformers files.
    _edit(tree / "models/auto/__init__.py")
    _edit(tree / "modeling_utils.py")
    tok = next((tree / "models/bert").glob("tokenization_bert*.py"), None)
    if tok is not None:
        _edit(tok)
    same = {mt: _key(tree, cls, mt) for mt, cls in (("llama", "LlamaModel"), ("bert", "BertModel"),
                                                      ("derived", "DerivedModel"))}
    assert {mt: k.digest() for mt, k in same.items()} == {mt: k.digest() for mt, k in before.items()}

    _edit(tree / "models/llama/modeling_llama.py")  # llama's code changes: llama and its derivative move
    after = {mt: _key(tree, cls, mt) for mt, cls in (("llama", "LlamaModel"), ("bert", "BertModel"),
                                                       ("derived", "DerivedModel"))}
    assert after["llama"].digest() != before["llama"].digest()
    assert after["derived"].digest() != before["derived"].digest()
    assert after["bert"].digest() == before["bert"].digest()
    d = decide("llama|base|cpu|eval|float32", RunResult(spec=RunSpec("llama"), verdict="full_graph"),
               before["llama"], after["llama"])
    assert d.action == "run" and d.reason == "model code changed: models/llama/modeling_llama.py"


def test_decisions_name_what_moved(tree):
    res = RunResult(spec=RunSpec("llama"), verdict="graph_break")
    old = _key(tree, "LlamaModel", "llama")
    assert decide("k", res, old, _key(tree, "LlamaModel", "llama")).reason == "key unchanged"
    tf = decide("k", res, old, _key(tree, "LlamaModel", "llama", transformers="5.25.0"))
    assert tf.action == "reuse" and tf.reason.startswith("transformers 5.24.0 -> 5.25.0, model code unchanged")
    strict = decide("k", res, old, _key(tree, "LlamaModel", "llama", transformers="5.25.0"), strict=True)
    assert strict.action == "run"
    assert decide("k", res, old, _key(tree, "LlamaModel", "llama", torch="2.15.0")).reason == \
        "torch changed: 2.13.0+cpu -> 2.15.0"
    spec2 = RunSpec(model_id="llama", task="base", backend="eager", fast=True, seq_len=64)
    assert decide("k", res, old, _key(tree, "LlamaModel", "llama", spec=spec2)).reason == "run spec changed: seq_len"
    knowledge = _key(tree, "LlamaModel", "llama", entry=ArchEntry("llama", config={"hidden_size": 32}))
    assert decide("k", res, old, knowledge).reason == "registry knowledge changed"
    timed_out = RunResult(spec=RunSpec("llama"), verdict="timeout")
    assert decide("k", timed_out, old, old).action == "run"
    # The replay keeps a timeout while the key is unchanged, and retries it once anything moved;
    # a crash is always retried.
    assert decide("k", timed_out, old, old, keep_timeouts=True).action == "reuse"
    assert decide("k", timed_out, old, _key(tree, "LlamaModel", "llama", torch="2.15.0"), keep_timeouts=True).action == "run"
    crashed = RunResult(spec=RunSpec("llama"), verdict="crash")
    assert decide("k", crashed, old, old, keep_timeouts=True).action == "run"
    assert decide("k", res, None, old).reason == "no recorded cache key for the previous result"
    # the registry's path is this machine's, not knowledge: moving it must not re-run anything
    moved = RunSpec(model_id="llama", task="base", backend="eager", fast=True, registry="/elsewhere/reg.yaml")
    assert decide("k", res, old, _key(tree, "LlamaModel", "llama", spec=moved)).action == "reuse"


def test_nothing_changed_reruns_nothing_and_a_code_change_reruns_only_that_model(tmp_path):
    reg = Registry.load(ROOT / "model_registry.yaml")
    opts = SweepOptions(modes=("eval",), tasks=("base",), timeout_s=240, registry=str(reg.path))
    items = plan(reg, opts, ["llama", "gpt2"])
    first = tmp_path / "first"
    stats = run_sweep(items, opts, first, jobs=1)
    assert stats.ran == 2 and len(load_keys(first)) == 2

    nightly = tmp_path / "nightly"
    stats = run_sweep(items, opts, nightly, jobs=1, reuse_from=first)
    assert (stats.ran, stats.reused) == (0, 2)
    inc = json.loads((nightly / DECISIONS_FILE).read_text())
    assert inc["reasons"] == {"reuse: key unchanged": 2}
    assert set(load_results(nightly / RESULTS_FILE)) == set(load_results(first / RESULTS_FILE))
    # The same sweep again into the same folder: those results are already done, not reused twice.
    again = run_sweep(items, opts, nightly, jobs=1, reuse_from=first)
    assert (again.ran, again.reused, again.skipped_done) == (0, 0, 2)

    # Plant what a transformers upgrade looks like in the recorded keys: a new version for both, and
    # a changed modeling file for gpt2 only. Only gpt2 may re-run (the deadline stops it starting).
    lines = [json.loads(ln) for ln in (first / KEYS_FILE).read_text().splitlines()]
    for ln in lines:
        ln["cache_key"]["transformers"] = "5.23.0"
        if ln["key"].startswith("gpt2|"):
            f = next(iter(ln["cache_key"]["files"]))
            ln["cache_key"]["files"][f] = "0" * 16
    (first / KEYS_FILE).write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    upgrade = tmp_path / "upgrade"
    stats = run_sweep(items, opts, upgrade, jobs=1, reuse_from=first, max_minutes=1e-9)
    dec = {d["key"].split("|")[0]: d for d in json.loads((upgrade / DECISIONS_FILE).read_text())["decisions"]}
    assert dec["llama"]["action"] == "reuse" and "model code unchanged" in dec["llama"]["reason"]
    assert dec["gpt2"]["action"] == "run" and dec["gpt2"]["reason"].startswith("model code changed: models/gpt2/")
    assert stats.reused == 1 and stats.not_started == 1


def test_recorded_keys_round_trip():
    k = CacheKey(torch="2.13.0", transformers="5.24.0", files={"models/a/modeling_a.py": "ab"}, spec="s")
    assert CacheKey.from_dict(json.loads(json.dumps(k.to_dict()))).digest() == k.digest()
