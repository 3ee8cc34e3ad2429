#!/usr/bin/env bash
# Disaggregated against aggregated serving on two network-namespace hosts (issue 33;
# docs/PERFORMANCE.md, "Disaggregated serving"): one CPU worker per host; aggregated = two
# data-parallel replicas, disaggregated = a prefill replica and a decode replica, the KV
# moving over the shaped link. A steady decode load of STREAMS clients with long prompts
# arriving at a fixed rate (scripts/bench_disagg.py says what is measured). Needs root,
# iproute2 (ip, tc, ss) and curl; on a kernel without sch_netem also iptables.
#
# Settings (environment): MODEL (SmolLM2 Q4_1), NET (10g | 1g), THREADS (1 per worker),
# STREAMS (32), PROMPT_TOKENS (64), MAX_TOKENS (128), LONG_PROMPT_TOKENS (512),
# LONG_MAX_TOKENS (16), LONG_EVERY_S (default: one long prefill's measured time over
# PREFILL_LOAD, 0.95), DURATION_S (90), WARMUP_S (20: not counted), STAGGER_S (20: the
# streams' starts spread over it), UCX_TLS (tcp), MAX_BATCHED_TOKENS
# (2048, both layouts), LOCAL_PREFILL_TOKENS (256: disaggregated, prompts up to this long are
# prefilled on the decode replica; 0 sends every prompt to the prefill replica).
# Table on stdout, JSON in ${1:-build/bench_disagg.json}. About 8 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/bench_disagg.json}
BIN=${CASCADE_BUILD_DIR:-build}/bin
[[ -x $BIN/cascade-coordinator && -x $BIN/cascade-worker && -x $BIN/cascade ]] || ./scripts/build.sh >/dev/null
[[ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]] || ./scripts/setup.sh
[[ $BIN/nfq_delay -nt scripts/nfq_delay.c ]] || cc -O2 -Wall -o "$BIN/nfq_delay" scripts/nfq_delay.c
exec python3 scripts/bench_disagg.py "$BIN" "$PWD/$BIN/nfq_delay" "$OUT"
