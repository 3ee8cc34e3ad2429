#!/usr/bin/env bash
# Mixture of experts against llama.cpp: a Qwen3-30B-A3B-shaped model scaled to fit (qwen3moe:
# hidden 1024, 8 layers, 16/4 heads, 64 experts, top-8, expert FFN 512; random weights from
# scripts/make_random_gguf.py moe, SmolLM2's 49152-token vocabulary), quantized to Q4_K_M
# and Q8_0 by llama.cpp's own `llama-quantize`, then in the same run:
#   1. `cascade run` against `llama-bench`: prefill and decode tok/s at 1 and 2 threads
#      (prompt N_PROMPT, decode N_DECODE), peak RSS, and Cascade's expert load (the worst
#      layer's busiest expert over the mean);
#   2. expert parallelism: batch-1 decode of a cluster with one worker (EP=1, 1 thread)
#      against two workers holding 32 experts each (EP=2, parallel.expert, 1 thread each),
#      and against two workers slicing every expert (TP=2, expert: false);
#   3. expert balance (EPLB=1) on a router skewed like a trained one (make_random_gguf.py
#      moe --skewed-router: 8 hot experts per layer, Zipf-like), Q4_K_M: throughput at
#      concurrency 16 (32 requests) of EP=1, EP=2, and EP=2 with parallel.redundant_experts
#      (SLOTS per rank, placed every 20 steps), one thread per worker; the worst layer's
#      busiest expert over the mean and, with EPLB, its busiest rank over the mean before
#      and after the last placement;
#   4. across hosts (HOSTS=1, root; scripts/bench_moe_hosts.py): EP=2 and EP=4, one worker per
#      network-namespace host on shaped links, the skewed Q4_K_M model in three forms
#      (all-reduce, all-reduce with EPLB, all-to-all): throughput at concurrency 16 and the
#      data plane's bytes per layer and token measured on the links, against what each
#      form's collectives imply.
# llama.cpp is built by scripts/llama_cpp.sh; models are cached in ~/.cache/cascade/models/
# (F16 1.8 GB, Q8_0 1 GB, Q4_K_M 0.6 GB).
#
# Usage: scripts/bench_moe.sh [OUT.json]     (default build/bench_moe.json)
# Env: TYPES="Q4_K_M Q8_0"  THREADS="1 2"  N_PROMPT=512  N_DECODE=128  REPEATS=3  EP=1 (0: skip 2.)
#      EPLB=1 (0: skip 3.)  SLOTS=4  SINGLE=1 (0: skip 1.)  HOSTS=1 (0: skip 4.)  EPS="2 4"  NET=10g
# Both sides report their best of REPEATS runs (llama-bench: of its repetitions).
# Prints markdown tables (docs/PERFORMANCE.md holds the latest) and writes JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/bench_moe.json}
export TYPES=${TYPES:-"Q4_K_M Q8_0"} THREADS=${THREADS:-"1 2"} N_PROMPT=${N_PROMPT:-512} N_DECODE=${N_DECODE:-128}
export REPEATS=${REPEATS:-3} EP=${EP:-1} EPLB=${EPLB:-1} SLOTS=${SLOTS:-4} SINGLE=${SINGLE:-1} HOSTS=${HOSTS:-1}
MODELS="${XDG_CACHE_HOME:-$HOME/.cache}/cascade/models"
mkdir -p "$MODELS" "$(dirname "$OUT")"
[[ -x build/bin/cascade && -x build/bin/cascade-coordinator ]] || ./scripts/build.sh >/dev/null
[[ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]] || ./scripts/setup.sh
LLAMA_BIN=$(./scripts/llama_cpp.sh)
export LLAMA_BIN MODELS

source scripts/random_models.sh
random_models moe random-qwen3moe $TYPES

