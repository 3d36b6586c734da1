"""Sweep speed: longest-first ordering from earlier durations, and pool workers forked from a
pre-imported fork server that still behave like fresh, isolated processes."""

import json
import subprocess
import sys

import pytest

from enablebot.execute.pool import WorkerPool
from enablebot.model.registry import ArchEntry, Registry
from enablebot.results import RunResult, RunSpec
from enablebot.sweep.baseline import Baseline, baseline_from, compare
from enablebot.sweep.schedule import baseline_durations, durations_for, estimator, item_key, load_durations, longest_first, work_order

from conftest import ROOT


def spec(model, mode="eval", task="base", **kw):
    return RunSpec(model_id=model, mode=mode, task=task, **kw)


def test_longest_first_starts_the_slowest_model_first_and_keeps_its_items_together():
    history = {"a|base|eval|call": 1.0, "a|base|train|call": 2.0, "b|base|eval|call": 9.0, "c|base|eval|call": 4.0}
    specs = [spec("a"), spec("a", "train"), spec("b"), spec("b", "train"), spec("c"), spec("new")]
    order = [(s.model_id, s.mode) for s in longest_first(specs, estimator(history))]
    # b/train has no history of its own: its model's mean (9 s) ranks it; "new" gets the median (3 s).
    assert order == [("b", "eval"), ("b", "train"), ("c", "eval"), ("new", "eval"), ("a", "train"), ("a", "eval")]
    assert longest_first(specs, estimator({})) == specs  # no history: every estimate ties, plan order kept


def test_durations_come_only_from_the_same_pass_and_device_and_a_torn_line_is_skipped(tmp_path):
    rows = [RunResult(spec=spec("llama", fast=True), verdict="full_graph", duration_s=1.5),
            RunResult(spec=spec("llama", fast=False), verdict="full_graph", duration_s=40.0),
            RunResult(spec=spec("gpt2", fast=True, device="cuda"), verdict="full_graph", duration_s=7.0)]
    f = tmp_path / "results.jsonl"
    f.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in rows) + '{"spec": {"model_id": "bert", "ta')
    assert load_durations(tmp_path, pass_name="dynamo", device="cpu") == {"llama|base|eval|call": 1.5}
    assert load_durations(f, pass_name="inductor") == {"llama|base|eval|call": 40.0}
    assert item_key(rows[2].spec) in load_durations(f)
    with pytest.raises(FileNotFoundError):
        load_durations(tmp_path / "nope")


def test_durations_fall_back_to_another_pass_of_the_same_device_never_another_device(tmp_path):
    rows = [RunResult(spec=spec("llama", fast=True, device="cuda"), verdict="full_graph", duration_s=3.0),
            RunResult(spec=spec("gpt2", fast=True, device="cuda"), verdict="full_graph", duration_s=9.0),
            RunResult(spec=spec("bert", fast=True), verdict="full_graph", duration_s=5.0)]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in rows))
    # No inductor results on cuda: the dynamo pass's cuda durations rank the work, and say so.
    assert durations_for([tmp_path], pass_name="inductor", device="cuda") == (
        {"llama|base|eval|call": 3.0, "gpt2|base|eval|call": 9.0}, "dynamo")
    assert durations_for([tmp_path], pass_name="dynamo", device="cpu") == ({"bert|base|eval|call": 5.0}, "dynamo")
    assert durations_for([tmp_path], pass_name="inductor", device="mps") == ({}, None)


def test_durations_of_a_sharded_pass_are_read_from_every_shard(tmp_path):
    shards = {"s1": [("llama", 3.0), ("gpt2", 9.0)], "s2": [("bert", 5.0), ("gpt2", 7.0)]}
    for name, rows in shards.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.jsonl").write_text("".join(
            json.dumps(RunResult(spec=spec(m, fast=False, device="cuda"), verdict="full_graph", duration_s=s).to_dict())
            + "\n" for m, s in rows))
    durations, source = durations_for([tmp_path / "s1", tmp_path / "s2"], pass_name="inductor", device="cuda")
    # The later shard wins for an item in both.
    assert source == "inductor" and durations == {
        "llama|base|eval|call": 3.0, "gpt2|base|eval|call": 7.0, "bert|base|eval|call": 5.0}


def test_passed_durations_order_a_time_boxed_sweep_but_its_own_history_does_not():
    todo = [spec("a"), spec("b"), spec("c"), spec("d")]
    passed = {"c|base|eval|call": 30.0, "b|base|eval|call": 20.0, "a|base|eval|call": 1.0}
    history = {"d|base|eval|call": 99.0}  # the checkpoint's own: d ran before
    names = lambda specs: [s.model_id for s in specs]  # noqa: E731
    # Time-boxed: only the passed durations count (d, unknown to them, gets their median, 20 s).
    assert names(work_order(todo, durations=passed, history=history, time_boxed=True)) == ["c", "b", "d", "a"]
    assert names(work_order(todo, durations=None, history=history, time_boxed=True)) == ["a", "b", "c", "d"]
    assert names(work_order(todo, durations=passed, history=history, time_boxed=False)) == ["d", "c", "b", "a"]
    assert names(work_order(todo, durations=None, history={}, time_boxed=False)) == ["a", "b", "c", "d"]


