"""Builder coverage over every architecture the installed transformers knows.

Builds each model_type's base model and main task head tiny, runs one eager step in
eval and train modes, prints the table and writes results/coverage-<device>.json and
.md (every failure with its reason; missing optional packages listed apart).

    python scripts/coverage.py                      # everything (slow: ~10-20 min on 2 cores)
    python scripts/coverage.py llama bert --modes eval
    python scripts/coverage.py --workers 2          # two child processes
    python scripts/coverage.py --shard 0/2 --out /tmp/s0   # part of the items; merge with --merge
    python scripts/coverage.py --merge /tmp/s0.json /tmp/s1.json

Items run in child processes (one item's crash or out-of-memory kill costs only that item).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def render_md(results: list, summary, device: str, versions: dict[str, str]) -> str:
    from enablebot.coverage import STATUSES

    lines = [
        f"# Builder coverage ({device})",
        "",
        f"torch {versions.get('torch', '?')}, transformers {versions.get('transformers', '?')}. "
        "Each item: build tiny from the config, one eager step (`eval`: forward; `train`: forward + backward).",
        "",
        f"**Coverage: {summary.coverage:.1%}** ({summary.ok} ok of {summary.total - summary.missing} "
        f"counted; {summary.failed} failures; {summary.missing} missing_dependency, not counted).",
        "",
        "| task/mode | " + " | ".join(STATUSES) + " |",
        "|---|" + "---|" * len(STATUSES),
    ]
    for key in sorted(summary.counts):
        lines.append(f"| {key} | " + " | ".join(str(summary.counts[key][s]) for s in STATUSES) + " |")
    fails = [r for r in results if r.status in ("create_error", "eager_error")]
    lines += ["", f"## Failures ({len(fails)})", "", "| model_type | task | mode | status | stage | reason |",
              "|---|---|---|---|---|---|"]
    for r in sorted(fails, key=lambda r: (r.model_type, r.task, r.mode)):
        reason = (r.reason or "").replace("|", "\\|").replace("\n", " ")[:200]
        lines.append(f"| {r.model_type} | {r.task} | {r.mode} | {r.status} | {r.stage} | {reason} |")
    missing = [r for r in results if r.status == "missing_dependency"]
    lines += ["", f"## Missing dependencies ({len(missing)}; covered on the GPU machine)", "",
              "| model_type | task | mode | package |", "|---|---|---|---|"]
    for r in sorted(missing, key=lambda r: (r.model_type, r.task, r.mode)):
        lines.append(f"| {r.model_type} | {r.task} | {r.mode} | {r.package} |")
    return "\n".join(lines) + "\n"


def _key(mt: str, task: str, mode: str) -> str:
    return f"{mt}/{task}/{mode}"


def run_child(items: list, jsonl: Path) -> None:
    """Run items in this process, appending one JSON line per result (crash-safe)."""
    from enablebot.coverage import run_coverage

    with jsonl.open("a", encoding="utf-8") as f:
        def progress(r) -> None:
            f.write(json.dumps(r.to_dict()) + "\n")
            f.flush()
            if r.status != "ok":
                print(f"{r.model_type:40s} {r.task:4s} {r.mode:5s} {r.status}: {r.reason}", file=sys.stderr)

        run_coverage([tuple(i) for i in items], progress=progress)


def run_isolated(items: list, workdir: Path, worker: int) -> list:
    """Run items in child processes; a child that dies (out of memory, segfault) takes
    only the item it was running with it, recorded as an eager_error."""
    import subprocess

    from enablebot.coverage import CoverageItem

    jsonl = workdir / f"worker{worker}.jsonl"
    jsonl.write_text("")
    todo = list(items)
    crashed: list = []
    while todo:
        spec = workdir / f"worker{worker}-items.json"
        spec.write_text(json.dumps(todo))
        rc = subprocess.call([sys.executable, __file__, "--child", str(spec), "--jsonl", str(jsonl)])
        done = {_key(d["model_type"], d["task"], d["mode"]) for d in _read_jsonl(jsonl)}
        todo = [i for i in todo if _key(*i) not in done]
        if todo and rc != 0:
            mt, task, mode = todo.pop(0)
            crashed.append(CoverageItem(mt, task, mode, status="eager_error", stage="eager",
                                        reason=f"process died (exit {rc}; out of memory or a native crash)"))
        elif todo:
            raise RuntimeError(f"child exited 0 with {len(todo)} items left")
    return [CoverageItem.from_dict(d) for d in _read_jsonl(jsonl)] + crashed


def _read_jsonl(path: Path) -> list[dict]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line torn by a crash
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_types", nargs="*", help="model_types to run (default: all)")
    ap.add_argument("--modes", default="eval,train")
    ap.add_argument("--tasks", default="base,head")
    ap.add_argument("--shard", default=None, help="i/n: run every n-th item starting at i")
    ap.add_argument("--merge", nargs="*", default=None, help="merge shard JSON files instead of running")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=None, help="output stem (default results/coverage-<device>)")
    ap.add_argument("--workers", type=int, default=1, help="child processes running in parallel")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--jsonl", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    if args.child:
        torch.set_num_threads(1)
        run_child(json.loads(Path(args.child).read_text()), Path(args.jsonl))
        return 0
    from enablebot.coverage import CoverageItem, summarize, sweep_items  # noqa: F401
    from enablebot.registry import atomic_write_text

    stem = Path(args.out) if args.out else ROOT / "results" / f"coverage-{args.device}"
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    if args.merge is not None:
        # Later files replace earlier results of the same item (a re-run of some types).
        merged = {}
        for f in args.merge:
            for d in json.loads(Path(f).read_text())["results"]:
                merged[_key(d["model_type"], d["task"], d["mode"])] = CoverageItem.from_dict(d)
        results = list(merged.values())
    else:
        items = sweep_items(args.model_types or None, tasks=args.tasks.split(","), modes=args.modes.split(","))
        if args.shard:
            i, n = (int(x) for x in args.shard.split("/"))
            items = items[i::n]

        import tempfile
        from concurrent.futures import ThreadPoolExecutor

        with tempfile.TemporaryDirectory() as tmp:
            groups = [items[w::args.workers] for w in range(args.workers)]
            with ThreadPoolExecutor(args.workers) as pool:
                parts = list(pool.map(lambda w: run_isolated(groups[w], Path(tmp), w), range(args.workers)))
        order = {_key(*i): n for n, i in enumerate(items)}
        results = sorted((r for part in parts for r in part),
                         key=lambda r: order.get(_key(r.model_type, r.task, r.mode), 0))
    summary = summarize(results)
    doc = {"device": args.device, "versions": versions, "summary": summary.to_dict(),
           "results": [r.to_dict() for r in results]}
    atomic_write_text(stem.with_suffix(".json"), json.dumps(doc, indent=1) + "\n")
    if not args.shard:
        atomic_write_text(stem.with_suffix(".md"), render_md(results, summary, args.device, versions))
    for suffix in (".json", ".md"):  # reports are for everyone to read
        if stem.with_suffix(suffix).exists():
            stem.with_suffix(suffix).chmod(0o644)
    for key in sorted(summary.counts):
        print(key, summary.counts[key])
    print(f"coverage {summary.coverage:.1%}: ok {summary.ok}, failed {summary.failed}, "
          f"missing_dependency {summary.missing}, total {summary.total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
