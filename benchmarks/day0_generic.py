"""Day 0 with no hand-written knowledge: which types build and run eager from generic entries.

Seeds a registry of generic entries for every type the installed transformers knows (`enablebot
registry seed`, what the watcher and the replay's day-0 path register), runs the build pass (create
+ one eager step, eval and train) over the types in TYPES, and prints how many types build with
every item, and what each generic rule changed (the items' notes). With --before, the types that
changed against an earlier run's results.jsonl.

    PYTHONPATH=. .venv/bin/python benchmarks/day0_generic.py --types results/day0-generic-tf5.25/day0types.txt \
        --out results/day0-generic-tf5.25-rules --before results/day0-generic-tf5.25/results.jsonl

A type counts as built as the replay counts it (`replay.timeline.type_release(...).built`): every
item that needs no missing optional package and is not skipped built and ran eager.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path


def by_type(path: Path) -> dict[str, list]:
    from enablebot.sweep.checkpoint import load_results

    out: dict[str, list] = defaultdict(list)
    for r in load_results(path).values():
        out[r.spec.model_id].append(r)
    return out


def built(items: list) -> bool:
    from enablebot.replay.timeline import type_release

    return type_release(items, []).built


def rule_of(note: str) -> str | None:
    for key, name in (("with a channel axis", "layout: channel axis"), ("frames first", "layout: frames first"),
                      ("larger", "layout: larger image"), ("whole windows", "layout: whole windows"),
                      ("full-size width", "widths"), ("leaves it unset", "repairs"),
                      ("halved to fit", "narrow")):
        if key in note:
            return name
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", type=Path, required=True, help="one model type per line")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--before", type=Path, help="an earlier run's results.jsonl to compare with")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    reg = a.out / "registry.yaml"
    cli = [sys.executable, "-m", "enablebot.cli"]
    subprocess.run([*cli, "registry", "seed", "--registry", str(reg)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with open(a.out / "run.log", "w") as log:
        subprocess.run([*cli, "sweep", "--pass", "build", "--device", "cpu", "--models-file", str(a.types),
                        "--registry", str(reg), "--out", str(a.out), "--jobs", str(a.jobs), "--no-report"],
                       check=True, stdout=log, stderr=subprocess.STDOUT)
    reg.unlink()  # large and regenerable; the results carry the versions
    a.out.joinpath("registry.state.json").unlink(missing_ok=True)
    now = by_type(a.out / "results.jsonl")
    n = sum(built(v) for v in now.values())
    print(f"{n} of {len(now)} types build and run eager with generic entries")
    rules: Counter = Counter()
    for items in now.values():
        if built(items):
            for name in {rule_of(r.note or "") for r in items} - {None}:
                rules[name] += 1
    print("types built with each rule's help:", dict(sorted(rules.items())))
    if a.before:
        before = by_type(a.before)
        print(f"before: {sum(built(v) for v in before.values())} of {len(before)}")
        for mt in sorted(set(now) | set(before)):
            x, y = built(before.get(mt, [])), built(now.get(mt, []))
            if x != y:
                print(f"  {mt}: {'built' if x else 'not built'} -> {'built' if y else 'not built'}")


if __name__ == "__main__":
    main()
