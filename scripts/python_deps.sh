#!/usr/bin/env bash
# Runs python3 with the test-only Python packages, installing them the first time, each
# group into its own folder of a cache outside the clone (pip --target; Debian's own
# python3 stays untouched, so no venv or --break-system-packages is needed). Fresh clones
# reuse it. Groups:
#   - `gguf` (llama.cpp's gguf-py, the independent dequantizer of tests/quant/) and numpy;
#   - http: the official `openai` SDK and `prometheus_client` (clients of the HTTP front).
# Usage: scripts/python_deps.sh [python args...]   (no args: only install)
set -euo pipefail
GGUF_VERSION=0.19.0
OPENAI_VERSION=3.60.0
PROMETHEUS_CLIENT_VERSION=0.26.0
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/cascade/python/$(python3 -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')"

# install_group DIR CHECK PIP-ARGS...: puts DIR on PYTHONPATH and, unless python can run
# CHECK, pip-installs PIP-ARGS into it.
install_group() {
  local dir=$1 check=$2
  shift 2
  export PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}"
  python3 -c "$check" >/dev/null 2>&1 && return 0
  echo "python_deps: installing $* into $dir" >&2
  mkdir -p "$dir"
  local log
  log=$(mktemp)
  if ! python3 -m pip install -q --disable-pip-version-check --upgrade --target "$dir" "$@" >"$log" 2>&1; then
    echo "python_deps: pip install failed (offline? PyPI is needed once):" >&2
    tail -n 5 "$log" >&2
    exit 1
  fi
  rm -f "$log"
}

install_group "$CACHE" "import gguf; assert gguf.__file__.startswith('$CACHE')" --no-deps "gguf==$GGUF_VERSION"
python3 -c "import numpy" >/dev/null 2>&1 || install_group "$CACHE" "import numpy" numpy
install_group "$CACHE/http" \
  "import openai, prometheus_client; assert openai.__version__ == '$OPENAI_VERSION' and prometheus_client.__file__.startswith('$CACHE')" \
  "openai==$OPENAI_VERSION" "prometheus_client==$PROMETHEUS_CLIENT_VERSION"
(($#)) || exit 0
exec python3 "$@"
