// Read-bandwidth probe (not a test): how fast this machine streams memory into registers,
// the ceiling of a memory-bound decode step. Each thread sums its own slice of a buffer far
// larger than the caches (default 1 GiB in all) with 64-byte vector loads; the best of
// several passes is reported, for 1..N threads.
//   build/bin/read_bandwidth [--mib=1024] [--threads=2] [--json=FILE]
// Prints one line per thread count and, with --json, {"threads": {"1": GB/s, ...}}.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"

namespace {

// Sums a slice with 4 independent accumulators (so the loads, not the adds, bound it).
__attribute__((target("avx2"))) uint64_t SumSlice(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  uint64_t out[4];
  std::memcpy(out, &s, sizeof(out));
  return out[0] + out[1] + out[2] + out[3];
}

double MeasureGbPerS(const uint8_t* buf, size_t bytes, int threads, int passes) {
  double best = 0;
  volatile uint64_t sink = 0;
  for (int pass = 0; pass < passes; ++pass) {
    std::vector<std::thread> pool;
    std::vector<uint64_t> sums(threads);
    const size_t slice = bytes / threads / 128 * 128;
    const auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] { sums[t] = SumSlice(buf + t * slice, slice); });
    }
    for (auto& th : pool) th.join();
    const double s = cascade::SecondsSince(t0);
    for (uint64_t v : sums) sink = sink + v;
    best = std::max(best, static_cast<double>(slice) * threads / s / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 1024;
  int max_threads = 2;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--mib=", 0) == 0) {
      mib = std::strtoull(a.c_str() + 6, nullptr, 10);
    } else if (a.rfind("--threads=", 0) == 0) {
      max_threads = std::atoi(a.c_str() + 10);
    } else if (a.rfind("--json=", 0) == 0) {
      json = a.substr(7);
    } else {
      std::fprintf(stderr, "usage: read_bandwidth [--mib=N] [--threads=N] [--json=FILE]\n");
      return 2;
    }
  }
  const size_t bytes = mib << 20;
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
  if (buf == nullptr || max_threads < 1) {
    std::fprintf(stderr, "read_bandwidth: cannot allocate %zu MiB\n", mib);
    return 1;
  }
  for (size_t i = 0; i < bytes; i += 4096) buf[i] = static_cast<uint8_t>(i >> 12);  // Touch every page.
  std::string out = "{\"mib\": " + std::to_string(mib) + ", \"threads\": {";
  for (int t = 1; t <= max_threads; ++t) {
    const double gbs = MeasureGbPerS(buf, bytes, t, 5);
    std::printf("read bandwidth, %d thread%s: %.1f GB/s\n", t, t > 1 ? "s" : "", gbs);
    out += (t > 1 ? ", " : "") + std::string("\"") + std::to_string(t) + "\": " + std::to_string(gbs);
  }
  out += "}}\n";
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (f == nullptr) return 1;
    std::fputs(out.c_str(), f);
    std::fclose(f);
  }
  std::free(buf);
  return 0;
}
