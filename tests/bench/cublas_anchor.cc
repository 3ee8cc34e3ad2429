#include "tests/bench/cublas_anchor.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace cascade::bench {
namespace {

struct Matrix {
  int64_t rows, cols;  // [out, in], row-major, as a Linear's weight.
};

std::vector<Matrix> LayerMatrices(const DenseShape& s) {
  return {{s.q_dim, s.n_embd}, {s.kv_dim, s.n_embd}, {s.kv_dim, s.n_embd}, {s.n_embd, s.q_dim},
          {s.n_ff, s.n_embd},  {s.n_ff, s.n_embd},   {s.n_embd, s.n_ff}};
}

bool Ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("anchor: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

bool Ok(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return true;
  std::printf("anchor: %s: cuBLAS status %d\n", what, static_cast<int>(e));
  return false;
}

// Everything the anchor allocates, released on every path.
struct Resources {
  std::vector<void*> buffers;
  cudaStream_t stream = nullptr;
  cublasHandle_t handle = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;

  void* Allocate(size_t bytes) {
    void* p = nullptr;
    if (!Ok(cudaMalloc(&p, bytes), "cudaMalloc")) return nullptr;
    buffers.push_back(p);
    (void)cudaMemset(p, 0, bytes);  // The values do not change a GEMM's time.
    return p;
  }
  ~Resources() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (handle != nullptr) cublasDestroy(handle);
    if (stream != nullptr) cudaStreamDestroy(stream);
    for (void* p : buffers) cudaFree(p);
  }
};

// Y[n, rows] = X[n, cols] W[rows, cols]^T: in cuBLAS's column-major terms Y^T = W X^T.
bool Gemm(cublasHandle_t h, const void* w, const Matrix& m, const void* x, void* y, int64_t n) {
  const float alpha = 1.0f, beta = 0.0f;
  return Ok(
      cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m.rows), static_cast<int>(n), static_cast<int>(m.cols),
                   &alpha, w, CUDA_R_16BF, static_cast<int>(m.cols), x, CUDA_R_16BF, static_cast<int>(m.cols), &beta, y,
                   CUDA_R_16BF, static_cast<int>(m.rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
}

}  // namespace

int64_t AnchorWeightBytes(const DenseShape& s) {
  int64_t n = 0;
  for (const Matrix& m : LayerMatrices(s)) n += m.rows * m.cols;
  return 2 * (n * s.n_layers + s.n_vocab * s.n_embd);
}

double AnchorTokensPerSecond(const DenseShape& s, int64_t n_tokens, int64_t head_rows, int reps) {
  Resources r;
  const std::vector<Matrix> layer = LayerMatrices(s);
  const Matrix head{s.n_vocab, s.n_embd};
  std::vector<const void*> weights;  // Layer by layer, then the head.
  for (int64_t l = 0; l < s.n_layers; ++l) {
    for (const Matrix& m : layer) {
      weights.push_back(r.Allocate(static_cast<size_t>(m.rows * m.cols) * 2));
      if (weights.back() == nullptr) return 0;
    }
  }
  weights.push_back(r.Allocate(static_cast<size_t>(head.rows * head.cols) * 2));
  const int64_t widest = std::max({s.n_embd, s.q_dim, s.n_ff, s.n_vocab});
  void* x = r.Allocate(static_cast<size_t>(n_tokens * widest) * 2);
  void* y = r.Allocate(static_cast<size_t>(n_tokens * widest) * 2);
  constexpr size_t kWorkspace = 32 << 20;  // Set before capture: cuBLAS may not allocate inside a graph.
  void* workspace = r.Allocate(kWorkspace);
  if (weights.back() == nullptr || x == nullptr || y == nullptr || workspace == nullptr) return 0;
  (void)cudaDeviceSynchronize();  // The memsets ran on the legacy stream; the graph runs on its own.
  if (!Ok(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), "stream") ||
      !Ok(cublasCreate(&r.handle), "cublasCreate") || !Ok(cublasSetStream(r.handle, r.stream), "cublasSetStream") ||
      !Ok(cublasSetWorkspace(r.handle, workspace, kWorkspace), "cublasSetWorkspace") ||
      !Ok(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeThreadLocal), "begin capture")) {
    return 0;
  }
  bool ok = true;
  size_t w = 0;
  for (int64_t l = 0; l < s.n_layers && ok; ++l) {
    for (const Matrix& m : layer) ok = ok && Gemm(r.handle, weights[w++], m, x, y, n_tokens);
  }
  ok = ok && Gemm(r.handle, weights[w], head, x, y, head_rows);
  const bool ended = Ok(cudaStreamEndCapture(r.stream, &r.graph), "end capture");
  if (!ok || !ended || !Ok(cudaGraphInstantiate(&r.exec, r.graph, 0), "instantiate") ||
      !Ok(cudaEventCreate(&r.start), "event") || !Ok(cudaEventCreate(&r.stop), "event") ||
      !Ok(cudaGraphLaunch(r.exec, r.stream), "warm-up launch") || !Ok(cudaStreamSynchronize(r.stream), "warm-up")) {
    return 0;
  }
  (void)cudaEventRecord(r.start, r.stream);
  for (int i = 0; i < reps; ++i) {
    if (!Ok(cudaGraphLaunch(r.exec, r.stream), "launch")) return 0;
  }
  (void)cudaEventRecord(r.stop, r.stream);
  if (!Ok(cudaEventSynchronize(r.stop), "replays")) return 0;
  float ms = 0;
  (void)cudaEventElapsedTime(&ms, r.start, r.stop);
  return ms > 0 ? static_cast<double>(n_tokens) * reps / (ms / 1e3) : 0;
}

}  // namespace cascade::bench
