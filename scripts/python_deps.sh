#!/usr/bin/env bash
# Runs python3 with the test-only Python packages, installing them the first time:
# `gguf` (llama.cpp's gguf-py from PyPI, the independent dequantizer of tests/quant/) and
# `numpy`, both into a cache outside the clone (pip --target; Debian's own python3 stays
# untouched, so no venv or --break-system-packages is needed). Fresh clones reuse it.
# Usage: scripts/python_deps.sh [python args...]   (no args: only install)
set -euo pipefail
GGUF_VERSION=0.19.0
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/cascade/python/$(python3 -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')"
export PYTHONPATH="$CACHE${PYTHONPATH:+:$PYTHONPATH}"
if ! python3 -c "import numpy, gguf; assert gguf.__file__.startswith('$CACHE')" >/dev/null 2>&1; then
  echo "python_deps: installing gguf==$GGUF_VERSION and numpy into $CACHE" >&2
  mkdir -p "$CACHE"
  log=$(mktemp)
  if ! { python3 -m pip install -q --disable-pip-version-check --target "$CACHE" --no-deps "gguf==$GGUF_VERSION" &&
    { python3 -c "import numpy" 2>/dev/null ||
      python3 -m pip install -q --disable-pip-version-check --target "$CACHE" numpy; }; } >"$log" 2>&1; then
    echo "python_deps: pip install failed (offline? PyPI is needed once):" >&2
    tail -n 5 "$log" >&2
    exit 1
  fi
  rm -f "$log"
fi
(($#)) || exit 0
exec python3 "$@"
