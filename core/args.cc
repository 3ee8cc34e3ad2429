#include "core/args.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "core/str_cat.h"

namespace cascade {

Args::Args(std::string program, std::string synopsis, std::vector<ArgOption> options)
    : program_(std::move(program)), synopsis_(std::move(synopsis)), options_(std::move(options)) {}

const ArgOption* Args::Find(const std::string& name) const {
  auto it = std::find_if(options_.begin(), options_.end(), [&](const ArgOption& o) { return o.name == name; });
  return it == options_.end() ? nullptr : &*it;
}

absl::Status Args::Parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      return absl::OkStatus();
    }
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(
          cascade::StrCat("unexpected argument '", arg, "' (see `", program_, " --help`)"));
    }
    std::string name = arg.substr(2);
    std::optional<std::string> inline_value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const ArgOption* option = Find(name);
    if (option == nullptr) {
      return absl::InvalidArgumentError(cascade::StrCat("unknown option '--", name, "' (see `", program_, " --help`)"));
    }
    if (option->value.empty()) {
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

std::string Args::Usage() const {
  std::vector<std::pair<std::string, std::string>> rows;  // ("--name VALUE", help)
  for (const ArgOption& o : options_) {
    rows.emplace_back(o.value.empty() ? "--" + o.name : cascade::StrCat("--", o.name, " ", o.value), o.help);
  }
  rows.emplace_back("-h, --help", "print this help and exit");
  size_t width = 0;
  for (const auto& [flag, help] : rows) width = std::max(width, flag.size());
  std::string out = cascade::StrCat("usage: ", program_, synopsis_.empty() ? "" : " ", synopsis_, "\noptions:\n");
  for (const auto& [flag, help] : rows) {
    out += cascade::StrCat("  ", flag, std::string(width + 2 - flag.size(), ' '), help, "\n");
  }
  return out;
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
