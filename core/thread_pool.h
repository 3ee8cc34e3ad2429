// A fixed-size pool of compute threads for the CPU kernels, with low-latency fork/join
// dispatch (a few microseconds): workers spin for a short while after each region and
// then sleep on a futex (std::atomic::wait), so back-to-back regions (a decode step runs
// hundreds) never pay a wake-up, and an idle pool burns no CPU.
//
// Work is claimed, not assigned: the calling thread starts on the work at once, and a
// worker that has not joined a region by the time the caller has run out of work is left
// out of it. So a worker that the OS has descheduled (a machine shared with other
// processes) never holds the caller up; only work a worker has actually started is
// waited for.
//
// Thread-safety: single owner. One thread at a time may call `ParallelFor*`, and not from
// inside a running region (no nesting). The calling thread takes part as thread 0, so a
// pool of `n_threads` starts `n_threads - 1` threads; the destructor joins them. Dispatch
// allocates nothing.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace cascade {

struct ThreadPoolOptions {
  // Threads that run work, the caller included. REQUIRES >= 1. Default 1 (no extra threads).
  int n_threads = 1;
  // How long (microseconds) an idle worker, or the caller waiting for workers, spins
  // before sleeping on a futex. Default 200: longer than the gaps between the regions of
  // a decode step, short enough that an idle pool stops spinning almost at once.
  int spin_us = 200;
};

class ThreadPool {
 public:
  explicit ThreadPool(const ThreadPoolOptions& options);
  explicit ThreadPool(int n_threads) : ThreadPool(ThreadPoolOptions{.n_threads = n_threads}) {}
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Splits [0, n) into n_threads() contiguous ranges of equal size (+-1) and calls
  // `fn(begin, end, thread)` once for each non-empty one. `thread` in [0, n_threads()) is
  // the thread running the call: a range is run by whichever thread claims it (when every
  // thread is on a core, each runs one). `fn` must be callable concurrently.
  template <typename F>
  void ParallelFor(int64_t n, F&& fn) {
    if (n <= 0) return;
    const int64_t t = n_threads_;
    if (t == 1 || n == 1) {
      fn(int64_t{0}, n, 0);
      return;
    }
    std::atomic<int64_t> next{0};
    Region([&](int thread) {
      for (;;) {
        const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
        if (i >= t) break;
        const int64_t begin = n * i / t;
        const int64_t end = n * (i + 1) / t;
        if (begin < end) fn(begin, end, thread);
      }
    });
  }

  // Dynamic scheduling: threads take chunks of `chunk` items of [0, n) from a shared
  // counter and call `fn(begin, end, thread)` per chunk; balances load when threads run at
  // different speeds. REQUIRES chunk >= 1.
  template <typename F>
  void ParallelForChunked(int64_t n, int64_t chunk, F&& fn) {
    if (n <= 0) return;
    if (n_threads_ == 1 || n <= chunk) {
      for (int64_t b = 0; b < n; b += chunk) fn(b, std::min(n, b + chunk), 0);
      return;
    }
    std::atomic<int64_t> next{0};
    Region([&](int thread) {
      for (;;) {
        const int64_t b = next.fetch_add(chunk, std::memory_order_relaxed);
        if (b >= n) break;
        fn(b, std::min(n, b + chunk), thread);
      }
    });
  }

 private:
  using CallFn = void (*)(void* ctx, int thread);

  // Runs `fn(0)` on the caller and `fn(thread)` on each worker that joins before the
  // caller's call returns; returns when all of those have returned. `fn` must claim its
  // work from shared state, so that work does not depend on who joins.
  template <typename F>
  void Region(F&& fn) {
    using Fn = std::remove_reference_t<F>;
    RunErased([](void* ctx, int thread) { (*static_cast<Fn*>(ctx))(thread); },
              const_cast<void*>(static_cast<const void*>(&fn)));
  }
  void RunErased(CallFn call, void* ctx);
  void WorkerLoop(int thread);

  const int n_threads_;
  const int spin_us_;
  std::vector<std::thread> threads_;

  // The current region, published by the release increment of `generation_`.
  CallFn job_call_ = nullptr;
  void* job_ctx_ = nullptr;
  std::atomic<bool> stop_{false};

  alignas(64) std::atomic<uint32_t> generation_{0};  // Bumped once per region.
  alignas(64) std::atomic<uint32_t> sleepers_{0};    // Workers asleep on `generation_`.
  // (generation << 32) | kClosed bit | number of workers that joined the region.
  alignas(64) std::atomic<uint64_t> state_{0};
  alignas(64) std::atomic<uint32_t> finished_{0};  // Joined workers that are done.
  alignas(64) std::atomic<uint32_t> caller_sleeping_{0};
};

}  // namespace cascade
