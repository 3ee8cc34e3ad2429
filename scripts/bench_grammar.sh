#!/usr/bin/env bash
# What constrained decoding costs per token on the coordinator (build/bin/grammar_bench):
# the 100 JSON schemas of tests/integration/structured_output_test.py, each a fresh
# request's grammar walking a random valid answer token by token (one mask and one
# advance per token, as the serving loop does), over three real vocabularies: SmolLM2's
# (49152, the default model), Llama 3's (128256) and Qwen2's (151936, the Qwen3 family's).
# The reference in the same run is the naive mask (every token through the matcher).
#
# Usage: scripts/bench_grammar.sh [OUT.json]     (default build/bench_grammar.json)
# Prints the table (docs/PERFORMANCE.md holds the latest) and writes JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/bench_grammar.json}
TESTDATA=${CASCADE_TESTDATA:-../shared/testdata}
SMOL=models/SmolLM2-135M-Instruct.Q4_1.gguf
[[ -f $SMOL ]] || ./scripts/setup.sh >/dev/null
[[ -x build/bin/grammar_bench ]] || ./scripts/build.sh >/dev/null
mkdir -p "$(dirname "$OUT")"
schemas=$(mktemp --suffix=.json)
trap 'rm -f "$schemas"' EXIT
./scripts/python_deps.sh -c "
import json, sys
sys.argv = ['', 'build/bin', 'x']
sys.path.insert(0, 'tests/integration')
import structured_output_test as t
json.dump(t.schemas(100), open('$schemas', 'w'))"
build/bin/grammar_bench --schemas="$schemas" --json="$OUT" "$SMOL" "$TESTDATA/vocab/ggml-vocab-llama-bpe.gguf" \
  "$TESTDATA/vocab/ggml-vocab-qwen2.gguf"
echo "bench_grammar: wrote $OUT"
