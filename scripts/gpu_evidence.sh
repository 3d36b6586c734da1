#!/usr/bin/env bash
# The CUDA evidence runs, on the GPU machine (torch 2.11 + transformers 5.17 there), from the
# source tree. Usage: bash scripts/gpu_evidence.sh OUT_DIR {archs|inductor|cache} [MAX_MINUTES]
#   archs:    8 architectures across families at a realistic small size
#             (hidden 512, 4 layers, batch 8, seq 512, bf16), one at a time so timings are clean.
#   inductor: the Inductor pass (numerics + speedup) over every architecture (its main model:
#             the task head, else the base), eval, parallel isolated workers; resumable.
#   cache:    the Inductor pass over sweeps/gpu-cache-sample.txt twice, side by side: first with an
#             empty Inductor cache (cold), then the same models again (warm), into OUT/cache/{cold,warm}.
#   inductor-cw: the whole Inductor pass, cold then warm, one shard (SHARD=i/n) per call so each
#             call fits the device's 10-minute limit. Then `enablebot sweep merge SHARD_DIRS/cold --out
#             DIR/cold` (and warm) keeps each shard's wall, and benchmarks/sweep_speed.py --results
#             DIR/cold prints the whole pass (the walls summed). Longest first by the H200 Dynamo
#             pass's durations (same scenarios; replayed on shard 1/6: 193 s against 239 s in hash order).
#   inductor-whole: the whole Inductor pass as one sweep per cache state, cold then warm, over as many
#             calls of one machine start as it takes: each call works until LIMIT seconds and the next
#             resumes (STATE, an ignored folder, stays on the device between calls of one start). The
#             walls of a phase's invocations add up to its time, restarts included. Longest first by the
#             last whole pass's cold (warm) durations (DURATIONS, default results/gpu/inductor-whole);
#             OUT/proc_stat.log samples the machine's CPU every 5 s.
#   diag:     the diagnostic scenarios (call_unpadded, call_nocache) over sweeps/gpu-diagnostics.txt,
#             into OUT/cuda-diagnostics: which breaks need the padding or the cache.
#   nvs:      benchmarks/naive_vs_sweep.py on the first 100 base model types, eval + train, side by side.
#   split:    benchmarks/speed_split.py on the same types: where the time goes (build / Dynamo / engine)
#             for the naive harness, the default call, the naive call through the engine and the
#             diagnostic variants, in one run of MAX_MINUTES; OUT gets split.md, split.json, an archive.
#   dynamo:   the Dynamo pass with the default scenarios (call; decode for generative heads) over
#             everything, into OUT/cuda-dynamo-default; RESUME=DIR continues an earlier time-boxed run.
#   inductor-ab: issue 29: one shard of the cold Inductor pass twice, side by side: the measured
#             setup (12 workers x 2 compile threads) against JOBS_B workers compiling in-process.
#   fidelity: issue 28: benchmarks/fidelity/run_all.py (evidence per disagreement family), then the
#             default Dynamo pass (12 workers), time-boxed (LIMIT, default 540 s) and resumed from
#             STATE (warm machine) or RESUME=DIR (an earlier call's OUT, carried: DIR/cuda-dynamo-default
#             and DIR/fidelity); into OUT/cuda-dynamo-default and OUT/fidelity (8 files).
set -u
out=${1:?OUT_DIR}; part=${2:?archs|inductor|cache}; minutes=${3:-8}
# The GPU machine lacks pydantic: carry its wheels unpacked in .gpudeps (scripts/gpu_deps.sh).
export PYTHONPATH=$PWD:$PWD/.gpudeps${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
# 8 workers share 16 cores: bound each one's Inductor compile threads.
export TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-2}
py=${PYTHON:-python3}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
case $part in
  archs)
    $py -m enablebot.cli sweep --pass inductor --device cuda --size small --batch-size 8 --seq-len 512 \
      --dtype bfloat16 --mode eval --task head --jobs 1 --repeats 20 --timeout 300 \
      -m llama -m gpt2 -m bert -m t5 -m vit -m whisper -m mixtral -m qwen2_moe --out "$out/cuda-archs-small-bf16" ;;
  inductor)
    $py -m enablebot.cli sweep --pass inductor --device cuda --mode eval --task main --jobs "${JOBS:-8}" --repeats 10 \
      --timeout 180 --max-minutes "$minutes" --out "$out/cuda-inductor-tiny" ;;
  cache)
    # benchmarks/sweep_speed.py prints both runs and the cold/warm ratios side by side.
    $py benchmarks/sweep_speed.py --cold-warm --out "$out/cache" -- --pass inductor --device cuda --mode eval \
      --task main --jobs "${JOBS:-12}" --repeats 10 --timeout "${TIMEOUT:-90}" --no-report --max-minutes "$minutes" \
      --models-file sweeps/gpu-cache-sample.txt
    du -sh "$out/cache/inductor-cache"; rm -rf "$out/cache/inductor-cache" "$out"/cache/*/logs ;;
  inductor-cw)
    d="$out/inductor-cw-${SHARD/\//of}"
    # The call's own limit must not take the results with it: stop the benchmark first, then pack.
    timeout "${LIMIT:-550}" $py benchmarks/sweep_speed.py --cold-warm --out "$d" -- --pass inductor --device cuda \
      --mode eval --task main --jobs "${JOBS:-12}" --repeats 10 --timeout "${TIMEOUT:-120}" --no-report \
      --max-minutes "$minutes" --shard "$SHARD" --durations-from results/gpu/cuda-dynamo-default
    du -sh "$d/inductor-cache"; rm -rf "$d/inductor-cache" "$d"/*/logs
    tar czf "$d.tar.gz" -C "$out" "$(basename "$d")" && rm -rf "$d" ;;
  inductor-whole)
    st=${STATE:-out/inductor-whole}; end=$((SECONDS + ${LIMIT:-570}))
    export TORCHINDUCTOR_CACHE_DIR=$PWD/$st/inductor-cache
    mkdir -p "$st"
    # A machine given back between calls loses STATE: RESUME=DIR (an earlier call's OUT, carried)
    # restores the finished phases and the cold sweep's results, so the cold phase resumes
    # (with an empty cache, as a cold phase should). A warm phase cannot resume without its cache.
    if [ -n "${RESUME:-}" ] && [ ! -d "$st/cold" ]; then
      mkdir -p "$st/cold" && cp "$RESUME"/cold/*.jsonl "$st/cold/" 2>/dev/null
      [ -f "$RESUME/cold.done" ] && touch "$st/cold.done"
    fi
    # How busy the 16 cores are (is the compile CPU-bound?): the machine's /proc/stat line every 5 s.
    ( while :; do echo "$(date +%s) $(head -n1 /proc/stat)"; sleep 5; done >> "$st/proc_stat.log" ) &
    sampler=$!
    for phase in cold warm; do
      [ -f "$st/$phase.done" ] && continue
      left=$((end - SECONDS)); [ "$left" -gt 60 ] || break
      # Start no new item 40 s before the hard stop: what is in flight then is short (longest first).
      timeout "$left" $py -m enablebot.cli sweep --pass inductor --device cuda --mode eval --task main \
        --jobs "${JOBS:-12}" --repeats 10 --timeout 120 --no-report --max-minutes "$(( (left - 40) / 6 ))e-1" \
        --durations-from "${DURATIONS:-results/gpu/inductor-whole}/$phase" --out "$st/$phase"
      rc=$?
      tail -n1 "$st/$phase/sweep_runs.jsonl"
      if [ $rc = 0 ] && tail -n1 "$st/$phase/sweep_runs.jsonl" | grep -q '"not_started": 0,'; then touch "$st/$phase.done"; else break; fi
    done
    kill "$sampler"; du -sh "$TORCHINDUCTOR_CACHE_DIR"; cp "$st/proc_stat.log" "$out/"
    for phase in cold warm; do
      [ -f "$st/$phase.done" ] && touch "$out/$phase.done"
      [ -d "$st/$phase" ] && mkdir -p "$out/$phase" && cp "$st/$phase"/*.json* "$out/$phase"/
    done ;;
  diag)
    d="$out/cuda-diagnostics"
    $py -m enablebot.cli sweep --pass dynamo --device cuda --mode eval --scenario call_unpadded \
      --scenario call_nocache --jobs "${JOBS:-15}" --timeout 120 --max-minutes "$minutes" \
      --models-file sweeps/gpu-diagnostics.txt --out "$d"
    rm -rf "$d/logs" ;;
  nvs)
    $py benchmarks/naive_vs_sweep.py --first 100 --jobs "${JOBS:-14}" --timeout 120 --out "$out/naive-vs-sweep"
    rm -rf "$out"/naive-vs-sweep/*/logs ;;
  split)
    # benchmarks/speed_split.py on the first 100 base types, 14 workers, one time-boxed run: the naive
    # harness, the default `call`, the naive call through the engine, call_unpadded + call_nocache;
    # the report, and an archive of every phase's results, land in OUT after each phase.
    $py benchmarks/speed_split.py --first 100 --jobs "${JOBS:-14}" --timeout 120 --device cuda \
      --budget-min "$minutes" --baseline results/gpu/cuda-dynamo-default --out /tmp/speed-split --publish "$out" ;;
  dynamo)
    d="$out/cuda-dynamo-default"
    if [ -n "${RESUME:-}" ]; then mkdir -p "$d" && cp -r "$RESUME"/. "$d"/; fi
    $py -m enablebot.cli sweep --pass dynamo --device cuda --jobs "${JOBS:-15}" --timeout 120 \
      --max-minutes "$minutes" --durations-from results/gpu/cuda-dynamo-scenarios --out "$d"
    rm -rf "$d/logs" ;;
  fidelity)
    # Issue 28 on the H200 (torch 2.11 + transformers 5.17), time-boxed and resumable: first the
    # fidelity evidence scripts (benchmarks/fidelity/run_all.py: 7 scripts side by side, CPU, rows
    # kept as they come), then the default Dynamo pass resumed in STATE (an ignored folder kept on
    # a warm machine) or from RESUME (the results of an earlier call, committed or carried). Each
    # call stops starting items LIMIT - 60 s in; what it has lands in OUT (8 files, 2 folders down).
    st=${STATE:-out/fidelity}; end=$((SECONDS + ${LIMIT:-540}))
    mkdir -p "$st/cuda-dynamo-default"
    if [ -n "${RESUME:-}" ] && [ ! -s "$st/cuda-dynamo-default/results.jsonl" ]; then
      cp "$RESUME"/cuda-dynamo-default/results.jsonl "$RESUME"/cuda-dynamo-default/sweep_runs.jsonl "$st/cuda-dynamo-default/" 2>/dev/null
      mkdir -p "$st/evidence" && cp "$RESUME"/fidelity/rows.jsonl "$RESUME"/fidelity/done.txt "$st/evidence/" 2>/dev/null
    fi
    if ! grep -qx misc_breaks.py "$st/evidence/done.txt" 2>/dev/null; then
      timeout $((end - SECONDS - 30)) $py benchmarks/fidelity/run_all.py "$st/evidence" --jobs 7 --timeout 400
    fi
    left=$((end - SECONDS))
    if [ "$left" -gt 120 ]; then
      timeout "$left" $py -m enablebot.cli sweep --pass dynamo --device cuda --jobs "${JOBS:-12}" --timeout 120 \
        --max-minutes "$(( (left - 60) / 6 ))e-1" --durations-from results/gpu/cuda-dynamo-default \
        --out "$st/cuda-dynamo-default"
      tail -n1 "$st/cuda-dynamo-default/sweep_runs.jsonl"
    fi
    mkdir -p "$out/cuda-dynamo-default" "$out/fidelity"
    for f in results.jsonl sweep_runs.jsonl summary.json report.md triage.json; do
      [ -f "$st/cuda-dynamo-default/$f" ] && cp "$st/cuda-dynamo-default/$f" "$out/cuda-dynamo-default/"
    done
    $py benchmarks/fidelity/run_all.py "$st/evidence" --table
    for f in rows.jsonl fidelity.md done.txt; do [ -f "$st/evidence/$f" ] && cp "$st/evidence/$f" "$out/fidelity/"; done ;;
  inductor-ab)
    # Issue 29: what the cold Inductor pass's compile settings cost, side by side on one shard
    # (SHARD, default 6/6), each run with its own empty Inductor and Triton caches: A is the
    # measured setup (12 workers, 2 compile threads each); B is JOBS_B workers (15) compiling
    # in-process (TORCHINDUCTOR_COMPILE_THREADS=1: no compile subprocess pool per worker).
    # RUNS="NAME:JOBS:THREADS:UNIQUE ..." sets other pairs; UNIQUE=0 names every Triton kernel
    # `triton_` (TORCHINDUCTOR_UNIQUE_KERNEL_NAMES=0), so a kernel another model already compiled
    # is found in the shared Triton cache instead of compiled again.
    # benchmarks/sweep_speed.py --results DIR prints each run's wall and worker time.
    runs=${RUNS:-A:12:2:1 B:${JOBS_B:-15}:1:1}
    for run in $runs; do
      set -- ${run//:/ }
      d="$out/inductor-ab-$1"; c=$(mktemp -d)
      TORCHINDUCTOR_CACHE_DIR=$c/inductor TRITON_CACHE_DIR=$c/triton TORCHINDUCTOR_COMPILE_THREADS=$3 \
        TORCHINDUCTOR_UNIQUE_KERNEL_NAMES=${4:-1} \
        timeout "${LIMIT_EACH:-280}" $py -m enablebot.cli sweep --pass inductor --device cuda --mode eval --task main \
        --jobs "$2" --repeats 10 --timeout 120 --no-report --shard "${SHARD:-6/6}" \
        --durations-from "${DURATIONS:-results/gpu/cuda-dynamo-default}" --out "$d"
      echo "run $1: jobs $2, compile threads $3, unique kernel names ${4:-1}, rc $?"; tail -n1 "$d/sweep_runs.jsonl"
      rm -rf "$d/logs" "$c"
    done ;;
  *) echo "unknown part $part" >&2; exit 2 ;;
esac
