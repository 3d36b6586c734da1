"""`enablebot compare`: planted torch-only and transformers-only changes are attributed correctly."""

import json
import subprocess
import sys

from enablebot.sweep.baseline import baseline_from
from enablebot.sweep.checkpoint import Checkpoint
from enablebot.sweep.compare import compare_paths, compare_sets, load_set
from enablebot.results import CompileStats, ErrorInfo, GraphBreak, RunResult, RunSpec, Versions

from conftest import ROOT


def _result(model, verdict, torch_v, tf_v, *, mode="eval", breaks=(), error=None, scenario=None):
    spec = RunSpec(model_id=model, task="base", mode=mode, backend="eager", fast=True)
    gbs = [GraphBreak(gb_type=t, registry_id=gid, count=n) for gid, t, n in breaks]
    r = RunResult(spec=spec, verdict=verdict, versions=Versions(torch=torch_v, transformers=tf_v, python="3.11"),
                  model_type=model, graph_breaks=gbs,
                  stats=CompileStats(graphs=1 + sum(n for *_, n in breaks), graph_breaks=sum(n for *_, n in breaks)),
                  error=ErrorInfo(stage=error[0], type=error[1], message="planted") if error else None)
    return r


GB33 = ("GB0033", "Data dependent operator", 2)
GB36 = ("GB0036", "Dynamic shape operator", 1)


def _sweep(tmp_path, name, results, scenarios=None):
    d = tmp_path / name
    ck = Checkpoint(d)
    for r in results:
        ck.append(r)
    if scenarios:  # results written by a newer bot carry spec.scenario
        lines = [json.loads(ln) for ln in (d / "results.jsonl").read_text().splitlines()]
        for ln in lines:
            ln["spec"]["scenario"] = scenarios.get(ln["spec"]["model_id"], "call")
        (d / "results.jsonl").write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    return d


def test_torch_only_and_transformers_only_changes_are_attributed(tmp_path):
    old = [
        _result("llama", "full_graph", "2.13.0+cpu", "5.24.0"),
        _result("jetmoe", "graph_break", "2.13.0+cpu", "5.24.0", breaks=[GB33]),
        _result("mixtral", "full_graph", "2.13.0+cpu", "5.24.0"),
        _result("bert", "full_graph", "2.13.0+cpu", "5.24.0"),
        _result("udop", "compile_error", "2.13.0+cpu", "5.24.0", error=("explain", "TorchRuntimeError")),
    ]
    # B1: only torch moved. jetmoe fixed, mixtral newly breaks, udop's error is gone.
    torch_new = [
        _result("llama", "full_graph", "2.15.0", "5.24.0"),
        _result("jetmoe", "full_graph", "2.15.0", "5.24.0"),
        _result("mixtral", "graph_break", "2.15.0", "5.24.0", breaks=[GB36]),
        _result("bert", "full_graph", "2.15.0", "5.24.0"),
        _result("udop", "graph_break", "2.15.0", "5.24.0", breaks=[GB33]),
    ]
    a = _sweep(tmp_path, "a", old)
    rep = compare_paths(a, _sweep(tmp_path, "b1", torch_new))
    got = {(d.model_id, c.kind): d.attribution for d in rep.diffs for c in d.changes}
    assert got == {("jetmoe", "fixed"): "torch", ("mixtral", "newly_broken"): "torch", ("udop", "error_lost"): "torch"}
    assert rep.unchanged == 2 and rep.compared == 5

    # B2: only transformers moved. bert gains an eager error; jetmoe's break count and type change.
    tf_new = [
        _result("llama", "full_graph", "2.13.0+cpu", "5.25.0"),
        _result("jetmoe", "graph_break", "2.13.0+cpu", "5.25.0", breaks=[("GB0033", "Data dependent operator", 5), GB36]),
        _result("mixtral", "full_graph", "2.13.0+cpu", "5.25.0"),
        _result("bert", "eager_error", "2.13.0+cpu", "5.25.0", error=("eager", "AttributeError")),
        _result("udop", "compile_error", "2.13.0+cpu", "5.25.0", error=("explain", "TorchRuntimeError")),
    ]
    rep = compare_paths(a, _sweep(tmp_path, "b2", tf_new))
    by = {d.model_id: d for d in rep.diffs}
    assert set(by) == {"jetmoe", "bert"}
    assert all(d.attribution == "transformers" for d in rep.diffs)
    assert [c.kind for c in by["bert"].changes] == ["newly_broken", "error_gained"]
    assert by["bert"].changes[1].what == "eager: AttributeError"
    assert by["jetmoe"].changes[0].kind == "breaks_changed"
    assert by["jetmoe"].changes[0].what == "GB0033 2 -> 5; GB0036 0 -> 1"
    md = rep.markdown()
    assert "Break ids: GB0033 Data dependent operator; GB0036 Dynamic shape operator" in md
    assert "## Newly broken (1)" in md and "| bert | base/eval | cpu | call | full_graph -> eager_error (eager: AttributeError) | transformers |" in md

    # Both moved: "both".
    both = [_result("jetmoe", "full_graph", "2.15.0", "5.25.0")]
    rep = compare_paths(a, _sweep(tmp_path, "b3", both))
    assert [(d.model_id, d.attribution) for d in rep.diffs] == [("jetmoe", "both")]
    assert len(rep.only_in_a) == 4


