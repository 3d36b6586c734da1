#!/usr/bin/env python
"""Serve a fake Hugging Face Hub on 127.0.0.1 from fixture data, to try `enablebot watch` offline.

    python scripts/fake_hub.py -- enablebot watch --registry /tmp/demo-registry.yaml
        starts the Hub, runs the command with HF_ENDPOINT pointing at it, stops the Hub;
    python scripts/fake_hub.py
        serves until Ctrl-C and prints the HF_ENDPOINT to use from another shell.

`--rate-limit N` answers the first N listing requests with 429 and `Retry-After: 1`,
to watch the client wait and retry.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from enablebot.testing.fake_hub import FakeHub, Fault  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", type=Path, default=ROOT / "tests" / "fixtures" / "hub")
    ap.add_argument("--page-size", type=int, default=5, help="models per listing page (Link-header pagination)")
    ap.add_argument("--token", default=None, help="token that unlocks gated repos (compare with HF_TOKEN)")
    ap.add_argument("--rate-limit", type=int, default=0, metavar="N",
                    help="answer the first N listing requests with 429 Retry-After: 1")
    args = ap.parse_args(argv[: argv.index("--")] if "--" in argv else argv)

    with FakeHub.from_fixtures(args.fixtures, page_size=args.page_size, token=args.token) as hub:
        if args.rate_limit:
            hub.inject(Fault(r"^/api/models$", 429, {"Retry-After": "1"}, times=args.rate_limit))
        where = args.fixtures.resolve()
        where = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
        print(f"fake Hub: {len(hub.repos)} repos from {where}", file=sys.stderr)
        print(f"HF_ENDPOINT={hub.url}", file=sys.stderr, flush=True)
        if command:
            env = {**os.environ, "HF_ENDPOINT": hub.url}
            env.pop("HF_HUB_OFFLINE", None)
            return subprocess.run(command, env=env).returncode
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
