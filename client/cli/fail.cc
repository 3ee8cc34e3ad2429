#include <cstdio>
#include <string>

#include "client/cli/commands.h"

namespace cascade::cli {

int Fail(const char* command, const absl::Status& status) {
  std::string msg(status.message());
  for (char& c : msg)
    if (c == '\n') c = ' ';
  std::fprintf(stderr, "cascade %s: %s\n", command, msg.c_str());
  return 2;
}

}  // namespace cascade::cli
