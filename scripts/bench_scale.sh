#!/usr/bin/env bash
# Cascade against llama.cpp at real sizes: random-weight Llama-3.2-1B-shaped and
# Llama-3-8B-shaped models (scripts/make_random_gguf.py, SmolLM2's 49152-token vocabulary)
# in Q4_K_M, Q5_K_M, Q6_K, Q8_0 and Q4_0, all made by llama.cpp's own `llama-quantize` from
# one F16 file, then `cascade run` and `llama-bench` in the same run, 1 and 2 threads:
# prefill tok/s, decode tok/s, peak RSS, and decode weight bandwidth (file bytes x decode
# tok/s) against a read-bandwidth probe (build/bin/read_bandwidth) measured in the same run.
#
# llama.cpp is built outside the repository by scripts/llama_cpp.sh (PyPI sdist of
# llama-cpp-python 0.3.36, cached under ~/.cache/cascade/llama.cpp/); models are cached
# under ~/.cache/cascade/models/ (1B: 2.1 GB F16 + ~4 GB quantized; 8B: 16 GB F16 + ~29 GB).
#
# Usage: scripts/bench_scale.sh [OUT.json]     (default build/bench_scale.json)
# Env: SHAPES="1b 8b"  TYPES="Q4_K_M Q5_K_M Q6_K Q8_0 Q4_0"  THREADS="1 2"  REPEATS=2
#      (both engines report their best of this many runs; llama-bench of its repetitions,
#      never fewer than 2)
#      (8B runs use a 128-token prompt and 32 decode tokens; 1B 512 and 128.)
# Prints a markdown table (docs/PERFORMANCE.md holds the latest) and writes JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/bench_scale.json}
export SHAPES=${SHAPES:-"1b 8b"} TYPES=${TYPES:-"Q4_K_M Q5_K_M Q6_K Q8_0 Q4_0"} THREADS=${THREADS:-"1 2"}
export REPEATS=${REPEATS:-2}
MODELS="${XDG_CACHE_HOME:-$HOME/.cache}/cascade/models"
mkdir -p "$MODELS" "$(dirname "$OUT")"
[[ -x build/bin/cascade && -x build/bin/read_bandwidth ]] || ./scripts/build.sh >/dev/null
[[ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]] || ./scripts/setup.sh
LLAMA_BIN=$(./scripts/llama_cpp.sh)
export LLAMA_BIN MODELS

source scripts/random_models.sh
for shape in $SHAPES; do
  random_models "$shape" "random-llama-$shape" $TYPES
done

exec python3 - "$OUT" <<'PYEOF'
import json, os, sys
out_path = sys.argv[1]
shapes, types = os.environ["SHAPES"].split(), os.environ["TYPES"].split()
threads, repeats = [int(t) for t in os.environ["THREADS"].split()], int(os.environ["REPEATS"])
llama, models = os.environ["LLAMA_BIN"], os.environ["MODELS"]
LENGTHS = {"1b": (512, 128), "8b": (128, 32)}

sys.path.insert(0, "scripts")
from bench_lib import cascade_run, llama_bench, read_probe  # noqa: E402


def cascade(model, n_prompt, n_decode, t):
    row = cascade_run(model, n_prompt, n_decode, t, repeats)
    row.pop("json")
    return row


bw = read_probe(threads, os.path.dirname(os.path.abspath(out_path)))
results = {"read_bandwidth_gb_s": bw, "rows": []}
print("| model | file | threads | cascade prefill / decode tok/s | llama.cpp prefill / decode | prefill ratio | decode ratio "
      "| cascade decode GB/s (% of probe) | peak RSS cascade / llama.cpp / file MiB |")
print("|---|---|---|---|---|---|---|---|---|", flush=True)
for shape in shapes:
    n_prompt, n_decode = LENGTHS[shape]
    for ty in types:
        model = f"{models}/random-llama-{shape}-{ty}.gguf"
        file_mib = os.path.getsize(model) / 1048576
        for t in threads:
            c = cascade(model, n_prompt, n_decode, t)
            l = llama_bench(llama, model, n_prompt, n_decode, t, repeats)
            gbs = os.path.getsize(model) * c["decode"] / 1e9
            row = {"shape": shape, "type": ty, "threads": t, "n_prompt": n_prompt, "n_decode": n_decode,
                   "file_mib": file_mib, "cascade": c, "llama_cpp": l, "cascade_decode_gb_s": gbs,
                   "decode_fraction_of_probe": gbs / bw[t]}
            results["rows"].append(row)
            print(f"| {shape} | {ty} | {t} | {c['prefill']:.1f} / {c['decode']:.1f} | {l['prefill']:.1f} / {l['decode']:.1f} "
                  f"| {c['prefill'] / l['prefill']:.2f}x | {c['decode'] / l['decode']:.2f}x | {gbs:.1f} ({100 * gbs / bw[t]:.0f}%) "
                  f"| {c['rss_mib']:.0f} / {l['rss_mib']:.0f} / {file_mib:.0f} |", flush=True)
with open(out_path, "w") as f:
    json.dump(results, f, indent=1)
print(f"wrote {out_path}")
PYEOF
