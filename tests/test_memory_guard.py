"""Memory guard: a config's huge special-token id does not grow the vocabulary, an oversized
shrunk model is a memory_limit verdict before anything is allocated, and the sweep goes on."""

import json

import pytest

from enablebot.model.budget import BUDGET_ENV, OverBudget, count_params_meta
from enablebot.model.build import build_model, make_config
from enablebot.model.resolve import resolve
from enablebot.results import RunSpec
from enablebot.measure.runner import run_spec
from enablebot.model.shrink import MAX_TOKEN_ID


def _config(tmp_path, **fields):
    from transformers import GPT2Config

    d = GPT2Config().to_dict()
    d.update(fields)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(d))
    return str(p)


def test_a_huge_special_token_id_is_remapped_not_allocated(tmp_path):
    path = _config(tmp_path, eos_token_id=30_000_000, bos_token_id=50256, pad_token_id=40_000_000)
    cfg, changes = make_config(resolve(path), "tiny")
    assert cfg.vocab_size == 50257  # grown to fit bos 50256 (valid), not to 40M
    assert cfg.eos_token_id < cfg.vocab_size and cfg.bos_token_id < cfg.vocab_size
    assert changes["eos_token_id"] == cfg.eos_token_id
    # Distinct ids stay distinct (a pad that became the eos would change the model).
    assert cfg.pad_token_id < cfg.vocab_size and len({cfg.pad_token_id, cfg.eos_token_id, cfg.bos_token_id}) == 3
    # The model really builds small and runs.
    r = run_spec(RunSpec(model_id=path, fast=True, numerics=False, timing=False))
    assert r.ok, r.error
    assert r.n_params < 5_000_000


def test_a_legit_id_past_the_tiny_vocab_still_grows_it(tmp_path):
    # A VLM-style special token inside the config's own vocab keeps its index.
    path = _config(tmp_path, eos_token_id=50_000, bos_token_id=3)
    cfg, _ = make_config(resolve(path), "tiny")
    assert cfg.eos_token_id == 50_000 and cfg.vocab_size == 50_001
    assert MAX_TOKEN_ID > 50_000


def test_over_the_parameter_budget_is_a_clear_memory_limit(tmp_path, monkeypatch):
    res = resolve("gpt2")
    b = build_model(res)
    n = sum(p.numel() for p in b.model.parameters())
    from transformers import GPT2LMHeadModel

    assert count_params_meta(type(b.model), b.config) == n  # the meta count is the real count
    monkeypatch.setenv(BUDGET_ENV, str(n - 1))
    with pytest.raises(OverBudget, match="over the budget"):
        build_model(res)
    r = run_spec(RunSpec(model_id="gpt2", fast=True, numerics=False, timing=False))
    assert r.verdict == "memory_limit" and "over the budget" in r.error.message
    assert GPT2LMHeadModel  # imported: the class the count used


def test_the_sweep_goes_on_past_an_oversized_model(tmp_path, monkeypatch):
    from enablebot.sweep.engine import SweepItem, SweepOptions, run_sweep

    # A legit-looking special token just under the cap keeps a 1M-row vocab: 64M parameters.
    big = _config(tmp_path, eos_token_id=1_000_000, vocab_size=1_040_000)
    monkeypatch.setenv(BUDGET_ENV, "10000000")
    items = [SweepItem(big, "base", "eval"), SweepItem("bert", "base", "eval")]
    stats = run_sweep(items, SweepOptions(pass_="dynamo", device="cpu"), tmp_path / "sweep", jobs=1)
    assert stats.ran == 2
    lines = [json.loads(ln) for ln in (tmp_path / "sweep" / "results.jsonl").read_text().splitlines()]
    by = {ln["spec"]["model_id"]: ln for ln in lines}
    assert by[big]["verdict"] == "memory_limit" and "over the budget" in by[big]["error"]["message"]
    assert by["bert"]["verdict"] in ("full_graph", "graph_break")


def test_a_worker_collects_fully_only_where_its_address_space_nears_the_limit():
    """The full collection after an item costs 20-28% of a worker's time on the CPU pass; it runs only
    where the address space is past half the worker's RLIMIT_AS, and never without a limit."""
    from enablebot.execute.sandbox import Limits
    from enablebot.execute.worker import _near_limit

    assert _near_limit(Limits(address_space_mb=1))  # any Python process is past 0.5 MB
    assert not _near_limit(Limits(address_space_mb=10**9))
    assert not _near_limit(Limits(address_space_mb=None)) and not _near_limit(None)