def test_a_baseline_keeps_item_seconds_that_order_the_next_sweep_and_are_never_judged(tmp_path):
    rows = [RunResult(spec=spec("llama", fast=True, device="cuda"), verdict="full_graph", duration_s=3.04),
            RunResult(spec=spec("gpt2", "train", fast=True, device="cuda"), verdict="graph_break", duration_s=19.0)]
    base = baseline_from(rows)
    base.save(tmp_path / "cuda-dynamo-torch-2.11.0.json")
    saved = Baseline.load(tmp_path / "cuda-dynamo-torch-2.11.0.json")
    assert {k: e.seconds for k, e in saved.entries.items()} == {rows[0].key: 3.0, rows[1].key: 19.0}
    # Twice as slow now: no regression, only verdicts, breaks and numerics are judged.
    slower = [RunResult(spec=r.spec, verdict=r.verdict, duration_s=r.duration_s * 2) for r in rows]
    assert not compare(slower, saved).failed
    # The same device and pass, the closest older torch; another pass or device has none.
    Baseline(device="cuda", torch="2.9.0", transformers="5.0.0", pass_name="dynamo").save(
        tmp_path / "cuda-dynamo-torch-2.9.0.json")
    times, path = baseline_durations(tmp_path, pass_name="dynamo", device="cuda", torch_version="2.12.0+cu130")
    assert path.name == "cuda-dynamo-torch-2.11.0.json"
    assert times == {"llama|base|eval|call": 3.0, "gpt2|base|train|call": 19.0}
    # An older torch than any baseline: the oldest is the closest (it keeps no seconds: nothing to rank by).
    assert baseline_durations(tmp_path, pass_name="dynamo", device="cuda", torch_version="2.8.1") == ({}, None)
    assert baseline_durations(tmp_path, pass_name="inductor", device="cuda", torch_version="2.11.0") == ({}, None)
    assert baseline_durations(tmp_path, pass_name="dynamo", device="cpu", torch_version="2.11.0") == ({}, None)
    (tmp_path / "cuda-dynamo-torch-2.10.0.json").write_text("{not json")
    assert baseline_durations(tmp_path, pass_name="dynamo", device="cuda", torch_version="2.10.1") == ({}, None)


