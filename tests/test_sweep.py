"""The sweep: isolated workers, resume after a kill, shards, reports and the baseline check.
Real tiny models through the Dynamo pass (explain + fullgraph capture) on CPU."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from enablebot.sweep.baseline import Baseline, baseline_from, compare
from enablebot.sweep.checkpoint import RESULTS_FILE, Checkpoint, load_results
from enablebot.model.registry import ArchEntry, Registry
from enablebot.sweep.engine import SweepOptions, load_runs, plan, planned_of, run_sweep

from conftest import MINIMAL_BASELINE, ROOT

MODELS = ["gpt2", "jetmoe", "llama", "mistral"]  # shard 1/2 gets three, 2/2 one


def cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "enablebot.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=900, **kw)


def sweep_args(out, *extra):
    args = ["sweep", "--out", str(out), "--mode", "eval", "--task", "head", "--jobs", "2", "--timeout", "240",
            "--scenario", "call"]
    for m in MODELS:
        args += ["-m", m]
    return args + list(extra)


@pytest.fixture(scope="module")
def full_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("full")
    p = cli(*sweep_args(out, "--progress-every", "2"))
    assert p.returncode == 0, p.stderr
    FULL_SWEEP_LOG["stderr"] = p.stderr
    return out


FULL_SWEEP_LOG: dict = {}


def test_sweep_without_a_tty_logs_each_item_counts_and_a_human_summary(full_sweep):
    err = FULL_SWEEP_LOG["stderr"]
    lines = err.splitlines()
    items = [ln for ln in lines if ln.startswith("[") and "/head/eval/call: " in ln]
    assert len(items) == len(MODELS) and items[0].startswith(f"[1/{len(MODELS)}] ")
    assert any(ln.startswith(f"progress: 2/{len(MODELS)} done (") and "ETA" in ln for ln in lines), err
    assert any(ln.startswith(f"progress: {len(MODELS)}/{len(MODELS)} done (") for ln in lines), err
    final = next(ln for ln in lines if ln.startswith("ran "))
    assert "{" not in final and "3 full_graph" in final and "1 graph_break" in final, final
    # cluster tables name the line; every output is readable by others (0644), not 0600
    md = (full_sweep / "report.md").read_text()
    assert re.search(r"`models/jetmoe/modeling_jetmoe\.py:\d+ in forward`", md), md
    for f in ("summary.json", "triage.json", "results.csv", "report.md", "report.html", RESULTS_FILE):
        assert (full_sweep / f).stat().st_mode & 0o777 == 0o644, f


def test_sweep_results_and_reports(full_sweep):
    results = load_results(full_sweep / RESULTS_FILE)
    assert len(results) == len(MODELS)
    verdicts = {r.spec.model_id: r.verdict for r in results.values()}
    assert verdicts["gpt2"] == "full_graph" and verdicts["jetmoe"] == "graph_break"
    for f in ("summary.json", "triage.json", "results.csv", "report.md", "report.html"):
        assert (full_sweep / f).stat().st_size > 0
    triage = json.loads((full_sweep / "triage.json").read_text())
    top = triage[0]
    assert top["gb_type"] == "Data dependent operator" and top["models"] == ["jetmoe"]
    assert top["location"].endswith("modeling_jetmoe.py:forward") and top["classification"] == "config"
    header = (full_sweep / "results.csv").read_text().splitlines()[0].split(",")
    for col in ("name", "graph_breaks", "unique_graph_breaks", "speedup", "compilation_latency"):
        assert col in header
    assert "<img src='data:image/png;base64," in (full_sweep / "report.html").read_text()
    # Where the time goes: the Dynamo pass builds, runs eager and traces every model once.
    for r in results.values():
        assert {"create", "eager", "trace"} <= set(r.stage_s) and r.stage_s["trace"] > 0
    summary = json.loads((full_sweep / "summary.json").read_text())
    assert summary["stage_seconds"]["trace"] > 0
    assert "where the time goes" in (full_sweep / "report.md").read_text()
    runs = load_runs(full_sweep)
    assert runs[-1]["ran"] == len(MODELS) and runs[-1]["wall_s"] > 0 and runs[-1]["pass"] == "dynamo"


def test_shards_merge_to_the_same_result_as_one_sweep(full_sweep, tmp_path):
    for i in (1, 2):
        p = cli(*sweep_args(tmp_path / f"s{i}", "--shard", f"{i}/2", "--no-report"))
        assert p.returncode == 0, p.stderr
    sizes = [len(load_results(tmp_path / f"s{i}" / RESULTS_FILE)) for i in (1, 2)]
    assert sum(sizes) == len(MODELS) and all(sizes)  # a real split, nothing lost
    p = cli("merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "merged"))
    assert p.returncode == 0, p.stderr
    merged = load_results(tmp_path / "merged" / RESULTS_FILE)
    one = load_results(full_sweep / RESULTS_FILE)
    view = lambda rs: {k: (r.verdict, r.stats.graph_breaks, [b.registry_id for b in r.graph_breaks]) for k, r in rs.items()}
    assert view(merged) == view(one)
    # the shards' invocations travel along: sweep_speed --results sums their walls
    runs = load_runs(tmp_path / "merged")
    assert [r["ran"] for r in runs] == sizes
    assert planned_of(runs) == len(MODELS)  # the shards' plans add up; a resumed sweep's do not
    assert planned_of(load_runs(tmp_path / "s1") * 2) == sizes[0]
    assert sum(r["wall_s"] for r in runs) == pytest.approx(sum(load_runs(tmp_path / f"s{i}")[0]["wall_s"] for i in (1, 2)))


def test_resume_after_a_killed_sweep_loses_and_repeats_nothing(tmp_path):
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "enablebot.cli", *sweep_args(out, "--jobs", "1", "--no-report")],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    ckpt = out / RESULTS_FILE
    deadline = time.time() + 300
    while time.time() < deadline and not (ckpt.exists() and ckpt.read_text().count("\n") >= 1):
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = load_results(ckpt)
    assert 1 <= len(before) < len(MODELS)
    with open(ckpt, "a") as f:  # the kill can also land mid-write: a torn last line
        f.write('{"spec": {"model_id": "llama", "tas')
    p = cli(*sweep_args(out, "--jobs", "1", "--no-report"))
    assert p.returncode == 0, p.stderr
    assert f"skipped {len(before)} already done" in " ".join(p.stderr.split())
    after = load_results(ckpt)
    assert set(after) == {f"{m}|head|cpu|eval|float32|call" for m in MODELS}
    for k, r in before.items():  # finished results were kept, not redone
        assert after[k].started_at == r.started_at
    lines = [json.loads(ln) for ln in ckpt.read_text().splitlines() if ln.startswith('{"spec": {') is False and ln.strip()]
    keys = [f"{d['spec']['model_id']}|{d['spec']['task']}|cpu|eval|float32|{d['spec']['scenario']}" for d in lines]
    assert len(keys) == len(set(keys)) == len(MODELS)


def _processes_with(marker: str) -> list[int]:
    """Pids whose environment holds `marker` (the sweep, its fork server and its workers: workers
    run in their own sessions, so neither the process group nor the session finds them)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "environ").read_bytes().split(b"\0"):
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc (Linux)")
def test_sigterm_stops_the_sweep_kills_its_busy_workers_and_keeps_the_checkpoint(tmp_path):
    out = tmp_path / "terminated"
    marker = f"ENABLEBOT_TEST_MARK={os.getpid()}-{time.time_ns()}"
    env = dict(os.environ, ENABLEBOT_TEST_MARK=marker.split("=", 1)[1])
    proc = subprocess.Popen([sys.executable, "-m", "enablebot.cli", *sweep_args(out, "--jobs", "1", "--no-report")],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    ckpt = out / RESULTS_FILE
    deadline = time.time() + 300
    while time.time() < deadline and not (ckpt.exists() and ckpt.read_text().count("\n") >= 1):
        time.sleep(0.2)
    workers = [p for p in _processes_with(marker) if p != proc.pid]
    assert workers, "the sweep should have a worker running its next model"
    proc.send_signal(signal.SIGTERM)  # what `timeout` and a cancelled CI job send
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "rerun the same command to resume" in " ".join(stderr.split())
    deadline = time.time() + 5  # the kernel may take a moment to reap
    while time.time() < deadline and _processes_with(marker):
        time.sleep(0.1)
    assert _processes_with(marker) == [], "a worker outlived the sweep"
    kept = load_results(ckpt)
    assert 1 <= len(kept) < len(MODELS)
    # The killed invocation's wall is logged, so a resumed pass's time still adds up.
    (run,) = load_runs(out)
    assert run["interrupted"] is True and run["ran"] == len(kept) and run["not_started"] >= 1 and run["wall_s"] > 0


def test_a_crashing_and_a_hanging_worker_do_not_stop_the_sweep(tmp_path):
    reg = Registry.load(ROOT / "model_registry.yaml")
    for model, hook in (("gpt2", "abort"), ("bert", "hang")):
        e = reg.get(model)
        reg.upsert(ArchEntry.from_dict({**e.to_dict(), "hook": f"enablebot.testing.faults:{hook}"}))
    reg.save(tmp_path / "reg.yaml")
    # The hang is caught by its own short timeout; llama gets all the time a loaded machine needs,
    # so the outcome does not depend on how fast llama builds.
    opts = SweepOptions(modes=("eval",), tasks=("head",), timeout_s=600, timeouts={"bert": 8}, scenarios=("call",),
                        registry=str(tmp_path / "reg.yaml"))
    items = plan(reg, opts, ["gpt2", "bert", "llama"])
    stats = run_sweep(items, opts, tmp_path / "out", jobs=2)
    res = {r.spec.model_id: r for r in load_results(tmp_path / "out" / RESULTS_FILE).values()}
    assert stats.ran == 3
    assert res["gpt2"].verdict == "crash" and "SIGABRT" in res["gpt2"].error.message
    assert res["bert"].verdict == "timeout" and "no result after 8 s" in res["bert"].error.message
    assert res["bert"].spec.timeout_s == 8 and res["llama"].spec.timeout_s == 600
    assert res["llama"].verdict == "full_graph"


def test_a_registry_entry_timeout_raises_the_sweep_limit_for_its_architecture_only(tmp_path):
    """`timeout_s` on a registry entry is data the engine honours: both models hang; the one whose
    entry says 8 s is killed after 8 s, the other at the sweep's 3 s. A longer sweep limit wins."""
    reg = Registry.load(ROOT / "model_registry.yaml")
    for model in ("gpt2", "bert"):
        extra = {"timeout_s": 8} if model == "bert" else {}
        reg.upsert(ArchEntry.from_dict({**reg.get(model).to_dict(), "hook": "enablebot.testing.faults:hang", **extra}))
    reg.save(tmp_path / "reg.yaml")
    opts = SweepOptions(modes=("eval",), tasks=("head",), timeout_s=3, scenarios=("call",),
                        registry=str(tmp_path / "reg.yaml"))
    run_sweep(plan(reg, opts, ["gpt2", "bert"]), opts, tmp_path / "out", jobs=2)
    res = {r.spec.model_id: r for r in load_results(tmp_path / "out" / RESULTS_FILE).values()}
    assert res["bert"].verdict == "timeout" and "no result after 8 s" in res["bert"].error.message
    assert res["gpt2"].verdict == "timeout" and "no result after 3 s" in res["gpt2"].error.message
    from enablebot.sweep.engine import item_timeout

    bert = plan(reg, opts, ["bert"])[0]
    assert item_timeout(bert, SweepOptions(timeout_s=600, registry=opts.registry)) == 600
    assert item_timeout(bert, SweepOptions(timeout_s=3, timeouts={"bert": 5}, registry=opts.registry)) == 5
    # The shipped registry: funnel's cold Inductor compile outlasts the H200 pass's 120 s limit.
    assert Registry.load(ROOT / "model_registry.yaml").get("funnel").timeout_s == 300


def test_check_passes_on_its_baseline_and_fails_on_a_planted_regression(full_sweep, tmp_path):
    b = tmp_path / "baseline.json"
    assert cli("check", str(full_sweep), "--baseline", str(b), "--update").returncode == 0
    p = cli("check", str(full_sweep), "--baseline", str(b))
    assert p.returncode == 0, p.stdout + p.stderr
    base = Baseline.load(b)
    # planted: the baseline says jetmoe compiled to one graph; the real result breaks
    key = "jetmoe|head|cpu|eval|float32|call"
    base.entries[key].verdict, base.entries[key].graph_breaks = "full_graph", 0
    base.save(b)
    p = cli("check", str(full_sweep), "--baseline", str(b))
    assert p.returncode == 1 and "jetmoe" in p.stdout and "full_graph -> graph_break" in p.stdout
    base.entries[key].flaky = True  # flaky models are reported, not failed on
    base.save(b)
    p = cli("check", str(full_sweep), "--baseline", str(b))
    assert p.returncode == 0 and "Flaky" in p.stdout


def test_check_reports_improvements_and_fewer_breaks():
    from enablebot.results import CompileStats, RunResult, RunSpec, Versions

    r = RunResult(spec=RunSpec(model_id="jetmoe", task="head"), verdict="graph_break",
                  versions=Versions(torch="t", transformers="x"), stats=CompileStats(graph_breaks=3))
    base = baseline_from([r])
    r2 = RunResult.from_dict(r.to_dict())
    r2.verdict, r2.stats.graph_breaks = "full_graph", 0
    rep = compare([r2], base)
    assert not rep.failed and rep.improvements and rep.improvements[0].what == "graph_break -> full_graph"


def _results_dir(path, *results):
    from enablebot.sweep.checkpoint import write_results

    path.mkdir(parents=True, exist_ok=True)
    write_results(path / RESULTS_FILE, results)
    return path


def test_check_refuses_to_compare_across_passes_and_scenarios(tmp_path):
    from enablebot.results import CompileStats, Numerics, RunResult, RunSpec, Versions

    v = Versions(torch="2.13.0", transformers="5.24.0")
    dynamo = RunResult(spec=RunSpec(model_id="llama", task="head", fast=True, numerics=False, timing=False),
                       verdict="full_graph", versions=v, stats=CompileStats())
    inductor = RunResult(spec=RunSpec(model_id="llama", task="head"), verdict="full_graph", versions=v,
                         stats=CompileStats(), numerics=Numerics(passed=True, tol=1e-3))
    assert (dynamo.spec.pass_name, inductor.spec.pass_name) == ("dynamo", "inductor")
    dynamic = RunResult.from_dict(inductor.to_dict())
    dynamic.spec.dynamic = True
    b = tmp_path / "base.json"
    p = cli("check", str(_results_dir(tmp_path / "dyn", dynamo)), "--baseline", str(b), "--update")
    assert p.returncode == 0, p.stderr
    assert Baseline.load(b).kind() == "dynamo" and Baseline.load(b).scenarios == ["call"]
    # Inductor results against the Dynamo baseline: exit 2, saying what was found (no false "improvement").
    p = cli("check", str(_results_dir(tmp_path / "ind", inductor)), "--baseline", str(b))
    err = " ".join(p.stderr.split())
    assert p.returncode == 2 and "the inductor pass" in err and "is the dynamo pass" in err, err
    p = cli("check", str(_results_dir(tmp_path / "ind", inductor)), "--baseline", str(b), "--update")
    assert p.returncode == 2 and Baseline.load(b).kind() == "dynamo"  # not overwritten
    # The repo's CPU baseline predates the recorded pass (inferred as Dynamo: it has no numerics)
    # and predates scenarios (the minimal harness): refused either way, with what to do.
    p = cli("check", str(tmp_path / "ind"), "--baseline", str(MINIMAL_BASELINE))
    assert p.returncode == 2 and "is the dynamo pass" in " ".join(p.stderr.split())
    p = cli("check", str(tmp_path / "dyn"), "--baseline", str(MINIMAL_BASELINE))
    assert p.returncode == 2 and "predates scenarios" in " ".join(p.stderr.split())
    # ... and refreshing it with --update, as the message says, is what works.
    stale = tmp_path / "stale.json"
    stale.write_bytes(MINIMAL_BASELINE.read_bytes())
    p = cli("check", str(tmp_path / "dyn"), "--baseline", str(stale), "--update")
    assert p.returncode == 0, p.stderr
    assert not Baseline.load(stale).predates_scenarios and Baseline.load(stale).scenarios == ["call"]
    assert cli("check", str(tmp_path / "dyn"), "--baseline", str(stale)).returncode == 0
    # Scenarios may mix in one directory: each key carries its scenario, so items only ever meet
    # their own scenario; a directory mixing passes is refused on its own.
    ib = tmp_path / "ind.json"
    assert cli("check", str(tmp_path / "ind"), "--baseline", str(ib), "--update").returncode == 0
    dynamic.spec.scenario = "dynamic"
    p = cli("check", str(_results_dir(tmp_path / "both", inductor, dynamic)), "--baseline", str(ib))
    assert p.returncode == 0 and "New runs not in the baseline: 1" in p.stdout + p.stderr, p.stdout + p.stderr
    other = RunResult.from_dict(dynamo.to_dict())
    other.spec.model_id = "gpt2"
    p = cli("check", str(_results_dir(tmp_path / "mixed", inductor, other)), "--baseline", str(ib))
    assert p.returncode == 2 and "mix passes" in " ".join(p.stderr.split())


def test_torn_checkpoint_line_is_dropped(tmp_path):
    (tmp_path / RESULTS_FILE).write_text('{"spec": {"model_id": "x"')
    ck = Checkpoint(tmp_path)
    assert ck.done == {} and (tmp_path / RESULTS_FILE).read_text() == ""  # truncated: the next append starts clean


def test_registry_record_stores_each_architectures_status(full_sweep, tmp_path):
    import shutil

    reg_path = tmp_path / "reg.yaml"
    shutil.copy(ROOT / "model_registry.yaml", reg_path)
    p = cli("registry", "record", str(full_sweep), "--registry", str(reg_path))
    assert p.returncode == 0, p.stderr
    reg = Registry.load(reg_path)
    jet, gpt = reg.get("jetmoe").status["cpu/eval"], reg.get("gpt2").status["cpu/eval"]
    assert jet["verdict"] == "graph_break" and gpt["verdict"] == "full_graph"
    assert jet["torch"] and jet["transformers"]
    # the Dynamo pass judges no numerics, so nothing counts as supported yet
    assert gpt["supported_at"] is None and gpt["numerics_passed"] is None


def test_main_task_is_the_head_where_there_is_one_else_the_base():
    reg = Registry.load()
    items = plan(reg, SweepOptions(modes=("eval",), tasks=("main",), scenarios=("call",)), models=["llama", "bert", "aimv2"])
    assert {(it.model_id, it.task) for it in items} == {("llama", "head"), ("bert", "head"), ("aimv2", "base")}
    both = plan(reg, SweepOptions(modes=("eval",), tasks=("main", "head"), scenarios=("call",)), models=["llama"])
    assert [(it.model_id, it.task) for it in both] == [("llama", "head")]  # no duplicate item


def test_a_worker_gets_the_architecture_it_already_imported_next():
    from enablebot.execute.pool import _affine
    from enablebot.results import RunSpec

    queue = ("c", "b", "a", "b")
    pending = [RunSpec(model_id=m) for m in queue][::-1]  # the pool pops from the end
    assert pending[_affine(pending, None)].model_id == "c"
    assert pending[_affine(pending, "a")].model_id == "a"
    assert pending[_affine(pending, "zzz")].model_id == "c"


def test_the_default_dynamo_pass_adds_a_decode_step_for_generative_heads_only():
    items = plan(Registry.load_cached(None), SweepOptions(), models=["llama", "albert", "t5"])
    got = {(it.model_id, it.task, it.mode, it.scenario) for it in items}
    assert ("llama", "head", "eval", "decode") in got and ("t5", "head", "eval", "decode") in got
    # albert's head is a masked LM: no generate(), no decode step
    assert not {it for it in got if it[3] == "decode" and (it[0] == "albert" or it[2] == "train" or it[1] == "base")}
    assert ("llama", "base", "train", "call") in got
    only = plan(Registry.load_cached(None), SweepOptions(scenarios=("dynamic",), modes=("eval", "train")), ["bert"])
    assert {it.scenario for it in only} == {"dynamic"} and {it.mode for it in only} == {"eval"}


def test_a_cuda_worker_is_retired_only_after_a_failure_that_touched_cuda():
    from enablebot.results import RunResult, RunSpec

    def res(device, verdict):
        return RunResult(spec=RunSpec(model_id="m", device=device), verdict=verdict)

    def _poisoned(r):
        return r.verdict.poisons_worker(r.spec.device)

    assert _poisoned(res("cuda", "eager_error")) and _poisoned(res("cuda", "compile_error"))
    assert not _poisoned(res("cuda", "create_error"))  # built on the CPU: the CUDA context is clean
    assert not _poisoned(res("cuda", "full_graph")) and not _poisoned(res("cpu", "eager_error"))
    assert _poisoned(res("cpu", "crash")) and _poisoned(res("cpu", "timeout"))


def test_bad_model_lists_are_refused_before_any_work(tmp_path):
    empty = tmp_path / "models.txt"
    empty.write_text("# nothing here yet\n\n")
    p = cli("sweep", "--out", str(tmp_path / "a"), "--models-file", str(empty))
    assert p.returncode == 2 and "lists no model types" in p.stderr  # must not widen to the whole zoo
    p = cli("sweep", "--out", str(tmp_path / "b"), "-m", "llama", "-m", "no_such_arch")
    assert p.returncode == 2 and "no_such_arch" in p.stderr
    assert not (tmp_path / "a" / RESULTS_FILE).exists() and not (tmp_path / "b" / RESULTS_FILE).exists()


def test_every_known_architecture_has_a_model_to_sweep():
    """Types with only a backbone, matting, keypoint or retrieval class used to drop out of the plan."""
    from enablebot.model.catalog import known_architectures

    known = known_architectures()
    assert [mt for mt, a in known.items() if not (a.base or a.head)] == []
    assert (known["vitmatte"].head, known["vitmatte"].task) == ("VitMatteForImageMatting", "image-matting")
    assert known["resnet"].task == "image-classification"  # a fallback never displaces a usual head
    items = plan(Registry.load_cached(None), SweepOptions(modes=("eval",), tasks=("main",)), ["vitmatte", "superglue"])
    assert sorted((it.model_id, it.task) for it in items) == [("superglue", "head"), ("vitmatte", "head")]


def test_the_diagnostic_naive_scenario_is_planned_in_eval_and_train_and_never_by_default():
    reg = Registry.load_cached(None)
    items = plan(reg, SweepOptions(scenarios=("naive", "call_unpadded"), tasks=("base",)), ["llama"])
    assert {(it.mode, it.scenario) for it in items} == {("eval", "naive"), ("train", "naive"), ("eval", "call_unpadded")}
    assert not {it for it in plan(reg, SweepOptions(), ["llama"]) if it.scenario == "naive"}
    import torch

    from enablebot.measure.scenarios import plan as plan_steps

    inputs = {"input_ids": torch.ones(2, 8, dtype=torch.long)}
    steps = plan_steps("naive", torch.nn.Linear(2, 2), None, inputs, "text", "train")
    assert steps.skip_reason is None and torch.equal(steps.steps[0].make_inputs()["input_ids"], inputs["input_ids"])


def test_an_inductor_sweep_shares_triton_kernels_across_models_unless_the_user_set_it():
    import subprocess
    import sys

    from enablebot.sweep.engine import INDUCTOR_ENV, with_inductor_env

    assert with_inductor_env({}) == INDUCTOR_ENV
    assert with_inductor_env({"TORCHINDUCTOR_UNIQUE_KERNEL_NAMES": "1"}) == {}  # the user's own setting stands
    # The variable is the one torch reads: with it, Inductor names every Triton kernel `triton_`.
    probe = "import torch._inductor.config as c; print(c.triton.unique_kernel_names)"
    for env, want in ((INDUCTOR_ENV, "False"), ({"TORCHINDUCTOR_UNIQUE_KERNEL_NAMES": "1"}, "True")):
        out = subprocess.run([sys.executable, "-c", probe], env={**os.environ, **env}, capture_output=True,
                             text=True, timeout=300)
        assert out.stdout.strip() == want, out.stderr
