#!/usr/bin/env bash
# The long fuzz runs (issue 18): each libFuzzer target (tests/fuzz/) for N executions,
# one target at a time, starting from its committed seeds (tests/fuzz/corpus/<name>/) plus
# what earlier runs added (build/fuzz/corpus-<name>/). Prints a table
# target | executions | seconds | result and writes it as JSON to build/fuzz.json. Exits 1
# when any target crashed, leaked, hung or ran out of memory; the input that did it is in
# build/fuzz/artifacts-<name>/ (reproduce with: <fuzzer> <input>).
# Usage: scripts/fuzz.sh [--runs N] [--max-seconds S] [TARGET...]
#   --runs N         executions per target (libFuzzer -runs), default 1000000
#   --max-seconds S  also stop a target after S seconds (then fewer than N ran); default: none
#   TARGET           gguf, safetensors, tokenizer_json, cluster_yaml, openai_request,
#                    generate_request, jinja_template, grammar (default: all)
# The fuzzers are built by the main build (scripts/build.sh, or
# `cmake --build build --target cascade_fuzzers`) when clang++ is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${CASCADE_BUILD_DIR:-build}
runs=1000000 max_seconds=0 targets=()
while (($#)); do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --max-seconds) max_seconds=$2; shift 2 ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) echo "fuzz: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=(gguf safetensors tokenizer_json cluster_yaml openai_request generate_request jinja_template grammar)

bin=$BUILD_DIR/tests/fuzz/standalone-build
work=$BUILD_DIR/fuzz
mkdir -p "$work"
failed=0 rows=()
printf '%-18s | %12s | %8s | %s\n' target executions seconds result
for t in "${targets[@]}"; do
  fuzzer=$bin/${t}_fuzz
  if [[ ! -x $fuzzer ]]; then
    echo "fuzz: $fuzzer is missing (build the target cascade_fuzzers; it needs clang++)" >&2
    exit 2
  fi
  corpus=$work/corpus-$t artifacts=$work/artifacts-$t log=$work/$t.log
  mkdir -p "$corpus" "$artifacts"
  cp -n tests/fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  limit=()
  ((max_seconds > 0)) && limit=(-max_total_time="$max_seconds")
  start=$(date +%s%N)
  rc=0
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} "$fuzzer" -runs="$runs" "${limit[@]}" -timeout=10 \
    -rss_limit_mb=2048 -max_len=65536 -artifact_prefix="$artifacts/" -print_final_stats=1 "$corpus" >"$log" 2>&1 ||
    rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  seconds=$((ms / 1000)).$((ms % 1000 / 100))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  if ((rc == 0)); then
    result=ok
  else
    failed=1
    # "libFuzzer: deadly signal", "AddressSanitizer: heap-buffer-overflow ...", "libFuzzer: timeout", ...
    result=$(sed -n 's/^SUMMARY: //p' "$log" | head -n 1 | cut -c 1-100)
    result="failed (rc $rc${result:+: $result}; see $log)"
    # After a crash libFuzzer prints no final stats: count the executions it reported last.
    [[ -n $execs ]] || execs=$(grep -o -E '^#[0-9]+' "$log" | tail -n 1 | tr -d '#' || true)
  fi
  execs=${execs:-0}
  ((rc != 0 || execs >= runs)) || result="ok (time limit: $execs of $runs runs)"
  printf '%-18s | %12s | %8s | %s\n' "$t" "$execs" "$seconds" "$result"
  rows+=("$(printf '{"target": "%s", "executions": %s, "seconds": %s, "result": "%s"}' \
    "$t" "$execs" "$seconds" "${result//\"/\'}")")
done
{
  printf '{"runs_requested": %s, "max_seconds": %s, "targets": [\n' "$runs" "$max_seconds"
  for i in "${!rows[@]}"; do
    printf '  %s%s\n' "${rows[$i]}" "$([[ $i -lt $((${#rows[@]} - 1)) ]] && echo ,)"
  done
  printf ']}\n'
} >"$BUILD_DIR/fuzz.json"
echo "fuzz: wrote $BUILD_DIR/fuzz.json"
exit "$failed"
