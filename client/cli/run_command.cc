// `cascade run`: single-process generation (implemented with the engine).
#include "client/cli/commands.h"

namespace cascade::cli {

int RunCommand(int argc, char** argv) {
  return Fail("run", absl::UnimplementedError("the engine is not built yet"));
}

}  // namespace cascade::cli
