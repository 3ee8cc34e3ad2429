// The device MoE layer's block-type experts by int8 tensor-core tiles (moe_mma.cu), for
// MoeRoutedExperts (moe_experts.cu) when MoeArgs::mma: each launch covers every tile of 64
// grouped rows of one expert (work.expert_tiles) by 64 of the matrix's rows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"

namespace cascade::kernels::cuda {

// work.h[r, o] = act(gate_o . x(r) + gate_bias_o, up_o . x(r) + up_bias_o) for every grouped
// row r, x(r) the row of xg (xu for up) that holds r's activations: row r when by_row, else
// its token's row. REQUIRES gate_code == up_code, an integer code (Q8GemvCode).
void MoeGateUpMma(const MoeArgs& a, const MoeWork& work, const Q8Block* xg, bool g_by_row, const Q8Block* xu,
                  bool u_by_row, int64_t m, cudaStream_t stream);
// work.out[r, o] = down_o . hq(r) (+ down_bias_o) for every grouped row r.
void MoeDownMma(const MoeArgs& a, const MoeWork& work, int64_t m, cudaStream_t stream);

}  // namespace cascade::kernels::cuda
