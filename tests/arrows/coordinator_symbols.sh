#!/usr/bin/env bash
# The coordinator never computes: its binary must hold no symbol of the kernels, comm or
# model libraries, nor any of UCX, CUDA or NCCL. Usage: coordinator_symbols.sh BINARY
set -euo pipefail
bin=$1
found=$(nm -C "$bin" | grep -E 'cascade::(kernels|comm)::|cascade::model::(Transformer|KvCache|LocalEngine)|\bucp_|\bucs_|\bcuda|\bnccl' || true)
count=$(printf '%s' "$found" | grep -c . || true)
echo "compute symbols in $(basename "$bin"): $count"
if [[ $count -ne 0 ]]; then
  printf '%s\n' "$found" | head -20
  exit 1
fi
