// Tests for core/prometheus.h: histogram buckets are cumulative with le-inclusive bounds,
// and the exposition follows the text format (HELP/TYPE lines, escaped labels, _bucket /
// _sum / _count with +Inf). http_test.py parses a live /metrics with prometheus_client.
#include "core/prometheus.h"

#include <cmath>
#include <thread>
#include <vector>

#include "tests/test_support.h"

namespace cascade {
namespace {

TEST(PrometheusTest, HistogramIsCumulativeWithInclusiveBounds) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 1.0, 5.0, 50.0}) h.Observe(v);
  const Histogram::Snapshot s = h.Get();
  EXPECT_EQ(s.buckets, (std::vector<uint64_t>{2, 4, 5, 6}));  // le=0.1 holds 0.1 itself.
  EXPECT_EQ(s.count, 6u);
  EXPECT_DOUBLE_EQ(s.sum, 56.65);
}

TEST(PrometheusTest, HistogramCountsFromManyThreads) {
  Histogram h({1});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h] {
      for (int i = 0; i < 1000; ++i) h.Observe(0.5);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(h.Get().count, 4000u);
}

TEST(PrometheusTest, TextExposition) {
  Histogram h({0.5, 2});
  h.Observe(1);
  PrometheusText out;
  out.Family("x_total", "counter", "Things.\nMore");
  out.Sample("x_total", {{"path", "a\"b\\c\nd"}}, 3);
  out.Family("lat_seconds", "histogram", "Latency.");
  out.Histogram("lat_seconds", {{"stage", "0"}}, h.Get());
  EXPECT_EQ(out.text(),
            "# HELP x_total Things.\\nMore\n"
            "# TYPE x_total counter\n"
            "x_total{path=\"a\\\"b\\\\c\\nd\"} 3\n"
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{stage=\"0\",le=\"0.5\"} 0\n"
            "lat_seconds_bucket{stage=\"0\",le=\"2\"} 1\n"
            "lat_seconds_bucket{stage=\"0\",le=\"+Inf\"} 1\n"
            "lat_seconds_sum{stage=\"0\"} 1\n"
            "lat_seconds_count{stage=\"0\"} 1\n");
}

TEST(PrometheusTest, ValueFormat) {
  EXPECT_EQ(FormatMetricValue(12), "12");
  EXPECT_EQ(FormatMetricValue(0.25), "0.25");
  EXPECT_EQ(FormatMetricValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatMetricValue(NAN), "NaN");
  EXPECT_EQ(FormatMetricValue(1e20), "1e+20");
}

}  // namespace
}  // namespace cascade
