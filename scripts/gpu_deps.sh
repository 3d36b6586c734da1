#!/usr/bin/env bash
# The GPU machine (python 3.12, x86_64, torch 2.11 + transformers 5.17 preinstalled) cannot install
# packages and lacks pydantic, which enablebot imports. Unpack its wheels into .gpudeps (ignored),
# then pass carry=[".gpudeps"] to the device call; scripts/gpu_evidence.sh puts it on PYTHONPATH.
set -eu
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
python3 -m pip download pydantic --only-binary=:all: --python-version 3.12 \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$tmp" -q
rm -rf .gpudeps && mkdir .gpudeps
for w in "$tmp"/*.whl; do python3 -m zipfile -e "$w" .gpudeps/; done
rm -rf "$tmp"
du -sh .gpudeps
