// libFuzzer target: the safetensors header parser must turn any byte string into either
// a tensor table or a Status, never a crash, hang, exception or out-of-bounds read.
// Every accepted tensor is checked to lie inside the input and is read end to end, so
// ASan catches an offset the parser should have rejected.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "model/format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto source = cascade::model::SafetensorsSource::OpenBytes(bytes, "fuzz.safetensors");
  if (!source.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const auto& t : (*source)->tensors()) {
    // Invariants the parser promises.
    if (t.file_offset > size || t.n_bytes > size - t.file_offset) std::abort();
    if (static_cast<int64_t>(t.n_bytes) != t.NumElements() * cascade::BlockBytes(t.dtype)) {
      std::abort();
    }
    if ((*source)->FindTensor(t.name) != &t) std::abort();
    auto view = (*source)->Read(t.name);
    if (!view.ok()) std::abort();
    const auto* p = static_cast<const uint8_t*>(view->data);
    if (t.n_bytes > 0) sink = sink + p[0] + p[t.n_bytes - 1];
    const int64_t rows = t.Rows();
    if (rows > 0) {
      auto last = (*source)->ReadRows(t.name, rows - 1, rows);
      if (!last.ok()) std::abort();
    }
    if ((*source)->ReadRows(t.name, 0, rows + 1).ok()) std::abort();
  }
  return 0;
}
