#include "core/args.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "core/str_cat.h"

namespace cascade {

absl::Status Args::Parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(cascade::StrCat("unexpected argument '", arg, "'"));
    }
    std::string name = arg.substr(2);
    std::optional<std::string> inline_value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const bool is_valued = std::find(valued_.begin(), valued_.end(), name) != valued_.end();
    const bool is_flag = std::find(flags_.begin(), flags_.end(), name) != flags_.end();
    if (!is_valued && !is_flag) {
      std::vector<std::string> all;
      for (const auto& v : valued_) all.push_back("--" + v + " V");
      for (const auto& f : flags_) all.push_back("--" + f);
      return absl::InvalidArgumentError(
          cascade::StrCat("unknown option '--", name, "' (options: ", absl::StrJoin(all, ", "), ")"));
    }
    if (is_flag) {
      values_[name] = "1";
      continue;
    }
    if (inline_value) {
      values_[name] = *inline_value;
    } else if (i + 1 < argc) {
      values_[name] = argv[++i];
    } else {
      return absl::InvalidArgumentError(cascade::StrCat("option '--", name, "' needs a value"));
    }
  }
  return absl::OkStatus();
}

std::optional<std::string> Args::Get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::GetOr(const std::string& name, const std::string& fallback) const {
  return Get(name).value_or(fallback);
}

absl::StatusOr<std::string> Args::Require(const std::string& name) const {
  auto v = Get(name);
  if (!v) return absl::InvalidArgumentError(cascade::StrCat("missing required option --", name));
  return *v;
}

absl::StatusOr<int64_t> Args::GetInt(const std::string& name, int64_t fallback) const {
  auto v = Get(name);
  if (!v) return fallback;
  int64_t out;
  if (!absl::SimpleAtoi(*v, &out)) {
    return absl::InvalidArgumentError(cascade::StrCat("--", name, " '", *v, "' is not an integer"));
  }
  return out;
}

absl::StatusOr<double> Args::GetDouble(const std::string& name, double fallback) const {
  auto v = Get(name);
  if (!v) return fallback;
  double out;
  if (!absl::SimpleAtod(*v, &out)) {
    return absl::InvalidArgumentError(cascade::StrCat("--", name, " '", *v, "' is not a number"));
  }
  return out;
}

}  // namespace cascade