TMP=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT
source scripts/cluster_lib.sh
# Starts a cluster of $2 workers (one thread each) on model $1, experts sharded whole when $3
# is true, with more parallel keys $4 (", key: value"), its files named after $5.
start_moe_cluster() {
  local model=$1 tp=$2 expert=$3 extra=$4 label=$5
  local devices; devices=$(printf 'cpu, %.0s' $(seq 1 "$tp")); devices=${devices%, }
  cat >"$TMP/$label.yaml" <<YAML
model: {path: $model}
parallel: {pipeline: 1, tensor: $tp, expert: $expert$extra}
nodes: [{name: n0, host: 127.0.0.1, devices: [$devices], launch: local}]
server: {listen: 127.0.0.1:0}
scheduler: {kv_cache_mb: 256}
YAML
  start_cluster "$TMP/$label.yaml" "$TMP/$label.log"
}
# Batch-1 decode of start_moe_cluster's cluster ($1-$3, no more keys): writes $TMP/ep-$4.json
# (cascade bench) and $TMP/ep-$4.status.
cluster_decode() {
  local model=$1 tp=$2 expert=$3 label=$4
  start_moe_cluster "$model" "$tp" "$expert" "" "$label"
  build/bin/cascade bench --server "$CLUSTER_ADDR" --requests 1 --concurrency 1 --prompt-tokens 8 --max-tokens 8 >/dev/null
  build/bin/cascade bench --server "$CLUSTER_ADDR" --requests 3 --concurrency 1 --prompt-tokens 32 \
    --max-tokens "$N_DECODE" --label "$label" --json "$TMP/ep-$label.json" >/dev/null
  build/bin/cascade status --server "$CLUSTER_ADDR" >"$TMP/ep-$label.status"
  kill "$CLUSTER_PID"; wait "$CLUSTER_PID" 2>/dev/null || true
}
# Throughput of `cascade bench` at concurrency 16 on model $1 over $2 workers, experts whole
# when $3 is true, with parallel keys $4 (", redundant_experts: ..."): $TMP/eplb-$5.json/.status.
cluster_throughput() {
  local label=$5
  start_moe_cluster "$@"
  build/bin/cascade bench --server "$CLUSTER_ADDR" --requests 16 --concurrency 16 --prompt-tokens 32 --max-tokens 32 >/dev/null
  build/bin/cascade bench --server "$CLUSTER_ADDR" --requests 32 --concurrency 16 --prompt-tokens 32 \
    --max-tokens "$N_DECODE" --label "$label" --json "$TMP/eplb-$label.json" >/dev/null
  build/bin/cascade status --server "$CLUSTER_ADDR" >"$TMP/eplb-$label.status"
  kill "$CLUSTER_PID"; wait "$CLUSTER_PID" 2>/dev/null || true
}
skewed_q4() {
  local skewed="$MODELS/random-qwen3moe-skewed-f16.gguf"
  [[ -f $skewed ]] || ./scripts/python_deps.sh scripts/make_random_gguf.py moe models/SmolLM2-135M-Instruct.Q4_1.gguf \
    "$skewed" --skewed-router >&2
  random_models_from "$skewed" random-qwen3moe-skewed Q4_K_M >&2
  echo "$MODELS/random-qwen3moe-skewed-Q4_K_M.gguf"
}
if [[ $EPLB == 1 ]]; then
  q=$(skewed_q4)
  cluster_throughput "$q" 1 false "" ep1
  cluster_throughput "$q" 2 true "" ep2
  cluster_throughput "$q" 2 true ", redundant_experts: $SLOTS, eplb_interval_steps: 20" ep2-eplb
fi
if [[ $HOSTS == 1 ]]; then
  [[ build/bin/nfq_delay -nt scripts/nfq_delay.c ]] || cc -O2 -Wall -o build/bin/nfq_delay scripts/nfq_delay.c
  # qwen3moe as scripts/make_random_gguf.py moe makes it: 8 layers, hidden 1024, 64 experts, top-8.
  NFQ_DELAY="$PWD/build/bin/nfq_delay" MAX_TOKENS=$N_DECODE python3 scripts/bench_moe_hosts.py build/bin "$(skewed_q4)" \
    8 1024 64 8 49152 "$TMP/hosts.json"
fi
if [[ $EP == 1 ]]; then
  for t in $TYPES; do
    q="$MODELS/random-qwen3moe-$t.gguf"
    cluster_decode "$q" 1 false "$t-ep1"
    cluster_decode "$q" 2 true "$t-ep2"
    cluster_decode "$q" 2 false "$t-tp2"
  done
fi

exec python3 - "$OUT" "$TMP" <<'PYEOF'
import json, os, re, sys
sys.path.insert(0, "scripts")
from bench_lib import cascade_run, llama_bench  # noqa: E402

out_path, tmp = sys.argv[1], sys.argv[2]
types, threads = os.environ["TYPES"].split(), [int(t) for t in os.environ["THREADS"].split()]
n_prompt, n_decode, repeats = int(os.environ["N_PROMPT"]), int(os.environ["N_DECODE"]), int(os.environ["REPEATS"])
llama, models = os.environ["LLAMA_BIN"], os.environ["MODELS"]
results = {"model": "qwen3moe hidden 1024, 8 layers, 64 experts top-8, expert FFN 512", "n_prompt": n_prompt,
           "n_decode": n_decode, "rows": [], "expert_parallel": []}
print(f"## Single process against llama-bench (prompt {n_prompt}, decode {n_decode})\n")
print("| type | threads | cascade prefill / decode tok/s | llama.cpp prefill / decode | prefill ratio | decode ratio "
      "| peak RSS cascade / llama.cpp / file MiB | expert load max/mean |")
