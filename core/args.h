// A small command-line parser for Cascade's binaries: `--name value` and boolean
// `--flag` options, each declared up front so a typo is an error that lists the options.
// Single owner; not thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cascade {

class Args {
 public:
  // `valued` options take a value; `flags` do not.
  Args(std::vector<std::string> valued, std::vector<std::string> flags)
      : valued_(std::move(valued)), flags_(std::move(flags)) {}

  // Parses argv[first..argc). InvalidArgument for unknown options or missing values.
  absl::Status Parse(int argc, char** argv, int first);

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::optional<std::string> Get(const std::string& name) const;
  std::string GetOr(const std::string& name, const std::string& fallback) const;
  absl::StatusOr<std::string> Require(const std::string& name) const;
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t fallback) const;
  absl::StatusOr<double> GetDouble(const std::string& name, double fallback) const;

 private:
  std::vector<std::string> valued_;
  std::vector<std::string> flags_;
  std::map<std::string, std::string> values_;
};

}  // namespace cascade
