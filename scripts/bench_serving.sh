#!/usr/bin/env bash
# Serving benchmark: for PP = 1 and PP = 2 (SmolLM2-135M Q4_1, CPU workers, one thread
# each), starts a local cluster, runs `cascade bench` (N requests at concurrency C, P
# prompt tokens, M generated tokens) and reports TTFT, TPOT and inter-token latency
# p50/p99 and throughput as a table, with all rows in ${1:-build/bench_serving.json}.
#   N=32 C=8 P=64 M=64 scripts/bench_serving.sh [OUT.json]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/bench_serving.json}
N=${N:-32} C=${C:-8} P=${P:-64} M=${M:-64}
MODEL=${MODEL:-$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf}
BIN=${CASCADE_BUILD_DIR:-build}/bin
[[ -x $BIN/cascade-coordinator ]] || ./scripts/build.sh >/dev/null
[[ -f $MODEL ]] || ./scripts/setup.sh
TMP=$(mktemp -d)
source scripts/cluster_lib.sh
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT
rows=()
for PP in 1 2; do
  DEVICES=$(printf 'cpu, %.0s' $(seq 1 $PP)); DEVICES=${DEVICES%, }
  cat > "$TMP/pp$PP.yaml" <<YAML
model: {path: $MODEL}
parallel: {pipeline: $PP, tensor: 1}
nodes: [{name: n0, host: 127.0.0.1, devices: [$DEVICES], launch: local}]
server: {listen: 127.0.0.1:0}
scheduler: {max_num_seqs: 32, max_batched_tokens: 2048, kv_block_size: 16, kv_cache_mb: 256}
YAML
  start_cluster "$TMP/pp$PP.yaml" "$TMP/pp$PP.log"
  PID=$CLUSTER_PID ADDR=$CLUSTER_ADDR
  "$BIN/cascade" bench --server "$ADDR" --requests 4 --concurrency 2 --prompt-tokens 8 --max-tokens 8 >/dev/null  # warm-up
  "$BIN/cascade" bench --server "$ADDR" --requests "$N" --concurrency "$C" --prompt-tokens "$P" --max-tokens "$M" \
    --label "PP=$PP" --json "$TMP/pp$PP.json" | { [[ $PP == 1 ]] && cat || tail -n 1; }
  rows+=("$TMP/pp$PP.json")
  kill $PID; wait $PID 2>/dev/null || true
done
mkdir -p "$(dirname "$OUT")"
python3 -c "import json,sys; json.dump([json.load(open(f)) for f in sys.argv[2:]], open(sys.argv[1],'w'), indent=1)" "$OUT" "${rows[@]}"
echo "wrote $OUT"
