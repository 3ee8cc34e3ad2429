// The `cascade` subcommands. Each returns the process exit code: 0 on success, 2 on any
// error, after printing exactly one line `cascade <cmd>: <message>` on stderr.
#pragma once

#include "absl/status/status.h"

namespace cascade::cli {

int InfoCommand(int argc, char** argv);
int TokenizeCommand(int argc, char** argv);
int RunCommand(int argc, char** argv);
int PerplexityCommand(int argc, char** argv);
int GenerateCommand(int argc, char** argv);
int ChatCommand(int argc, char** argv);
int StatusCommand(int argc, char** argv);
int BenchCommand(int argc, char** argv);

// Prints `status` as one line on stderr and returns 2.
int Fail(const char* command, const absl::Status& status);

}  // namespace cascade::cli
