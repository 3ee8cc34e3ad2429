#!/usr/bin/env bash
# The whole test suite: set up the machine (packages, default model), configure, build,
# and run every test with ctest (unit, integration, fuzz and slow ones alike).
# GPU tests report themselves as skipped, with the reason, on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
cd "${CASCADE_BUILD_DIR:-build}"
ctest --output-on-failure --timeout 900 -j "${CASCADE_JOBS:-$(nproc)}" "$@"
