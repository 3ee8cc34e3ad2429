#!/usr/bin/env bash
# The main job: set up, build, then show the default model SmolLM2-135M-Instruct at work:
# its metadata, the tokenization of a chat prompt, and a streamed answer.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh >/dev/null
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
QUESTION=${1:-"What is the capital of France?"}
BIN=${CASCADE_BUILD_DIR:-build}/bin
echo "== cascade info --model $MODEL"
"$BIN/cascade" info --model "$MODEL"
echo
echo "== cascade tokenize --model $MODEL --chat \"$QUESTION\""
"$BIN/cascade" tokenize --model "$MODEL" --chat "$QUESTION"
echo
echo "== cascade run --model $MODEL --chat \"$QUESTION\""
"$BIN/cascade" run --model "$MODEL" --chat "$QUESTION" --max-tokens 128
