// Helpers the benchmark programs share (not tests): wall-clock seconds, and a failed step
// ending the program with one line naming it.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"

namespace cascade::bench {

inline double Seconds(const std::chrono::steady_clock::time_point& t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Exits 1 printing "PROGRAM: WHAT: message" when `s` is an error.
inline void Check(const absl::Status& s, const char* program, const std::string& what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s: %s\n", program, what.c_str(), std::string(s.message()).c_str());
  std::exit(1);
}

}  // namespace cascade::bench
