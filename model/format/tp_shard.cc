#include "model/format/tp_shard.h"

#include <algorithm>

#include "core/load_balance.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "model/format/arch/llama.h"
#include "model/format/arch/moe.h"
#include "model/format/model_files.h"

namespace cascade::model {
namespace {

// Columns [begin, end) of rank `rank` when `n` columns split among `parts` in whole blocks.
absl::StatusOr<std::pair<int64_t, int64_t>> BlockSplit(int64_t n, int64_t block, int parts, int rank,
                                                       std::string_view what) {
  if (n % block != 0) {
    return absl::InvalidArgumentError(
        StrCat("tensor parallel: ", what, " size ", n, " is not whole blocks of ", block));
  }
  if (n / block < parts) {
    return absl::InvalidArgumentError(
        StrCat("tensor parallel: ", parts, " ranks cannot split the ", what, "'s ", n / block, " blocks of ", block));
  }
  const auto [b0, b1] = EvenSplit(n / block, parts, rank);
  return std::make_pair(b0 * block, b1 * block);
}

}  // namespace

int TpShard::ExpertRank(int64_t n_experts, int tp_size, int64_t expert) {
  return static_cast<int>(EvenSplitPart(n_experts, tp_size, expert));
}

std::string TpShard::ToString() const {
  std::string experts;
  if (expert_all_to_all) {
    experts =
        StrCat(", experts [", expert_begin, ", ", expert_end, ") of all-to-all rank ", expert_rank, "/", expert_ranks);
  } else if (expert_end > 0 || ffe_end > 0) {
    experts = expert_parallel ? StrCat(", experts [", expert_begin, ", ", expert_end, ")")
                              : StrCat(", expert ffn [", ffe_begin, ", ", ffe_end, ")");
  }
  return StrCat("tp rank ", tp_rank, "/", tp_size, ": kv heads [", kv_head_begin, ", ", kv_head_end, ")",
                kv_replicated ? " (replicated)" : "", ", q heads [", q_head_begin, ", ", q_head_end, "), ffn [",
                ff_begin, ", ", ff_end, ")", experts, ", vocab [", vocab_begin, ", ", vocab_end, ")");
}

absl::Status TpShard::PlanExperts(const ModelConfig& c, bool ep, int64_t expert_block, int64_t shared_block) {
  expert_parallel = ep;
  if (!c.is_moe()) return absl::OkStatus();
  if (ep) {
    std::tie(expert_begin, expert_end) = EvenSplit(c.n_experts, tp_size, tp_rank);
    ffe_begin = 0;
    ffe_end = c.n_ff_expert;
  } else {
    expert_begin = 0;
    expert_end = c.n_experts;
    CASCADE_ASSIGN_OR_RETURN(std::tie(ffe_begin, ffe_end),
                             BlockSplit(c.n_ff_expert, expert_block, tp_size, tp_rank, "expert FFN"));
  }
  if (c.n_ff_shared_expert > 0) {
    CASCADE_ASSIGN_OR_RETURN(std::tie(ffs_begin, ffs_end),
                             BlockSplit(c.n_ff_shared_expert, shared_block, tp_size, tp_rank, "shared expert FFN"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TpShard> TpShard::Plan(const ModelConfig& c, int tp_rank, int tp_size, int64_t ffn_block,
                                      int64_t attn_out_block) {
  if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size) {
    return absl::InvalidArgumentError(StrCat("tensor parallel: rank ", tp_rank, " outside a group of ", tp_size));
  }
  if (c.n_kv_heads <= 0 || c.n_heads <= 0 || c.n_heads % c.n_kv_heads != 0 || c.head_dim <= 0) {
    return absl::InvalidArgumentError(
        StrCat("tensor parallel: bad head layout ", c.n_heads, " heads / ", c.n_kv_heads, " kv heads"));
  }
  if (ffn_block < 1 || attn_out_block < 1) {
    return absl::InvalidArgumentError("tensor parallel: weight blocks must be >= 1 element");
  }
  TpShard s;
  s.tp_rank = tp_rank;
  s.tp_size = tp_size;
  s.head_dim = c.head_dim;
  const int64_t group = c.n_heads / c.n_kv_heads;  // Query heads per KV head.
  if (tp_size <= c.n_kv_heads) {
    std::tie(s.kv_head_begin, s.kv_head_end) = EvenSplit(c.n_kv_heads, tp_size, tp_rank);
    s.q_head_begin = s.kv_head_begin * group;
    s.q_head_end = s.kv_head_end * group;
  } else {
    // Replicated: rank r uses KV head r * n_kv / tp; the ranks sharing it split its queries.
    const int64_t kv = static_cast<int64_t>(tp_rank) * c.n_kv_heads / tp_size;
    const int64_t first = (kv * tp_size + c.n_kv_heads - 1) / c.n_kv_heads;  // ceil(kv * tp / n_kv)
    const int64_t last = ((kv + 1) * tp_size + c.n_kv_heads - 1) / c.n_kv_heads;
    const int64_t sharing = last - first;
    if (sharing > group) {
      return absl::InvalidArgumentError(StrCat("tensor parallel: ", tp_size, " ranks over ", c.n_kv_heads,
                                               " kv heads put ", sharing, " ranks on kv head ", kv, ", which has only ",
                                               group, " query heads"));
    }
    s.kv_replicated = true;
    s.kv_head_begin = kv;
    s.kv_head_end = kv + 1;
    const auto [q0, q1] = EvenSplit(group, sharing, tp_rank - first);
    s.q_head_begin = kv * group + q0;
    s.q_head_end = kv * group + q1;
  }
  // The O projection's column slice: head-group boundaries must fall on weight blocks.
  // Every rank checks every boundary, so the whole group refuses together.
  for (int r = 0; r < tp_size && tp_size > 1; ++r) {
    int64_t q0 = 0;
    if (tp_size <= c.n_kv_heads) {
      q0 = EvenSplit(c.n_kv_heads, tp_size, r).first * group;
    } else {
      const int64_t kv = static_cast<int64_t>(r) * c.n_kv_heads / tp_size;
      const int64_t first = (kv * tp_size + c.n_kv_heads - 1) / c.n_kv_heads;
      const int64_t last = ((kv + 1) * tp_size + c.n_kv_heads - 1) / c.n_kv_heads;
      q0 = kv * group + EvenSplit(group, last - first, r - first).first;
    }
    if ((q0 * c.head_dim) % attn_out_block != 0) {
      return absl::InvalidArgumentError(StrCat("tensor parallel: rank ", r, "'s query heads start at column ",
                                               q0 * c.head_dim, " of the attention output, inside a weight block of ",
                                               attn_out_block, " (head_dim ", c.head_dim, ")"));
    }
  }
  // FFN in whole blocks of the down weight.
  CASCADE_ASSIGN_OR_RETURN(std::tie(s.ff_begin, s.ff_end), BlockSplit(c.n_ff, ffn_block, tp_size, tp_rank, "FFN"));
  // Vocabulary in equal chunks (the last may be short).
  s.vocab_chunk = (c.n_vocab + tp_size - 1) / tp_size;
  if (c.n_vocab <= 0 || (tp_size - 1) * s.vocab_chunk >= c.n_vocab) {
    return absl::InvalidArgumentError(
        StrCat("tensor parallel: ", tp_size, " ranks cannot split a vocabulary of ", c.n_vocab));
  }
  s.vocab_begin = tp_rank * s.vocab_chunk;
  s.vocab_end = std::min(c.n_vocab, s.vocab_begin + s.vocab_chunk);
  return s;
}

absl::StatusOr<TpShard> TpShard::ForExpertGroup(const ModelConfig& c, int rank, int size) {
  if (!c.is_moe()) return absl::InvalidArgumentError("all-to-all expert parallelism needs a mixture-of-experts model");
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(StrCat("expert group: rank ", rank, " outside a group of ", size));
  }
  CASCADE_ASSIGN_OR_RETURN(TpShard s, Plan(c, 0, 1));
  CASCADE_RETURN_IF_ERROR(s.PlanExperts(c, /*ep=*/false));
  s.expert_parallel = s.expert_all_to_all = true;
  s.expert_rank = rank;
  s.expert_ranks = size;
  std::tie(s.expert_begin, s.expert_end) = EvenSplit(c.n_experts, size, rank);
  return s;
}

absl::StatusOr<TpShard> TpShard::ForFiles(const ModelFiles& files, int64_t first_layer, int64_t last_layer, int tp_rank,
                                          int tp_size, bool expert_parallel) {
  if (last_layer < 0) last_layer = files.config.n_layers;
  int64_t ffn_block = 1, attn_out_block = 1, expert_block = 1, shared_block = 1;
  const auto block_of = [&](const std::string& name, int64_t& block) {
    if (const TensorInfo* t = files.weights->FindTensor(name)) block = std::max(block, BlockElems(t->dtype));
  };
  const ModelConfig& c = files.config;
  for (int64_t l = first_layer; l < last_layer; ++l) {
    block_of(arch::LlamaTensorName(files.format, arch::LlamaTensor::kFfnDown, l), ffn_block);
    block_of(arch::LlamaTensorName(files.format, arch::LlamaTensor::kAttnOutput, l), attn_out_block);
    if (!c.IsMoeLayer(l)) continue;
    block_of(arch::ExpertMatrixOf(c, files.format, arch::MoeTensor::kDown, l, 0).name, expert_block);
    block_of(arch::MoeTensorName(c, files.format, arch::MoeTensor::kSharedDown, l), shared_block);
  }
  CASCADE_ASSIGN_OR_RETURN(TpShard s, Plan(c, tp_rank, tp_size, ffn_block, attn_out_block));
  CASCADE_RETURN_IF_ERROR(s.PlanExperts(c, expert_parallel, expert_block, shared_block));
  return s;
}

}  // namespace cascade::model
