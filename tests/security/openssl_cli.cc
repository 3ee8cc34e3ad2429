#include "tests/security/openssl_cli.h"

#include <sys/wait.h>

#include <cstdio>

namespace cascade::testing {

CommandResult RunIn(const std::string& dir, const std::string& command) {
  const std::string line = "cd '" + dir + "' && { " + command + " ; } 2>&1";
  CommandResult result;
  FILE* pipe = popen(line.c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) result.output.append(buf, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace cascade::testing
