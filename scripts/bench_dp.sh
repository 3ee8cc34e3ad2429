#!/usr/bin/env bash
# Data-parallel benchmark: throughput at concurrency 32 (and TTFT/ITL percentiles) of one
# replica (parallel.data: 1) against two (parallel.data: 2), the same cores per replica
# (each replica one PP=1 x TP=1 worker with --worker-threads 1), on SmolLM2-135M Q4_1 and
# the random Llama-3.2-1B-shaped Q4_K_M of scripts/random_models.sh; greedy, fixed-length
# outputs (--ignore-eos through `cascade bench`). Also one greedy prompt sent twice at once,
# four times, at DP=2: one copy per replica, and the ids must be identical.
# Table on stdout, JSON in ${1:-build/bench_dp.json}.
# Settings (environment): MODELS (paths), REQUESTS (default 96), MAX_TOKENS (default 64).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/bench_dp.json}
BIN=${CASCADE_BUILD_DIR:-build}/bin
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/cascade/models"
R1B=$CACHE/random-llama-1b-Q4_K_M.gguf
MODELS=${MODELS:-"$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf $R1B"}
REQUESTS=${REQUESTS:-96} MAX_TOKENS=${MAX_TOKENS:-64}
[[ -x $BIN/cascade-coordinator ]] || ./scripts/build.sh >/dev/null
[[ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]] || ./scripts/setup.sh
if [[ " $MODELS " == *" $R1B "* && ! -f $R1B ]]; then
  (mkdir -p "$CACHE" && LLAMA_BIN=$(./scripts/llama_cpp.sh) && MODELS=$CACHE && source scripts/random_models.sh &&
    random_models 1b random-llama-1b Q4_K_M)
fi
export UCX_POSIX_ERROR_HANDLING=y UCX_SYSV_ERROR_HANDLING=y
TMP=$(mktemp -d)
source scripts/cluster_lib.sh
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT
mkdir -p "$(dirname "$OUT")"
rows=()
for MODEL in $MODELS; do
  NAME=$(basename "$MODEL" .gguf)
  for DP in 1 2; do
    DEVICES=$(printf 'cpu, %.0s' $(seq 1 "$DP")); DEVICES=${DEVICES%, }
    cat > "$TMP/dp$DP.yaml" <<YAML
model: {path: $MODEL}
parallel: {data: $DP, pipeline: 1, tensor: 1}
nodes: [{name: n0, host: 127.0.0.1, devices: [$DEVICES], launch: local}]
server: {listen: 127.0.0.1:0}
scheduler: {max_num_seqs: 32, kv_cache_mb: 256, prefix_caching: false}
YAML
    start_cluster "$TMP/dp$DP.yaml" "$TMP/dp$DP.log"
    PID=$CLUSTER_PID ADDR=$CLUSTER_ADDR
    "$BIN/cascade" bench --server "$ADDR" --requests 4 --concurrency 4 --prompt-tokens 8 --max-tokens 8 >/dev/null
    "$BIN/cascade" bench --server "$ADDR" --requests "$REQUESTS" --concurrency 32 --prompt-tokens 32 \
      --max-tokens "$MAX_TOKENS" --temperature 0 --label "$NAME DP=$DP" --json "$TMP/$NAME-dp$DP.json" |
      { [[ ${#rows[@]} == 0 ]] && cat || tail -n 1; }
    rows+=("$TMP/$NAME-dp$DP.json")
    "$BIN/cascade" status --server "$ADDR" --wait 0 | grep '^replica' | tee "$TMP/$NAME-replicas-before.txt" || true
    if [[ $DP == 2 ]]; then
      # The same greedy prompt twice at once, 4 times: one copy per replica, each at batch 1
      # (a near-tie may resolve differently at another batch size: GEMV vs tiled GEMM).
      for i in 1 2 3 4; do
        "$BIN/cascade" generate --server "$ADDR" --prompt "The quick brown fox" --temperature 0 --max-tokens 24 \
          --ignore-eos --json > "$TMP/$NAME-ids${i}a.json" &
        a=$!
        "$BIN/cascade" generate --server "$ADDR" --prompt "The quick brown fox" --temperature 0 --max-tokens 24 \
          --ignore-eos --json > "$TMP/$NAME-ids${i}b.json" &
        wait $a $!
      done
      "$BIN/cascade" status --server "$ADDR" --wait 0 | grep '^replica' > "$TMP/$NAME-replicas.txt" || true
    fi
    kill "$PID"; wait "$PID" 2>/dev/null || true
  done
done
python3 - "$OUT" "$TMP" $MODELS <<'PY'
import glob, json, os, sys
out, tmp, models = sys.argv[1], sys.argv[2], sys.argv[3:]
result = {"concurrency": 32, "models": []}
print("\n| model | DP=1 tok/s | DP=2 tok/s | DP=2 / DP=1 | TTFT p50 ms (1 / 2) | ITL p50 ms (1 / 2) | ids identical |")
print("|---|---|---|---|---|---|---|")
for m in models:
    name = os.path.basename(m)[:-len(".gguf")]
    r1, r2 = (json.load(open(f"{tmp}/{name}-dp{d}.json")) for d in (1, 2))
    ids = [json.load(open(f))["token_ids"] for f in sorted(glob.glob(f"{tmp}/{name}-ids*.json"))]
    same = len(ids) == 8 and all(i == ids[0] for i in ids)
    def finished(path):  # Requests finished per replica, from `cascade status`.
        return [int(line.rsplit(" ", 1)[1]) for line in open(path) if line.startswith("replica ")]
    split = [b - a for a, b in zip(finished(f"{tmp}/{name}-replicas-before.txt"), finished(f"{tmp}/{name}-replicas.txt"))]
    same = same and split == [4, 4]  # One copy of each pair per replica.
    ratio = r2["throughput_tok_s"] / r1["throughput_tok_s"]
    print(f"| {name} | {r1['throughput_tok_s']:.1f} | {r2['throughput_tok_s']:.1f} | {ratio:.2f}x | "
          f"{r1['ttft_ms']['p50']:.0f} / {r2['ttft_ms']['p50']:.0f} | {r1['itl_ms']['p50']:.1f} / {r2['itl_ms']['p50']:.1f} | "
          f"{'yes' if same else 'NO'} ({len(ids)} requests, {split} per replica) |")
    replicas = open(f"{tmp}/{name}-replicas.txt").read().strip().splitlines()
    for line in replicas:
        print(f"  {line}")
    result["models"].append({"model": name, "dp1": r1, "dp2": r2, "dp2_over_dp1": ratio, "greedy_ids_identical": same,
                             "replicas_after": replicas})
    if not same:
        sys.exit(f"{name}: greedy ids differ across replicas")
json.dump(result, open(out, "w"), indent=1)
print(f"wrote {out}")
PY