def test_scenario_keeps_items_apart_and_is_read_from_raw_results(tmp_path):
    a = _sweep(tmp_path, "a", [_result("llama", "full_graph", "2.13.0", "5.24.0")])
    b = _sweep(tmp_path, "b", [_result("llama", "graph_break", "2.13.0", "5.24.0", breaks=[GB36])],
               scenarios={"llama": "generate"})
    rep = compare_paths(a, b)
    assert rep.compared == 0 and rep.only_in_a == ["llama|base|cpu|eval|float32|call"]
    assert rep.only_in_b == ["llama|base|cpu|eval|float32|generate"]


def test_baseline_against_sweep_compares_verdicts_and_counts(tmp_path):
    old = [_result("jetmoe", "graph_break", "2.13.0+cpu", "5.24.0", breaks=[GB33]),
           _result("llama", "full_graph", "2.13.0+cpu", "5.24.0")]
    bl = tmp_path / "cpu-torch-2.13.0.json"
    baseline_from(old).save(bl)
    new = [_result("jetmoe", "graph_break", "2.15.0", "5.24.0", breaks=[GB33, GB36]),
           _result("llama", "full_graph", "2.15.0", "5.24.0")]
    rep = compare_sets(load_set(bl), load_set(_sweep(tmp_path, "b", new)))
    assert [(d.model_id, d.changes[0].kind, d.changes[0].what, d.attribution) for d in rep.diffs] == \
        [("jetmoe", "breaks_changed", "graph breaks 2 -> 3", "torch")]
    assert any("baseline" in n for n in rep.notes)


def test_cli_writes_markdown_and_json_and_refuses_bad_input(tmp_path):
    a = _sweep(tmp_path, "a", [_result("llama", "full_graph", "2.13.0", "5.24.0")])
    b = _sweep(tmp_path, "b", [_result("llama", "graph_break", "2.14.1", "5.24.0", breaks=[GB36])])
    cmd = [sys.executable, "-m", "enablebot.cli", "compare"]
    p = subprocess.run(cmd + [str(a), str(b), "--out", str(tmp_path / "cmp")], capture_output=True, text=True,
                       cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "Newly broken (1)" in p.stdout
    data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert data["counts"] == {"newly_broken": {"torch": 1}}
    assert (tmp_path / "cmp" / "compare.md").read_text() == p.stdout
    (tmp_path / "junk.json").write_text("[1, 2]")
    for bad in (tmp_path / "nowhere", tmp_path / "junk.json"):
        p = subprocess.run(cmd + [str(a), str(bad)], capture_output=True, text=True, cwd=ROOT)
        assert p.returncode == 2 and "error" in p.stderr and "baseline" in p.stderr


def test_sets_of_different_sizes_are_compared_on_the_items_both_hold(tmp_path):
    """A whole sweep (5 models, 3 full graph of 5) against a 2-model subset on a newer torch that
    changed nothing: the report's share is on the 2 shared items (equal on both sides), and each
    set's whole-sample share is labelled as a different sample, not as a change."""
    whole = [_result("llama", "full_graph", "2.13.0+cpu", "5.25.0"),
             _result("bert", "full_graph", "2.13.0+cpu", "5.25.0"),
             _result("mixtral", "full_graph", "2.13.0+cpu", "5.25.0"),
             _result("jetmoe", "graph_break", "2.13.0+cpu", "5.25.0", breaks=[GB33]),
             _result("udop", "graph_break", "2.13.0+cpu", "5.25.0", breaks=[GB36])]
    subset = [_result("llama", "full_graph", "2.15.0", "5.25.0"),
              _result("jetmoe", "graph_break", "2.15.0", "5.25.0", breaks=[GB33])]
    rep = compare_paths(_sweep(tmp_path, "whole", whole), _sweep(tmp_path, "subset", subset))
    assert (rep.compared, rep.unchanged, len(rep.only_in_a), len(rep.only_in_b)) == (2, 2, 3, 0)
    assert (rep.common_a.full_graph, rep.common_a.compiled) == (rep.common_b.full_graph, rep.common_b.compiled) == (1, 2)
    assert (rep.all_a.full_graph, rep.all_a.compiled, rep.all_a.items) == (3, 5, 5)
    md = rep.markdown()
    assert "- Full graph on the 2 items both hold: A 50.0% (1 of 2 compiled) -> B 50.0% (1 of 2 compiled)" in md
    assert "different samples, not a trend): A 60.0% (3 of 5 compiled) of 5 items; B 50.0%" in md
    assert any("3 only in A, 0 only in B" in n and "on the 2 items both hold" in n for n in rep.notes)
    again = type(rep).from_dict(json.loads(json.dumps(rep.to_dict())))  # the JSON keeps the shares
    assert again.common_b.full_graph == 1 and again.all_a.items == 5
