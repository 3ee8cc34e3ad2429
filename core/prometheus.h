// Metrics in Prometheus' text exposition format (version 0.0.4): a thread-safe histogram
// and a writer of metric families. No client library: Debian packages none, and the
// format is a few lines of text (https://prometheus.io/docs/instrumenting/exposition_formats/).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace cascade {

// A cumulative histogram over fixed upper bounds (the `le` buckets; +Inf is implied).
// Thread-safe: Observe and Get may be called from any thread.
class Histogram {
 public:
  struct Snapshot {
    std::vector<double> bounds;     // Ascending upper bounds.
    std::vector<uint64_t> buckets;  // Observations <= bounds[i], cumulative; one more for +Inf.
    double sum = 0;
    uint64_t count = 0;
  };

  // REQUIRES `upper_bounds` strictly ascending.
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  Snapshot Get() const;

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // Per bucket, not cumulative; +Inf last.
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
};

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// Builds one exposition: call `Family` once per metric name, then its samples.
class PrometheusText {
 public:
  // `type` is "counter", "gauge" or "histogram".
  void Family(std::string_view name, std::string_view type, std::string_view help);
  void Sample(std::string_view name, const MetricLabels& labels, double value);
  // The `_bucket`, `_sum` and `_count` samples of histogram `name`.
  void Histogram(std::string_view name, const MetricLabels& labels, const cascade::Histogram::Snapshot& h);
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// A value as the format writes it: integers without a fraction, "+Inf", "NaN".
std::string FormatMetricValue(double value);

}  // namespace cascade
