#include "coordinator/control/kv_budget.h"

#include <cmath>

#include "core/str_cat.h"

namespace cascade::coordinator {
namespace {

std::string MiB(double bytes) { return StrCat(static_cast<int64_t>(std::llround(bytes / 1048576.0)), " MiB"); }

}  // namespace

int64_t KvBlockBytes(int64_t n_layers, int64_t block_size, int64_t n_kv_heads, int64_t head_dim, DType dtype) {
  return 2 * n_layers * block_size * RowBytes(dtype, n_kv_heads * head_dim);
}

absl::StatusOr<int64_t> GpuKvBlocks(int64_t free_bytes, int64_t weight_bytes, int64_t block_bytes, double fraction,
                                    const std::string& who) {
  const double usable = fraction * static_cast<double>(free_bytes);
  const double left = usable - static_cast<double>(weight_bytes);
  const int64_t blocks =
      block_bytes <= 0 || left <= 0 ? 0 : static_cast<int64_t>(left / static_cast<double>(block_bytes));
  if (blocks < 1) {
    return absl::FailedPreconditionError(
        StrCat(who, ": ", MiB(weight_bytes), " of weights and one ", MiB(block_bytes), " KV block do not fit ",
               fraction, " of its ", MiB(free_bytes),
               " free GPU memory (raise scheduler.gpu_memory_fraction, free the GPU, or split "
               "the model over more stages or a wider tensor-parallel group)"));
  }
  return blocks;
}

}  // namespace cascade::coordinator
