// The coordinator's Prometheus page (`GET /metrics` on the HTTP front): what ServingMetrics
// has observed (request counts, latencies, each worker's step times), then gauges and
// counters read at scrape time from the serving loops' stats and the cluster's status, so that
// nothing is counted twice. Rendering only: the measuring is ServingMetrics'.
#pragma once

#include <string>

#include "cascade/v1/inference.pb.h"
#include "coordinator/control/serving_metrics.h"
#include "coordinator/serving/serving_loop.h"

namespace cascade::coordinator {

std::string RenderMetricsPage(const ServingMetrics& metrics, const ServingStats& serving,
                              const v1::ClusterStatus& cluster);

}  // namespace cascade::coordinator
