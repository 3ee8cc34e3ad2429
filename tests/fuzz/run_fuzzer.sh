#!/usr/bin/env bash
# run_fuzzer.sh FUZZER SEED_DIR WORK_CORPUS SECONDS: copies the committed seeds into a
# scratch corpus and fuzzes for SECONDS; any crash, leak or hang fails the test.
set -euo pipefail
fuzzer=$1 seeds=$2 corpus=$3 seconds=$4
mkdir -p "$corpus" "$corpus.artifacts"
cp -n "$seeds"/* "$corpus"/ 2>/dev/null || true
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -artifact_prefix="$corpus.artifacts/" -print_final_stats=1 "$corpus"
