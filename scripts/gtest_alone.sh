#!/usr/bin/env bash
# After a GoogleTest binary's run failed: runs again, one process each, every test that the
# run's log does not show passed or skipped, and prints a line per test:
#   alone: OK|FAILED|TIMEOUT|CRASHED (exit N)|NOT FOUND Suite.Test
# (a failure's first words under it)
# A CUDA fault (an illegal address, a launch failure) is sticky for the whole process, so
# every GPU test after a faulting one fails too; run alone, the tests that fail only because
# of it pass, and the ones that fail on their own are named. scripts/gpu_check.sh calls it.
# TIMEOUT_S bounds each test (default 120); BUDGET_S, when given, all of them: tests left
# when it is spent are listed as "alone: NOT RUN". With SANITIZE_OUT set and CUDA's
# compute-sanitizer on the PATH, a test that fails alone runs once more under its memcheck
# (within TIMEOUT_S; its first reports come early), the log in $SANITIZE_OUT/<test>.log
# and its first errors printed: the kernel and the bad access, where the test only saw a
# sticky error.
#   scripts/gtest_alone.sh BINARY LOG [TIMEOUT_S] [BUDGET_S]
set -uo pipefail
bin=$1 log=$2 limit=${3:-120} budget=${4:-0}
t0=$(date +%s)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
suite=""
while IFS= read -r line; do
  if [[ $line != " "* ]]; then  # "Suite." or "Prefix/Suite.  # TypeParam = ..."
    suite=${line%%#*}
    suite=${suite// /}
    continue
  fi
  name=${line%%#*}  # "  Test" or "  Test/0  # GetParam() = ..."
  name=${name// /}
  full=$suite$name
  if grep -qF -e "OK ] $full (" -e "SKIPPED ] $full (" "$log"; then continue; fi
  if (( budget > 0 && $(date +%s) - t0 >= budget )); then
    echo "alone: NOT RUN $full"
    continue
  fi
  (timeout "$limit" "$bin" --gtest_filter="$full"; exit $?) >"$out" 2>&1  # The shell here reports a crash, quietly.
  rc=$?
  case $rc in
    0) verdict=OK ;;
    1) verdict=FAILED ;;
    124) verdict=TIMEOUT ;;
    *) verdict="CRASHED (exit $rc)" ;;
  esac
  # A filter that selects nothing also exits 0: OK only for a test that ran.
  if (( rc == 0 )) && ! grep -qF -e "OK ] $full (" -e "SKIPPED ] $full (" "$out"; then verdict="NOT FOUND"; fi
  echo "alone: $verdict $full"
  grep -m 1 -A 3 -E "Failure$|error:" "$out" | sed 's/^/  /'  # The first failure's words.
  if [[ $verdict != OK && -n ${SANITIZE_OUT:-} ]] && command -v compute-sanitizer >/dev/null; then
    mkdir -p "$SANITIZE_OUT"
    slog=$SANITIZE_OUT/${full//\//_}.log
    timeout "$limit" compute-sanitizer --tool memcheck --print-limit 10 "$bin" --gtest_filter="$full" >"$slog" 2>&1
    grep -m 3 -E "^========= (Invalid|Program hit|Out-of-range|Misaligned|Malloc|Error)" "$slog" | sed 's/^/  memcheck: /'
  fi
done < <("$bin" --gtest_list_tests)
