// A small command-line parser for Cascade's binaries: `--name value` and boolean
// `--flag` options, each declared up front with one line of help, so that `--help` (or
// `-h`) can list them and a typo is an error that points to `--help`.
// Single owner; not thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cascade {

// One option of a binary: `--name VALUE` when `value` is set, a boolean `--name` when it
// is empty.
struct ArgOption {
  std::string name;   // Without the leading "--", e.g. "max-tokens".
  std::string value;  // The value's placeholder in the usage ("PATH", "N"); empty for a flag.
  std::string help;   // One line: what it does, and its default when it has one.
};

class Args {
 public:
  // `program` names the binary in messages and the usage ("cascade-coordinator",
  // "cascade run"); `synopsis` follows it on the usage's first line ("--config FILE
  // [options]"); `options` are every option it takes, listed in this order by `Usage`.
  Args(std::string program, std::string synopsis, std::vector<ArgOption> options);

  // Parses argv[first..argc). `--help` or `-h` anywhere stops parsing with OK and sets
  // `help_requested()` (the caller prints `Usage()` to stdout and exits 0). On error,
  // InvalidArgument for an unknown option (naming it and pointing to `PROGRAM --help`), a
  // positional argument or a missing value; the values parsed before it stay set.
  absl::Status Parse(int argc, char** argv, int first);
  bool help_requested() const { return help_requested_; }

  // The usage text: "usage: PROGRAM SYNOPSIS", then "options:" and one line per option
  // ("  --name VALUE   help"), `--help` last. Ends with a newline.
  std::string Usage() const;
  const std::vector<ArgOption>& options() const { return options_; }

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::optional<std::string> Get(const std::string& name) const;
  std::string GetOr(const std::string& name, const std::string& fallback) const;
  absl::StatusOr<std::string> Require(const std::string& name) const;
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t fallback) const;
  absl::StatusOr<double> GetDouble(const std::string& name, double fallback) const;

 private:
  const ArgOption* Find(const std::string& name) const;

  std::string program_;
  std::string synopsis_;
  std::vector<ArgOption> options_;
  std::map<std::string, std::string> values_;
  bool help_requested_ = false;
};

}  // namespace cascade
