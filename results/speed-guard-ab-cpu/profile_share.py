"""How much of the Dynamo pass's trace time Dynamo's guard-latency profile takes, timed directly.

Runs the Dynamo pass items of the given types in this process with the profile kept (as before
55f9990) and each profile_guard_manager call timed, then prints the calls, their seconds and
their share of the trace stage. Timing the calls themselves is not subject to the run-to-run
noise of this 2-core VM that a side-by-side wall comparison is.

    .venv/bin/python results/speed-guard-ab-cpu/profile_share.py $(cat results/verdict-check-cpu/models.txt)
"""
import contextlib
import sys
import time

import torch._dynamo.guards as guards

from enablebot.measure import guard_profile, runner
from enablebot.results import RunSpec

calls = [0, 0.0]
original = guards.profile_guard_manager


def timed(*args, **kwargs):
    t0 = time.perf_counter()
    try:
        return original(*args, **kwargs)
    finally:
        calls[0] += 1
        calls[1] += time.perf_counter() - t0


guards.profile_guard_manager = timed
guard_profile.skipped = lambda: contextlib.nullcontext(False)  # keep the profile: time it
trace = 0.0
for model_id in sys.argv[1:]:
    for mode in ("eval", "train"):
        spec = RunSpec(model_id=model_id, mode=mode, pass_name="dynamo", backend="eager", numerics=False,
                       timing=False, fullgraph_check=False, timeout_s=120)
        before = calls[1]
        r = runner.run_spec(spec)
        trace += (r.stage_s or {}).get("trace", 0.0)
        print(f"{model_id:24s} {mode:5s} {r.verdict:14s} trace {(r.stage_s or {}).get('trace', 0):6.2f} s  "
              f"profile {calls[1] - before:5.2f} s", flush=True)
print(f"profile_guard_manager: {calls[0]} calls, {calls[1]:.1f} s of {trace:.1f} s trace "
      f"({calls[1] / max(trace, 1e-9):.1%})")
