#!/usr/bin/env bash
# The whole test suite: set up the machine (packages, default model), configure, build,
# fetch the references (gguf package, llama.cpp tools), and run every test with ctest
# (unit, integration, fuzz and slow ones alike).
# GPU tests report themselves as skipped, with the reason, on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
# The independent references some tests compare against, cached outside the clone: the
# `gguf` package (block-type dequantizers), gRPC for Python (reflection and health clients,
# the Python client's build and tests), jinja2 (the chat templates' reference) and llama.cpp's
# tools (~5 min to build once; its tree also holds the real chat templates).
./scripts/python_deps.sh
./scripts/llama_cpp.sh >/dev/null
cd "${CASCADE_BUILD_DIR:-build}"
ctest --output-on-failure --timeout 900 -j "${CASCADE_JOBS:-$(nproc)}" "$@"
