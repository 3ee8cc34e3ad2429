// Launchers of the CUDA kernels behind CudaBackend (cuda_backend.cc). Plain pointers and
// sizes so that the .cu files need no C++20 header (nvcc builds them as C++17). Every
// pointer is device memory unless its name says host; every launch is asynchronous on
// `stream`, and the caller checks cudaGetLastError.
//
// Numerics: activations F32, accumulation F32, quantized weights dequantized in
// registers (weight-only quantization: W8 for Q8_0, W4 for Q4_0/Q4_1 and for the
// GPTQ/AWQ group-128 INT4 of I4_G128).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/sample_row.h"

namespace cascade::kernels::cuda {

// Weight encodings the kernels decode; values match cascade::DType.
enum WeightCode : int {
  kWF32 = 0,
  kWF16 = 1,
  kWBF16 = 2,
  kWQ8_0 = 4,
  kWQ4_0 = 5,
  kWQ4_1 = 6,
  kWQ4_K = 7,
  kWQ6_K = 8,
  kWI4G128 = 10,
  kWQ5_0 = 11,
  kWQ5_1 = 12,
  kWQ2_K = 13,
  kWQ3_K = 14,
  kWQ5_K = 15,
  kWIQ4_NL = 16,
  kWIQ4_XS = 17,
  kWF8 = 18,      // Raw E4M3 codes: the FP8 KV cache (times a scale per KV head).
  kWF8B128 = 19,  // F8_E4M3_B128: f32 scale + 128 E4M3 codes (core/fp8.h).
  kWMXFP4 = 20,   // E8M0 exponent + 16 bytes of E2M1 nibbles.
};

// out[r, :] = in[r, :] * w / rms(in[r, :]); one block per row.
void RmsNorm(float* out, const float* in, const float* w, int64_t n_rows, int64_t n, float eps, cudaStream_t stream);
// hidden += add, then out = RmsNorm(hidden) over [n_rows, n], bit for bit as Add then RmsNorm.
void AddRmsNorm(float* out, float* hidden, const float* add, const float* w, int64_t n_rows, int64_t n, float eps,
                cudaStream_t stream);
// Rotates x [n_tokens, n_heads * head_dim] in place. style 0: adjacent pairs, 1: halves.
void Rope(float* x, const int32_t* positions, const float* inv_freq, int64_t n_tokens, int64_t n_heads,
          int64_t head_dim, int style, cudaStream_t stream);
void SiluMul(float* out, const float* gate, const float* up, int64_t n, cudaStream_t stream);
// gpt-oss's clamped SwiGLU (Backend::ClampedSwiglu) over n elements.
void ClampedSwiglu(float* out, const float* gate, const float* up, int64_t n, float alpha, float limit,
                   cudaStream_t stream);
// out [n_rows, n_cols] = in [n_rows, d] at columns cols[j] (device memory).
void GatherColumns(float* out, const float* in, const int32_t* cols, int64_t n_rows, int64_t d, int64_t n_cols,
                   cudaStream_t stream);
void Add(float* out, const float* in, int64_t n, cudaStream_t stream);
// out[rows[i], :] += scales[i] * in[i, :] for i in [0, n_rows), in order of i (rows may
// repeat: one thread per column walks every row); in [n_rows, d].
void AddScaledRows(float* out, const float* in, const int32_t* rows, const float* scales, int64_t n_rows, int64_t d,
                   cudaStream_t stream);
// out[i, :] += sigmoid(gate[i]) * in[i, :] for i in [0, n_rows); in [n_rows, d].
void AddSigmoidGatedRows(float* out, const float* in, const float* gate, int64_t n_rows, int64_t d,
                         cudaStream_t stream);
// out[t, o] += bias[o].
void AddBias(float* out, const float* bias, int64_t n_tokens, int64_t n_out, cudaStream_t stream);
// out [n_ids, n_embd] = rows `ids` of table (any WeightCode), as f32.
void Embedding(float* out, const void* table, int code, const int32_t* ids, int64_t n_ids, int64_t n_embd,
               cudaStream_t stream);
// out [rows, cols] f32 = the whole matrix decoded (for the GEMM path of many tokens).
void Dequantize(float* out, const void* w, int code, int64_t rows, int64_t cols, cudaStream_t stream);
// The same in bf16 (the tuned kernels' GEMM path: tensor-core GEMMs on bf16 activations).
void DequantizeBf16(void* out, const void* w, int code, int64_t rows, int64_t cols, cudaStream_t stream);
// out [n, cols] in f16 (code kWF16) or bf16 (kWBF16) = in [n, cols] f32.
void ConvertActivations(void* out, const float* in, int code, int64_t n, cudaStream_t stream);
// Weight-only quantized GEMV/GEMM for few tokens: out [n_tokens, n_out] = x [n_tokens,
// n_in] w^T, w [n_out, n_in] in Q8_0/Q4_0/Q4_1/I4_G128 blocks. One warp per output row, up to 8
// tokens per pass over the row.
// The weight's rows may stack up to kMaxGemvParts projections of x (Q/K/V, gate/up): part
// p is rows [end[p - 1], end[p]) (end[-1] = 0) and goes to out[p] [n_tokens, its rows].
constexpr int kMaxGemvParts = 4;
struct GemvOut {
  float* out[kMaxGemvParts] = {};
  int64_t end[kMaxGemvParts] = {};
  // Each part's bias [its rows], added as the sums are stored (the bits of AddBias after
  // them), or null.
  const float* bias[kMaxGemvParts] = {};
  int n_parts = 0;

