// Minimal logging and invariant checks. `CASCADE_CHECK` is for programmer errors only:
// input from files, clients or peers is validated and answered with a Status instead.
// Thread-safe: each message is written with one call to stderr.
#pragma once

#include <sstream>
#include <string>

namespace cascade::internal {

enum class LogLevel { kInfo, kWarning, kError, kFatal };

// Accumulates one log line and writes it on destruction; aborts for kFatal.
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

// Set once at start-up by main(); messages below it are dropped.
void SetMinLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);

}  // namespace cascade::internal

#define CASCADE_LOG(level)                                                      \
  if (::cascade::internal::LogEnabled(::cascade::internal::LogLevel::k##level)) \
  ::cascade::internal::LogMessage(::cascade::internal::LogLevel::k##level, __FILE__, __LINE__).stream()

#define CASCADE_CHECK(cond)                                                                           \
  if (!(cond))                                                                                        \
  ::cascade::internal::LogMessage(::cascade::internal::LogLevel::kFatal, __FILE__, __LINE__).stream() \
      << "Check failed: " #cond " "
