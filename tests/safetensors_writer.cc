#include "tests/safetensors_writer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace cascade::testing {

std::string SafetensorsFileBytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

std::string SafetensorsBytes(const std::vector<SafetensorsEntry>& entries, bool with_metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (with_metadata) header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const SafetensorsEntry& e : entries) {
    header[e.name] = {
        {"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {data.size(), data.size() + e.data.size()}}};
    data += e.data;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return SafetensorsFileBytes(text, data);
}

std::string WriteHfDirectory(const std::string& dir, const std::string& config_json,
                             const std::vector<SafetensorsEntry>& entries) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << config_json;
  std::ofstream(dir + "/model.safetensors", std::ios::binary) << SafetensorsBytes(entries);
  return dir;
}

}  // namespace cascade::testing
