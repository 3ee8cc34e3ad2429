// Random blocks of a GGUF block type for kernel tests: any bit pattern is a valid block, so
// every code and scale bit is exercised; the f16 scale fields are set finite and small
// (MXFP4's exponent to 2^-18..2^1), and the values come from the CPU's dequantizer
// (kernels/cpu/quantize.h DequantizeRow, itself checked against the gguf package in
// tests/quant/).
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace cascade::testing {

// `n_out` rows of `n_in` columns of `dtype` (one the CPU dequantizes) from `seed`; their
// values into `decoded` [n_out * n_in].
std::vector<uint8_t> RandomBlocks(DType dtype, int64_t n_out, int64_t n_in, uint32_t seed, std::vector<float>* decoded);

}  // namespace cascade::testing