  // Stores row o of the stacked rows (o < end[n_parts - 1]) for token t: the sum v, plus its
  // part's bias.
  __host__ __device__ void Store(int64_t o, int64_t t, float v) const {
    int p = 0;
    while (o >= end[p]) ++p;
    const int64_t first = p == 0 ? 0 : end[p - 1];
    out[p][t * (end[p] - first) + (o - first)] = bias[p] != nullptr ? v + bias[p][o - first] : v;
  }
};
void QuantGemv(const GemvOut& out, const float* x, const void* w, int code, int64_t n_tokens, int64_t n_out,
               int64_t n_in, cudaStream_t stream);
// The same for F16 / BF16 weights (code kWF16 or kWBF16), reading the F32 activations as
// they are (half_gemv.cu). REQUIRES n_tokens <= kMaxHalfGemvTokens, n_in % 8 == 0 and w
// 16-byte aligned.
constexpr int64_t kMaxHalfGemvTokens = 8;

// Quantized weights (every GGUF block type and I4_G128: Q8GemvCode) times activations quantized
// to 8 bits, by integer dot products (q8_gemv.cu). QuantizeActivations writes x
// [n_tokens, n_in] (n_in % 32 == 0) as n_tokens * n_in / 32 blocks; Q8Gemv then writes
// out as QuantGemv does. Each block of 32 activations loses what an 8-bit quantization
// with an amax scale loses (as the CPU backend's quantized matmuls do).
struct Q8Block {
  float d = 0.0f;   // Scale: x ~ d * q.
  float s = 0.0f;   // d * sum(q).
  float s1 = 0.0f;  // d * sum(q[16:32]) (Q2_K's second min).
  int32_t q[8];     // 32 int8, four to a word.
};
inline bool Q8GemvCode(int code) {
  switch (code) {
    case kWQ8_0:
    case kWQ4_0:
    case kWQ4_1:
    case kWQ5_0:
    case kWQ5_1:
    case kWQ2_K:
    case kWQ3_K:
    case kWQ4_K:
    case kWQ5_K:
    case kWQ6_K:
    case kWIQ4_NL:
    case kWIQ4_XS:
    case kWMXFP4:
    case kWI4G128: return true;
    default: return false;
  }
}
// The float weight encodings the device MoE layers take (float_chunk.cuh), against f32
// activations.
inline bool FloatChunkCode(int code) { return code == kWF32 || code == kWF16 || code == kWBF16 || code == kWF8B128; }
// The 16-entry value tables of the IQ4 and MXFP4 codes (core/quant_blocks.h's kIq4nlValues
// and kMxfp4Values) as four little-endian words, entries 4 i .. 4 i + 3 in word i, for the
// integer kernels' byte permutes (q8_unpack.cuh TableBytes; checked against the tables in
// cuda_backend.cc). Scalars, which device code may read as constants (arrays it may not).
constexpr uint32_t kIq4nlWord0 = 0xbfad9881u, kIq4nlWord1 = 0xf6eaddcfu, kIq4nlWord2 = 0x26190d01u,
                   kIq4nlWord3 = 0x71594535u;
constexpr uint32_t kMxfp4Word0 = 0x03020100u, kMxfp4Word1 = 0x0c080604u, kMxfp4Word2 = 0xfdfeff00u,
                   kMxfp4Word3 = 0xf4f8fafcu;
void QuantizeActivations(Q8Block* out, const float* x, int64_t n_tokens, int64_t n_in, cudaStream_t stream);
void Q8Gemv(const GemvOut& out, const Q8Block* xq, const void* w, int code, int64_t row_bytes, int64_t n_tokens,
            int64_t n_out, int64_t n_in, cudaStream_t stream);
void HalfGemv(const GemvOut& out, const float* x, const void* w, int code, int64_t n_tokens, int64_t n_out,
              int64_t n_in, cudaStream_t stream);
// The same product for many tokens (prefill) on int8 tensor cores (q8_mma.cu: tiles of 64
// rows by 64 tokens, mma.sync on the unpacked chunks), with Q8Gemv's arithmetic per chunk.
// REQUIRES compute capability 8.0 or later, n_in % 32 == 0, n_out / 64 < 65536.
void Q8Mma(const GemvOut& out, const Q8Block* xq, const void* w, int code, int64_t row_bytes, int64_t n_tokens,
           int64_t n_out, int64_t n_in, cudaStream_t stream);
// A layer's paged KV cache [n_blocks, block_size, n_kv_heads, head_dim] in encoding `code`:
// kWF32, kWF16, kWQ8_0 (kv_dim and head_dim multiples of 32; the element at flat index i
// is in block i / 32) or kWF8 (E4M3 codes of x / scale of the element's KV head, with
// k_scale and v_scale [n_kv_heads]; null for the other codes).
struct KvCacheRef {
  void* k = nullptr;
  void* v = nullptr;
  int code = 0;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  int64_t head_dim = 0;
};

// Scatters k, v [n_rows, kv_dim] (f32) into the paged caches at slot_of_row[r] (slot =
// block * block_size + position % block_size), converting to the cache's encoding.
void WriteKv(const KvCacheRef& cache, const float* k, const float* v, const int32_t* slot_of_row, int64_t n_rows,
             int64_t kv_dim, cudaStream_t stream);

// Rope of q and k (as Rope, style 0 adjacent pairs, 1 halves) and then WriteKv of the
// rotated k and v, one block per row: the two ops' bits in one launch.
void RopeWriteKv(float* q, float* k, const float* v, const int32_t* positions, const float* inv_freq, int64_t n_rows,
                 int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int style, const KvCacheRef& cache,
                 const int32_t* slot_of_row, cudaStream_t stream);
// The same after RmsNorm of each head of q (weights q_norm [head_dim]) and of k (k_norm), one
// block per (row, head): the four ops' bits in one launch (Qwen3). REQUIRES head_dim % 32
// == 0 for a q8_0 cache.
void NormRopeWriteKv(float* q, float* k, const float* v, const float* q_norm, const float* k_norm, float eps,
                     const int32_t* positions, const float* inv_freq, int64_t n_rows, int64_t n_heads,
                     int64_t n_kv_heads, int64_t head_dim, int style, const KvCacheRef& cache,
                     const int32_t* slot_of_row, cudaStream_t stream);

// Paged attention for any mix of prefill and decode rows (flash-decoding): each (row,
// head, split) block runs an online softmax over its share of the row's keys, then a
// combine kernel merges the splits. Row r attends to keys [0, row_pos[r]] of its sequence,
// whose block table starts at tables[row_table[r]]. GQA: head h reads KV head
// h / (n_heads / n_kv_heads). `partial` holds n_rows * n_heads * n_splits * (head_dim + 2)
// floats. REQUIRES head_dim <= 256 and a multiple of 32.
struct AttentionArgs {
  float* out = nullptr;           // [n_rows, n_heads * head_dim]
  const float* q = nullptr;       // [n_rows, n_heads * head_dim]
  const void* k_cache = nullptr;  // [n_blocks, block_size, n_kv_heads, head_dim] in kv_code
  const void* v_cache = nullptr;
  int kv_code = 0;  // kWF32, kWF16, kWQ8_0 or kWF8.
  // kWF8 only: per KV head, K's scale (folded into the scores) and V's (into the output).
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  const int32_t* row_pos = nullptr;    // [n_rows]
  const int32_t* row_table = nullptr;  // [n_rows] offsets into tables
  const int32_t* tables = nullptr;
  float* partial = nullptr;
  int64_t n_rows = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, block_size = 0;
  int64_t n_splits = 1, keys_per_split = 0;
  float scale = 1.0f;
  int64_t window = 0;            // > 0: row r sees keys (row_pos[r] - window, row_pos[r]] only,
  int64_t kept_prefix = 0;       //   and keys [0, kept_prefix) (AttentionParams::kept_prefix).
  const float* sinks = nullptr;  // [n_heads] attention-sink logits, or null.
  // The rows `Attention` computes: split_rows[0, n_split_rows), or every row when null
  // (the others are left to AttentionTiles).
  const int32_t* split_rows = nullptr;
  int64_t n_split_rows = 0;
};
void Attention(const AttentionArgs& args, cudaStream_t stream);

// Prefill attention in tiles (attention_prefill.cu, FlashAttention-2's loop without tensor
// cores): each block takes kTileRows consecutive rows of one sequence and one head, keeps
// their queries in shared memory and walks the sequence's keys kTileKeys at a time, K and V
// tiles loaded once into shared memory for all its rows (instead of once per row), with an
// online softmax per row and causal masking by position. Same contract as Attention for
// the rows of `tiles`. REQUIRES head_dim 64 or 128 (TiledAttentionHeadDim).
struct PrefillTile {
  int32_t first_row = 0;  // Of the tile's rows in q / out.
  int32_t n_rows = 0;     // 1..kTileRows.
  int32_t table = 0;      // Offset of the sequence's block table in args.tables.
  int32_t pos0 = 0;       // Position of the first row; row i attends to keys [0, pos0 + i].
};
constexpr int kTileRows = 16;
inline bool TiledAttentionHeadDim(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }
void AttentionTiles(const AttentionArgs& args, const PrefillTile* tiles, int64_t n_tiles, cudaStream_t stream);
// The same on tensor cores (attention_prefill_f16.cu): Q scaled then rounded to f16, K and V
// staged as f16 (from any cache encoding), scores and outputs accumulated in f32 with the
// probabilities rounded to f16 for P V; the heads of a GQA group share each staged K/V tile.
// REQUIRES compute capability 8.0 or later.
void AttentionTilesF16(const AttentionArgs& args, const PrefillTile* tiles, int64_t n_tiles, cudaStream_t stream);

// A MoE layer's routed experts, on the device from the router's logits to the weighted sum
// (moe_experts.cu), with no host synchronisation: per token the softmax over all experts,
// the top k (lower id on ties) and their weights (renormalised over the k when `norm`), as
// model/layers/moe.h RouteToken; the entries of held experts grouped expert by expert (in
// no fixed order within an expert: no value depends on it); per held expert one warp per output
// row computes act(gate + bias, up + bias) for its rows and then down (+ bias) (the block types of Q8GemvCode
// against activations quantized to 8 bits; F32, F16, BF16 and F8_E4M3_B128 against the f32
// activations: FloatChunkCode); then each token's row of `acc` adds its experts' rows
// scaled by their weights, in the token's order of choice (deterministic). Blocks of held
// experts no token chose return at once. `load` [n_experts] (or null) gains each entry.
// Act-order GPTQ matrices (MoeArgs' orders) read each grouped row's inputs gathered in
// their order and quantized then. Any number of tokens; MoeWork is sized by it (the backend runs long batches in
// passes). REQUIRES top_k <= kMaxMoeTopK, n_experts <= kMaxMoeExperts, n_embd and n_ff multiples of 32 (of 128 for
// F8_E4M3_B128), every code Q8GemvCode or FloatChunkCode, gate and up of the same kind.
constexpr int64_t kMaxMoeTopK = 16;
constexpr int64_t kMaxMoeExperts = 1024;
struct MoeExpertRows {  // One held expert's matrices: its gate, up and down rows [0, ...).
  const uint8_t* gate = nullptr;
  const uint8_t* up = nullptr;
  const uint8_t* down = nullptr;
  // gpt-oss's biases (f32, device memory): [n_ff] added to gate and up, [n_embd] to down; or null.
  const float* gate_bias = nullptr;
  const float* up_bias = nullptr;
  const float* down_bias = nullptr;
};
struct MoeArgs {
  const MoeExpertRows* experts = nullptr;  // [n_held], device memory.
  int gate_code = 0, up_code = 0, down_code = 0;
  int64_t gate_row_bytes = 0, up_row_bytes = 0, down_row_bytes = 0;
  int64_t n_embd = 0, n_ff = 0;  // n_ff: this rank's columns of each expert's FFN.
  int64_t n_experts = 0, top_k = 0, expert_begin = 0, n_held = 0;
  bool norm = false;
  // The activation: silu(g) * u, or with swiglu_limit > 0 gpt-oss's clamped SwiGLU
  // (g = min(g, limit), u = clamp(u, -limit, limit), (u + 1) * g * sigmoid(alpha * g)).
  float swiglu_alpha = 0.0f, swiglu_limit = 0.0f;
  // Act-order GPTQ (Linear's input orders), device memory, null where no held expert's matrix
  // of that kind reorders: gate and up [n_held, n_embd], down [n_held, n_ff] (an expert
  // whose matrix reads its input as it is holds 0, 1, 2, ...). Column j of held expert e's
  // matrix multiplies input column order[e, j]; integer (Q8GemvCode) matrices only.
  const int32_t* gate_order = nullptr;
  const int32_t* up_order = nullptr;
  const int32_t* down_order = nullptr;
  // The block-type matrices by int8 tensor-core tiles (moe_mma.cu) instead of the GEMVs:
  // gate and up when they share a code, and down (for prefill passes).
  bool mma = false;
};
// Device scratch of MoeRoutedExperts, for n_tokens tokens (m = n_tokens * top_k entries).
struct MoeWork {
  int32_t* chosen = nullptr;        // [m] expert ids, token-major.
  float* weights = nullptr;         // [m]
  int32_t* entry_row = nullptr;     // [m] grouped row of an entry; -1 when its expert is not held.
  int32_t* expert_rows = nullptr;   // [n_held + 1] first grouped row of each held expert.
  int32_t* expert_tiles = nullptr;  // [n_held + 1] first int8 tile (64 grouped rows) of each.
  int32_t* token_of_row = nullptr;  // [m]
  Q8Block* xq = nullptr;            // [n_tokens * n_embd / 32]
  Q8Block* xg = nullptr;            // [m * n_embd / 32] with gate_order: each grouped row's x in it
  Q8Block* xu = nullptr;            // [m * n_embd / 32] with an up_order other than gate_order
  float* h = nullptr;               // [m, n_ff] silu(gate) * up
  Q8Block* hq = nullptr;            // [m * n_ff / 32]
  float* out = nullptr;             // [m, n_embd] each grouped row's down
};
void MoeRoutedExperts(float* acc, const float* x, const float* logits, int32_t* load, int64_t n_tokens,
                      const MoeArgs& args, const MoeWork& work, cudaStream_t stream);

// Fills n elements of w with pseudo-random values of encoding `code` (F32/F16/BF16:
// normal-ish in [-scale, scale]; quantized: random quants, scale / 16 as the block scale,
// I4_G128 with zero point 8),
// for benchmarks that need weights of a size no host could make quickly.
void FillRandom(void* w, int code, int64_t n, float scale, uint32_t seed, cudaStream_t stream);

// out[r] = index of the largest of logits[r, :] (the first on ties).
void Argmax(int32_t* out, const float* logits, int64_t n_rows, int64_t n_vocab, cudaStream_t stream);

// out[r] = row r of logits [n_rows, n_vocab] sampled or verified per rows[r]
// (kernels/sample_row.h); out, rows, penalties and masks are device memory. With `shape`
// (some row has penalties or a mask), `shaped` [n_rows, n_vocab] receives those rows
// penalised and masked.
void Sample(SampleResult* out, const float* logits, float* shaped, const SampleRow* rows,
            const SamplePenalty* penalties, const uint8_t* masks, bool shape, int64_t n_rows, int64_t n_vocab,
            cudaStream_t stream);

}  // namespace cascade::kernels::cuda
