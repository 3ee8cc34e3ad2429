// Microbenchmark of kernels/cpu/attention.h.
// Decode (default): SmolLM2-135M's attention (9 heads over 3 KV heads of dim 64, block 16,
// 30 layers): one decode row per layer, the layers' caches cycled in order so K/V stream
// from memory/L3 as in a real decode step. Prints microseconds per layer call per ISA path
// and thread count, for several context lengths.
// Prefill (--prefill=N[,N...]): one prompt of N tokens through one layer of
// Llama-3.2-1B's attention (32 heads over 8 KV heads of dim 64, f16 cache, block 16), every
// row causal: milliseconds per layer and G multiply-adds/s (q.k and p.v over the causal
// triangle), per ISA path and thread count.
// Usage: attention_bench [--head-dim=N] [--prefill=N[,N...]]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu_features.h"

namespace cascade::kernels {
namespace {

// One prompt of n tokens through one layer's attention, every row causal.
void Prefill(int64_t n) {
  constexpr int64_t kHeads = 32, kKv = 8, kD = 64, kBs = 16;
  const int64_t n_blocks = (n + kBs - 1) / kBs;
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> k(n_blocks * kBs * kKv * kD), v(k.size());
  for (auto& x : k) x = F32ToF16(normal(rng));
  for (auto& x : v) x = F32ToF16(normal(rng));
  std::vector<int32_t> table(n_blocks);
  for (int64_t b = 0; b < n_blocks; ++b) table[b] = static_cast<int32_t>(b);
  std::vector<float> q(n * kHeads * kD), out(q.size());
  for (auto& x : q) x = normal(rng);
  const AttentionSeq seq{0, n, 0, table};
  const double macs = 2.0 * kHeads * kD * (static_cast<double>(n) * (n + 1) / 2);
  for (CpuIsa isa : kAllCpuIsas) {
    if (!CpuSupportsIsa(isa) || isa == CpuIsa::kGeneric) continue;
    SetMaxCpuIsaForTesting(isa);
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      const KvCacheLayer cache = KvCacheLayer::Over(TensorView(k.data(), DType::kF16, {n_blocks, kBs, kKv, kD}),
                                                    TensorView(v.data(), DType::kF16, {n_blocks, kBs, kKv, kD}));
      auto run = [&] {
        absl::Status s = cpu::AttentionCpu(TensorView(out.data(), DType::kF32, {n, kHeads * kD}),
                                           TensorView(q.data(), DType::kF32, {n, kHeads * kD}), cache, {&seq, 1},
                                           {.n_heads = kHeads, .scale = 0.125f, .window = 0, .sinks = {}}, pool);
        if (!s.ok()) std::abort();
      };
      run();
      double best = 1e30;
      for (int r = 0; r < 5; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        run();
        best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf("prefill %5lld d %3lld %-8s threads %d: %8.3f ms/layer  %6.1f G multiply-adds/s\n",
                  static_cast<long long>(n), static_cast<long long>(kD), std::string(CpuIsaName(isa)).c_str(), threads,
                  best, macs / (best * 1e6));
    }
  }
  SetMaxCpuIsaForTesting(BestCpuIsa());
}

int Main(int argc, char** argv) {
  int64_t d = 64;
  std::vector<int64_t> prefill;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--head-dim=", 11) == 0) d = std::atoi(argv[i] + 11);
    if (std::strncmp(argv[i], "--prefill=", 10) == 0) {
      for (const char* p = argv[i] + 10; *p != '\0';) {
        prefill.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
        if (*p == ',') ++p;
      }
    }
  }
  if (!prefill.empty()) {
    for (int64_t n : prefill) Prefill(n);
    return 0;
  }
  constexpr int64_t kLayers = 30, kHeads = 9, kKv = 3, kBs = 16;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t n_ctx : {128, 512, 1024, 2048}) {
    const int64_t n_blocks = (n_ctx + kBs - 1) / kBs;
    std::vector<std::vector<float>> ks(kLayers), vs(kLayers);
    for (int64_t l = 0; l < kLayers; ++l) {
      ks[l].resize(n_blocks * kBs * kKv * d);
      vs[l].resize(ks[l].size());
      for (auto& x : ks[l]) x = normal(rng);
      for (auto& x : vs[l]) x = normal(rng);
    }
    std::vector<int32_t> table(n_blocks);
    for (int64_t b = 0; b < n_blocks; ++b) table[b] = static_cast<int32_t>(b);
    std::vector<float> q(kHeads * d), out(q.size());
    for (auto& x : q) x = normal(rng);
    AttentionSeq seq{0, 1, n_ctx - 1, table};
    for (CpuIsa isa : kAllCpuIsas) {
      if (!CpuSupportsIsa(isa) || isa == CpuIsa::kAvx2) continue;
      SetMaxCpuIsaForTesting(isa);
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        auto run = [&](int64_t l) {
          KvCacheLayer cache = KvCacheLayer::Over(TensorView(ks[l].data(), DType::kF32, {n_blocks, kBs, kKv, d}),
                                                  TensorView(vs[l].data(), DType::kF32, {n_blocks, kBs, kKv, d}));
          absl::Status s = cpu::AttentionCpu(TensorView(out.data(), DType::kF32, {1, kHeads * d}),
                                             TensorView(q.data(), DType::kF32, {1, kHeads * d}), cache, {&seq, 1},
                                             {.n_heads = kHeads, .scale = 0.125f, .window = 0, .sinks = {}}, pool);
          if (!s.ok()) std::abort();
        };
        for (int64_t l = 0; l < kLayers; ++l) run(l);
        const int kReps = 20;
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < kReps; ++r) {
          for (int64_t l = 0; l < kLayers; ++l) run(l);
        }
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                          (kReps * kLayers);
        std::printf("ctx %5lld d %3lld %-8s threads %d: %8.2f us/layer  %6.2f GB/s\n", static_cast<long long>(n_ctx),
                    static_cast<long long>(d), std::string(CpuIsaName(isa)).c_str(), threads, us,
                    2.0 * n_ctx * kKv * d * 4 / (us * 1e3));
      }
    }
    SetMaxCpuIsaForTesting(BestCpuIsa());
  }
  return 0;
}

}  // namespace
}  // namespace cascade::kernels

int main(int argc, char** argv) { return cascade::kernels::Main(argc, argv); }
