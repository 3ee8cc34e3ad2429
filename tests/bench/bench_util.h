// Helpers the benchmark programs share (not tests): a failed step ending the program with
// one line naming it (seconds come from core/clock.h).
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "core/clock.h"

namespace cascade::bench {

// Exits 1 printing "PROGRAM: WHAT: message" when `s` is an error.
inline void Check(const absl::Status& s, const char* program, const std::string& what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s: %s\n", program, what.c_str(), std::string(s.message()).c_str());
  std::exit(1);
}

}  // namespace cascade::bench
