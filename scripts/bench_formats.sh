#!/usr/bin/env bash
# The weight formats of issue 31 at a real size, against llama.cpp and the read bandwidth in
# the same run: one random-weight Llama-3.2-1B-shaped model (Llama 3's 128256-token
# vocabulary; scripts/make_random_gguf.py 1b, F16, cached under ~/.cache/cascade/models/ and
# shared with bench_step.sh) written in
#   * FP8 E4M3 with 128 x 128 block scales, as a Hugging Face directory (DeepSeek-V3 /
#     Qwen3-FP8's form; scripts/make_format_models.py fp8-hf): llama.cpp has no FP8 type, so
#     its row runs llama.cpp on the Q8_0 file, the nearest (8.5 against 8.25 bits per weight);
#   * MXFP4 GGUF (gpt-oss's E2M1 + E8M0 per 32; make_format_models.py mxfp4, gguf-py's own
#     quantizer): llama.cpp runs the same file;
#   * every K type llama.cpp's `llama-quantize` makes (Q2_K, Q3_K_M, Q4_K_M, Q5_K_M, Q6_K) and
#     Q8_0: llama.cpp runs the same files;
#   * with FORMATS including f16, the F16 file itself (the float kernels' row);
#   * fp8-moe: bench_moe.sh's Qwen3-30B-A3B-shaped model (make_random_gguf.py moe: 64 experts,
#     top 8) as Qwen3-30B-A3B-FP8 ships it (make_format_models.py fp8-hf: one FP8 tensor per
#     expert, the router BF16); llama.cpp runs that model's Q8_0 file, the nearest;
#   * fp8+bf16, fp8-moe+bf16: the same FP8 models with `--cpu-prefill-activations bf16`
#     (scheduler.cpu_prefill_activations: opt-in, lossy; prefills on AVX512_BF16 CPUs round
#     activations to bf16), against the same llama.cpp run as their f32 rows;
#   * mxfp4-gptoss: a gpt-oss-20b-shaped model scaled as that one (make_random_gpt_oss.py
#     --gguf 20b-scaled: 32 experts, top 4, alternating 128-token windows, sinks) as
#     llama.cpp's converter writes gpt-oss (experts MXFP4, the rest F16); llama.cpp runs the
#     same file.
# Per row: `cascade run` and `llama-bench` prefill / decode tok/s, Cascade's decode weight
# bandwidth (the weight bytes a batch-1 token reads, `cascade info`'s decode_step_bytes: the
# whole file for a dense model, the routed experts' share for a MoE, times decode tok/s)
# against the read probe (build/bin/read_bandwidth) at the same thread count, run just
# before and just after the row's Cascade runs (this VM's two-thread bandwidth swings by
# tens of percent between minutes): the higher of the two is the row's probe; and peak RSS
# against llama.cpp's (llama-bench's, which maps the file it reads: for the FP8 rows that is
# the Q8_0 file) and the file.
#
# Usage: scripts/bench_formats.sh [OUT.json]     (default build/bench_formats.json)
# Env: FORMATS="fp8 fp8+bf16 mxfp4 Q2_K Q3_K_M Q4_K_M Q5_K_M Q6_K Q8_0 fp8-moe fp8-moe+bf16 mxfp4-gptoss"
#      THREADS="2"  REPEATS=2 (both engines report their best of this many runs; llama-bench
#      of its repetitions, never fewer than 2)
#      N_PROMPT=512  N_DECODE=64
# Prints a markdown table (docs/PERFORMANCE.md holds the latest) and writes JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/bench_formats.json}
export FORMATS=${FORMATS:-"fp8 fp8+bf16 mxfp4 Q2_K Q3_K_M Q4_K_M Q5_K_M Q6_K Q8_0 fp8-moe fp8-moe+bf16 mxfp4-gptoss"}
export THREADS=${THREADS:-2}
export REPEATS=${REPEATS:-2} N_PROMPT=${N_PROMPT:-512} N_DECODE=${N_DECODE:-64}
TESTDATA=${CASCADE_TESTDATA:-../shared/testdata}
VOCAB=$TESTDATA/vocab/ggml-vocab-llama-bpe.gguf
[[ -f $VOCAB ]] || { echo "bench_formats: $VOCAB not found (set CASCADE_TESTDATA)" >&2; exit 1; }
MODELS="${XDG_CACHE_HOME:-$HOME/.cache}/cascade/models"
mkdir -p "$MODELS" "$(dirname "$OUT")"
[[ -x build/bin/cascade && -x build/bin/read_bandwidth ]] || ./scripts/build.sh >/dev/null
# The MoE shapes take SmolLM2's tokenizer from the default model.
[[ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]] || ./scripts/setup.sh
LLAMA_BIN=$(./scripts/llama_cpp.sh)
export LLAMA_BIN MODELS
stem=random-llama-1b-v128k
f16="$MODELS/$stem-f16.gguf"
[[ -f $f16 ]] || ./scripts/python_deps.sh scripts/make_random_gguf.py 1b "$VOCAB" "$f16"

