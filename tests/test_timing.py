"""Timing spread, the noise verdict, contention flags, the warm/cold Inductor cache, trusted geomeans."""

import ast
import subprocess
import sys

from enablebot.measure import timing
from enablebot.sweep.reports import markdown, summarize, write_csv
from enablebot.results import RunResult, RunSpec, Timing
from enablebot.sweep.engine import mark_contention

from conftest import ROOT


def _timed(e_ms, c_ms, **kw):
    import statistics

    t = Timing(repeats=len(e_ms), eager_ms=statistics.median(e_ms), compiled_ms=statistics.median(c_ms))
    t.speedup = t.eager_ms / t.compiled_ms
    return timing.assess(t, e_ms, c_ms, steal=kw.get("steal", 0.0), load_per_core=kw.get("load", 0.5))


def test_tight_repeats_are_ok_and_spread_is_reported():
    t = _timed([10.0, 10.1, 9.9, 10.0, 10.05, 9.95, 10.0, 10.02, 9.98, 10.0], [5.0, 5.01, 4.99, 5.0, 5.0, 5.02, 4.98, 5.0, 5.0, 5.0])
    assert t.noise == "ok" and t.flags == [] and t.trustworthy
    assert t.eager_p10_ms <= t.eager_ms <= t.eager_p90_ms and t.compiled_p10_ms <= t.compiled_ms <= t.compiled_p90_ms
    assert 0 < t.eager_iqr_ms < 0.2 and t.eager_cv < 0.02


def test_noisy_and_contended_measurements_are_flagged_and_not_trusted():
    # the llama: the same model at 1.59x, 7.71x and 0.26x -- compiled times all over the place
    t = _timed([10.0] * 10, [6.3, 1.3, 38.0, 6.0, 1.5, 30.0, 6.5, 1.2, 35.0, 6.1])
    assert {"spread", "high_cv"} <= set(t.flags) and t.noise == "noisy" and not t.trustworthy
    assert "cpu_steal" in _timed([10.0] * 10, [5.0] * 10, steal=0.1).flags
    assert "load" in _timed([10.0] * 10, [5.0] * 10, load=3.5).flags
    assert "few_repeats" in _timed([10.0] * 3, [5.0] * 3).flags


def test_steal_comes_from_proc_stat():
    before = timing.cpu_times()
    assert before is not None and before[1] > 0  # Linux: /proc/stat is there
    assert timing.steal_share((0, 1000), (30, 2000)) == 0.03
    assert timing.steal_share(before, before) is None


def test_the_sweep_flags_speedups_timed_beside_other_cpu_workers():
    r = RunResult(spec=RunSpec(model_id="llama"), verdict="full_graph", timing=_timed([10.0] * 10, [5.0] * 10))
    mark_contention(r, jobs=1)
    assert r.timing.trustworthy
    mark_contention(r, jobs=2)
    assert "parallel_workers" in r.timing.flags and not r.timing.trustworthy
    mark_contention(r, jobs=timing.cores() + 1)
    assert "oversubscribed" in r.timing.flags


def test_geomean_only_over_trustworthy_speedups(tmp_path):
    def res(name, t):
        return RunResult(spec=RunSpec(model_id=name), verdict="full_graph", timing=t)

    good = [res("a", _timed([10.0] * 10, [5.0] * 10)), res("b", _timed([8.0] * 10, [4.0] * 10))]
    noisy = res("c", _timed([10.0] * 10, [6.3, 1.3, 38.0, 6.0, 1.5, 30.0, 6.5, 1.2, 35.0, 6.1]))
    old = res("d", Timing(repeats=10, eager_ms=1.0, compiled_ms=4.0, speedup=0.25))  # written before assessment
    s = summarize(good + [noisy, old])
    assert s.speedup_geomean == 2.0 and s.speedups_trusted == 2 and s.speedups_measured == 4
    assert s.speedup_flags["not_assessed"] == 1 and s.speedup_flags["spread"] == 1
    md = markdown(s, [], good + [noisy, old])
    assert "over the 2 trustworthy of 4 measured" in md
    s = summarize([noisy])
    assert s.speedup_geomean is None and "no geomean" in markdown(s, [], [noisy])
    write_csv(tmp_path / "r.csv", good + [noisy])
    rows = (tmp_path / "r.csv").read_text().splitlines()
    assert rows[0].endswith("speedup_p10,speedup_p90,noise,flags,compile_cache")
    assert ",noisy,spread high_cv," in rows[3]


def test_compile_cache_warm_or_cold_from_inductor_counters(tmp_path):
    # A fresh cache dir: the first compile misses (cold), the same graph after a reset hits (warm).
    code = """
import torch
from torch._dynamo.utils import counters
from enablebot.measure.timing import compile_cache_state, compile_phases
f = lambda x: torch.sin(x) * 2 + 1
states, phases = [], []
for _ in range(2):
    torch._dynamo.reset(); counters.clear()
    torch.compile(f)(torch.ones(8))
    states.append(compile_cache_state(counters))
    phases.append(compile_phases(min_s=0.0))
torch._dynamo.reset(); counters.clear()
torch.compile(f, backend="eager")(torch.ones(8))
states.append(compile_cache_state(counters))
phases.append(compile_phases(min_s=0.0))
# Where the compile went: Inductor's codegen only on the cold compile, none with the eager backend.
print([sorted(k for k in p if k in ("compile_fx_inner", "GraphLowering.run", "_compile.compile_inner")) for p in phases])
print(states)
"""
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "['cold', 'warm', None]"
    cold, warm, eager = ast.literal_eval(p.stdout.strip().splitlines()[-2])
    assert cold == ["GraphLowering.run", "_compile.compile_inner", "compile_fx_inner"]
    assert warm == ["_compile.compile_inner"]  # Inductor's output came from the FX graph cache
    assert eager == ["_compile.compile_inner"]


def test_run_summary_states_spread_noise_and_cache():
    from enablebot.measure.render import summary_rows

    t = _timed([10.0] * 10, [6.3, 1.3, 38.0, 6.0, 1.5, 30.0, 6.5, 1.2, 35.0, 6.1])
    t.compile_s, t.compile_cache = 3.96, "warm"
    rows = dict(summary_rows(RunResult(spec=RunSpec(model_id="llama"), verdict="full_graph", timing=t)))
    assert rows["noise"].startswith("NOISY, not comparable: spread, high_cv")
    assert "p10/p50/p90" in rows["spread"]
    assert "warm Inductor cache" in rows["compile"]
