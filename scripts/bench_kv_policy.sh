#!/usr/bin/env bash
# What scheduler.kv_policy: sink_window costs in quality: the perplexity of a held text (the
# GPL-3 licence Debian ships, /usr/share/common-licenses/GPL-3: real English, not a prompt
# any test feeds) under exact attention against sink + window attention, windows of 128 to
# 1024 positions with StreamingLLM's 4 sinks and without any (a plain window, the baseline
# StreamingLLM improves on), on the default model (SmolLM2-135M-Instruct Q4_1), teacher
# forced over the text's first CTX tokens (`cascade perplexity`, one forward pass each).
# Only the rows past sinks + window see less than exact attention: their perplexity is
# compared with exact attention's over the same rows, in the same run.
#
# Usage: scripts/bench_kv_policy.sh [OUT.json]     (default build/bench_kv_policy.json)
# Env: CTX (default 2048), THREADS (default 2). Prints the table and writes JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/bench_kv_policy.json}
TEXT=/usr/share/common-licenses/GPL-3
SMOL=models/SmolLM2-135M-Instruct.Q4_1.gguf
[[ -f $SMOL ]] || ./scripts/setup.sh >/dev/null
[[ -x build/bin/cascade ]] || ./scripts/build.sh >/dev/null
[[ -f $TEXT ]] || { echo "bench_kv_policy: $TEXT is missing (Debian's base-files)" >&2; exit 1; }
mkdir -p "$(dirname "$OUT")"
python3 - "$OUT" "${CTX:-2048}" "${THREADS:-2}" "$SMOL" "$TEXT" <<'EOF'
import json, math, subprocess, sys
out, ctx, threads, model, text = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]

def run(*flags):
    p = subprocess.run(["build/bin/cascade", "perplexity", "--model", model, "--file", text, "--ctx", str(ctx),
                        "--threads", threads, "--json", *flags], capture_output=True, text=True, check=True)
    return json.loads(p.stdout)

def ppl(nll, first):
    rows = nll[first:]
    return math.exp(sum(rows) / len(rows))

exact = run()
print(f"perplexity of the first {ctx} tokens of GPL-3, SmolLM2-135M-Instruct Q4_1, {threads} thread(s); "
      f"exact attention over all {len(exact['nll'])} rows: {exact['perplexity']:.3f}")
print("| sinks | window | rows narrowed | ppl, narrowed rows | exact attention, same rows | ratio | ppl, all rows |")
print("|---|---|---|---|---|---|---|")
rows = []
for window in (128, 256, 512, 1024):
    for sinks in (4, 0):
        r = run("--kv-window-tokens", str(window), "--kv-sink-tokens", str(sinks))
        first = window + sinks
        mine, ref = ppl(r["nll"], first), ppl(exact["nll"], first)
        rows.append({"sinks": sinks, "window": window, "narrowed_rows": len(r["nll"]) - first,
                     "perplexity_narrowed": mine, "exact_same_rows": ref, "perplexity_all": r["perplexity"]})
        print(f"| {sinks} | {window} | {len(r['nll']) - first} | {mine:.3f} | {ref:.3f} | {mine / ref:.3f}x | "
              f"{r['perplexity']:.3f} |")
json.dump({"ctx": ctx, "threads": threads, "text": text, "model": model, "exact_perplexity": exact["perplexity"],
           "rows": rows}, open(out, "w"), indent=1)
EOF
echo "bench_kv_policy: wrote $OUT"
