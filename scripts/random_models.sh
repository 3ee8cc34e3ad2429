# Sourced by the benchmarks at real sizes (bench_scale.sh, bench_moe.sh, bench_formats.sh).
# random_models SHAPE STEM TYPES...: makes $MODELS/STEM-f16.gguf with
# `make_random_gguf.py SHAPE` (SmolLM2's tokenizer) unless it is there (delete it after
# changing the script's SHAPE), then random_models_from on it.
# random_models_from F16 STEM TYPES...: $MODELS/STEM-T.gguf for each type T with llama.cpp's
# `llama-quantize` ($LLAMA_BIN) unless it is newer than F16. Exits showing the log on failure.
random_models() {
  local shape=$1 stem=$2
  shift 2
  local f16="$MODELS/$stem-f16.gguf"
  [[ -f $f16 ]] ||
    ./scripts/python_deps.sh scripts/make_random_gguf.py "$shape" models/SmolLM2-135M-Instruct.Q4_1.gguf "$f16"
  random_models_from "$f16" "$stem" "$@"
}

random_models_from() {
  local f16=$1 stem=$2 t q
  shift 2
  for t in "$@"; do
    q="$MODELS/$stem-$t.gguf"
    if [[ ! -f $q || $q -ot $f16 ]]; then
      echo "llama-quantize $stem $t" >&2
      "$LLAMA_BIN/llama-quantize" "$f16" "$q.tmp" "$t" "$(nproc)" >"$q.log" 2>&1 || { tail -5 "$q.log" >&2; exit 1; }
      mv "$q.tmp" "$q"
    fi
  done
}
