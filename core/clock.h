// The one "time since" of the project: seconds on the monotonic clock.
#pragma once

#include <chrono>

namespace cascade {

// Seconds elapsed since `t` (steady_clock: never jumps with the wall clock).
inline double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace cascade
