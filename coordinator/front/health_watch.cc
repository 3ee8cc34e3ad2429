#include "coordinator/front/health_watch.h"

#include "cascade/v1/inference.grpc.pb.h"
#include "core/logging.h"
#include "core/str_cat.h"

namespace cascade::coordinator {

static_assert(HealthWatch::kServices[1] == v1::Inference::service_full_name());

HealthWatch::HealthWatch(grpc::HealthCheckServiceInterface* health) : health_(health) {
  for (std::string_view name : kServices) health_->SetServingStatus(std::string(name), false);
}

void HealthWatch::Update(const Replicas& replicas) {
  if (replicas.Serving()) {
    Set(true, replicas.size() == 1 ? "every worker is ready" : "a replica has every worker ready");
    return;
  }
  if (serving_ == false) return;  // Already said; spare the status walk.
  v1::ClusterStatus status;
  replicas.FillStatus(&status);
  Set(false, status.detail().empty() ? status.state() : StrCat(status.state(), ": ", status.detail()));
}

void HealthWatch::Set(bool serving, std::string_view why) {
  if (serving_ == serving) return;
  serving_ = serving;
  for (std::string_view name : kServices) health_->SetServingStatus(std::string(name), serving);
  CASCADE_LOG(Info) << "health: " << (serving ? "SERVING" : "NOT_SERVING") << " (" << why << ")";
}

}  // namespace cascade::coordinator
