#!/usr/bin/env bash
# Configures and builds Cascade into build/ (Release). Extra arguments go to CMake's
# configure step, e.g. scripts/build.sh -DCASCADE_WITH_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${CASCADE_BUILD_DIR:-build}
JOBS=${CASCADE_JOBS:-$(nproc)}
if [[ ! -f $BUILD_DIR/CMakeCache.txt || $# -gt 0 ]]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCASCADE_WERROR=ON "$@" >"$BUILD_DIR.configure.log" 2>&1 || {
    tail -n 30 "$BUILD_DIR.configure.log" >&2; echo "build: configure failed (full log: $BUILD_DIR.configure.log)" >&2; exit 1; }
fi
cmake --build "$BUILD_DIR" -j "$JOBS"
