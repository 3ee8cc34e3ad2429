#!/usr/bin/env bash
# Speculative decoding benchmark: batch-1 decode tokens/s with and without
# speculation, measured against the same cluster in the same run (`cascade bench`
# with and without --no-speculate), with the acceptance rate, for
#   (a) SmolLM2-135M Q4_1 + the n-gram drafter on an input-grounded task (repeat a passage)
#   (b) SmolLM2-135M Q4_1 + self-draft (its first SELF_LAYERS layers and its head)
#   (c) tinystories-656k F32 (safetensors) + its Q8_0 GGUF copy as the draft model
#   (d) throughput at concurrency 16 (n-gram drafter) with the cost-aware switch-off on
#       (the default), with a hard cap (draft.max_batch 4), and off (adaptive: false,
#       k = num_tokens always), each against plain decoding
# CPU workers with one thread each. Prints a table; all rows go to ${1:-build/bench_spec.json}.
#   R=3 M=128 scripts/bench_spec.sh [OUT.json]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/bench_spec.json}
R=${R:-3} M=${M:-128} SELF_LAYERS=${SELF_LAYERS:-20}
SMOL=${SMOL:-$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf}
TESTDATA=${CASCADE_TESTDATA:-$PWD/../shared/testdata}
TINY=$TESTDATA/models/tinystories-656k TINY_Q8=$TESTDATA/models/tinystories-656k-q8_0.gguf
BIN=${CASCADE_BUILD_DIR:-build}/bin
[[ -x $BIN/cascade-coordinator ]] || ./scripts/build.sh >/dev/null
[[ -f $SMOL ]] || ./scripts/setup.sh
TMP=$(mktemp -d)
source scripts/cluster_lib.sh
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT
PASSAGE="Repeat the following passage exactly, word for word: The old lighthouse stood at the edge of the cliff, \
its white paint peeling in the salt wind. Every night for forty years, Martha climbed the hundred and twelve steps \
to light the lamp, and every morning she wrote the weather in a small green book. When the new automatic light \
arrived, she kept climbing the stairs anyway, because the ships still needed someone to watch for them."

# setting NAME MODEL DRAFT_YAML CONCURRENCY REQUESTS BENCH_ARGS...: one cluster, bench with
# speculation then without; writes $TMP/NAME.{spec,plain}.json.
setting() {
  local name=$1 model=$2 draft=$3 c=$4 n=$5; shift 5
  cat > "$TMP/$name.yaml" <<YAML
model: {path: $model}
parallel: {pipeline: 1, tensor: 1}
nodes: [{name: n0, host: 127.0.0.1, devices: [cpu], launch: local}]
server: {listen: 127.0.0.1:0}
scheduler: {max_num_seqs: 32, max_batched_tokens: 2048, kv_block_size: 16, kv_cache_mb: 256}
draft: $draft
YAML
  start_cluster "$TMP/$name.yaml" "$TMP/$name.log"
  local pid=$CLUSTER_PID addr=$CLUSTER_ADDR
  "$BIN/cascade" bench --server "$addr" --requests 2 --concurrency 1 --prompt-tokens 8 --max-tokens 8 >/dev/null  # warm-up
  for mode in spec plain; do
    local extra=(); [[ $mode == plain ]] && extra=(--no-speculate)
    "$BIN/cascade" bench --server "$addr" --requests "$n" --concurrency "$c" --max-tokens "$M" "$@" "${extra[@]}" \
      --label "$name/$mode" --json "$TMP/$name.$mode.json" >/dev/null
  done
  kill $pid; wait $pid 2>/dev/null || true
}

setting a_ngram "$SMOL" "{ngram: {n: 3}, num_tokens: 8}" 1 "$R" --chat "$PASSAGE"
setting b_self "$SMOL" "{self: {layers: $SELF_LAYERS}, num_tokens: 4}" 1 "$R" --chat "Write a short story about a robot who learns to paint."
if [[ -d $TINY && -f $TINY_Q8 ]]; then
  setting c_draft_model "$TINY" "{model: $TINY_Q8, num_tokens: 6}" 1 "$R" --prompt-ids 1
else
  echo "bench_spec: $TINY or $TINY_Q8 missing, setting (c) skipped" >&2
fi
setting d_c16_switch_on "$SMOL" "{ngram: {n: 3}}" 16 32
setting d_c16_cap4 "$SMOL" "{ngram: {n: 3}, max_batch: 4}" 16 32
setting d_c16_switch_off "$SMOL" "{ngram: {n: 3}, adaptive: false}" 16 32

python3 - "$OUT" "$TMP" <<'PY'
import glob, json, os, sys
out, tmp = sys.argv[1], sys.argv[2]
rows = []
for spec in sorted(glob.glob(os.path.join(tmp, "*.spec.json"))):
    name = os.path.basename(spec)[:-len(".spec.json")]
    s, p = json.load(open(spec)), json.load(open(spec.replace(".spec.", ".plain.")))
    batch1 = s["concurrency"] == 1
    metric = "decode_tok_s_p50" if batch1 else "throughput_tok_s"
    rows.append({"setting": name, "concurrency": s["concurrency"], "metric": metric, "speculative": s[metric],
                 "plain": p[metric], "speedup": s[metric] / p[metric] if p[metric] else 0,
                 "acceptance_rate": s["speculative"]["acceptance_rate"],
                 "mean_accepted_length": s["speculative"]["mean_accepted_length"], "raw": {"spec": s, "plain": p}})
print(f"{'setting':18} {'conc':>4} {'metric':>17} {'speculative':>12} {'plain':>9} {'speedup':>8} {'accept':>7} {'len':>5}")
for r in rows:
    print(f"{r['setting']:18} {r['concurrency']:4} {r['metric']:>17} {r['speculative']:12.1f} {r['plain']:9.1f} "
          f"{r['speedup']:7.2f}x {100 * r['acceptance_rate']:6.1f}% {r['mean_accepted_length']:5.2f}")
os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
json.dump(rows, open(out, "w"), indent=1)
print("wrote", out)
PY
