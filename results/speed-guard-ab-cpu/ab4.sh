#!/usr/bin/env bash
# Side by side on one machine, the same 16 types (results/verdict-check-cpu/models.txt), --jobs 2,
# one Dynamo sweep per NAME:TREE argument, in the order given (2026-12-07, second session):
#   ab4.sh mid:/tmp/ab_mid gc:/tmp/ab_gc new:/tmp/ab_new      # e612741 (the 74.9-min pass), f22cc25 (+ worker gc), 55f9990 (+ no guard-latency profile)
#   ab4.sh new2:/tmp/ab_new gc2:/tmp/ab_gc mid2:/tmp/ab_mid   # the other order
# Then: python results/speed-guard-ab-cpu/ab4cmp.py mid gc new mid2 gc2 new2
set -u
mkdir -p /tmp/ab4
for side in "$@"; do
  name=${side%%:*}; tree=${side#*:}
  out=/tmp/ab4/$name; rm -rf $out
  start=$(date +%s)
  (cd $tree && PYTHONPATH=$tree /work/main/.venv/bin/python -m enablebot.cli sweep --pass dynamo \
    --models-file /tmp/ab_models.txt --jobs 2 --timeout 120 --no-report --out $out > $out.log 2>&1)
  echo "$name $(git -C $tree log --format=%h -1) wall $(( $(date +%s) - start )) s"
done
