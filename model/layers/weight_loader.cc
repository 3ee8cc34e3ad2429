#include "model/layers/weight_loader.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/dtype.h"
#include "core/huge_pages.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "kernels/cpu/quantize.h"

namespace cascade::model {

void WeightLoader::FreeBytes::operator()(uint8_t* p) const {
  if (mapped) {
    ::munmap(p, size);
  } else {
    std::free(p);
  }
}

WeightLoader::WeightLoader(const WeightSource* source, kernels::Backend* backend)
    : source_(source), backend_(backend) {}
WeightLoader::~WeightLoader() = default;

absl::StatusOr<uint8_t*> WeightLoader::OwnBytes(const std::string& tensor, size_t bytes) {
  const size_t size = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  const auto refuse = [&] {
    return absl::ResourceExhaustedError(StrCat("tensor '", tensor, "': cannot allocate ", bytes, " bytes"));
  };
  if (size >= kMappedCopyBytes) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return refuse();
    AdviseHugePages(p, size);  // A weight the backend may stream whole every step (FP8, BF16 copies).
    owned_bytes_.push_back(OwnedBytes(static_cast<uint8_t*>(p), FreeBytes{.size = size, .mapped = true}));
    return owned_bytes_.back().get();
  }
  // The spare when this copy would use at least half of it (a copy the backend then keeps
  // wastes at most as much as it holds).
  if (spare_ != nullptr && size <= spare_.get_deleter().size && 2 * size >= spare_.get_deleter().size) {
    owned_bytes_.push_back(std::move(spare_));
    return owned_bytes_.back().get();
  }
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(64, size));
  if (buf == nullptr) return refuse();
  owned_bytes_.push_back(OwnedBytes(buf, FreeBytes{.size = size, .mapped = false}));
  return buf;
}

// A row slice is a view of just those rows of the file; a column slice (whole blocks of
// the type) is copied into an owned buffer and the file pages behind the rows are dropped.
absl::StatusOr<WeightLoader::Slice> WeightLoader::ReadSlice(const std::string& n, int64_t rows, int64_t cols,
                                                            IndexRange row_range, IndexRange col_range) {
  const WeightSource& w = *source_;
  const int64_t r0 = row_range.begin, r1 = row_range.end < 0 ? rows : row_range.end;
  const int64_t c0 = col_range.begin, c1 = col_range.end < 0 ? cols : col_range.end;
  const TensorInfo* info = w.FindTensor(n);
  if (info == nullptr) return absl::NotFoundError(StrCat(w.path(), ": tensor '", n, "' is missing"));
  // Read as [Rows(), Cols()]: a GGUF merged expert tensor [n_experts, rows, cols] is
  // [n_experts * rows, cols], and a [cols] vector one row.
  if (info->n_dims < 1 || info->Rows() != rows || info->Cols() != cols) {
    return absl::InvalidArgumentError(
        StrCat("tensor '", n, "' has shape ", info->ShapeString(), ", the config needs [", rows, ", ", cols, "]"));
  }
  if (!backend_->SupportsWeight(info->dtype)) {
    return absl::UnimplementedError(StrCat("tensor '", n, "': the backend has no kernel for ", DTypeName(info->dtype)));
  }
  const int64_t block = BlockElems(info->dtype);
  if (c0 % block != 0 || c1 % block != 0) {
    return absl::InvalidArgumentError(
        StrCat("tensor '", n, "': columns [", c0, ", ", c1, ") are not whole blocks of ", DTypeName(info->dtype)));
  }
  Slice sl;
  sl.name = n;
  CASCADE_ASSIGN_OR_RETURN(sl.file, w.ReadRows(n, r0, r1));
  sl.kept = sl.file;
  if (c0 != 0 || c1 != cols) {
    const int64_t src_row = RowBytes(info->dtype, cols), dst_row = RowBytes(info->dtype, c1 - c0);
    const int64_t skip = RowBytes(info->dtype, c0);
    CASCADE_ASSIGN_OR_RETURN(uint8_t * buf, OwnBytes(n, static_cast<size_t>((r1 - r0) * dst_row)));
    const auto* src = static_cast<const uint8_t*>(sl.file.data);
    for (int64_t r = 0; r < r1 - r0; ++r) std::memcpy(buf + r * dst_row, src + r * src_row + skip, dst_row);
    sl.kept = TensorView(buf, info->dtype, {r1 - r0, c1 - c0});
    w.ReleasePages(sl.file);
    sl.owned = true;
  }
  return sl;
}

// When the backend keeps its own copy, the file pages or the owned copy behind the slice
// are dropped right away, so the model is resident about once, not twice.
absl::StatusOr<const kernels::PreparedWeight*> WeightLoader::Prepare(const Slice& sl) {
  weight_bytes_ += sl.kept.NumBytes();
  absl::StatusOr<std::unique_ptr<kernels::PreparedWeight>> prepared = backend_->PrepareWeight(sl.kept);
  if (!prepared.ok()) return Annotate(prepared.status(), StrCat("preparing tensor '", sl.name, "'"));
  std::unique_ptr<kernels::PreparedWeight> p = *std::move(prepared);
  if (p->reads_source() && !backend_->host_memory()) {
    return absl::InternalError(StrCat("tensor '", sl.name, "': the backend left the weight in host memory"));
  }
  if (!p->reads_source()) {
    if (sl.owned) {  // The backend made its own copy (the slice's is the latest): a spare.
      OwnedBytes& last = owned_bytes_.back();
      if (!last.get_deleter().mapped && (spare_ == nullptr || last.get_deleter().size > spare_.get_deleter().size)) {
        spare_ = std::move(last);
      }
      owned_bytes_.pop_back();
    } else {
      source_->ReleasePages(sl.file);
    }
  } else if (!sl.owned) {
    used_.push_back(sl.file);
  }
  return prepared_.emplace_back(std::move(p)).get();
}

