#!/usr/bin/env bash
# Downloads (here, where Debian's apt works) the .deb files scripts/gpu_check.sh needs on a
# GPU machine that has CUDA and CMake but no package registry: Abseil and GoogleTest (gtest, gmock).
# They land in .gpu-debs/ (git-ignored); carry that folder to the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu-debs
cd .gpu-debs
apt-get download libabsl-dev libabsl20220623 libgtest-dev libgmock-dev >/dev/null
ls -1 *.deb
