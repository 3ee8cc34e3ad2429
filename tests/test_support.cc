#include "tests/test_support.h"

#include <cmath>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace cascade::testing {
namespace fs = std::filesystem;

namespace internal {
bool Exists(const std::string& path) { return fs::exists(path); }
}  // namespace internal

std::string SourceDir() { return CASCADE_SOURCE_DIR; }

std::string TestDataDir() {
  if (const char* env = std::getenv("CASCADE_TESTDATA"); env != nullptr && fs::is_directory(env)) {
    return env;
  }
  const fs::path p = fs::path(CASCADE_SOURCE_DIR) / ".." / "shared" / "testdata";
  return fs::is_directory(p) ? fs::canonical(p).string() : std::string();
}

std::string TestDataPath(const std::string& relative) {
  const std::string dir = TestDataDir();
  return dir.empty() ? std::string() : dir + "/" + relative;
}

std::string DefaultModelPath(const std::string& name) {
  const fs::path p = fs::path(CASCADE_SOURCE_DIR) / "models" / name;
  return fs::exists(p) ? p.string() : std::string();
}

TempDir::TempDir() {
  std::string templ = (fs::temp_directory_path() / "cascade-test-XXXXXX").string();
  char* p = ::mkdtemp(templ.data());
  if (p == nullptr) std::abort();
  path_ = p;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TempDir::WriteFile(const std::string& name, const std::string& bytes) const {
  const std::string full = path_ + "/" + name;
  std::ofstream out(full, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return full;
}

std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) std::abort();
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double OcpE4M3(uint8_t q) {
  const int e = (q >> 3) & 15, m = q & 7;
  if (e == 15 && m == 7) return std::nan("");
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7);
  return q & 0x80 ? -mag : mag;
}

double OcpE2M1(uint8_t code) {
  const int e = (code >> 1) & 3, m = code & 1;
  const double mag = e == 0 ? m * 0.5 : std::ldexp(1 + m / 2.0, e - 1);
  return code & 8 ? -mag : mag;
}

}  // namespace cascade::testing
