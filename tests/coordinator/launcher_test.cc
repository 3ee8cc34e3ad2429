// Launcher supervision with a stand-in worker binary (a shell script that records each
// start and exits with a chosen code): a crashed worker is started again, a worker that
// refuses its arguments (EX_USAGE, 64) is not.
#include "coordinator/launcher.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace cascade::coordinator {
namespace {

// Starts of a stand-in worker that exits with `code`, counted over `wait`.
int StartsOfWorkerExiting(int code, std::chrono::milliseconds wait) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("cascade-launcher-" + std::to_string(::getpid()) + "-" + std::to_string(code));
  std::filesystem::create_directories(dir);
  const std::string script = (dir / "worker").string(), starts = (dir / "starts").string();
  std::ofstream(script) << "#!/bin/sh\necho start >> " << starts << "\nexit " << code << "\n";
  ::chmod(script.c_str(), 0755);
  {
    Launcher launcher(script, "127.0.0.1:1", std::chrono::milliseconds(50));
    WorkerLaunch l;
    l.node = "n0";
    l.device = "cpu";
    EXPECT_TRUE(launcher.Launch(l).ok());
    std::this_thread::sleep_for(wait);
  }
  std::ifstream in(starts);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  std::filesystem::remove_all(dir);
  return n;
}

TEST(LauncherTest, RestartsACrashedWorker) { EXPECT_GE(StartsOfWorkerExiting(1, std::chrono::milliseconds(800)), 3); }

TEST(LauncherTest, DoesNotRestartAWorkerThatRefusesItsArguments) {
  EXPECT_EQ(StartsOfWorkerExiting(64, std::chrono::milliseconds(800)), 1);
}

}  // namespace
}  // namespace cascade::coordinator
