"""Run every fidelity evidence script and write what each printed.

    python benchmarks/fidelity/run_all.py OUT_DIR [--jobs N] [--timeout S] [--max-minutes M] [SCRIPT ...]

Each script runs in its own process (`python SCRIPT`), at most --timeout seconds; its
`FIDELITY {json}` rows are appended to OUT_DIR/rows.jsonl as they arrive, and a script that
finished is listed in OUT_DIR/done.txt, so a second call with the same OUT_DIR resumes where the
first stopped (a time-boxed device call). At the end OUT_DIR/fidelity.md tabulates the rows:
family, class, variant, verdict, first break and its frame (or the error), towers that ran.
A script killed mid-way is re-run whole by the next call: its later rows supersede the earlier
ones (one row per script, class and variant). `--table` only rewrites fidelity.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNNING: set = set()  # child processes, killed with this one (a time-boxed call's `timeout`)
SCRIPTS = ["audio_encoders.py", "train_mode_eval.py", "hybrid_linear_attention.py", "capture_flags.py",
           "vlm_towers.py", "compile_errors.py", "misc_breaks.py"]


def run_one(script: str, out: Path, timeout: float, env: dict) -> tuple[str, int, float]:
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, str(HERE / script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    RUNNING.add(proc)
    rows = out / "rows.jsonl"
    log = out / f"{Path(script).stem}.log"
    rc = 0
    try:
        with open(log, "w") as lf:
            deadline = t0 + timeout
            for line in proc.stdout:  # rows reach the file as they come (a killed call keeps them)
                lf.write(line)
                if line.startswith("FIDELITY "):
                    with open(rows, "a") as f:
                        f.write(json.dumps({"script": script, **json.loads(line[len("FIDELITY "):])}) + "\n")
                        f.flush()
                        os.fsync(f.fileno())
                if time.time() > deadline:
                    proc.kill()
                    rc = 124
                    break
        rc = proc.wait() if rc == 0 else rc
    finally:
        if proc.poll() is None:
            proc.kill()
        RUNNING.discard(proc)
    if rc == 0:
        with open(out / "done.txt", "a") as f:
            f.write(script + "\n")
    return script, rc, time.time() - t0


def latest_rows(out: Path) -> list[dict]:
    """The rows of OUT/rows.jsonl, the last one kept per script, class and variant (a resumed script
    re-runs from its start and appends again)."""
    path = out / "rows.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    return list({(r["script"], r["family"], r["class"], r["variant"]): r for r in rows}.values())


def table(out: Path) -> str:
    rows = latest_rows(out)
    lines = ["| family | class | variant | torch · transformers | verdict | graphs/breaks | first break or error | frame | towers run |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        what = r.get("first_break") or r.get("error") or ""
        gb = f"{r.get('graphs', '')}/{r.get('breaks', '')}" if "graphs" in r else ""
        lines.append(f"| {r['family']} | {r['class']} | {r['variant']} | {r['torch']} · {r['transformers']} | "
                     f"{r['verdict']} | {gb} | {what.replace('|', '/')[:120]} | {r.get('frame') or ''} | "
                     f"{', '.join(r.get('towers_run') or []) if 'towers_run' in r else ''} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("scripts", nargs="*")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1500.0)
    ap.add_argument("--max-minutes", type=float, default=0.0, help="start no script after this many minutes")
    ap.add_argument("--table", action="store_true", help="only rewrite OUT/fidelity.md from OUT/rows.jsonl")
    a = ap.parse_args()
    if a.table:
        (Path(a.out) / "fidelity.md").write_text(table(Path(a.out)))
        return

    def stop(_sig: int, _frame: object) -> None:
        for p in list(RUNNING):
            p.kill()
        os._exit(124)

    signal.signal(signal.SIGTERM, stop)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    done = set((out / "done.txt").read_text().split()) if (out / "done.txt").exists() else set()
    todo = [s for s in (a.scripts or SCRIPTS) if s not in done]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent), os.environ.get("PYTHONPATH", "")])}
    t0 = time.time()

    def go(script: str) -> tuple[str, int, float]:
        if a.max_minutes and time.time() - t0 > a.max_minutes * 60:
            return script, -1, 0.0
        return run_one(script, out, a.timeout, env)

    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        for script, rc, secs in pool.map(go, todo):
            print(f"{script}: {'not started (time box)' if rc == -1 else f'rc {rc}, {secs:.0f} s'}", flush=True)
    (out / "fidelity.md").write_text(table(out))
    print(f"wrote {out / 'fidelity.md'}")


if __name__ == "__main__":
    main()