print("|---|---|---|---|---|---|---|---|", flush=True)
for ty in types if os.environ["SINGLE"] == "1" else []:
    model = f"{models}/random-qwen3moe-{ty}.gguf"
    file_mib = os.path.getsize(model) / 1048576
    for t in threads:
        c = cascade_run(model, n_prompt, n_decode, t, repeats)
        load = c.pop("json").get("expert_load", {})
        c["expert_load_max_mean"] = load.get("max_mean_ratio", 0)
        c["expert_load"] = load.get("layers", [])
        l = llama_bench(llama, model, n_prompt, n_decode, t, repeats)
        results["rows"].append({"type": ty, "threads": t, "file_mib": file_mib, "cascade": c, "llama_cpp": l,
                                "prefill_ratio": c["prefill"] / l["prefill"], "decode_ratio": c["decode"] / l["decode"]})
        print(f"| {ty} | {t} | {c['prefill']:.1f} / {c['decode']:.1f} | {l['prefill']:.1f} / {l['decode']:.1f} "
              f"| {c['prefill'] / l['prefill']:.2f}x | {c['decode'] / l['decode']:.2f}x "
              f"| {c['rss_mib']:.0f} / {l['rss_mib']:.0f} / {file_mib:.0f} | {c['expert_load_max_mean']:.2f} |", flush=True)

runs = {}
for ty in types:
    for label in ("ep1", "ep2", "tp2"):
        path = f"{tmp}/ep-{ty}-{label}.json"
        if os.path.exists(path):
            r = json.load(open(path))
            r["decode_tok_s"] = 1000.0 / r["tpot_ms"]["p50"]
            status = open(f"{tmp}/ep-{ty}-{label}.status").read()
            r["worker_weight_mib"] = [float(m) for m in re.findall(r"ready\s+([\d.]+) MiB", status)]
            r["expert_load_max_mean"] = max([float(m) for m in re.findall(r"max/mean ([\d.]+)", status)] or [0])
            runs[(ty, label)] = r
if runs:
    print("\n## Expert parallelism: batch-1 decode through a cluster, 1 thread per worker\n")
    print("| type | EP=1 (1 worker) tok/s | EP=2 (2 workers, 32 experts each) tok/s | EP=2 / EP=1 | TP=2 sliced experts tok/s "
          "| weights per worker MiB (EP=1; EP=2) |")
    print("|---|---|---|---|---|---|")
    for ty in types:
        if (ty, "ep1") not in runs:
            continue
        e1, e2, t2 = runs[(ty, "ep1")], runs[(ty, "ep2")], runs[(ty, "tp2")]
        ratio = e2["decode_tok_s"] / e1["decode_tok_s"]
        results["expert_parallel"].append({"type": ty, "ep1": e1, "ep2": e2, "tp2": t2, "ep2_over_ep1": ratio})
        print(f"| {ty} | {e1['decode_tok_s']:.1f} | {e2['decode_tok_s']:.1f} | {ratio:.2f}x | {t2['decode_tok_s']:.1f} "
              f"| {', '.join(f'{m:.0f}' for m in e1['worker_weight_mib'])}; "
              f"{', '.join(f'{m:.0f}' for m in e2['worker_weight_mib'])} |")
balance = {}
for label in ("ep1", "ep2", "ep2-eplb"):
    path = f"{tmp}/eplb-{label}.json"
    if os.path.exists(path):
        r = json.load(open(path))
        status = open(f"{tmp}/eplb-{label}.status").read()
        r["expert_load_max_mean"] = max([float(m) for m in re.findall(r"max/mean ([\d.]+)", status)] or [0])
        ranks = re.findall(r"busiest rank over the mean ([\d.]+) -> ([\d.]+)", status)
        r["rank_imbalance"] = [[float(a), float(b)] for a, b in ranks]
        balance[label] = r
if balance:
    results["eplb"] = balance
    print(f"\n## Expert balance on a skewed router: concurrency 16, 32 requests of {n_decode} tokens, "
          "1 thread per worker, Q4_K_M\n")
    print("| cluster | throughput tok/s | over EP=1 | TPOT p50 ms | expert load max/mean (worst layer) "
          "| busiest rank over the mean, worst layer (before -> after the last placement) |")
    print("|---|---|---|---|---|---|")
    base = balance.get("ep1", {}).get("throughput_tok_s", 0)
    for label, r in balance.items():
        worst = max(r["rank_imbalance"], key=lambda ba: ba[0]) if r["rank_imbalance"] else None
        print(f"| {label} | {r['throughput_tok_s']:.1f} | {r['throughput_tok_s'] / base if base else 0:.2f}x "
              f"| {r['tpot_ms']['p50']:.1f} | {r['expert_load_max_mean']:.2f} "
              f"| {f'{worst[0]:.2f} -> {worst[1]:.2f}' if worst else '-'} |")
if os.path.exists(f"{tmp}/hosts.json"):
    results["across_hosts"] = json.load(open(f"{tmp}/hosts.json"))  # Its table was printed above.
with open(out_path, "w") as f:
    json.dump(results, f, indent=1)
print(f"\nwrote {out_path}")
PYEOF
