#!/usr/bin/env bash
# Side by side on one quiet machine: the same 16 types (results/verdict-check-cpu/models.txt), --jobs 2,
# one sweep per NAME:TREE argument, in the order given. Round 1 (2026-12-07):
#   ab3.sh old:/tmp/wt_old mid:/tmp/wt29 new:/tmp/wt27     # 0b413e4 (the 118-min pass), e612741 (today's pass), 0d3857e+ (gc)
# Round 2, the other order:  ab3.sh new2:/tmp/wt27 mid2:/tmp/wt29
# Then: python ab3cmp.py old mid new mid2 new2 (items with the same verdict and op count in every run).
set -u
mkdir -p /tmp/ab3
for side in "$@"; do
  name=${side%%:*}; tree=${side#*:}
  out=/tmp/ab3/$name; rm -rf $out
  start=$(date +%s)
  (cd $tree && PYTHONPATH=$tree /work/main/.venv/bin/python -m enablebot.cli sweep --pass dynamo \
    --models-file /tmp/wt27/results/verdict-check-cpu/models.txt --jobs 2 --timeout 120 --no-report \
    --out $out > $out.log 2>&1)
  echo "$name $(git -C $tree log --format=%h -1) wall $(( $(date +%s) - start )) s"
done
