#include "core/dtype.h"

#include <array>

#include <cctype>
#include <string>

namespace cascade {
namespace {
// clang-format off
constexpr std::array<DTypeInfo, 22> kInfos = {{
    {"f32", 1, 4, false},
    {"f16", 1, 2, false},
    {"bf16", 1, 2, false},
    {"i32", 1, 4, false},
    {"q8_0", 32, 34, true},
    {"q4_0", 32, 18, true},
    {"q4_1", 32, 20, true},
    {"q4_k", 256, 144, true},
    {"q6_k", 256, 210, true},
    {"q8_k", 256, 292, true},
    {"i4_g128", 128, 68, true},
    {"q5_0", 32, 22, true},
    {"q5_1", 32, 24, true},
    {"q2_k", 256, 84, true},
    {"q3_k", 256, 110, true},
    {"q5_k", 256, 176, true},
    {"iq4_nl", 32, 18, true},
    {"iq4_xs", 256, 136, true},
    {"f8_e4m3", 1, 1, false},
    {"f8_e4m3_b128", 128, 132, true},
    {"mxfp4", 32, 17, true},
    {"u8", 1, 1, false},
}};
// clang-format on
}  // namespace

const DTypeInfo& GetDTypeInfo(DType dtype) { return kInfos[static_cast<size_t>(dtype)]; }

std::optional<DType> DTypeFromName(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (size_t i = 0; i < kInfos.size(); ++i) {
    if (kInfos[i].name == lower) return static_cast<DType>(i);
  }
  return std::nullopt;
}

}  // namespace cascade
