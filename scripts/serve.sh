#!/usr/bin/env bash
# The main job: set up, build, start the local cluster of configs/local-cpu.yaml
# (SmolLM2-135M-Instruct in two pipeline stages: a coordinator and two worker
# processes talking UCX), stream the answer to a chat question, print the command to
# talk to it, and keep serving in the foreground until Ctrl-C.
#   scripts/serve.sh [--once] [QUESTION]     --once: exit after the answer
set -euo pipefail
cd "$(dirname "$0")/.."
ONCE=0
if [[ ${1:-} == "--once" ]]; then ONCE=1; shift; fi
# The default question spells out the language: asked only "What is the capital of France?",
# SmolLM2-135M's first token is a near tie between "The" and "La" (0.02-0.13 nats, by which
# kernels run it; llama.cpp 0.13), so greedy answers in French rambling on some CPUs.
QUESTION=${1:-"What is the capital of France? Answer in English."}
CONFIG=${CASCADE_CONFIG:-configs/local-cpu.yaml}
./scripts/setup.sh
./scripts/build.sh >/dev/null
BIN=${CASCADE_BUILD_DIR:-build}/bin
LOG=$(mktemp -t cascade-coordinator.XXXXXX.log)
source scripts/cluster_lib.sh
trap 'kill ${CLUSTER_PID:-} 2>/dev/null; wait ${CLUSTER_PID:-} 2>/dev/null; rm -f "$LOG"' EXIT
start_cluster "$CONFIG" "$LOG" tee
ADDR=$CLUSTER_ADDR
COORD=$CLUSTER_PID

echo
echo "== cascade generate --server $ADDR --system \"You are a helpful assistant.\" --chat \"$QUESTION\""
"$BIN/cascade" generate --server "$ADDR" --system "You are a helpful assistant." --chat "$QUESTION" \
  --temperature 0 --max-tokens 128
echo
"$BIN/cascade" status --server "$ADDR" --wait 0
echo
echo "Talk to it:  $BIN/cascade chat --server $ADDR      (or: $BIN/cascade generate --server $ADDR --prompt \"...\")"
if [[ -n ${CLUSTER_HTTP:-} ]]; then
  echo "OpenAI API:  base_url=http://$CLUSTER_HTTP/v1  (GET /v1/models, POST /v1/chat/completions; /health, /metrics)"
  echo "  curl -sN http://$CLUSTER_HTTP/v1/chat/completions -d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"stream\": true}'"
fi
[[ $ONCE == 1 ]] && exit 0
echo "Serving in the foreground; Ctrl-C stops the cluster."
wait $COORD
