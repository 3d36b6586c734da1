"""The one child entry point. Every process that runs a model starts here:

  python -m enablebot.execute.worker run SPEC.json RESULT.json                  one run (isolation.run_in_child)
  python -m enablebot.execute.worker reference-dump SPEC.json DATA.pt OUT.json   held-out numerics, unpatched
  python -m enablebot.execute.worker reference-check SPEC.json DATA.pt OUT.json  held-out numerics, patched
  serve(...)                                                             a sweep worker (pool.WorkerPool)

The execution layer's duties are here, once: install a candidate's overlay before torch or
transformers are imported (a sandboxed child: isolation.child_command), apply resource limits,
relay progress (stderr lines prefixed PROGRESS_PREFIX), write the result atomically.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from typing import Any

PROGRESS_PREFIX = "[enablebot] "


def _progress(msg: str) -> None:
    print(PROGRESS_PREFIX + msg, file=sys.stderr, flush=True)


def _load_spec(spec_path: str) -> Any:
    with open(spec_path, encoding="utf-8") as f:
        raw = json.load(f)
    if raw.get("overlay_dir"):
        # Before torch/transformers are imported: patched copies must shadow installed files.
        from enablebot.execute.overlay_loader import install_overlay

        install_overlay(raw["overlay_dir"])
    from enablebot.results import RunSpec

    return RunSpec.from_dict(raw)


def main(argv: list[str] | None = None) -> int:
    args = list(argv if argv is not None else sys.argv[1:])
    if args and args[0].endswith(".json"):
        args = ["run", *args]  # the older form: SPEC.json RESULT.json
    kind, rest = args[0], args[1:]
    from enablebot.fileio import atomic_write_text

    if kind == "run":
        spec_path, out_path = rest[:2]
        spec = _load_spec(spec_path)
        from enablebot.measure.runner import run_spec

        result = run_spec(spec, progress=_progress)
        atomic_write_text(out_path, json.dumps(result.to_dict(), indent=1))
        return 0
    if kind in ("reference-dump", "reference-check"):
        spec_path, data_path, out_path = rest[:3]
        spec = _load_spec(spec_path)
        from enablebot.measure import heldout

        out = heldout.dump(spec, data_path) if kind == "reference-dump" else heldout.check(spec, data_path)
        atomic_write_text(out_path, json.dumps(out))
        return 0
    print(f"enablebot.execute.worker: unknown job {kind!r} (run, reference-dump, reference-check)", file=sys.stderr)
    return 2


# Young-generation collections per allocation count: Dynamo's tracing allocates millions of small
# objects, and CPython's default (700) runs a collection every 700 of them, each scanning the young
# objects again. Measured in one process on 2 cores (llama, bert, t5, glm5_next; second runs):
# about 9% less trace time. What is collected, and when it is freed, does not change a verdict.
# A full collection after every item scans the whole heap a worker has grown (Dynamo's caches, the
# kept build): sampled on the whole CPU pass (py-spy, 2026-12-07) it took 20-28% of each worker's
# time, outside every item's own clock, so workers sat 31% idle. It now runs only where the address
# space nears the worker's limit (FULL_GC_AT of it), so one item's cyclic garbage still never costs
# the next item its memory headroom; elsewhere CPython's own generations collect it.
GC_THRESHOLDS = (50_000, 20, 100)
FULL_GC_AT = 0.5


def _near_limit(limits: Any) -> bool:
    """Whether this process's address space is past FULL_GC_AT of its RLIMIT_AS (Linux)."""
    mb = getattr(limits, "address_space_mb", None)
    if not mb:
        return False
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return True  # cannot tell: collect, as before
    return pages * os.sysconf("SC_PAGE_SIZE") > FULL_GC_AT * mb * 2**20


def _tune_gc() -> None:
    """Freeze what the imports made (the collector never scans it again) and collect less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def serve(conn: Any, log_path: str, limits: Any, threads: int | None, env: dict[str, str] | None = None) -> None:
    """A sweep worker: run specs received on `conn` until None or EOF, sending back results.
    Never given candidate code (the pool refuses overlays: they go through a sandboxed `run`)."""
    # Own process group: killing it also kills Inductor's compile workers.
    os.setsid()
    if env is not None:
        # A forked worker inherits the fork server's environment, fixed when it started; the
        # pool's is the one that counts (settings torch read at import keep the server's).
        os.environ.clear()
        os.environ.update(env)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.environ["PYTHONUNBUFFERED"] = "1"
    if limits is not None:
        limits.apply()  # address space etc.: an over-sized model fails here, not the machine
    if threads:
        import torch

        # N workers each using every core oversubscribe the CPU; tiny models gain nothing from threads.
        torch.set_num_threads(threads)
    from enablebot.results import RunSpec
    from enablebot.measure.runner import run_spec

    _tune_gc()
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        spec = RunSpec.from_dict(msg)
        print(f"=== {spec.model_id} {spec.task or ''} {spec.mode} {spec.scenario}", flush=True)
        result = run_spec(spec, progress=lambda m: print(PROGRESS_PREFIX + m, flush=True))
        conn.send(result.to_dict())
        if _near_limit(limits):
            gc.collect()


if __name__ == "__main__":
    sys.exit(main())