def test_the_committed_baselines_order_a_sweep_longest_first(tmp_path):
    """Without --durations-from, a sweep runs first what the committed CPU baseline timed longest:
    t5 (2.4 s there) before opt (0.8 s), which the plan's hash order puts first."""
    import hashlib

    assert hashlib.sha1(b"opt").hexdigest() < hashlib.sha1(b"t5").hexdigest()
    out = tmp_path / "o"
    p = subprocess.run([sys.executable, "-m", "enablebot.cli", "sweep", "--out", str(out), "-m", "opt", "-m", "t5",
                        "--task", "base", "--mode", "eval", "--jobs", "1", "--no-report"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "longest first by the item times in baselines/cpu-dynamo-torch-" in p.stderr
    ran = [json.loads(line)["spec"]["model_id"] for line in (out / "results.jsonl").read_text().splitlines()]
    assert ran == ["t5", "opt"]
    run = json.loads((out / "sweep_runs.jsonl").read_text().splitlines()[-1])
    assert 0 < run["startup_s"] < 120  # the process's start-up before the loop, for speed_split.py


def test_sweep_refuses_a_missing_durations_file(tmp_path):
    p = subprocess.run([sys.executable, "-m", "enablebot.cli", "sweep", "--out", str(tmp_path / "o"), "-m", "llama",
                        "--durations-from", str(tmp_path / "missing.jsonl")], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2 and "missing.jsonl" in p.stderr


def test_start_method_choice(monkeypatch, tmp_path):
    monkeypatch.delenv("ENABLEBOT_POOL_START", raising=False)
    assert WorkerPool(jobs=1, log_dir=tmp_path).start_method == "forkserver"
    # Candidate code (an overlay) never runs in a pool worker: it goes through the sandboxed run_in_child.
    with pytest.raises(ValueError, match="sandboxes it"):
        WorkerPool(jobs=1, log_dir=tmp_path, overlay_dir=str(tmp_path))
    monkeypatch.setenv("ENABLEBOT_POOL_START", "spawn")
    assert WorkerPool(jobs=1, log_dir=tmp_path).start_method == "spawn"
    with pytest.raises(ValueError, match="start method"):
        WorkerPool(jobs=1, log_dir=tmp_path, start_method="fork")


def test_forked_workers_see_the_pools_environment_not_the_fork_servers(tmp_path, monkeypatch):
    reg = Registry.load(ROOT / "model_registry.yaml")
    reg.upsert(ArchEntry.from_dict({**reg.get("llama").to_dict(), "hook": "enablebot.testing.faults:env_probe"}))
    reg.save(tmp_path / "reg.yaml")
    probe = spec("llama", fast=True, numerics=False, timing=False, timeout_s=240, registry=str(tmp_path / "reg.yaml"))
    seen = []
    for value in ("first", "second"):  # the fork server keeps the environment it started with ("first")
        monkeypatch.setenv("ENABLEBOT_PROBE", value)
        pool = WorkerPool(jobs=1, log_dir=tmp_path / "logs", start_method="forkserver")
        [result] = list(pool.run([probe]))
        seen.append(result)
    assert [r.verdict for r in seen] == ["create_error", "create_error"]
    assert "ENABLEBOT_PROBE=first" in seen[0].error.message
    assert "ENABLEBOT_PROBE=second" in seen[1].error.message


def test_a_process_forked_from_the_pools_server_runs_multithreaded_ops(tmp_path):
    """A fork server that had run a Dynamo trace gave children that hung in their first
    multi-threaded op; the preload must stay import-only (and leave CUDA alone)."""
    pool = WorkerPool(jobs=1, log_dir=tmp_path, start_method="forkserver")
    code = ("import torch, sys\ntorch.set_num_threads(2)\nx = torch.randn(1000, 1000)\n"
            "(x @ x).sum(); torch.randn(5_000_000).add_(1).sum(); torch.softmax(x, -1).sum()\n"
            "sys.exit(3 if torch.cuda.is_initialized() else 0)\n")
    p = pool._ctx.Process(target=exec, args=(code,))
    p.start()
    p.join(240)
    if p.exitcode is None:
        p.kill()
    assert p.exitcode == 0


def test_an_idle_worker_takes_its_own_types_next_and_leaves_other_workers_types_to_them():
    from enablebot.execute.pool import _affine

    pending = [spec(m, mode) for m, mode in (("a", "eval"), ("a", "train"), ("b", "eval"), ("b", "train"))][::-1]
    # A second idle worker beside the one running a/eval: b, not a/train (which would build `a` twice).
    assert pending[_affine(pending, None, {"a"})].model_id == "b"
    assert pending[_affine(pending, "b", {"a"})].model_id == "b"  # its own type first, wherever it is queued
    # Only another worker's type is left: take it rather than sit idle at the tail.
    assert pending[2:][_affine(pending[2:], None, {"a"})].model_id == "a"


def dynamo_spec(model, mode, **kw):
    return spec(model, mode, pass_name="dynamo", backend="eager", numerics=False, timing=False, timeout_s=240, **kw)


def test_a_base_and_a_head_build_are_both_kept_for_the_next_items_of_the_type():
    from enablebot.model import prepare

    prepare.forget()
    first = [prepare.prepare(dynamo_spec("gpt2", "eval", task=t)).copied for t in ("base", "head")]
    again = [prepare.prepare(dynamo_spec("gpt2", "train", task=t)).copied for t in ("base", "head")]
    prepare.forget()
    assert first == [False, False] and again == [True, True]


@pytest.mark.slow
def test_a_pool_builds_each_type_once_and_its_copies_give_the_verdicts_of_fresh_builds(tmp_path):
    """Two workers, eval + train of two real tiny models: one build per type (eval and train of a
    type used to go to the two idle workers side by side, each building it), and every item's
    verdict, graphs, breaks and ops equal those of a run that builds afresh."""
    from enablebot.measure.runner import run_spec
    from enablebot.model import prepare

    specs = [dynamo_spec(m, mode) for m in ("gpt2", "bert") for mode in ("eval", "train")]
    pooled = {r.key: r for r in WorkerPool(jobs=2, log_dir=tmp_path, start_method="forkserver").run(specs)}
    builds = {m: sorted(r.build for r in pooled.values() if r.spec.model_id == m) for m in ("gpt2", "bert")}
    assert builds == {"gpt2": ["copy", "fresh"], "bert": ["copy", "fresh"]}

    def seen(r):
        return (str(r.verdict), r.explain_graphs, r.explain_breaks, r.ops_captured, r.fullgraph_ok)

    for s in specs:
        prepare.forget()
        fresh = run_spec(s)
        assert fresh.build == "fresh"
        assert seen(pooled[fresh.key]) == seen(fresh), s
    prepare.forget()


def test_a_fork_server_started_early_is_the_one_the_pool_forks_its_workers_from(tmp_path):
    """`enablebot sweep` starts the fork server before it plans, so the server's imports overlap the
    planning; the pool must then fork from that server, not start a second one."""
    from multiprocessing import forkserver

    from enablebot.execute.pool import start_fork_server

    assert start_fork_server()
    server = forkserver._forkserver._forkserver_pid
    pool = WorkerPool(jobs=1, log_dir=tmp_path, start_method="forkserver")
    p = pool._ctx.Process(target=sum, args=([1, 2],))
    p.start()
    p.join(240)
    assert p.exitcode == 0 and forkserver._forkserver._forkserver_pid == server
    assert not start_fork_server("spawn")
