// libFuzzer target: the GGUF header parser must turn any byte string into either a file
// or a Status, never a crash, hang or out-of-bounds read. Reading every tensor's rows
// checks that accepted offsets really lie inside the input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "model/format/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto file = cascade::model::GgufFile::OpenBytes(bytes, "fuzz.gguf");
  if (!file.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const auto& t : (*file)->tensors()) {
    auto view = (*file)->Read(t.name);
    if (!view.ok()) continue;
    const auto* p = static_cast<const uint8_t*>(view->data);
    if (t.n_bytes > 0) sink = sink + p[0] + p[t.n_bytes - 1];
  }
  for (const auto& [key, value] : (*file)->metadata()) {
    (void)value.ToString();
    (void)(*file)->GetIntArray(key);
    (void)(*file)->GetFloatArray(key);
  }
  return 0;
}
