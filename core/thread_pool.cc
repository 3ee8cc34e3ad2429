#include "core/thread_pool.h"

#include <chrono>

#include "core/logging.h"

namespace cascade {
namespace {

constexpr uint64_t kClosed = uint64_t{1} << 31;
constexpr uint64_t kJoinedMask = kClosed - 1;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until `pred()` holds or `spin_us` elapse; returns whether `pred()` held.
template <typename Pred>
bool SpinUntil(Pred pred, int spin_us) {
  if (pred()) return true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  for (uint32_t i = 1;; ++i) {
    CpuRelax();
    if (pred()) return true;
    if ((i & 63) == 0 && std::chrono::steady_clock::now() >= deadline) return false;
  }
}

}  // namespace

ThreadPool::ThreadPool(const ThreadPoolOptions& options) : n_threads_(options.n_threads), spin_us_(options.spin_us) {
  CASCADE_CHECK(n_threads_ >= 1) << "ThreadPool needs at least one thread, got " << n_threads_;
  threads_.reserve(n_threads_ - 1);
  for (int t = 1; t < n_threads_; ++t) threads_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  if (threads_.empty()) return;
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ThreadPool::RunErased(CallFn call, void* ctx) {
  if (n_threads_ == 1) {
    call(ctx, 0);
    return;
  }
  const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
  job_call_ = call;
  job_ctx_ = ctx;
  finished_.store(0, std::memory_order_relaxed);
  state_.store(static_cast<uint64_t>(gen) << 32, std::memory_order_relaxed);
  // Dekker pairing with the worker's `sleepers_` increment: either we see the sleeper and
  // wake it, or it sees the new generation and does not sleep.
  generation_.store(gen, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) != 0) generation_.notify_all();

  call(ctx, 0);

  // Close the region: workers that have not joined yet stay out of it.
  const uint32_t joined = static_cast<uint32_t>(state_.fetch_or(kClosed, std::memory_order_acq_rel) & kJoinedMask);
  if (!SpinUntil([&] { return finished_.load(std::memory_order_acquire) == joined; }, spin_us_)) {
    caller_sleeping_.store(1, std::memory_order_seq_cst);
    for (uint32_t f; (f = finished_.load(std::memory_order_seq_cst)) != joined;) finished_.wait(f);
    caller_sleeping_.store(0, std::memory_order_relaxed);
  }
}

void ThreadPool::WorkerLoop(int thread) {
  uint32_t seen = 0;
  for (;;) {
    if (!SpinUntil([&] { return generation_.load(std::memory_order_acquire) != seen; }, spin_us_)) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      while (generation_.load(std::memory_order_seq_cst) == seen) generation_.wait(seen);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_relaxed)) return;
    // Join region `seen` unless the caller has closed it (or moved past it).
    uint64_t s = state_.load(std::memory_order_acquire);
    bool joined = false;
    while ((s >> 32) == seen && (s & kClosed) == 0) {
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) {
        joined = true;
        break;
      }
    }
    if (!joined) continue;
    job_call_(job_ctx_, thread);
    finished_.fetch_add(1, std::memory_order_seq_cst);
    if (caller_sleeping_.load(std::memory_order_seq_cst) != 0) finished_.notify_all();
  }
}

}  // namespace cascade
