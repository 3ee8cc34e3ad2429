#!/usr/bin/env bash
# The real cluster on one device: the coordinator and its workers, PP=1, PP=2 (PP=2 as
# two nodes on 127.0.0.1 that both list the device) and PP=1 with scheduler.cuda_graphs
# (`1g`; on a cpu device the switch changes nothing), greedy, `cascade bench` at batch 1
# and 32 (128-token prompts, 128 tokens generated, no speculation). For each run it prints
# the workers' mean step (cascade_stage_step_seconds from /metrics, over that run alone),
# TTFT, ITL and throughput, the in-process forward at the same batch where FORWARD_JSON
# gives it (gpu_model_bench's JSON for the same model), and it checks that PP=2 and PP=1
# with graphs give PP=1's greedy ids. scripts/gpu_check.sh runs it on cuda:0 with the binaries of
# scripts/pack_gpu_cluster.sh; run here with DEVICE=cpu it is its own no-GPU path (the same
# flow on stories260K).
#
# Usage: OUT=DIR [DEVICE=cuda:0|cpu] [MODEL=FILE] [FORWARD_JSON=FILE] scripts/gpu_cluster_check.sh
# Env: CASCADE_BUILD_DIR (default build; .gpu-cluster on the GPU machine), REQUESTS_B1=8,
#      MAX_TOKENS=128, PROMPT_TOKENS=128, WORKER_THREADS=4 (each worker's host threads: a
#      GPU worker samples its rows on them). Exit status: 0, or 1 when a run fails or the
#      ids differ.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu_cluster}
DEVICE=${DEVICE:-cuda:0}
export CASCADE_BUILD_DIR=${CASCADE_BUILD_DIR:-build}
BIN=$CASCADE_BUILD_DIR/bin
MODEL=${MODEL:-${CASCADE_TESTDATA:-../shared/testdata}/models/stories260K.gguf}
PROMPT_TOKENS=${PROMPT_TOKENS:-128}
MAX_TOKENS=${MAX_TOKENS:-128}
REQUESTS_B1=${REQUESTS_B1:-8}
export CLUSTER_ARGS="--worker-threads ${WORKER_THREADS:-4}"
mkdir -p "$OUT"
source scripts/cluster_lib.sh
t0=$(date +%s)
say() { echo "gpu_cluster_check [$(($(date +%s) - t0)) s]: $*" | tee -a "$OUT/summary.txt"; }

[[ -x $BIN/cascade-coordinator && -x $BIN/cascade-worker && -x $BIN/cascade ]] ||
  { say "no cascade binaries in $BIN (build, or scripts/pack_gpu_cluster.sh): skipped"; exit 0; }
[[ -f $MODEL ]] || { say "no model $MODEL: skipped"; exit 0; }

# The config of run $1 (PP=N, with CUDA graphs when it ends in g) on $DEVICE, every stage
# a node of its own on 127.0.0.1.
config() {
  local pp=${1%g} nodes="" i graphs=""
  [[ $1 == *g ]] && graphs=", cuda_graphs: true"
  for ((i = 0; i < pp; ++i)); do nodes+="  - {name: n$i, host: 127.0.0.1, devices: ['$DEVICE'], launch: local}"$'\n'; done
  local memory="kv_cache_mb: 256"
  [[ $DEVICE == cuda:* ]] && memory="kv_cache_mb: 4096, gpu_memory_fraction: $(awk "BEGIN {print 0.8 / $pp}")"
  cat <<EOF
model: {path: $(realpath "$MODEL")}
parallel: {pipeline: $pp}
nodes:
$nodes
server: {listen: '127.0.0.1:0', http_listen: '127.0.0.1:0'}
scheduler: {max_num_seqs: 32, max_batched_tokens: 4096, kv_block_size: 16, $memory$graphs}
EOF
}

# cascade_stage_step_seconds per stage (sum, count and cumulative buckets), as JSON, from /metrics.
step_snapshot() {
  python3 - "$CLUSTER_HTTP" <<'PY'
import json, re, sys, urllib.request
text = urllib.request.urlopen(f"http://{sys.argv[1]}/metrics", timeout=10).read().decode()
out = {}
for m in re.finditer(r'^cascade_stage_step_seconds_(sum|count|bucket)\{([^}]*)\} (\S+)$', text, re.M):
    kind, labels, value = m.group(1), m.group(2), float(m.group(3))
    if kind == "bucket":
        le = re.search(r'le="([^"]+)"', labels).group(1)
        key = re.sub(r',?le="[^"]+"', "", labels)
        out.setdefault(key, {}).setdefault("buckets", {})[le] = value
    else:
        out.setdefault(labels, {})[kind] = value
print(json.dumps(out))
PY
}

