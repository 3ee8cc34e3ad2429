#!/usr/bin/env bash
# The GPU check, one prepared command for a machine with an NVIDIA GPU, CUDA's
# nvcc, CMake and g++ but no package registry. It unpacks the .deb files carried in
# .gpu-debs/ (scripts/fetch_gpu_debs.sh makes them: Abseil, RE2, nlohmann-json, GoogleTest,
# and the tiny test models) into a prefix with `dpkg -x`, builds core/, kernels/, comm/
# (NCCL, no UCX) and model/ with CUDA for sm_90 (CASCADE_SCOPE=model: no gRPC/UCX), runs
# the GPU tests (every kernel against references; whole models on the GPU against the CPU
# backend and the golden ids; NCCL TP with two GPUs; after a failed run, each test that did
# not pass once more alone: scripts/gtest_alone.sh), then cuda_bench (linear layers alone:
# reference, tuned, and for the quantized 8B shapes the int8 tiles against the BF16 GEMM)
# and gpu_model_bench (whole forwards: prefill and batch-1/32 decode tokens/s for SmolLM2
# and a Llama-3-8B-shaped BF16 model, weight bandwidth against the measured copy
# bandwidth; a row each for the reference kernels, the tuned ones and CUDA graphs, beside the
# copy roofline and, for BF16, the cuBLAS anchor of the same matrices in one CUDA graph;
# with its Q8_0 and Q4_K_M forms and a MoE shape; SKIP_8B=1 leaves the 8B models out,
# QUANT=0 the quantized ones), then, with
# .gpu-cluster/ carried
# (scripts/pack_gpu_cluster.sh), the real cluster on cuda:0 (scripts/gpu_cluster_check.sh),
# and writes logs and JSON under $OUT.
# Budget: under 10 minutes on 16 cores. Exit status: the tests' and the cluster's.
#   OUT=/tmp/out scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/build-gpu/out}
PREFIX=${PREFIX:-/tmp/cascade-prefix}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OUT" "$PREFIX"
t0=$(date +%s)
log() { echo "gpu_check [$(( $(date +%s) - t0 )) s]: $*" | tee -a "$OUT/summary.txt"; }
if compgen -G ".gpu-debs/*.deb" >/dev/null; then
  for f in .gpu-debs/*.deb; do dpkg -x "$f" "$PREFIX"; done
  log "unpacked $(ls .gpu-debs/*.deb | wc -l) .deb files into $PREFIX"
fi
export LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
# The tiny models: ../shared/testdata where the checkout has it, else the carried copy.
if [[ -z ${CASCADE_TESTDATA:-} && ! -d ../shared/testdata && -d .gpu-debs/testdata ]]; then
  export CASCADE_TESTDATA=$PWD/.gpu-debs/testdata
fi
export PATH=/usr/local/cuda/bin:$PATH
(nvidia-smi; nvcc --version; g++ --version; cmake --version) >"$OUT/machine.txt" 2>&1
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCASCADE_SCOPE=model -DCASCADE_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH="$PREFIX/usr" >"$OUT/configure.log" 2>&1 \
  || { log "configure failed"; tail -n 30 "$OUT/configure.log"; exit 1; }
cmake --build build-gpu -j "$JOBS" --target cascade_gpu_tests cascade_gpu_model_tests cascade_kernels_tests cuda_bench \
  gpu_model_bench >"$OUT/build.log" 2>&1 \
  || { log "build failed"; grep -m 20 -E "error" "$OUT/build.log"; exit 1; }
log "built"
timeout 180 build-gpu/bin/cascade_gpu_tests --gtest_output="json:$OUT/gpu_tests.json" >"$OUT/gpu_tests.log" 2>&1
rc=$?
tail -n 15 "$OUT/gpu_tests.log"
log "GPU kernel tests: exit $rc"
# A CUDA fault fails every later test of its process: each test that did not pass runs alone,
# every op waiting for its kernels (CASCADE_CUDA_SYNC=1), so that the failure names the op.
(( rc != 0 )) && CASCADE_CUDA_SYNC=1 SANITIZE_OUT=$OUT/memcheck scripts/gtest_alone.sh build-gpu/bin/cascade_gpu_tests "$OUT/gpu_tests.log" 60 120 |
  tee -a "$OUT/summary.txt"
timeout 240 build-gpu/bin/cascade_gpu_model_tests --gtest_output="json:$OUT/gpu_model_tests.json" \
  >"$OUT/gpu_model_tests.log" 2>&1
rc_model=$?
grep -E "^\[ +(OK|FAILED|SKIPPED) |info" "$OUT/gpu_model_tests.log" | tail -n 20
log "GPU whole-model tests: exit $rc_model"
(( rc_model != 0 )) && CASCADE_CUDA_SYNC=1 SANITIZE_OUT=$OUT/memcheck scripts/gtest_alone.sh build-gpu/bin/cascade_gpu_model_tests "$OUT/gpu_model_tests.log" 90 150 |
  tee -a "$OUT/summary.txt"
(( rc == 0 )) && rc=$rc_model
build-gpu/bin/cascade_kernels_tests --gtest_brief=1 >"$OUT/cpu_kernel_tests.log" 2>&1 || log "CPU kernel tests failed (see cpu_kernel_tests.log)"
timeout 150 build-gpu/bin/cuda_bench --json "$OUT/cuda_bench.json" 2>&1 | tee "$OUT/cuda_bench.log"
log "cuda_bench done"
# The eager reference kernels, the tuned ones and CUDA graphs on each model; unless QUANT=0
# also the 8B shape in Q8_0 and Q4_K_M and bench_moe.sh's MoE shape (issue 29's table); and
# where each configuration's prefill and decode steps spend their time, op by op.
bench_args=(--json "$OUT/gpu_model_bench.json" --tuned --graphs --profile)
[[ -n ${SKIP_8B:-} ]] && bench_args+=(--skip-llama)
[[ ${QUANT:-1} != 0 ]] && bench_args+=(--quant)
timeout "${BENCH_TIMEOUT:-300}" build-gpu/bin/gpu_model_bench "${bench_args[@]}" 2>&1 | tee "$OUT/gpu_model_bench.log"
log "gpu_model_bench: exit ${PIPESTATUS[0]}"
# The real cluster on cuda:0 (scripts/gpu_cluster_check.sh) with the binaries and libraries
# of scripts/pack_gpu_cluster.sh, on a Llama-3.2-1B-shaped F16 model with Llama-3's
# vocabulary written here, against the in-process forward of the same model.
if [[ -x .gpu-cluster/bin/cascade-coordinator ]]; then
  model=/tmp/cascade-1b-v128k.gguf
  [[ -f $model ]] || PYTHONPATH=$PWD/.gpu-cluster/python python3 scripts/make_random_gguf.py 1b \
    .gpu-cluster/vocab/ggml-vocab-llama-bpe.gguf "$model" >"$OUT/make_1b.log" 2>&1 || log "writing the 1B model failed"
  timeout 120 build-gpu/bin/gpu_model_bench --model "$model" --skip-llama --json "$OUT/forward_1b.json" \
    >"$OUT/forward_1b.log" 2>&1 || log "gpu_model_bench on the 1B model failed"
  tail -n 4 "$OUT/forward_1b.log"
  LD_LIBRARY_PATH=$PWD/.gpu-cluster/lib:$LD_LIBRARY_PATH OUT=$OUT/cluster DEVICE=cuda:0 MODEL=$model \
    FORWARD_JSON=$OUT/forward_1b.json CASCADE_BUILD_DIR=.gpu-cluster timeout 360 scripts/gpu_cluster_check.sh
  rc_cluster=$?
  log "cluster on cuda:0: exit $rc_cluster"
  (( rc == 0 )) && rc=$rc_cluster
else
  log "no .gpu-cluster/ (scripts/pack_gpu_cluster.sh here first): the cluster check is skipped"
fi
exit $rc
