// API keys for the public API (security.api_keys_file): bearer tokens a client sends as
// gRPC metadata `authorization: Bearer KEY` or the HTTP header `Authorization: Bearer
// KEY`. Keys are read once from a file, one per line ('#' starts a comment), compared in
// constant time, and never logged or echoed in an error. Without a file the API is open.
//
// Thread-safe after construction (read-only).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cascade::coordinator {

class ApiKeys {
 public:
  ApiKeys() = default;  // No keys: every caller is let in.
  // The keys of `path`. InvalidArgument (naming security.api_keys_file) when the file
  // cannot be read, holds no key, or a key is shorter than 16 characters.
  static absl::StatusOr<ApiKeys> Load(const std::string& path);
  static ApiKeys FromKeys(std::vector<std::string> keys);

  bool enabled() const { return !keys_.empty(); }
  size_t size() const { return keys_.size(); }
  // True when keys are off, or `authorization` is "Bearer K" for a configured K.
  bool Allows(std::string_view authorization) const;
  // UNAUTHENTICATED with what to send, unless Allows(authorization).
  absl::Status Check(std::string_view authorization) const;

 private:
  std::vector<std::string> keys_;
};

}  // namespace cascade::coordinator
