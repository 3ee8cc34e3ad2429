// Status helpers shared by every module: propagation macros with added context.
// Same contract as Abseil's status_macros; thread-safe (stateless).
#pragma once

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/str_cat.h"

namespace cascade {

// Returns `status` with `context: ` prepended to its message, keeping the code.
inline absl::Status Annotate(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), StrCat(context, ": ", ToStd(status.message())));
}

}  // namespace cascade

#define CASCADE_STATUS_CONCAT_INNER_(a, b) a##b
#define CASCADE_STATUS_CONCAT_(a, b) CASCADE_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define CASCADE_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::absl::Status cascade_status_ = (expr);           \
    if (!cascade_status_.ok()) return cascade_status_; \
  } while (0)

// `lhs = value of expr` (an absl::StatusOr<T>), or returns its error.
#define CASCADE_ASSIGN_OR_RETURN(lhs, expr) \
  CASCADE_ASSIGN_OR_RETURN_IMPL_(CASCADE_STATUS_CONCAT_(cascade_statusor_, __LINE__), lhs, expr)
#define CASCADE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return std::move(tmp).status();       \
  lhs = std::move(tmp).value()
