#!/usr/bin/env bash
# Prepares (here, where Debian's apt works) what scripts/gpu_check.sh needs on a GPU
# machine that has CUDA, CMake and g++ but no package registry and no ../shared:
#  * the .deb files of Abseil, RE2, nlohmann-json and GoogleTest (gtest, gmock), unpacked
#    there with `dpkg -x`;
#  * testdata/: the real tiny models of ../shared/testdata the GPU tests read (~5 MB).
# Everything lands in .gpu-debs/ (git-ignored); carry that folder to the GPU machine. The
# default model (93 MB) does not fit the 64 MiB a device run may carry: where it is absent
# there, the GPU tests and benchmark that need it say so and skip it.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu-debs/testdata/models
(cd .gpu-debs && apt-get download libabsl-dev libabsl20220623 libgtest-dev libgmock-dev libre2-dev libre2-9 \
   nlohmann-json3-dev >/dev/null)
shared=../shared/testdata/models
if [[ -d $shared ]]; then
  cp -r "$shared/stories260K.gguf" "$shared/tinystories-656k" .gpu-debs/testdata/models/
fi
ls -1 .gpu-debs/*.deb
du -sh .gpu-debs
