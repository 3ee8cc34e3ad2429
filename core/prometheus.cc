#include "core/prometheus.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "core/logging.h"
#include "core/str_cat.h"

namespace cascade {
namespace {

// Label values escape backslash, double quote and newline; HELP text backslash and newline.
std::string Escape(std::string_view s, bool quote) {
  std::string out;
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string LabelText(const MetricLabels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out += ',';
    out += StrCat(labels[i].first, "=\"", Escape(labels[i].second, true), "\"");
  }
  return out + "}";
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  CASCADE_CHECK(std::is_sorted(bounds_.begin(), bounds_.end()) &&
                std::adjacent_find(bounds_.begin(), bounds_.end()) == bounds_.end())
      << "histogram bounds must be strictly ascending";
}

void Histogram::Observe(double value) {
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  absl::MutexLock lock(&mu_);
  ++counts_[bucket];
  sum_ += value;
}

Histogram::Snapshot Histogram::Get() const {
  Snapshot s;
  s.bounds = bounds_;
  absl::MutexLock lock(&mu_);
  uint64_t total = 0;
  for (uint64_t c : counts_) s.buckets.push_back(total += c);
  s.sum = sum_;
  s.count = total;
  return s;
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) return absl::StrFormat("%.0f", value);
  return absl::StrFormat("%.9g", value);
}

void PrometheusText::Family(std::string_view name, std::string_view type, std::string_view help) {
  text_ += StrCat("# HELP ", name, " ", Escape(help, false), "\n# TYPE ", name, " ", type, "\n");
}

void PrometheusText::Sample(std::string_view name, const MetricLabels& labels, double value) {
  text_ += StrCat(name, LabelText(labels), " ", FormatMetricValue(value), "\n");
}

void PrometheusText::Histogram(std::string_view name, const MetricLabels& labels,
                               const cascade::Histogram::Snapshot& h) {
  for (size_t i = 0; i <= h.bounds.size(); ++i) {
    MetricLabels with_le = labels;
    with_le.emplace_back("le", i < h.bounds.size() ? FormatMetricValue(h.bounds[i]) : "+Inf");
    Sample(StrCat(name, "_bucket"), with_le, static_cast<double>(h.buckets[i]));
  }
  Sample(StrCat(name, "_sum"), labels, h.sum);
  Sample(StrCat(name, "_count"), labels, static_cast<double>(h.count));
}

}  // namespace cascade
