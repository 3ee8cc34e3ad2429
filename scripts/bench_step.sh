#!/usr/bin/env bash
# A worker's decode step against its in-process forward on the CPU (build/bin/step_bench):
# a random-weight Llama-3.2-1B-shaped model with Llama-3's 128256-token vocabulary
# (scripts/make_random_gguf.py 1b with ../shared/testdata/vocab/ggml-vocab-llama-bpe.gguf,
# then llama.cpp's llama-quantize to Q4_K_M; cached under ~/.cache/cascade/models/, 2.5 GB +
# 0.8 GB), batch 1 and 32, 64 tokens of context. The two are timed step by step, interleaved
# (a shared machine drifts), with the host sampler alone over the same rows beside them.
#
# Usage: scripts/bench_step.sh [OUT.json]     (default build/bench_step.json)
# Env: TYPE=Q4_K_M  THREADS=2  BATCHES=1,32  CONTEXT=64  STEPS=12  SAMPLED=1 (T 0.8, top-k 40, top-p 0.95)
# Prints the table (docs/PERFORMANCE.md holds the latest) and writes JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/bench_step.json}
TYPE=${TYPE:-Q4_K_M}
TESTDATA=${CASCADE_TESTDATA:-../shared/testdata}
VOCAB=$TESTDATA/vocab/ggml-vocab-llama-bpe.gguf
[[ -f $VOCAB ]] || { echo "bench_step: $VOCAB not found (set CASCADE_TESTDATA)" >&2; exit 1; }
MODELS="${XDG_CACHE_HOME:-$HOME/.cache}/cascade/models"
mkdir -p "$MODELS" "$(dirname "$OUT")"
[[ -x build/bin/step_bench ]] || ./scripts/build.sh >/dev/null
f16="$MODELS/random-llama-1b-v128k-f16.gguf"
model="$MODELS/random-llama-1b-v128k-$TYPE.gguf"
[[ -f $f16 ]] || ./scripts/python_deps.sh scripts/make_random_gguf.py 1b "$VOCAB" "$f16"
if [[ ! -f $model || $model -ot $f16 ]]; then
  LLAMA_BIN=$(./scripts/llama_cpp.sh)
  "$LLAMA_BIN/llama-quantize" "$f16" "$model.tmp" "$TYPE" "$(nproc)" >"$model.log" 2>&1 || { tail -5 "$model.log" >&2; exit 1; }
  mv "$model.tmp" "$model"
fi
args=(--model "$model" --threads "${THREADS:-2}" --batches "${BATCHES:-1,32}" --context "${CONTEXT:-64}"
  --steps "${STEPS:-12}" --json "$OUT")
[[ -n ${SAMPLED:-} ]] && args+=(--sampled)
build/bin/step_bench "${args[@]}"
echo "bench_step: wrote $OUT"
