"""A naive graph-break harness: the baseline the sweep engine is measured against (issue 18).

One process per chunk of model types. Each worker imports torch and transformers once, builds each
type once (enablebot's own resolve + build_model + build_inputs, so the tiny models and inputs are
the sweep's) and, for each mode, tries `torch.compile(model, fullgraph=True, backend="eager")`:
eval is a no-grad forward, train a forward plus backward of the sweep's loss. No isolation, no
eager run, no explain: a graph break is simply the fullgraph failure. One JSON line per item:

    {"model_type", "task", "mode", "verdict": full_graph|graph_break|error|create_error,
     "seconds", "cpu_s", "build_s", "build_cpu_s", "error"}

`seconds` is the compile step plus this item's share of the build (split over the modes), so summed
over items it is the worker time. A worker also writes one {"worker": i, "import_s": ...} line.

    PYTHONPATH=. python benchmarks/naive_harness.py --models llama gpt2 --jobs 2 --out naive.jsonl
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _now() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _is_break(exc: BaseException) -> bool:
    import torch._dynamo.exc as dexc

    # fullgraph=True turns every graph break into Unsupported (data-dependent ops included).
    return isinstance(exc, dexc.Unsupported)


def worker(models: list[str], modes: list[str], task: str, device: str, threads: int, index: int,
           out_path: str) -> None:
    t0, c0 = _now()
    import torch
    import transformers  # noqa: F401 - the import is part of what a worker pays once

    from enablebot.model.build import build_model
    from enablebot.model.inputs import build_inputs
    from enablebot.model.loss import loss_from_outputs
    from enablebot.model.registry import Registry
    from enablebot.model.resolve import resolve

    torch.set_num_threads(threads)
    registry = Registry.load_cached()
    from enablebot import jsonl

    def emit(row: dict) -> None:  # the workers append to one file: each row one fsynced O_APPEND write
        jsonl.append(out_path, row)

    t1, c1 = _now()
    emit({"worker": index, "import_s": round(t1 - t0, 3), "import_cpu_s": round(c1 - c0, 3)})
    for mt in models:
        b0, bc0 = _now()
        try:
            res = resolve(mt, registry)
            built = build_model(res, size="tiny", task=task, seed=0)
            inputs = build_inputs(built.model, built.config, built.modality, res.entry.inputs if res.entry else None,
                                  batch=2, seq_len=32, seed=0)
            model = built.model.to(device)
            inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
            error = None
        except Exception as e:  # noqa: BLE001 - a failed build is a result
            error = f"{type(e).__name__}: {str(e)[:300]}"
        b1, bc1 = _now()
        build_s, build_cpu = (b1 - b0) / len(modes), (bc1 - bc0) / len(modes)
        for mode in modes:
            row = {"model_type": mt, "task": task, "mode": mode, "build_s": round(build_s, 3),
                   "build_cpu_s": round(build_cpu, 3)}
            s0, sc0 = _now()
            if error:
                row.update(verdict="create_error", error=error)
            else:
                try:
                    model.train(mode == "train")
                    torch._dynamo.reset()
                    compiled = torch.compile(model, fullgraph=True, backend="eager")
                    if mode == "eval":
                        with torch.no_grad():
                            compiled(**inputs)
                    else:
                        model.zero_grad(set_to_none=True)
                        loss_from_outputs(compiled(**inputs)).backward()
                    row["verdict"] = "full_graph"
                except Exception as e:  # noqa: BLE001 - the failure is the finding
                    row.update(verdict="graph_break" if _is_break(e) else "error",
                               error=f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
            s1, sc1 = _now()
            row.update(seconds=round(s1 - s0 + build_s, 3), cpu_s=round(sc1 - sc0 + build_cpu, 3))
            emit(row)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=[], help="model types")
    ap.add_argument("--models-file", type=Path, help="model types, one per line")
    ap.add_argument("--modes", nargs="+", default=["eval", "train"], choices=["eval", "train"])
    ap.add_argument("--task", default="base", help="base or head (as the sweep's --task)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, required=True, help="JSONL output (overwritten)")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)  # internal: run chunk i
    args = ap.parse_args(argv)
    models = list(args.models)
    if args.models_file:
        models += [ln.strip() for ln in args.models_file.read_text().splitlines()
                   if ln.strip() and not ln.startswith("#")]
    if not models:
        print("error: no model types (--models or --models-file)", file=sys.stderr)
        return 2
    jobs = max(1, min(args.jobs, len(models)))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = max(1, cores // jobs)  # as the sweep does: no oversubscription
    if args.worker is not None:
        worker(models[args.worker::jobs], args.modes, args.task, args.device, threads, args.worker,
               f"{args.out}.{args.worker}")
        return 0
    for i in range(jobs):
        Path(f"{args.out}.{i}").unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    base = [sys.executable, __file__, "--models", *models, "--modes", *args.modes, "--task", args.task,
            "--jobs", str(jobs), "--device", args.device, "--out", str(args.out)]
    procs = [subprocess.Popen([*base, "--worker", str(i)], env=env) for i in range(jobs)]
    rc = max(p.wait() for p in procs)
    with open(args.out, "w", encoding="utf-8") as f:
        for i in range(jobs):
            part = Path(f"{args.out}.{i}")
            if part.exists():
                f.write(part.read_text(encoding="utf-8"))
                part.unlink()
    return rc


if __name__ == "__main__":
    sys.exit(main())
