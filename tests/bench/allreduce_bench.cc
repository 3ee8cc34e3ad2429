// All-reduce latency of comm::UcxCommunicator for hidden-state-sized messages: 2 ranks
// (threads, each with its own UCX context and worker; UCX picks shared memory; 50 us of
// polling before sleeping, as the workers' TP groups), ring
// all-reduce of n floats, median and p99 over many rounds. Prints a table; with
// --json FILE also writes it. Not a test.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/rendezvous.h"
#include "comm/ucx_communicator.h"

int main(int argc, char** argv) {
  using namespace cascade;
  std::string json_path;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--json") json_path = argv[i + 1];
  }
  const int kRanks = 2, kRounds = 400, kWarmup = 200;                     // Warm-up: connections, caches.
  const std::vector<size_t> sizes = {576, 576 * 8, 576 * 64, 576 * 512};  // 1, 8, 64, 512 tokens of SmolLM2.
  comm::InProcessRendezvous rendezvous;
  std::vector<std::vector<double>> us(sizes.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      comm::UcxOptions ucx;
      ucx.spin_us = 50;  // As the workers' TP groups (worker/worker_service.h).
      auto c = comm::UcxCommunicator::Create({"bench", r, kRanks, 30000}, &rendezvous, ucx);
      if (!c.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, std::string(c.status().message()).c_str());
        return;
      }
      for (size_t s = 0; s < sizes.size(); ++s) {
        std::vector<float> data(sizes[s], 1.0f);
        for (int i = 0; i < kRounds + kWarmup; ++i) {
          const auto t0 = std::chrono::steady_clock::now();
          if (!(*c)->AllReduceSum(data.data(), data.size()).ok()) return;
          const double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
          if (r == 0 && i >= kWarmup) us[s].push_back(t);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  std::printf("%-10s %10s %12s %12s\n", "floats", "bytes", "p50 us", "p99 us");
  std::string json = "[";
  for (size_t s = 0; s < sizes.size(); ++s) {
    auto v = us[s];
    if (v.empty()) return 1;
    std::sort(v.begin(), v.end());
    const double p50 = v[v.size() / 2], p99 = v[v.size() * 99 / 100];
    std::printf("%-10zu %10zu %12.1f %12.1f\n", sizes[s], sizes[s] * 4, p50, p99);
    json += (s ? "," : "") + std::string("{\"floats\":") + std::to_string(sizes[s]) +
            ",\"p50_us\":" + std::to_string(p50) + ",\"p99_us\":" + std::to_string(p99) + "}";
  }
  json += "]";
  if (!json_path.empty()) std::ofstream(json_path) << json << "\n";
  return 0;
}
