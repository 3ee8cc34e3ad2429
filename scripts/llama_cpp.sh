#!/usr/bin/env bash
# Builds llama.cpp, the CPU reference Cascade is measured and checked against, outside the
# repository, and prints the directory that holds its binaries (llama-bench, llama-quantize,
# llama-server). Idempotent: a second run with the build in place only prints the path.
#
# Where it comes from: model hubs and GitHub are unreachable here, but PyPI is, and the
# `llama-cpp-python` sdist vendors a llama.cpp tree (0.3.36 carries llama.cpp 0c1e570).
# We download that sdist (never install it: that would compile the Python binding) and
# build three tools from its vendor/llama.cpp with CMake, native ISA, no curl.
#
# Cache: ${XDG_CACHE_HOME:-~/.cache}/cascade/llama.cpp/<version>/ (sdist, tree, build).
# Usage: scripts/llama_cpp.sh            # prints .../build/bin
#        scripts/llama_cpp.sh --src      # only unpacks the tree (its models/templates/ are
#                                        # the chat templates tests/text/ checks); prints it
# Takes ~10 minutes on 2 cores the first time (--src: the download only).
set -euo pipefail

VERSION=0.3.36
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/cascade/llama.cpp/$VERSION"
BIN="$CACHE/build/bin"
TOOLS=(llama-bench llama-quantize llama-server)

SRC_ONLY=0
[[ ${1:-} == --src ]] && SRC_ONLY=1

have_all() { for t in "${TOOLS[@]}"; do [[ -x "$BIN/$t" ]] || return 1; done; }
if ((!SRC_ONLY)) && have_all; then
  echo "$BIN"
  exit 0
fi

mkdir -p "$CACHE"
sdist="$CACHE/llama_cpp_python-$VERSION.tar.gz"
if [[ ! -f "$sdist" ]]; then
  echo "llama_cpp: downloading the llama-cpp-python==$VERSION sdist from PyPI (~77 MB)" >&2
  tmp=$(mktemp -d)
  if ! python3 -m pip download -q --no-deps --no-binary=:all: -d "$tmp" "llama-cpp-python==$VERSION" >"$tmp/pip.log" 2>&1; then
    echo "llama_cpp: pip download failed (offline?); put $(basename "$sdist") in $CACHE/ by hand" >&2
    tail -n 3 "$tmp/pip.log" >&2
    exit 1
  fi
  mv "$tmp/$(basename "$sdist")" "$sdist"
  rm -rf "$tmp"
fi
src="$CACHE/src"
if [[ ! -f "$src/CMakeLists.txt" ]]; then
  rm -rf "$src" "$CACHE/extract"
  mkdir -p "$CACHE/extract"
  tar -xzf "$sdist" -C "$CACHE/extract" "llama_cpp_python-$VERSION/vendor/llama.cpp"
  mv "$CACHE/extract/llama_cpp_python-$VERSION/vendor/llama.cpp" "$src"
  rm -rf "$CACHE/extract"
fi
if ((SRC_ONLY)); then
  echo "$src"
  exit 0
fi

echo "llama_cpp: building ${TOOLS[*]} in $CACHE/build (first time: ~10 min on 2 cores)" >&2
log="$CACHE/build.log"
if ! { cmake -S "$src" -B "$CACHE/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON &&
  cmake --build "$CACHE/build" -j"$(nproc)" --target "${TOOLS[@]}"; } >"$log" 2>&1; then
  echo "llama_cpp: build failed; last lines of $log:" >&2
  tail -n 15 "$log" >&2
  exit 1
fi
have_all || { echo "llama_cpp: build finished without ${TOOLS[*]} in $BIN" >&2; exit 1; }
echo "$BIN"