# The K types and Q8_0 by llama-quantize (Q8_0 is also FP8's llama.cpp reference).
ktypes=(Q8_0)
for f in $FORMATS; do [[ $f == fp8* || $f == mxfp4* || $f == Q8_0 || $f == f16 ]] || ktypes+=("$f"); done
plain=" ${FORMATS//+bf16/} "  # The models a +bf16 row runs are its plain row's.
source scripts/random_models.sh
random_models_from "$f16" "$stem" "${ktypes[@]}"
# The two forms llama-quantize cannot make, rebuilt when the F16 file is newer.
fp8="$MODELS/$stem-fp8"
if [[ $plain == *" fp8 "* && (! -f $fp8/model.safetensors || $fp8/model.safetensors -ot $f16) ]]; then
  echo "make_format_models fp8-hf" >&2
  ./scripts/python_deps.sh scripts/make_format_models.py "$f16" fp8-hf "$fp8"
fi
mxfp4="$MODELS/$stem-mxfp4.gguf"
if [[ " $FORMATS " == *" mxfp4 "* && (! -f $mxfp4 || $mxfp4 -ot $f16) ]]; then
  echo "make_format_models mxfp4" >&2
  ./scripts/python_deps.sh scripts/make_format_models.py "$f16" mxfp4 "$mxfp4.tmp"
  mv "$mxfp4.tmp" "$mxfp4"
fi
# The MoE shapes: Qwen3-30B-A3B-shaped F16 and Q8_0 (shared with bench_moe.sh), its FP8
# directory; the gpt-oss-20b-shaped MXFP4 GGUF (SmolLM2's tokenizer, as bench_moe.sh's).
if [[ $plain == *" fp8-moe "* ]]; then
  random_models moe random-qwen3moe Q8_0
  moe_fp8="$MODELS/random-qwen3moe-fp8"
  if [[ ! -f $moe_fp8/model.safetensors || $moe_fp8/model.safetensors -ot $MODELS/random-qwen3moe-f16.gguf ]]; then
    echo "make_format_models fp8-hf (qwen3moe)" >&2
    ./scripts/python_deps.sh scripts/make_format_models.py "$MODELS/random-qwen3moe-f16.gguf" fp8-hf "$moe_fp8"
  fi
fi
gptoss="$MODELS/random-gpt-oss-20b-scaled-mxfp4.gguf"
if [[ " $FORMATS " == *" mxfp4-gptoss "* && ! -f $gptoss ]]; then
  echo "make_random_gpt_oss 20b-scaled" >&2
  ./scripts/python_deps.sh scripts/make_random_gpt_oss.py models/SmolLM2-135M-Instruct.Q4_1.gguf --gguf "$gptoss.tmp" \
    20b-scaled
  mv "$gptoss.tmp" "$gptoss"
fi

exec python3 - "$OUT" "$stem" <<'PYEOF'
import json, os, subprocess, sys
out_path, stem = sys.argv[1], sys.argv[2]
formats, threads = os.environ["FORMATS"].split(), [int(t) for t in os.environ["THREADS"].split()]
repeats, n_prompt, n_decode = int(os.environ["REPEATS"]), int(os.environ["N_PROMPT"]), int(os.environ["N_DECODE"])
llama, models = os.environ["LLAMA_BIN"], os.environ["MODELS"]

