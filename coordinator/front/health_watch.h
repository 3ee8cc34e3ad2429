// Keeps the standard grpc.health.v1 service in step with the cluster: NOT_SERVING while
// the cluster starts, is degraded (a worker dead) or reloads after a death, SERVING while
// every worker is ready, both for the overall service "" and for `cascade.v1.Inference`.
// The coordinator's main loop calls `Update` every ~100 ms once the serving loop runs, so a
// load balancer or `grpc_health_probe` sees a dead worker within that much of the cluster
// noticing it.
//
// Thread-safety: single owner (the coordinator's main thread).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "coordinator/serving/replicas.h"
#include "grpcpp/health_check_service_interface.h"

namespace cascade::coordinator {

class HealthWatch {
 public:
  // Sets both services NOT_SERVING. `health` (the server's health service) is borrowed and
  // must outlive this object.
  explicit HealthWatch(grpc::HealthCheckServiceInterface* health);
  HealthWatch(const HealthWatch&) = delete;
  HealthWatch& operator=(const HealthWatch&) = delete;

  // SERVING while some replica has every worker ready (with one replica: every worker),
  // else NOT_SERVING naming the cluster's state and why (the dead worker).
  void Update(const Replicas& replicas);
  // Sets both services to `serving` when it changed since the last call, and logs the
  // change with `why` (what `Update` calls; tests call it directly).
  void Set(bool serving, std::string_view why);
  // What was set last (false before any `Set`).
  bool serving() const { return serving_.value_or(false); }

  // The services whose status follows the cluster: "" (the whole server) and the public API.
  static constexpr std::string_view kServices[] = {"", "cascade.v1.Inference"};

 private:
  grpc::HealthCheckServiceInterface* health_;
  std::optional<bool> serving_;  // Unset until the first Set after construction.
};

}  // namespace cascade::coordinator
