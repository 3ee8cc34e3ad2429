// The `openssl` command-line tool as the independent reference for tests/security/: runs
// a command through the shell in a directory and returns its exit code and output.
#pragma once

#include <string>

namespace cascade::testing {

struct CommandResult {
  int exit_code = -1;  // The command's exit status; -1 when it did not exit normally.
  std::string output;  // stdout and stderr together.
};

// Runs `command` with /bin/sh in directory `dir` (2>&1).
CommandResult RunIn(const std::string& dir, const std::string& command);

}  // namespace cascade::testing