absl::StatusOr<const kernels::PreparedWeight*> WeightLoader::Matrix(const std::string& name, int64_t rows, int64_t cols,
                                                                    IndexRange row_range, IndexRange col_range) {
  CASCADE_ASSIGN_OR_RETURN(Slice sl, ReadSlice(name, rows, cols, row_range, col_range));
  return Prepare(sl);
}

absl::StatusOr<const kernels::PreparedWeight*> WeightLoader::LookupTable(const std::string& name, int64_t rows,
                                                                         int64_t cols, IndexRange row_range) {
  if (!backend_->host_memory()) return Matrix(name, rows, cols, row_range);
  CASCADE_ASSIGN_OR_RETURN(Slice sl, ReadSlice(name, rows, cols, row_range, {}));
  weight_bytes_ += sl.kept.NumBytes();
  return prepared_.emplace_back(std::make_unique<kernels::PreparedWeight>(sl.kept)).get();
}

absl::StatusOr<const kernels::PreparedWeight*> WeightLoader::Stacked(std::span<const std::string> names,
                                                                     std::span<const int64_t> rows, int64_t cols,
                                                                     std::span<const IndexRange> ranges) {
  const WeightSource& w = *source_;
  const TensorInfo* first = w.FindTensor(names[0]);
  if (first == nullptr || !backend_->SupportsWeight(first->dtype)) return nullptr;
  const DType dtype = first->dtype;
  // Checked in full before anything is read, so a refusal costs nothing.
  std::vector<std::pair<int64_t, int64_t>> kept(names.size());
  int64_t total = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const TensorInfo* a = w.FindTensor(names[i]);
    if (a == nullptr || a->dtype != dtype || a->n_dims < 2 || a->Rows() != rows[i] || a->Cols() != cols) {
      return nullptr;
    }
    kept[i] = {ranges[i].begin, ranges[i].end < 0 ? rows[i] : ranges[i].end};
    const int64_t n = kept[i].second - kept[i].first;
    if (i + 1 < names.size() && n % kernels::Backend::kLinearPartRows != 0) return nullptr;
    total += n;
  }
  const int64_t row_bytes = RowBytes(dtype, cols);
  CASCADE_ASSIGN_OR_RETURN(uint8_t * buf, OwnBytes(names[0], static_cast<size_t>(total * row_bytes)));
  int64_t at = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    CASCADE_ASSIGN_OR_RETURN(TensorView part, w.ReadRows(names[i], kept[i].first, kept[i].second));
    std::memcpy(buf + at * row_bytes, part.data, static_cast<size_t>(part.NumBytes()));
    w.ReleasePages(part);
    at += part.Rows();
  }
  Slice sl;
  sl.name = names[0] + " (stacked)";
  sl.kept = TensorView(buf, dtype, {total, cols});
  sl.owned = true;
  return Prepare(sl);
}

absl::StatusOr<TensorView> WeightLoader::Vector(const std::string& n, int64_t len, IndexRange range) {
  const int64_t e0 = range.begin, e1 = range.end < 0 ? len : range.end;
  CASCADE_ASSIGN_OR_RETURN(TensorView v, source_->Read(n));
  if (v.NumElements() != len) {
    return absl::InvalidArgumentError(StrCat("tensor '", n, "' has shape ", v.ShapeString(), ", expected [", len, "]"));
  }
  // Copied even as f32: read in place, a norm's page would keep the file's pages around it
  // mapped (fault-around, or a whole 2 MiB folio), though their tensors were released.
  std::vector<float> full(len);
  CASCADE_RETURN_IF_ERROR(kernels::cpu::DequantizeRow(v.dtype, v.data, full.data(), len));
  weight_bytes_ += v.dtype == DType::kF32 ? (e1 - e0) * static_cast<int64_t>(sizeof(float)) : v.NumBytes();
  source_->ReleasePages(v);
  std::vector<float>& buf = owned_.emplace_back(full.begin() + e0, full.begin() + e1);
  absl::StatusOr<TensorView> kept = Keep(buf);
  if (!backend_->host_memory()) owned_.pop_back();  // Keep uploaded it.
  return kept;
}

absl::StatusOr<TensorView> WeightLoader::Keep(std::span<const float> host) {
  const int64_t n = static_cast<int64_t>(host.size());
  if (backend_->host_memory()) return TensorView(const_cast<float*>(host.data()), DType::kF32, {n});
  CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Buffer> buf, backend_->Allocate(host.size_bytes()));
  CASCADE_RETURN_IF_ERROR(backend_->CopyIn(buf->data(), host.data(), host.size_bytes()));
  return TensorView(uploaded_.emplace_back(std::move(buf))->data(), DType::kF32, {n}, backend_->device());
}

void WeightLoader::Prefault(const std::function<void(double)>& progress) const {
  int64_t total = 0, done = 0;
  for (const TensorView& v : used_) total += v.NumBytes();
  volatile uint8_t sink = 0;
  for (const TensorView& v : used_) {
    const auto* p = static_cast<const uint8_t*>(v.data);
    for (int64_t off = 0; off < v.NumBytes(); off += 4096) sink = sink + p[off];
    done += v.NumBytes();
    if (progress && total > 0) progress(static_cast<double>(done) / static_cast<double>(total));
  }
  // Last, so that the pages faulted in around these reads go too.
  source_->ReleasePagesExcept(used_);
}

}  // namespace cascade::model
