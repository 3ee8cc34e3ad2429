// Tests of cascade::ThreadPool: every index is covered exactly once, ranges are even, regions work after workers fell
// asleep, and dispatch is fast. To add a case, add a TEST below; timing numbers are printed, never asserted (shared CI
// machines).
#include "core/thread_pool.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace cascade {
namespace {

TEST(ThreadPoolTest, ParallelForCoversEveryIndexOnce) {
  for (int n_threads : {1, 2, 3, 5}) {
    ThreadPool pool(n_threads);
    EXPECT_EQ(pool.n_threads(), n_threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, [&](int64_t begin, int64_t end, int thread) {
        EXPECT_GE(thread, 0);
        EXPECT_LT(thread, n_threads);
        EXPECT_LT(begin, end);
        for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

TEST(ThreadPoolTest, ParallelForSplitsEvenly) {
  ThreadPool pool(2);
  std::atomic<int> calls{0};
  pool.ParallelFor(100, [&](int64_t begin, int64_t end, int) {
    EXPECT_EQ(end - begin, 50);
    calls.fetch_add(1);
  });
  EXPECT_EQ(calls.load(), 2);
}

TEST(ThreadPoolTest, ChunkedCoversEveryIndexOnce) {
  ThreadPool pool(3);
  for (int64_t chunk : {1, 4, 16, 1000}) {
    const int64_t n = 333;
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelForChunked(n, chunk, [&](int64_t begin, int64_t end, int) {
      EXPECT_LE(end - begin, chunk);
      for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1);
  }
}

TEST(ThreadPoolTest, WorkersTakePartWhenRunning) {
  ThreadPool pool(2);
  // With a slow body, the worker (spinning after the first region) claims the second range.
  std::atomic<int> by_worker{0};
  for (int i = 0; i < 20; ++i) {
    pool.ParallelFor(2, [&](int64_t, int64_t, int thread) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (thread == 1) by_worker.fetch_add(1);
    });
  }
  std::printf("worker ran %d of 20 ranges\n", by_worker.load());
  SUCCEED();  // Scheduling-dependent: reported, not asserted.
}

TEST(ThreadPoolTest, ManyRegionsBackToBack) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int i = 0; i < 20000; ++i) {
    pool.ParallelFor(2, [&](int64_t begin, int64_t end, int) { sum += end - begin; });
  }
  EXPECT_EQ(sum.load(), 40000);
}

TEST(ThreadPoolTest, WakesSleepingWorkers) {
  ThreadPool pool(ThreadPoolOptions{.n_threads = 3, .spin_us = 10});
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // Workers go to sleep.
    std::atomic<int> calls{0};
    pool.ParallelFor(3, [&](int64_t begin, int64_t end, int) { calls.fetch_add(end - begin); });
    EXPECT_EQ(calls.load(), 3);
  }
}

TEST(ThreadPoolTest, CallerSleepsWhileAWorkerIsSlow) {
  ThreadPool pool(ThreadPoolOptions{.n_threads = 2, .spin_us = 5});
  std::atomic<int> done{0};
  pool.ParallelFor(2, [&](int64_t begin, int64_t, int) {
    if (begin == 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    done.fetch_add(1);
  });
  EXPECT_EQ(done.load(), 2);
}

TEST(ThreadPoolTest, DestroysWithSleepingWorkers) {
  auto pool = std::make_unique<ThreadPool>(ThreadPoolOptions{.n_threads = 4, .spin_us = 1});
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  pool.reset();  // Must join without hanging.
  SUCCEED();
}

TEST(ThreadPoolTest, DispatchLatency) {
  ThreadPool pool(2);
  constexpr int kIters = 20000;
  std::atomic<int64_t> sink{0};
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kIters; ++i) {
    pool.ParallelFor(2, [&](int64_t begin, int64_t, int) { sink.fetch_add(begin, std::memory_order_relaxed); });
  }
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  std::printf("ThreadPool(2) fork/join: %.2f us per region\n", us / kIters);
  EXPECT_EQ(sink.load(), static_cast<int64_t>(kIters));
}

}  // namespace
}  // namespace cascade
