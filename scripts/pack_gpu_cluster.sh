#!/usr/bin/env bash
# Packs, here, what scripts/gpu_cluster_check.sh needs on a GPU machine that has CUDA but
# no gRPC, protobuf, UCX, Abseil or yaml-cpp (../shared/BUILD_NOTES.md: the H200 machine):
#  * bin/: cascade, cascade-coordinator and cascade-worker of this machine's Release build
#    (nvcc found here, so the worker carries the CUDA backend for sm_80/90), stripped;
#  * lib/: every shared library they load but glibc's, libstdc++/libgcc_s and CUDA's own
#    (cudart, cuBLAS, NCCL, the driver), with UCX's transport modules in lib/ucx/;
#  * python/: the `gguf` package (scripts/make_random_gguf.py writes the 1B model there;
#    numpy is on that machine), and vocab/: Llama-3's 128256-token vocabulary
#    (../shared/testdata/vocab/ggml-vocab-llama-bpe.gguf).
# Everything lands in .gpu-cluster/ (git-ignored); carry it with .gpu-debs/ (a device run
# carries at most 64 MiB). Usage: scripts/pack_gpu_cluster.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${CASCADE_BUILD_DIR:-build}
OUT=.gpu-cluster
TESTDATA=${CASCADE_TESTDATA:-../shared/testdata}
bins=(cascade cascade-coordinator cascade-worker)
for b in "${bins[@]}"; do
  [[ -x $BUILD/bin/$b ]] || { echo "pack_gpu_cluster: $BUILD/bin/$b missing (scripts/build.sh)" >&2; exit 1; }
done
ldd "$BUILD/bin/cascade-worker" | grep -q -E 'libcublas' ||
  { echo "pack_gpu_cluster: $BUILD/bin/cascade-worker has no CUDA backend (nvcc not found at configure?)" >&2; exit 1; }
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib" "$OUT/python" "$OUT/vocab"
for b in "${bins[@]}"; do strip --strip-unneeded -o "$OUT/bin/$b" "$BUILD/bin/$b"; done
# The machine there brings its own C and C++ runtimes and CUDA's libraries.
system='/(libc|libm|libmvec|libdl|librt|libpthread|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so'
ldd "${bins[@]/#/$BUILD/bin/}" | awk '/=> \// {print $3}' | sort -u | grep -v -E "$system" | while read -r lib; do
  cp -L "$lib" "$OUT/lib/"
done
ucx_modules=$(dirname "$(ldconfig -p | awk '/libucs.so.0 / {print $NF; exit}')")/ucx
if [[ -d $ucx_modules ]]; then
  mkdir -p "$OUT/lib/ucx"
  cp -L "$ucx_modules"/libuct_cma.so* "$ucx_modules"/libucm_*.so* "$OUT/lib/ucx/" 2>/dev/null || true
fi
strip --strip-unneeded "$OUT"/lib/*.so* "$OUT"/lib/ucx/*.so* 2>/dev/null || true
gguf=$(./scripts/python_deps.sh -c 'import gguf, os; print(os.path.dirname(gguf.__file__))')
cp -r "$gguf" "$OUT/python/"
cp "$TESTDATA/vocab/ggml-vocab-llama-bpe.gguf" "$OUT/vocab/"
du -sh "$OUT"
size=$(du -sm "$OUT" | cut -f1)
((size <= 56)) || { echo "pack_gpu_cluster: $OUT is $size MiB; with .gpu-debs it must stay under 64" >&2; exit 1; }
