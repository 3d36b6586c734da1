"""Day 0: model types the installed transformers knows and the registry lacks are registered and run first."""

import json
import subprocess
import sys

from enablebot.model.catalog import known_architectures
from enablebot.sweep.day0 import first, missing_types, new_in_release, register_new_types
from enablebot.model.registry import Registry
from enablebot.sweep.engine import SweepItem

from conftest import ROOT, installed_versions

NEW = ("gpt2", "llama")  # taken out of a copy of the registry: to the bot they are new in this release


def _registry_without(tmp_path, types):
    """A copy of the registry without `types`; the installed release's own new types (already
    registered, `new_in` this release) lose that mark, so `types` are the release's only new ones."""
    reg = Registry.load(ROOT / "model_registry.yaml")
    for mt in types:
        del reg.entries[mt]
    for e in reg.entries.values():
        e.new_in = None
    p = tmp_path / "registry.yaml"
    reg.save(p)
    return Registry.load(p)


def test_missing_types_are_registered_with_their_release_and_source(tmp_path):
    reg = _registry_without(tmp_path, NEW)
    _, tf = installed_versions()
    already_missing = set(missing_types(Registry.load(ROOT / "model_registry.yaml"), known_architectures()))
    assert set(missing_types(reg, known_architectures())) == set(NEW) | already_missing
    added = register_new_types(reg, transformers_version=tf, release_date=None, now="2026-12-03T09:00:00+00:00")
    assert {a.model_type for a in added} == set(NEW) | already_missing
    e = reg.entries["llama"]
    assert (e.first_seen, e.first_seen_source, e.new_in) == ("2026-12-03T09:00:00+00:00", "bot", f"transformers {tf}")
    assert e.base == "LlamaModel" and e.head == "LlamaForCausalLM" and not e.config and not e.inputs
    assert set(NEW) <= set(new_in_release(reg, tf))
    reg.save()
    again = Registry.load(reg.path)  # the new fields survive a write and a read
    assert again.entries["gpt2"].first_seen_source == "bot" and again.entries["gpt2"].new_in == f"transformers {tf}"
    assert register_new_types(again, transformers_version=tf) == []  # a second run adds nothing
    items = [SweepItem("bert", "base", "eval"), SweepItem("llama", "head", "eval"), SweepItem("albert", "base", "eval"),
             SweepItem("gpt2", "head", "eval")]
    assert [it.model_id for it in first(items, set(NEW))] == ["llama", "gpt2", "bert", "albert"]


def test_sweep_registers_and_runs_the_new_types_and_reports_them_apart(tmp_path):
    reg = _registry_without(tmp_path, NEW)
    out = tmp_path / "day0"
    p = subprocess.run([sys.executable, "-m", "enablebot.cli", "sweep", "--registry", str(reg.path), "--out", str(out),
                        "--only-new-types", "--release-date", "2026-11-30", "--task", "main", "--mode", "eval",
                        "--scenario", "call", "--jobs", "1", "--timeout", "240", "--no-report"],
                       capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert p.returncode == 0, p.stderr
    _, tf = installed_versions()
    after = Registry.load(reg.path)
    assert all(after.entries[mt].first_seen == "2026-11-30T00:00:00+00:00" for mt in NEW)
    assert all(after.entries[mt].first_seen_source == "release" for mt in NEW)
    rows = {r["model_type"]: r for r in json.loads((out / "new_types.json").read_text())["rows"]}
    assert set(rows) == set(NEW)
    assert all(r["items"] == 1 and r["built_and_ran"] == 1 for r in rows.values())
    md = (out / "new_types.md").read_text()
    assert f"## New in transformers {tf} (2 model types)" in md and "2 of 2 items built and ran (100.0%)" in md


def test_a_bad_release_date_is_refused_before_any_work(tmp_path):
    reg = _registry_without(tmp_path, NEW)
    before = reg.path.read_text()
    p = subprocess.run([sys.executable, "-m", "enablebot.cli", "sweep", "--registry", str(reg.path), "--out",
                        str(tmp_path / "x"), "--only-new-types", "--release-date", "yesterday"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 2 and "--release-date" in p.stderr
    assert reg.path.read_text() == before and not (tmp_path / "x").exists()
