#!/usr/bin/env bash
# Tensor-parallel benchmark on this machine: batch-1 decode tokens/s of SmolLM2-135M Q4_1
# served by a cluster at TP=1 (one worker, 1 thread) and TP=2 (two workers, 1 thread
# each), the scaling ratio, and all-reduce latency for hidden-state-sized messages.
# Table on stdout, JSON in ${1:-build/bench_tp.json}.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/bench_tp.json}
MODEL=${MODEL:-$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf}
BIN=${CASCADE_BUILD_DIR:-build}/bin
[[ -x $BIN/cascade-coordinator && -x $BIN/allreduce_bench ]] || ./scripts/build.sh >/dev/null
[[ -f $MODEL ]] || ./scripts/setup.sh
export UCX_POSIX_ERROR_HANDLING=y UCX_SYSV_ERROR_HANDLING=y   # shared memory with failure detection
TMP=$(mktemp -d)
source scripts/cluster_lib.sh
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT
echo "== batch-1 decode (cascade bench --concurrency 1, 32-token prompt, 128 new tokens)"
for TP in 1 2; do
  DEVICES=$(printf 'cpu, %.0s' $(seq 1 $TP)); DEVICES=${DEVICES%, }
  cat > "$TMP/tp$TP.yaml" <<YAML
model: {path: $MODEL}
parallel: {pipeline: 1, tensor: $TP}
nodes: [{name: n0, host: 127.0.0.1, devices: [$DEVICES], launch: local}]
server: {listen: 127.0.0.1:0}
scheduler: {kv_cache_mb: 128}
YAML
  start_cluster "$TMP/tp$TP.yaml" "$TMP/tp$TP.log"
  PID=$CLUSTER_PID ADDR=$CLUSTER_ADDR
  "$BIN/cascade" bench --server "$ADDR" --requests 2 --concurrency 1 --prompt-tokens 8 --max-tokens 8 >/dev/null
  "$BIN/cascade" bench --server "$ADDR" --requests 4 --concurrency 1 --prompt-tokens 32 --max-tokens 128 \
    --label "TP=$TP" --json "$TMP/tp$TP.json" | { [[ $TP == 1 ]] && cat || tail -n 1; }
  kill $PID; wait $PID 2>/dev/null || true
done
echo
echo "== all-reduce latency, 2 ranks (UCX, in one process)"
"$BIN/allreduce_bench" --json "$TMP/allreduce.json"
python3 - "$OUT" "$TMP" <<'PY'
import json, sys
out, tmp = sys.argv[1], sys.argv[2]
rows = [json.load(open(f"{tmp}/tp{t}.json")) for t in (1, 2)]
for r in rows:
    r["decode_tok_s"] = 1000.0 / r["tpot_ms"]["p50"]
ratio = rows[1]["decode_tok_s"] / rows[0]["decode_tok_s"]
print(f"\nbatch-1 decode: TP=1 {rows[0]['decode_tok_s']:.1f} tok/s, TP=2 {rows[1]['decode_tok_s']:.1f} tok/s, scaling {ratio:.2f}x")
json.dump({"decode": rows, "tp2_over_tp1": ratio, "allreduce": json.load(open(f"{tmp}/allreduce.json"))}, open(out, "w"), indent=1)
print(f"wrote {out}")
PY
