"""Where a sweep item's CPU time goes, against the naive harness, in ONE process (issue 18).

CPU time (time.process_time, not wall: it holds on a loaded machine) of every stage:
  * process start and imports, in child processes (python alone, + torch, + transformers, + Dynamo
    and enablebot.measure.runner);
  * in this process: imports, registry load (cold and the memoised load_cached), catalog;
  * the first compile in a process (Dynamo's lazy imports), paid once per worker, on a warm-up model;
  * per model and mode, the naive path: resolve, build, inputs, fullgraph=True compile step;
    then on the same built model `torch._dynamo.explain` alone (what the sweep runs instead);
  * per model and mode, the sweep's own `run_spec` (Dynamo pass) with its stage clock switched to CPU
    time, plus what the pool adds: result to_dict + pickling through a Pipe + from_dict.

    PYTHONPATH=. python benchmarks/sweep_overhead.py --models llama gpt2 bert mistral qwen2 --json /tmp/o.json
    PYTHONPATH=. python benchmarks/sweep_overhead.py --models llama --cprofile explain   # top functions
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

IMPORTS = {
    "python": "pass",
    "+torch": "import torch",
    "+transformers": "import torch, transformers",
    "+dynamo+runner": "import torch, transformers, torch._dynamo, enablebot.measure.runner, enablebot.model.build, enablebot.model.inputs",
}


def child_cpu(code: str) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r0 = os.times()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    r1 = os.times()
    return (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)


class Clock:
    def __init__(self) -> None:
        self.s: dict[str, float] = {}

    def __call__(self, name: str):
        clock = self

        class _Ctx:
            def __enter__(self):
                self.c0 = time.process_time()

            def __exit__(self, *exc):
                clock.s[name] = clock.s.get(name, 0.0) + time.process_time() - self.c0

        return _Ctx()


def naive_item(mt: str, mode: str, registry, clock: Clock, with_explain: bool = True) -> str:
    import torch

    from enablebot.model.build import build_model
    from enablebot.model.inputs import build_inputs
    from enablebot.model.loss import loss_from_outputs
    from enablebot.model.resolve import resolve

    with clock("resolve"):
        res = resolve(mt, registry)
    with clock("build"):
        built = build_model(res, size="tiny", task="base", seed=0)
    with clock("inputs"):
        inputs = build_inputs(built.model, built.config, built.modality, res.entry.inputs if res.entry else None,
                              batch=2, seq_len=32, seed=0)
    model = built.model
    model.train(mode == "train")
    verdict = "full_graph"
    with clock("fullgraph_step"):
        torch._dynamo.reset()
        try:
            compiled = torch.compile(model, fullgraph=True, backend="eager")
            if mode == "eval":
                with torch.no_grad():
                    compiled(**inputs)
            else:
                loss_from_outputs(compiled(**inputs)).backward()
        except Exception as e:  # noqa: BLE001
            verdict = f"error {type(e).__name__}"
    if with_explain:
        with clock("explain_alone"):
            torch._dynamo.reset()
            with torch.no_grad() if mode == "eval" else torch.enable_grad():
                torch._dynamo.explain(model)(**inputs)
    return verdict


def sweep_item(mt: str, mode: str, clock: Clock) -> tuple[str, dict[str, float]]:
    import multiprocessing as mp
    import pickle

    from enablebot.measure import runner
    from enablebot.results import RunResult, RunSpec

    spec = RunSpec(model_id=mt, task="base", mode=mode, device="cpu", backend="eager", fast=True, numerics=False,
                   timing=False, fullgraph_check=False, timeout_s=300)
    real = runner.time
    runner.time = types.SimpleNamespace(time=time.time, perf_counter=time.process_time)  # stage_s in CPU s
    try:
        with clock("run_spec"):
            result = runner.run_spec(spec, progress=lambda m: None)
    finally:
        runner.time = real
    with clock("serialise"):
        d = result.to_dict()
        blob = pickle.dumps(d)
    a, b = mp.Pipe()
    got: list = []
    with clock("pipe"):
        t = threading.Thread(target=lambda: got.append(b.recv()))
        t.start()
        a.send(d)
        t.join()
    with clock("deserialise"):
        RunResult.from_dict(got[0])
    a.close(), b.close()
    clock.s["result_bytes"] = clock.s.get("result_bytes", 0) + len(blob)
    return result.verdict, dict(result.stage_s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["llama", "gpt2", "bert", "mistral", "qwen2"])
    ap.add_argument("--modes", nargs="+", default=["eval", "train"])
    ap.add_argument("--warmup", default="opt", help="a model run first, not counted (first compile in a process)")
    ap.add_argument("--no-children", action="store_true", help="skip the process start/import measurements")
    ap.add_argument("--cprofile", choices=["explain", "fullgraph"], help="print the top functions of one stage")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    out: dict = {"process_cpu_s": {}, "in_process_cpu_s": {}, "per_item_cpu_ms": {}}
    if not args.no_children:
        for name, code in IMPORTS.items():
            out["process_cpu_s"][name] = round(child_cpu(code), 3)
    c = Clock()
    with c("import torch"):
        import torch
    with c("import transformers"):
        import transformers  # noqa: F401
    with c("import torch._dynamo"):
        import torch._dynamo  # noqa: F401
    with c("import enablebot.runner+build+inputs"):
        import enablebot.model.build  # noqa: F401
        import enablebot.model.inputs  # noqa: F401
        import enablebot.measure.runner  # noqa: F401
    torch.set_num_threads(1)
    from enablebot.model.catalog import known_architectures
    from enablebot.model.registry import Registry

    with c("catalog known_architectures (first)"):
        known_architectures()
    with c("Registry.load (cold parse)"):
        Registry.load()
    with c("Registry.load_cached (first)"):
        registry = Registry.load_cached()
    with c("Registry.load_cached (hit)"):
        Registry.load_cached()
    with c("first compile in the process (warm-up model)"):
        for mode in args.modes:
            naive_item(args.warmup, mode, registry, Clock(), with_explain=True)
    out["in_process_cpu_s"] = {k: round(v, 3) for k, v in c.s.items()}

    naive, sweep, stages = Clock(), Clock(), Clock()
    verdicts = {}
    n = 0
    for mt in args.models:
        for mode in args.modes:
            nv = naive_item(mt, mode, registry, naive)
            sv, stage_s = sweep_item(mt, mode, sweep)
            for k, v in stage_s.items():
                stages.s[k] = stages.s.get(k, 0.0) + v
            verdicts[f"{mt}/{mode}"] = {"naive": nv, "sweep": sv}
            n += 1
    ms = lambda d: {k: round(1000 * v / n, 1) for k, v in d.items() if k != "result_bytes"}  # noqa: E731
    out["per_item_cpu_ms"] = {"naive": ms(naive.s), "sweep": ms(sweep.s), "sweep_stages": ms(stages.s),
                              "result_bytes": round(sweep.s.get("result_bytes", 0) / n)}
    naive_total = sum(v for k, v in naive.s.items() if k != "explain_alone")
    sweep_total = sum(v for k, v in sweep.s.items() if k != "result_bytes")
    out["per_item_cpu_ms"]["naive_total"] = round(1000 * naive_total / n, 1)
    out["per_item_cpu_ms"]["sweep_total"] = round(1000 * sweep_total / n, 1)
    out["ratio_sweep_over_naive"] = round(sweep_total / naive_total, 3)
    out["verdicts"] = verdicts
    out["items"] = n
    print(json.dumps(out, indent=1))
    if args.cprofile:
        import cProfile
        import pstats

        mt, mode = args.models[0], args.modes[0]
        prof = cProfile.Profile()
        probe = Clock()
        if args.cprofile == "explain":
            from enablebot.model.build import build_model
            from enablebot.model.inputs import build_inputs
            from enablebot.model.resolve import resolve

            res = resolve(mt, registry)
            built = build_model(res, size="tiny", task="base")
            inputs = build_inputs(built.model, built.config, built.modality, res.entry.inputs if res.entry else None)
            torch._dynamo.reset()
            prof.enable()
            with torch.no_grad():
                torch._dynamo.explain(built.model)(**inputs)
            prof.disable()
        else:
            prof.enable()
            naive_item(mt, mode, registry, probe, with_explain=False)
            prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
