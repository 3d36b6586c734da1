"""Child-process entry point: `python -m enablebot.worker SPEC.json RESULT.json`.

Reads a RunSpec, runs it in this fresh process and writes the RunResult. Progress
lines go to stderr prefixed with PROGRESS_PREFIX so the parent can relay them.
"""

from __future__ import annotations

import json
import sys

PROGRESS_PREFIX = "[enablebot] "


def main(argv: list[str] | None = None) -> int:
    spec_path, out_path = (argv or sys.argv[1:])[:2]
    with open(spec_path, encoding="utf-8") as f:
        raw = json.load(f)
    if raw.get("overlay_dir"):
        # Before torch/transformers are imported: patched copies must shadow installed files.
        from enablebot.fix.overlay import install_overlay

        install_overlay(raw["overlay_dir"])
    from enablebot.registry import atomic_write_text
    from enablebot.results import RunSpec
    from enablebot.runner import run_spec

    spec = RunSpec.from_dict(raw)

    def progress(msg: str) -> None:
        print(PROGRESS_PREFIX + msg, file=sys.stderr, flush=True)

    result = run_spec(spec, progress=progress)
    atomic_write_text(out_path, json.dumps(result.to_dict(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
