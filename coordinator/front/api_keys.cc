#include "coordinator/front/api_keys.h"

#include <fstream>

#include "absl/strings/ascii.h"
#include "core/str_cat.h"

namespace cascade::coordinator {
namespace {

// Equal strings, in time that depends on the lengths only (no early exit on the first
// differing byte, which would let a caller find a key byte by byte).
bool ConstantTimeEqual(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::StatusOr<ApiKeys> ApiKeys::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(StrCat("security.api_keys_file: cannot read ", path));
  std::vector<std::string> keys;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    const std::string key(absl::StripAsciiWhitespace(line));
    if (key.empty()) continue;
    if (key.size() < 16) {
      return absl::InvalidArgumentError(
          StrCat("security.api_keys_file: ", path, " line ", n, ": a key of ", key.size(),
                 " characters is too easy to guess (16 or more; e.g. `openssl rand -hex 24`)"));
    }
    keys.push_back(key);
  }
  if (keys.empty()) return absl::InvalidArgumentError(StrCat("security.api_keys_file: ", path, " holds no key"));
  return FromKeys(std::move(keys));
}

ApiKeys ApiKeys::FromKeys(std::vector<std::string> keys) {
  ApiKeys k;
  k.keys_ = std::move(keys);
  return k;
}

bool ApiKeys::Allows(std::string_view authorization) const {
  if (keys_.empty()) return true;
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.substr(0, kBearer.size()) != kBearer) return false;
  const std::string_view offered = authorization.substr(kBearer.size());
  bool match = false;
  for (const std::string& k : keys_) match = ConstantTimeEqual(offered, k) || match;  // Every key, always.
  return match;
}

absl::Status ApiKeys::Check(std::string_view authorization) const {
  if (Allows(authorization)) return absl::OkStatus();
  return absl::UnauthenticatedError(authorization.empty()
                                        ? "no API key: send `authorization: Bearer KEY` (gRPC metadata or HTTP header)"
                                        : "the API key is not valid");
}

}  // namespace cascade::coordinator
