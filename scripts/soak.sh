#!/usr/bin/env bash
# Soak under worker deaths (scripts/soak.py): 2,000 streamed requests at concurrency 64
# through the HTTP front of a PP=2 cluster, 20% cancelled at random points, half greedy and
# half seeded samples; once undisturbed, once with a worker SIGKILLed at a random moment
# and another later. Checks: 0 failed other than the cancels, 0 hung, 0 KV blocks held
# afterwards, and every request completed in both runs with the same text.
#   N=2000 C=64 KILLS=2 CANCEL=0.2 scripts/soak.sh [OUT.json]    (default build/soak.json)
# MODEL defaults to ../shared/testdata's stories260K (F32: a recomputed KV equals the
# decoded one bit for bit, so texts are comparable exactly).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/soak.json}
MODEL=${MODEL:-$(cd .. && pwd)/shared/testdata/models/stories260K.gguf}
BIN=${CASCADE_BUILD_DIR:-build}/bin
[[ -x $BIN/cascade-coordinator ]] || ./scripts/build.sh >/dev/null
[[ -f $MODEL ]] || { echo "soak: no model at $MODEL (set MODEL=...)" >&2; exit 2; }
mkdir -p "$(dirname "$OUT")"
exec python3 scripts/soak.py "$BIN" "$MODEL" "$OUT" --requests "${N:-2000}" --concurrency "${C:-64}" \
  --kills "${KILLS:-2}" --cancel "${CANCEL:-0.2}" --max-tokens "${M:-48}"
