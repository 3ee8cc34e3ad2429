#!/usr/bin/env bash
# Prefix caching on multi-turn chats: the same load against one cluster with
# scheduler.prefix_caching on and one with it off, in the same run. CHATS conversations,
# CONCURRENCY at a time, TURNS turns each, through the OpenAI chat endpoint
# (scripts/openai_load.py chat): every turn resends the whole history (a ~300-token system
# prompt shared by all chats, earlier questions and answers) plus a new question, and
# generates exactly MAX_TOKENS tokens (greedy, ignore_eos). SmolLM2-135M-Instruct Q4_1, PP=1,
# one CPU worker of THREADS threads. Prints TTFT of first turns and of later turns (which a
# prefix cache serves mostly from cached blocks), their ratio off/on, and writes JSON.
# DATA=2 runs both as two data-parallel replicas of one worker each, routed by load
# (ROUTE_BY_PREFIX=true: the router follows each chat's prefix to its replica,
# parallel.route_by_prefix).
#   CHATS=16 CONCURRENCY=8 TURNS=4 MAX_TOKENS=32 THREADS=2 DATA=1 scripts/bench_chat.sh [OUT.json]
#
# COMPARE=host_tier compares the host tier of the prefix cache instead: prefix caching on in
# both, a device KV pool of KV_CACHE_MB (default 32 MiB) far smaller than the chats'
# histories, with scheduler.host_kv_cache_mb HOST_KV_MB (default 1024) against none. Each
# chat has its own system prompt and the turns go round by round (turn t of every chat,
# then turn t + 1), so a history is evicted from the device pool before its next turn.
#   COMPARE=host_tier CHATS=16 CONCURRENCY=2 TURNS=4 scripts/bench_chat.sh [OUT.json]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/bench_chat.json}
CHATS=${CHATS:-16} CONCURRENCY=${CONCURRENCY:-8} TURNS=${TURNS:-4} MAX_TOKENS=${MAX_TOKENS:-32} THREADS=${THREADS:-2}
DATA=${DATA:-1} ROUTE_BY_PREFIX=${ROUTE_BY_PREFIX:-false} COMPARE=${COMPARE:-caching}
if [[ $COMPARE == host_tier ]]; then
  KV_CACHE_MB=${KV_CACHE_MB:-32} HOST_KV_MB=${HOST_KV_MB:-1024}
  VARIANTS=("on:prefix_caching: true, host_kv_cache_mb: $HOST_KV_MB" "off:prefix_caching: true")
  CHAT_FLAGS=(--turn-order round --own-system-prompt)
  COLUMN="host tier ($HOST_KV_MB MiB; device pool $KV_CACHE_MB MiB)"
else
  KV_CACHE_MB=${KV_CACHE_MB:-256}
  VARIANTS=("on:prefix_caching: true" "off:prefix_caching: false")
  CHAT_FLAGS=()
  COLUMN="prefix caching"
fi
DEVICES=$(printf 'cpu, %.0s' $(seq 1 "$DATA")); DEVICES=${DEVICES%, }
MODEL=${MODEL:-$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf}
BIN=${CASCADE_BUILD_DIR:-build}/bin
[[ -x $BIN/cascade-coordinator ]] || ./scripts/build.sh >/dev/null
[[ -f $MODEL ]] || ./scripts/setup.sh
TMP=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

rows=()
for VARIANT in "${VARIANTS[@]}"; do
  CACHING=${VARIANT%%:*} SCHED=${VARIANT#*:}
  cat > "$TMP/$CACHING.yaml" <<YAML
model: {path: $MODEL}
parallel: {data: $DATA, pipeline: 1, tensor: 1, route_by_prefix: $ROUTE_BY_PREFIX}
nodes: [{name: n0, host: 127.0.0.1, devices: [$DEVICES], launch: local}]
server: {listen: 127.0.0.1:0, http_listen: 127.0.0.1:0}
scheduler: {max_num_seqs: 64, max_batched_tokens: 2048, kv_block_size: 16, kv_cache_mb: $KV_CACHE_MB, $SCHED}
YAML
  "$BIN/cascade-coordinator" --config "$TMP/$CACHING.yaml" --worker-threads "$THREADS" >"$TMP/$CACHING.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 600); do grep -q "ready on" "$TMP/$CACHING.log" && break; sleep 0.1; done
  HTTP=$(grep -o 'http front on [^ ]*' "$TMP/$CACHING.log" | cut -d' ' -f4)
  [[ -n $HTTP ]] || { cat "$TMP/$CACHING.log" >&2; exit 1; }
  python3 scripts/openai_load.py load "http://$HTTP" --requests 4 --concurrency 4 --max-tokens 4 >/dev/null  # warm-up
  python3 scripts/openai_load.py chat "http://$HTTP" --chats "$CHATS" --concurrency "$CONCURRENCY" --turns "$TURNS" \
    --max-tokens "$MAX_TOKENS" --label "$COLUMN: $CACHING" --json "$TMP/$CACHING.json" "${CHAT_FLAGS[@]}" >/dev/null
  curl -s "http://$HTTP/metrics" | grep -E '^cascade_(prefix_cache_(query|hit|host_hit)_tokens|host_kv_[a-z_]+)' |
    sed "s/^/  $CACHING: /" || true
  [[ $DATA == 1 ]] || curl -s "http://$HTTP/metrics" | grep -E '^cascade_replica_requests_finished_total' | sed 's/^/  /'
  kill $PID; wait $PID 2>/dev/null || true
  rows+=("$TMP/$CACHING.json")
done

python3 - "$OUT" "$COLUMN" "$COMPARE" "${rows[@]}" <<'PY'
import json, sys
column, compare = sys.argv[2], sys.argv[3]
on, off = (json.load(open(f)) for f in sys.argv[4:])
json.dump({"compare": compare, "on": on, "off": off}, open(sys.argv[1], "w"), indent=1)
print(f"{on['chats']} chats x {on['turns']} turns at concurrency {on['concurrency']}, {on['max_tokens']} tokens per answer,"
      f" turns {'round by round' if on['turn_order'] == 'round' else 'back to back'}\n")
print(f"| {column} | turn-1 TTFT p50 ms | turn-2+ TTFT p50 ms | turn-2+ TTFT mean ms | turn-2+ p99 ms | cached / prompt tokens (turns 2+) | tok/s | failed |")
print("|---|---|---|---|---|---|---|---|")
for name, r in (("on", on), ("off", off)):
    f, l = r["ttft_first_turn_ms"], r["ttft_later_turns_ms"]
    share = r["later_turn_cached_tokens"] / max(1, r["later_turn_prompt_tokens"])
    print(f"| {name} | {f['p50']:.0f} | {l['p50']:.0f} | {l['mean']:.0f} | {l['p99']:.0f} | "
          f"{r['later_turn_cached_tokens']} / {r['later_turn_prompt_tokens']} ({100 * share:.0f}%) | "
          f"{r['throughput_tok_s']:.0f} | {r['failures']} |")
ratio = off["ttft_later_turns_ms"]["p50"] / max(1e-9, on["ttft_later_turns_ms"]["p50"])
print(f"\nturn-2+ TTFT p50: {ratio:.2f}x lower with {'the host tier' if compare == 'host_tier' else 'prefix caching'}"
      " (goal >= 3x)")
print(f"wrote {sys.argv[1]}")
PY
