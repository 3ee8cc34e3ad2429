#!/usr/bin/env bash
# The HTTP front under load, beside the gRPC API and llama-server, on the same model and
# cores, in the same run: SmolLM2-135M-Instruct Q4_1, one CPU worker of THREADS threads
# (PP=1, no speculation) for Cascade; `llama-server -t THREADS -np C` (llama.cpp 0c1e570,
# built by scripts/llama_cpp.sh). N requests of P random prompt ids and exactly M generated
# tokens (ignore_eos, greedy), C at a time, streamed. Rows:
#   cascade grpc   `cascade bench` against the gRPC API;
#   cascade http   scripts/openai_load.py against /v1/completions (SSE);
#   llama-server   the same openai_load.py against llama-server's /v1/completions.
# Prints a markdown table (docs/PERFORMANCE.md holds the latest) and writes JSON.
#   N=64 C=32 P=64 M=64 THREADS=2 scripts/bench_http.sh [OUT.json]   (default build/bench_http.json)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/bench_http.json}
N=${N:-64} C=${C:-32} P=${P:-64} M=${M:-64} THREADS=${THREADS:-2}
MODEL=${MODEL:-$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf}
BIN=${CASCADE_BUILD_DIR:-build}/bin
[[ -x $BIN/cascade-coordinator ]] || ./scripts/build.sh >/dev/null
[[ -f $MODEL ]] || ./scripts/setup.sh
LLAMA_BIN=$(./scripts/llama_cpp.sh)
TMP=$(mktemp -d)
source scripts/cluster_lib.sh
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT
LOAD=(python3 scripts/openai_load.py load --requests "$N" --concurrency "$C" --prompt-tokens "$P" --max-tokens "$M")

cat > "$TMP/c.yaml" <<YAML
model: {path: $MODEL}
parallel: {pipeline: 1, tensor: 1}
nodes: [{name: n0, host: 127.0.0.1, devices: [cpu], launch: local}]
server: {listen: 127.0.0.1:0, http_listen: 127.0.0.1:0, http_threads: $((C + 8))}
scheduler: {max_num_seqs: 64, max_batched_tokens: 2048, kv_block_size: 16, kv_cache_mb: 256}
YAML
# --worker-threads must reach the coordinator: start it by hand rather than start_cluster.
"$BIN/cascade-coordinator" --config "$TMP/c.yaml" --worker-threads "$THREADS" >"$TMP/c.log" 2>&1 &
PID=$!
for _ in $(seq 1 600); do grep -q "ready on" "$TMP/c.log" && break; sleep 0.1; done
ADDR=$(grep -o 'ready on [^ ]*' "$TMP/c.log" | cut -d' ' -f3)
HTTP=$(grep -o 'http front on [^ ]*' "$TMP/c.log" | cut -d' ' -f4)
[[ -n $ADDR && -n $HTTP ]] || { cat "$TMP/c.log" >&2; exit 1; }
"$BIN/cascade" bench --server "$ADDR" --requests 8 --concurrency 8 --prompt-tokens 8 --max-tokens 8 >/dev/null  # warm-up
"$BIN/cascade" bench --server "$ADDR" --requests "$N" --concurrency "$C" --prompt-tokens "$P" --max-tokens "$M" \
  --temperature 0 --label "cascade grpc" --json "$TMP/grpc.json" >/dev/null
"${LOAD[@]}" "http://$HTTP" --label "cascade http" --json "$TMP/http.json" >/dev/null
kill $PID; wait $PID 2>/dev/null || true

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$LLAMA_BIN/llama-server" -m "$MODEL" -t "$THREADS" -np "$C" -c $((C * (P + M + 16))) --host 127.0.0.1 \
  --port "$PORT" >"$TMP/llama.log" 2>&1 &
LPID=$!
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
  kill -0 $LPID 2>/dev/null || { tail "$TMP/llama.log" >&2; exit 1; }
  sleep 0.1
done
python3 scripts/openai_load.py load "http://127.0.0.1:$PORT" --requests 8 --concurrency 8 --max-tokens 8 >/dev/null  # warm-up
"${LOAD[@]}" "http://127.0.0.1:$PORT" --label "llama-server" --json "$TMP/llama.json" >/dev/null
kill $LPID; wait $LPID 2>/dev/null || true

python3 - "$OUT" "$TMP/grpc.json" "$TMP/http.json" "$TMP/llama.json" <<'PY'
import json, sys
rows = [json.load(open(f)) for f in sys.argv[2:]]
json.dump(rows, open(sys.argv[1], "w"), indent=1)
r0 = rows[0]
print(f"{r0['requests']} requests of {r0['prompt_tokens']}+{r0['max_tokens']} tokens at concurrency {r0['concurrency']}\n")
print("| server | tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | failed |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['label']} | {r['throughput_tok_s']:.0f} | {r['ttft_ms']['p50']:.0f} | {r['ttft_ms']['p99']:.0f} | "
          f"{r['itl_ms']['p50']:.1f} | {r['itl_ms']['p99']:.1f} | {r['failures']} |")
print(f"\nwrote {sys.argv[1]}")
PY