rc=0
for pp in 1 2 1g; do
  config "$pp" >"$OUT/pp$pp.yaml"
  if ! start_cluster "$OUT/pp$pp.yaml" "$OUT/pp$pp.log"; then
    say "PP=$pp: the cluster did not start (last lines: $(tail -n 2 "$OUT/pp$pp.log" | tr '\n' ' '))"
    rc=1
    continue
  fi
  for batch in 1 32; do
    requests=$((batch == 1 ? REQUESTS_B1 : 2 * batch))
    step_snapshot >"$OUT/pp${pp}_b${batch}.before.json"
    if ! "$BIN/cascade" bench --server "$CLUSTER_ADDR" --requests "$requests" --concurrency "$batch" \
      --prompt-tokens "$PROMPT_TOKENS" --max-tokens "$MAX_TOKENS" --no-speculate --label "pp$pp-b$batch" \
      --json "$OUT/pp${pp}_b${batch}.json" --ids-out "$OUT/pp${pp}_b${batch}.ids" >"$OUT/pp${pp}_b${batch}.bench.log" 2>&1; then
      say "PP=$pp batch $batch: cascade bench failed: $(tail -n 1 "$OUT/pp${pp}_b${batch}.bench.log")"
      rc=1
    fi
    step_snapshot >"$OUT/pp${pp}_b${batch}.after.json"
  done
  kill -TERM "$CLUSTER_PID" 2>/dev/null
  wait "$CLUSTER_PID" 2>/dev/null
done

python3 - "$OUT" "${FORWARD_JSON:-}" "$DEVICE" "$MODEL" <<'PY' | tee -a "$OUT/summary.txt"
import json, os, sys
out, forward_json, device, model = sys.argv[1:5]
forward = {}
if forward_json and os.path.exists(forward_json):
    runs = json.load(open(forward_json))["runs"]
    gpu = [r for r in runs if r["backend"].startswith("cuda")]
    if gpu:  # ms per in-process decode step at each batch.
        forward = {1: 1e3 / gpu[0]["decode_b1_tok_s"], 32: 1e3 * 32 / gpu[0]["decode_b32_tok_s"]}
rows, report = [], {"device": device, "model": model, "runs": []}
print(f"\nthe cluster on {device}, {os.path.basename(model)}: worker step (mean over the run) against the in-process forward")
print("(stage steps: each stage's mean step over the run, prefill included; median: the last stage's median step,"
      " from the histogram; ratio: median / the in-process forward at the same batch)")
print(f"{'PP':>3} {'batch':>6} {'stage means ms':>18} {'median ms':>10} {'forward ms':>11} {'ratio':>7} {'ttft p50':>9}"
      f" {'itl p50':>8} {'tok/s':>8}")
for pp in ("1", "2", "1g"):
    for batch in (1, 32):
        name = f"pp{pp}_b{batch}"
        try:
            before = json.load(open(f"{out}/{name}.before.json"))
            after = json.load(open(f"{out}/{name}.after.json"))
            bench = json.load(open(f"{out}/{name}.json"))
        except (OSError, ValueError):
            print(f"{pp:>3} {batch:>6} (no result)")
            continue
        steps, medians = [], []
        for key in sorted(after):
            b = before.get(key, {})
            n = after[key].get("count", 0) - b.get("count", 0)
            if n <= 0:
                continue
            steps.append(1e3 * (after[key]["sum"] - b.get("sum", 0)) / n)
            # The median step, from the histogram's buckets over this run (the mean also
            # carries the prompts' prefill steps).
            les = sorted(after[key].get("buckets", {}), key=lambda le: float("inf") if le == "+Inf" else float(le))
            prev_le, prev_c = 0.0, 0.0
            for le in les:
                c = after[key]["buckets"][le] - b.get("buckets", {}).get(le, 0)
                if c >= n / 2:
                    hi = prev_le if le == "+Inf" else float(le)
                    medians.append(1e3 * (prev_le + (hi - prev_le) * (n / 2 - prev_c) / max(c - prev_c, 1e-9)))
                    break
                prev_le, prev_c = (prev_le if le == "+Inf" else float(le)), c
        fwd = forward.get(batch) if pp != "2" else None
        ratio = medians[-1] / fwd if fwd and medians else None
        row = bench["rows"][0] if "rows" in bench else bench
        ttft, itl = row["ttft_ms"]["p50"], row["itl_ms"]["p50"]
        tok_s = row.get("tok_s", row.get("throughput_tok_s", 0))
        show = lambda x, f: format(x, f) if x is not None else "-"
        print(f"{pp:>3} {batch:>6} {' / '.join(f'{x:.2f}' for x in steps):>18} "
              f"{show(medians[-1] if medians else None, '.2f'):>10} {show(fwd, '.2f'):>11} {show(ratio, '.3f'):>7}"
              f" {ttft:>9.1f} {itl:>8.2f} {tok_s:>8.0f}")
        report["runs"].append({"pp": pp, "batch": batch, "stage_step_mean_ms": steps, "stage_step_median_ms": medians,
                               "forward_ms": fwd, "ratio": ratio, "ttft_p50_ms": ttft, "itl_p50_ms": itl,
                               "tok_s": tok_s})
json.dump(report, open(f"{out}/gpu_cluster.json", "w"), indent=1)
PY

# PP=1, PP=2 and PP=1 with graphs are one model: the same greedy ids, request by request.
for other in 2 1g; do
  for batch in 1 32; do
    a="$OUT/pp1_b${batch}.ids" b="$OUT/pp${other}_b${batch}.ids"
    if [[ -s $a && -s $b ]] && cmp -s <(sort "$a") <(sort "$b"); then
      say "batch $batch: PP=1 and PP=$other gave the same greedy ids ($(wc -l <"$a") requests)"
    else
      say "batch $batch: PP=1 and PP=$other greedy ids DIFFER (or a run is missing): $a $b"
      rc=1
    fi
  done
done
exit $rc
