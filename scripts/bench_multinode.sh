#!/usr/bin/env bash
# Multi-node benchmark on this machine (issue 19; docs/PERFORMANCE.md, "Multi-node (network
# namespaces)"): 2 and 4 network-namespace hosts on a Linux bridge, each host's link shaped
# to ~10 Gbit/s with 0.1 ms one-way delay and to ~1 Gbit/s with 1 ms; the coordinator in
# host 0, external workers in the others, UCX over TCP. Layouts: PP=1 in one host (the
# reference), PP=2 on 2 hosts, PP=4 on 4, TP=2 x PP=2 on 2 (transport.pp_handoff split and
# full), DP=2 on 2 (one PP=1 replica per host). Throughput at concurrency 1/8/32, TTFT and ITL, bytes per generated token on every
# host's link, and the share of a batch-1 decode step spent outside the workers' compute
# (scripts/bench_multinode.py says exactly what is measured). Needs root, iproute2 (ip, tc,
# ss) and curl; on a kernel without sch_netem also iptables (the delay is then
# scripts/nfq_delay.c behind an NFQUEUE rule). About 6 minutes with the defaults on 2 cores.
#
# Settings (environment): MODELS (paths; default the SmolLM2 Q4_1 file; the random 1B of
# scripts/random_models.sh is e.g. ~/.cache/cascade/models/random-llama-1b-Q4_K_M.gguf),
# LAYOUTS ("pp1 pp2 pp4 tp2pp2-split tp2pp2-full dp2"), NETS ("10g 1g"), CONCURRENCY ("1 8 32"),
# PROMPT_TOKENS (16), MAX_TOKENS (64), REQUESTS_C1 / REQUESTS_C8 / REQUESTS_C32 (8 / 32 /
# 96), UCX_TLS (tcp). Table on stdout, JSON in ${1:-build/bench_multinode.json}.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/bench_multinode.json}
BIN=${CASCADE_BUILD_DIR:-build}/bin
[[ -x $BIN/cascade-coordinator && -x $BIN/cascade-worker && -x $BIN/cascade ]] || ./scripts/build.sh >/dev/null
[[ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ]] || ./scripts/setup.sh
[[ $BIN/nfq_delay -nt scripts/nfq_delay.c ]] || cc -O2 -Wall -o "$BIN/nfq_delay" scripts/nfq_delay.c
exec python3 scripts/bench_multinode.py "$BIN" "$PWD/$BIN/nfq_delay" "$OUT"