sys.path.insert(0, "scripts")
from bench_lib import cascade_run, llama_bench, read_probe  # noqa: E402


def paths(fmt):
    """(what Cascade runs, its bytes, the GGUF llama.cpp runs, what that is)."""
    fmt = fmt.removesuffix("+bf16")
    if fmt in ("fp8", "fp8-moe"):
        s = stem if fmt == "fp8" else "random-qwen3moe"
        d = f"{models}/{s}-fp8"
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".safetensors"))
        return d, size, f"{models}/{s}-Q8_0.gguf", "Q8_0 (nearest)"
    m = f"{models}/random-gpt-oss-20b-scaled-mxfp4.gguf" if fmt == "mxfp4-gptoss" else f"{models}/{stem}-{fmt}.gguf"
    return m, os.path.getsize(m), m, "same file"


def info(model):
    """`cascade info --json`: parameters, and the weight bytes a decode token reads."""
    out = subprocess.run(["build/bin/cascade", "info", "--model", model, "--json"], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)


bw = read_probe(threads, os.path.dirname(os.path.abspath(out_path)))
llama_runs = {}  # (file, threads): a +bf16 row compares with its f32 row's llama.cpp run.
results = {"read_bandwidth_gb_s": bw, "n_prompt": n_prompt, "n_decode": n_decode, "rows": []}
print("| format | bits / weight (file) | threads | cascade prefill / decode tok/s | llama.cpp prefill / decode (file) "
      "| prefill ratio | decode ratio | cascade decode GB/s (% of the row's probe GB/s) | peak RSS cascade / llama.cpp / file MiB |")
print("|---|---|---|---|---|---|---|---|---|", flush=True)
for fmt in formats:
    model, size, ref_model, ref_what = paths(fmt)
    i = info(model)
    results["cpu_kernels"] = i["cpu_kernels"]  # The level the numbers were taken with.
    for t in threads:
        extra = ["--cpu-prefill-activations", "bf16"] if fmt.endswith("+bf16") else []
        probe_dir = os.path.dirname(os.path.abspath(out_path))
        before = read_probe([t], probe_dir, quiet=True)[t]
        c = cascade_run(model, n_prompt, n_decode, t, repeats, extra)
        probe = max(before, read_probe([t], probe_dir, quiet=True)[t])
        c["prefill_activations"] = c.pop("json")["cpu_prefill_activations"]
        if (ref_model, t) not in llama_runs:
            llama_runs[(ref_model, t)] = llama_bench(llama, ref_model, n_prompt, n_decode, t, repeats)
        l = llama_runs[(ref_model, t)]
        gbs = i["decode_step_bytes"] * c["decode"] / 1e9
        row = {"format": fmt, "threads": t, "file_bytes": size, "n_params": i["n_params"],
               "decode_step_bytes": i["decode_step_bytes"], "cascade": c, "llama_cpp": l, "llama_cpp_file": ref_what,
               "cascade_decode_gb_s": gbs, "probe_gb_s": probe, "decode_fraction_of_probe": gbs / probe}
        results["rows"].append(row)
        bits = 8 * size / i["n_params"]  # The tied 1B's embedding counted once.
        print(f"| {fmt} | {bits:.2f} | {t} | {c['prefill']:.1f} / {c['decode']:.1f} | {l['prefill']:.1f} / {l['decode']:.1f} "
              f"({ref_what}) | {c['prefill'] / l['prefill']:.2f}x | {c['decode'] / l['decode']:.2f}x "
              f"| {gbs:.1f} ({100 * gbs / probe:.0f}% of {probe:.1f}) | {c['rss_mib']:.0f} / {l['rss_mib']:.0f} / {size / 1048576:.0f} |",
              flush=True)
with open(out_path, "w") as f:
    json.dump(results, f, indent=1)
print(f"cpu kernels: {results.get('cpu_kernels')}; wrote {out_path}")
PYEOF
