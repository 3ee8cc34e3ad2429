// Tests for model/format/safetensors.h: the real TinyStories checkpoint, exact row reads over
// files written here, sharded directories, and one test per kind of corrupt file (each
// checks the status code and that the message names the file and the tensor).
// To add a bad-file case: build the bytes with `FileBytes(header_json, data)` (or
// `Build({...})` for a valid file), write it with `TempDir::WriteFile`, open it, and check
// the code and message with `ExpectError`.

#include "model/format/safetensors.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/format/hf_model.h"
#include "tests/safetensors_writer.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

using ::cascade::testing::TempDir;
using ::cascade::testing::TestDataPath;
using ::testing::HasSubstr;
using Json = nlohmann::json;

using ::cascade::testing::StatusMessage;

// Element `i` of a float view, without assuming the file aligned it.
float FloatAt(const TensorView& v, int64_t i) {
  float x;
  std::memcpy(&x, static_cast<const char*>(v.data) + i * sizeof(float), sizeof(float));
  return x;
}

using Entry = ::cascade::testing::SafetensorsEntry;

std::string FileBytes(const std::string& header, const std::string& data = "") {
  return ::cascade::testing::SafetensorsFileBytes(header, data);
}
std::string Build(const std::vector<Entry>& entries, bool with_metadata = true) {
  return ::cascade::testing::SafetensorsBytes(entries, with_metadata);
}
template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return ::cascade::testing::RawBytes(v);
}

std::vector<float> Iota(int n, float start = 0) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

// Opens `bytes` written to `file_name` in `dir`.
absl::StatusOr<std::unique_ptr<SafetensorsSource>> OpenWritten(const TempDir& dir, const std::string& file_name,
                                                               const std::string& bytes) {
  return SafetensorsSource::OpenFile(dir.WriteFile(file_name, bytes));
}

void ExpectError(const absl::Status& s, absl::StatusCode code, const std::vector<std::string>& must_mention) {
  EXPECT_EQ(s.code(), code) << s;
  for (const std::string& part : must_mention) {
    EXPECT_THAT(StatusMessage(s), HasSubstr(part)) << "message should mention '" << part << "'";
  }
}

// ---- The real checkpoint -----------------------------------------------------------

TEST(SafetensorsTest, OpensTinyStoriesCheckpoint) {
  CASCADE_REQUIRE_FILE(path, TestDataPath("models/tinystories-656k/model.safetensors"));
  absl::StatusOr<std::unique_ptr<SafetensorsSource>> src = SafetensorsSource::OpenFile(path);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ((*src)->path(), path);
  EXPECT_EQ((*src)->tensors().size(), 20u);  // 2 layers x 9 + norm + lm_head.

  const TensorInfo* head = (*src)->FindTensor("lm_head.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->dtype, DType::kF32);
  ASSERT_EQ(head->n_dims, 2);
  EXPECT_EQ(head->shape[0], 2048);
  EXPECT_EQ(head->shape[1], 128);
  EXPECT_EQ(head->n_bytes, 2048u * 128 * 4);
  // Tied: the embedding is not stored separately.
  EXPECT_EQ((*src)->FindTensor("model.embed_tokens.weight"), nullptr);

  const TensorInfo* k = (*src)->FindTensor("model.layers.1.self_attn.k_proj.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->shape[0], 64);  // 4 KV heads x head_dim 16.
  EXPECT_EQ(k->shape[1], 128);
  const TensorInfo* norm = (*src)->FindTensor("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->n_dims, 1);
  EXPECT_EQ(norm->shape[0], 128);

  // Tensors come in data order, each starting where the previous ended.
  const auto& ts = (*src)->tensors();
  for (size_t i = 1; i < ts.size(); ++i) {
    EXPECT_EQ(ts[i].file_offset, ts[i - 1].file_offset + ts[i - 1].n_bytes) << ts[i].name;
  }
  for (const TensorInfo& t : ts) EXPECT_EQ(t.file_offset % 4, 0u) << t.name;  // F32-aligned.
}

TEST(SafetensorsTest, TinyStoriesRowsMatchFileBytes) {
  CASCADE_REQUIRE_FILE(path, TestDataPath("models/tinystories-656k/model.safetensors"));
  const std::string file = ::cascade::testing::ReadFileOrDie(path);
  absl::StatusOr<std::unique_ptr<SafetensorsSource>> src = SafetensorsSource::OpenFile(path);
  ASSERT_TRUE(src.ok()) << src.status();

  // Independently: the data section starts after the 8-byte length and the header.
  uint64_t header_len = 0;
  std::memcpy(&header_len, file.data(), 8);
  const TensorInfo* q = (*src)->FindTensor("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  ASSERT_GE(q->file_offset, 8 + header_len);

  absl::StatusOr<TensorView> rows = (*src)->ReadRows(q->name, 5, 9);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->dtype, DType::kF32);
  ASSERT_EQ(rows->n_dims, 2);
  EXPECT_EQ(rows->shape[0], 4);
  EXPECT_EQ(rows->shape[1], 128);
  EXPECT_EQ(std::memcmp(rows->data, file.data() + q->file_offset + 5 * 128 * 4, 4 * 128 * 4), 0);

  absl::StatusOr<TensorView> norm = (*src)->Read("model.norm.weight");
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_EQ(norm->n_dims, 1);
  EXPECT_EQ(norm->shape[0], 128);
  for (int i = 0; i < 128; ++i) EXPECT_TRUE(std::isfinite(FloatAt(*norm, i))) << i;
}

TEST(SafetensorsTest, OpensTinyStoriesDirectory) {
  CASCADE_REQUIRE_FILE(dir, TestDataPath("models/tinystories-656k"));
  absl::StatusOr<std::unique_ptr<SafetensorsSource>> src = SafetensorsSource::OpenDirectory(dir);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ((*src)->num_shards(), 1u);
  EXPECT_NE((*src)->FindTensor("lm_head.weight"), nullptr);

  absl::StatusOr<std::unique_ptr<WeightSource>> weights = OpenHfWeights(dir);
  ASSERT_TRUE(weights.ok()) << weights.status();
  EXPECT_EQ((*weights)->tensors().size(), 20u);
}

// ---- Exact reads over files written here ----------------------------------------------

TEST(SafetensorsTest, ReadRowsReturnsExactBytes) {
  TempDir dir;
  const std::vector<uint16_t> f16 = {0x3C00, 0x4000, 0xC000, 0x7BFF};  // 1, 2, -2, 65504.
  const std::vector<uint16_t> bf16 = {0x3F80, 0x4040, 0xBF80};         // 1, 3, -1.
  const std::string bytes = Build({{"a.weight", "F32", {4, 3}, Bytes(Iota(12))},
                                   {"d.i32", "I32", {2}, Bytes(std::vector<int32_t>{-7, 9})},
                                   {"b.f16", "F16", {2, 2}, Bytes(f16)},
                                   {"c.bf16", "BF16", {3}, Bytes(bf16)}});
  auto src = OpenWritten(dir, "m.safetensors", bytes);
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_EQ((*src)->tensors().size(), 4u);

  absl::StatusOr<TensorView> a = (*src)->ReadRows("a.weight", 1, 3);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->n_dims, 2);
  EXPECT_EQ(a->shape[0], 2);
  EXPECT_EQ(a->shape[1], 3);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(FloatAt(*a, i), 3.0f + i) << i;
  // A padded header keeps the mapping's alignment.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data) % alignof(float), 0u);

  absl::StatusOr<TensorView> b = (*src)->ReadRows("b.f16", 1, 2);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->dtype, DType::kF16);
  EXPECT_EQ(b->As<uint16_t>()[0], 0xC000);
  EXPECT_EQ(b->As<uint16_t>()[1], 0x7BFF);

  absl::StatusOr<TensorView> c = (*src)->Read("c.bf16");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->dtype, DType::kBF16);
  EXPECT_EQ(c->n_dims, 1);
  EXPECT_EQ(c->shape[0], 3);
  EXPECT_EQ(std::memcmp(c->data, bf16.data(), 6), 0);

  absl::StatusOr<TensorView> d = (*src)->Read("d.i32");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->dtype, DType::kI32);
  EXPECT_EQ(d->As<int32_t>()[0], -7);

  // Empty range at the end is fine.
  absl::StatusOr<TensorView> empty = (*src)->ReadRows("a.weight", 4, 4);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->shape[0], 0);

  // Released pages read back the file's bytes; a view of other memory is ignored.
  (*src)->ReleasePages(*a);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(FloatAt(*a, i), 3.0f + i) << i;
  std::vector<float> elsewhere = {1, 2};
  (*src)->ReleasePages(TensorView(elsewhere.data(), DType::kF32, {2}));
  EXPECT_EQ(elsewhere[1], 2.0f);
}

TEST(SafetensorsTest, FileOffsetsAreAbsoluteAndOrdered) {
  // Data laid out in the reverse of the header's (alphabetical) order.
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string bytes = FileBytes(header, Bytes(std::vector<float>{1, 2, 3, 4}));
  absl::StatusOr<std::vector<TensorInfo>> ts = ParseSafetensorsHeader(bytes, "x.safetensors");
  ASSERT_TRUE(ts.ok()) << ts.status();
  ASSERT_EQ(ts->size(), 2u);
  EXPECT_EQ((*ts)[0].name, "b");
  EXPECT_EQ((*ts)[0].file_offset, 8 + header.size());
  EXPECT_EQ((*ts)[1].name, "a");
  EXPECT_EQ((*ts)[1].file_offset, 8 + header.size() + 8);

  auto src = SafetensorsSource::OpenBytes(bytes, "x.safetensors");
  ASSERT_TRUE(src.ok()) << src.status();
  absl::StatusOr<TensorView> a = (*src)->Read("a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(FloatAt(*a, 0), 3.0f);
}

TEST(SafetensorsTest, ScalarsZeroSizeTensorsPaddingAndMetadata) {
  // Header padded with spaces (as the reference writer does), arbitrary metadata.
  const std::string header = R"({"__metadata__":{"format":"pt","note":"anything"},)"
                             R"("s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                             R"("z":{"dtype":"F16","shape":[0,4],"data_offsets":[4,4]}}      )";
  const std::string bytes = FileBytes(header, Bytes(std::vector<float>{42}));
  auto src = SafetensorsSource::OpenBytes(bytes, "pad.safetensors");
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ((*src)->tensors().size(), 2u);
  EXPECT_EQ((*src)->FindTensor("__metadata__"), nullptr);
  absl::StatusOr<TensorView> s = (*src)->ReadRows("s", 0, 1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(FloatAt(*s, 0), 42.0f);
  absl::StatusOr<TensorView> z = (*src)->ReadRows("z", 0, 0);
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_STATUS_CODE((*src)->ReadRows("z", 0, 1), kOutOfRange);
}

TEST(SafetensorsTest, EmptyHeaderHasNoTensors) {
  auto src = SafetensorsSource::OpenBytes(FileBytes("{}"), "empty.safetensors");
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_TRUE((*src)->tensors().empty());
}

TEST(SafetensorsTest, MissingTensorIsNotFound) {
  TempDir dir;
  auto src = OpenWritten(dir, "m.safetensors", Build({{"w", "F32", {2, 2}, Bytes(Iota(4))}}));
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ((*src)->FindTensor("nope"), nullptr);
  ExpectError((*src)->ReadRows("nope", 0, 1).status(), absl::StatusCode::kNotFound, {"m.safetensors", "nope"});
  EXPECT_STATUS_CODE((*src)->Read("nope"), kNotFound);
}

TEST(SafetensorsTest, BadRowRangeIsOutOfRange) {
  TempDir dir;
  auto src = OpenWritten(dir, "m.safetensors", Build({{"w", "F32", {2, 2}, Bytes(Iota(4))}}));
  ASSERT_TRUE(src.ok()) << src.status();
  ExpectError((*src)->ReadRows("w", 0, 3).status(), absl::StatusCode::kOutOfRange, {"m.safetensors", "'w'", "[0, 3)"});
  EXPECT_STATUS_CODE((*src)->ReadRows("w", -1, 1), kOutOfRange);
  EXPECT_STATUS_CODE((*src)->ReadRows("w", 2, 1), kOutOfRange);
}

TEST(SafetensorsTest, MissingFileIsNotFound) {
  TempDir dir;
  const std::string path = dir.path() + "/absent.safetensors";
  ExpectError(SafetensorsSource::OpenFile(path).status(), absl::StatusCode::kNotFound, {"absent.safetensors"});
}

// ---- Corrupt files: one test per problem ----------------------------------------------

TEST(SafetensorsBadFileTest, TruncatedHeaderLength) {
  TempDir dir;
  ExpectError(OpenWritten(dir, "short.safetensors", std::string("\x10\x00\x00", 3)).status(),
              absl::StatusCode::kDataLoss, {"short.safetensors", "truncated"});
  ExpectError(OpenWritten(dir, "zero.safetensors", "").status(), absl::StatusCode::kDataLoss, {"zero.safetensors"});
}

TEST(SafetensorsBadFileTest, TruncatedHeader) {
  TempDir dir;
  // Length says 200 bytes of JSON; only part of it is there.
  std::string bytes = FileBytes(std::string(200, ' '));
  bytes.resize(60);
  ExpectError(OpenWritten(dir, "cut.safetensors", bytes).status(), absl::StatusCode::kDataLoss,
              {"cut.safetensors", "past the end"});
}

TEST(SafetensorsBadFileTest, HeaderLengthPastEndOfFile) {
  TempDir dir;
  std::string bytes(8, '\0');
  bytes[0] = '\x00';
  bytes[1] = '\x10';  // 4096.
  bytes += "{}";
  ExpectError(OpenWritten(dir, "eof.safetensors", bytes).status(), absl::StatusCode::kDataLoss,
              {"eof.safetensors", "4096", "past the end"});
}

TEST(SafetensorsBadFileTest, AbsurdHeaderLength) {
  TempDir dir;
  std::string bytes(8, '\0');
  bytes[5] = '\x01';  // 2^40.
  bytes += "{}";
  ExpectError(OpenWritten(dir, "huge.safetensors", bytes).status(), absl::StatusCode::kDataLoss,
              {"huge.safetensors", "exceeds"});
  // All ones: must not overflow the bounds arithmetic.
  ExpectError(ParseSafetensorsHeader(std::string(8, '\xff') + "{}", "ones").status(), absl::StatusCode::kDataLoss,
              {"ones"});
}

TEST(SafetensorsBadFileTest, InvalidJson) {
  TempDir dir;
  ExpectError(OpenWritten(dir, "bad.safetensors", FileBytes(R"({"w": {"dtype": "F32",)")).status(),
              absl::StatusCode::kDataLoss, {"bad.safetensors", "not valid JSON"});
}

TEST(SafetensorsBadFileTest, HeaderNotAnObject) {
  ExpectError(ParseSafetensorsHeader(FileBytes("[1, 2]"), "arr.safetensors").status(), absl::StatusCode::kDataLoss,
              {"arr.safetensors", "array"});
}

TEST(SafetensorsBadFileTest, DeeplyNestedJson) {
  const std::string deep = R"({"w":)" + std::string(1000, '[') + std::string(1000, ']') + "}";
  ExpectError(ParseSafetensorsHeader(FileBytes(deep), "deep.safetensors").status(), absl::StatusCode::kDataLoss,
              {"deep.safetensors", "nests"});
}

TEST(SafetensorsBadFileTest, MissingFields) {
  const std::string no_dtype = R"({"w":{"shape":[1],"data_offsets":[0,4]}})";
  ExpectError(ParseSafetensorsHeader(FileBytes(no_dtype, "abcd"), "f.safetensors").status(),
              absl::StatusCode::kDataLoss, {"f.safetensors", "'w'", "dtype"});
  const std::string no_shape = R"({"w":{"dtype":"F32","data_offsets":[0,4]}})";
  ExpectError(ParseSafetensorsHeader(FileBytes(no_shape, "abcd"), "f.safetensors").status(),
              absl::StatusCode::kDataLoss, {"'w'", "shape"});
  const std::string bad_offsets = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})";
  ExpectError(ParseSafetensorsHeader(FileBytes(bad_offsets, "abcd"), "f.safetensors").status(),
              absl::StatusCode::kDataLoss, {"'w'", "data_offsets"});
  const std::string not_object = R"({"w":[1,2,3]})";
  ExpectError(ParseSafetensorsHeader(FileBytes(not_object), "f.safetensors").status(), absl::StatusCode::kDataLoss,
              {"'w'"});
}

TEST(SafetensorsBadFileTest, OffsetsPastEnd) {
  TempDir dir;
  const std::string header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  ExpectError(OpenWritten(dir, "past.safetensors", FileBytes(header, "12345678")).status(), absl::StatusCode::kDataLoss,
              {"past.safetensors", "'w'", "past the end"});
}

TEST(SafetensorsBadFileTest, ReversedOffsets) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})";
  ExpectError(ParseSafetensorsHeader(FileBytes(header, "12345678"), "rev.safetensors").status(),
              absl::StatusCode::kDataLoss, {"rev.safetensors", "'w'", "reversed"});
}

TEST(SafetensorsBadFileTest, NegativeOffset) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})";
  ExpectError(ParseSafetensorsHeader(FileBytes(header, "1234"), "neg.safetensors").status(),
              absl::StatusCode::kDataLoss, {"neg.safetensors", "'w'"});
}

TEST(SafetensorsBadFileTest, SizeDoesNotMatchShape) {
  TempDir dir;
  // [2, 3] F32 needs 24 bytes; the offsets give 20.
  const std::string header = R"({"w.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})";
  ExpectError(OpenWritten(dir, "size.safetensors", FileBytes(header, std::string(24, 'x'))).status(),
              absl::StatusCode::kDataLoss, {"size.safetensors", "'w.weight'", "24", "20"});
}

TEST(SafetensorsBadFileTest, OverlappingTensors) {
  TempDir dir;
  const std::string header = R"({"first":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("second":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  ExpectError(OpenWritten(dir, "overlap.safetensors", FileBytes(header, std::string(12, 'x'))).status(),
              absl::StatusCode::kDataLoss, {"overlap.safetensors", "'first'", "'second'", "overlap"});
}

TEST(SafetensorsBadFileTest, UnsupportedDtype) {
  TempDir dir;
  const std::string header = R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})";
  ExpectError(OpenWritten(dir, "i64.safetensors", FileBytes(header, std::string(16, 'x'))).status(),
              absl::StatusCode::kUnimplemented, {"i64.safetensors", "'ids'", "I64"});
}

TEST(SafetensorsBadFileTest, UnknownDtype) {
  const std::string header = R"({"w":{"dtype":"F99","shape":[1],"data_offsets":[0,4]}})";
  ExpectError(ParseSafetensorsHeader(FileBytes(header, "1234"), "u.safetensors").status(), absl::StatusCode::kDataLoss,
              {"u.safetensors", "'w'", "F99"});
}

TEST(SafetensorsBadFileTest, AbsurdShape) {
  TempDir dir;
  // 2^60 x 2^60 elements overflows int64.
  const std::string overflow = R"({"big":{"dtype":"F32","shape":[1152921504606846976,1152921504606846976],)"
                               R"("data_offsets":[0,4]}})";
  ExpectError(OpenWritten(dir, "big.safetensors", FileBytes(overflow, "1234")).status(), absl::StatusCode::kDataLoss,
              {"big.safetensors", "'big'", "overflow"});
  // 2^60 F32 elements: 2^62 bytes, which the file cannot hold.
  const std::string huge = R"({"big":{"dtype":"F32","shape":[1152921504606846976],"data_offsets":[0,4]}})";
  ExpectError(OpenWritten(dir, "big2.safetensors", FileBytes(huge, "1234")).status(), absl::StatusCode::kDataLoss,
              {"big2.safetensors", "'big'"});
  // 2^61 F32 elements: the byte count overflows.
  const std::string bytes_overflow = R"({"big":{"dtype":"F32","shape":[4,576460752303423488],"data_offsets":[0,4]}})";
  ExpectError(ParseSafetensorsHeader(FileBytes(bytes_overflow, "1234"), "b3").status(), absl::StatusCode::kDataLoss,
              {"b3", "'big'", "overflow"});
  // Above INT64_MAX.
  const std::string above = R"({"big":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]}})";
  ExpectError(ParseSafetensorsHeader(FileBytes(above, "1234"), "b4").status(), absl::StatusCode::kDataLoss,
              {"b4", "'big'", "too large"});
}

TEST(SafetensorsBadFileTest, NegativeOrNonIntegerShape) {
  const std::string neg = R"({"w":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,0]}})";
  ExpectError(ParseSafetensorsHeader(FileBytes(neg), "n.safetensors").status(), absl::StatusCode::kDataLoss,
              {"n.safetensors", "'w'", "negative"});
  const std::string frac = R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,0]}})";
  ExpectError(ParseSafetensorsHeader(FileBytes(frac), "n.safetensors").status(), absl::StatusCode::kDataLoss,
              {"'w'", "integer"});
}

TEST(SafetensorsBadFileTest, TooManyDimensions) {
  const std::string header = R"({"w5":{"dtype":"F32","shape":[1,1,1,1,1],"data_offsets":[0,4]}})";
  ExpectError(ParseSafetensorsHeader(FileBytes(header, "1234"), "d.safetensors").status(),
              absl::StatusCode::kUnimplemented, {"d.safetensors", "'w5'", "5 dimensions"});
}

TEST(SafetensorsBadFileTest, InvalidUtf8Name) {
  TempDir dir;
  const std::string header =
      "{\"bad\xC3\x28name\":{\"dtype\":\"F32\",\"shape\":[1],"
      "\"data_offsets\":[0,4]}}";
  ExpectError(OpenWritten(dir, "utf8.safetensors", FileBytes(header, "1234")).status(), absl::StatusCode::kDataLoss,
              {"utf8.safetensors", "UTF-8", "bad"});
  // An overlong encoding of '/' and an encoded surrogate are invalid too.
  for (const char* bad : {"\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xFF"}) {
    const std::string h = std::string("{\"x") + bad +
                          "\":{\"dtype\":\"F32\",\"shape\":[0],"
                          "\"data_offsets\":[0,0]}}";
    EXPECT_STATUS_CODE(ParseSafetensorsHeader(FileBytes(h), "u"), kDataLoss);
  }
  // Valid multi-byte names are fine.
  const std::string ok =
      "{\"\xC3\xA9t\xE2\x82\xAC\xF0\x9F\x98\x80\":{\"dtype\":\"F32\","
      "\"shape\":[0],\"data_offsets\":[0,0]}}";
  EXPECT_TRUE(ParseSafetensorsHeader(FileBytes(ok), "u").ok());
}

TEST(SafetensorsBadFileTest, DuplicateName) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  ExpectError(ParseSafetensorsHeader(FileBytes(header, "12345678"), "dup.safetensors").status(),
              absl::StatusCode::kDataLoss, {"dup.safetensors", "'w'", "twice"});
}

// ---- Directories -------------------------------------------------------------------------

// Two shards: `embed` and `layer0` in the first, `layer1` and `norm` in the second.
struct ShardedFixture {
  TempDir dir;
  std::vector<float> embed = Iota(6 * 4, 0);
  std::vector<float> layer0 = Iota(3 * 4, 100);
  std::vector<float> layer1 = Iota(5 * 4, 200);
  std::vector<float> norm = Iota(4, 300);

  void WriteShards() const {
    dir.WriteFile("model-00001-of-00002.safetensors",
                  Build({{"embed", "F32", {6, 4}, Bytes(embed)}, {"layer0", "F32", {3, 4}, Bytes(layer0)}}));
    dir.WriteFile("model-00002-of-00002.safetensors",
                  Build({{"layer1", "F32", {5, 4}, Bytes(layer1)}, {"norm", "F32", {4}, Bytes(norm)}}));
  }
  static Json Index() {
    return {{"metadata", {{"total_size", 1000}}},
            {"weight_map",
             {{"embed", "model-00001-of-00002.safetensors"},
              {"layer0", "model-00001-of-00002.safetensors"},
              {"layer1", "model-00002-of-00002.safetensors"},
              {"norm", "model-00002-of-00002.safetensors"}}}};
  }
  void WriteIndex(const Json& index) const { dir.WriteFile("model.safetensors.index.json", index.dump(2)); }
};

TEST(SafetensorsDirTest, ReadsRowsAcrossShards) {
  ShardedFixture f;
  f.WriteShards();
  f.WriteIndex(ShardedFixture::Index());
  auto src = SafetensorsSource::OpenDirectory(f.dir.path());
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ((*src)->path(), f.dir.path());
  EXPECT_EQ((*src)->num_shards(), 2u);
  ASSERT_EQ((*src)->tensors().size(), 4u);
  EXPECT_THAT((*src)->ShardPathOf("embed"), HasSubstr("model-00001-of-00002"));
  EXPECT_THAT((*src)->ShardPathOf("norm"), HasSubstr("model-00002-of-00002"));

  absl::StatusOr<TensorView> e = (*src)->ReadRows("embed", 2, 5);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->shape[0], 3);
  EXPECT_EQ(std::memcmp(e->data, f.embed.data() + 2 * 4, 3 * 4 * sizeof(float)), 0);

  absl::StatusOr<TensorView> l1 = (*src)->ReadRows("layer1", 1, 4);
  ASSERT_TRUE(l1.ok()) << l1.status();
  EXPECT_EQ(std::memcmp(l1->data, f.layer1.data() + 4, 3 * 4 * sizeof(float)), 0);
  EXPECT_EQ(FloatAt(*l1, 0), 204.0f);

  absl::StatusOr<TensorView> n = (*src)->Read("norm");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(FloatAt(*n, 3), 303.0f);

  // The shards' file offsets are each into their own file: both first tensors start at
  // their own file's data section.
  const TensorInfo* embed = (*src)->FindTensor("embed");
  const TensorInfo* layer1 = (*src)->FindTensor("layer1");
  ASSERT_NE(embed, nullptr);
  ASSERT_NE(layer1, nullptr);
  EXPECT_LT(layer1->file_offset, embed->file_offset + embed->n_bytes);

  absl::StatusOr<std::unique_ptr<WeightSource>> weights = OpenHfWeights(f.dir.path());
  ASSERT_TRUE(weights.ok()) << weights.status();
  EXPECT_EQ((*weights)->tensors().size(), 4u);
}

TEST(SafetensorsDirTest, MissingShardIsNotFound) {
  ShardedFixture f;
  f.dir.WriteFile("model-00001-of-00002.safetensors",
                  Build({{"embed", "F32", {6, 4}, Bytes(f.embed)}, {"layer0", "F32", {3, 4}, Bytes(f.layer0)}}));
  f.WriteIndex(ShardedFixture::Index());
  ExpectError(SafetensorsSource::OpenDirectory(f.dir.path()).status(), absl::StatusCode::kNotFound,
              {"model.safetensors.index.json", "model-00002-of-00002.safetensors", "layer1"});
}

TEST(SafetensorsDirTest, IndexNamesTensorNotInShard) {
  ShardedFixture f;
  f.WriteShards();
  Json index = ShardedFixture::Index();
  index["weight_map"]["ghost"] = "model-00002-of-00002.safetensors";
  f.WriteIndex(index);
  ExpectError(SafetensorsSource::OpenDirectory(f.dir.path()).status(), absl::StatusCode::kDataLoss,
              {"model.safetensors.index.json", "'ghost'", "model-00002-of-00002.safetensors"});
}

TEST(SafetensorsDirTest, IndexNamesWrongShard) {
  ShardedFixture f;
  f.WriteShards();
  Json index = ShardedFixture::Index();
  index["weight_map"]["norm"] = "model-00001-of-00002.safetensors";
  f.WriteIndex(index);
  ExpectError(SafetensorsSource::OpenDirectory(f.dir.path()).status(), absl::StatusCode::kDataLoss,
              {"'norm'", "model-00001-of-00002.safetensors"});
}

TEST(SafetensorsDirTest, TensorInTwoShards) {
  ShardedFixture f;
  f.dir.WriteFile("model-00001-of-00002.safetensors", Build({{"embed", "F32", {6, 4}, Bytes(f.embed)}}));
  f.dir.WriteFile("model-00002-of-00002.safetensors", Build({{"embed", "F32", {6, 4}, Bytes(f.embed)}}));
  f.WriteIndex(
      {{"weight_map", {{"embed", "model-00001-of-00002.safetensors"}, {"other", "model-00002-of-00002.safetensors"}}}});
  ExpectError(SafetensorsSource::OpenDirectory(f.dir.path()).status(), absl::StatusCode::kDataLoss,
              {"'embed'", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"});
}

TEST(SafetensorsDirTest, CorruptShardNamesShardFile) {
  ShardedFixture f;
  f.WriteShards();
  f.dir.WriteFile("model-00002-of-00002.safetensors", FileBytes("{not json"));
  f.WriteIndex(ShardedFixture::Index());
  ExpectError(SafetensorsSource::OpenDirectory(f.dir.path()).status(), absl::StatusCode::kDataLoss,
              {"model-00002-of-00002.safetensors", "JSON"});
}

TEST(SafetensorsDirTest, BadIndex) {
  ShardedFixture f;
  f.WriteShards();
  f.dir.WriteFile("model.safetensors.index.json", "{\"weight_map\": ");
  ExpectError(SafetensorsSource::OpenDirectory(f.dir.path()).status(), absl::StatusCode::kDataLoss,
              {"model.safetensors.index.json", "JSON"});
  f.dir.WriteFile("model.safetensors.index.json", R"({"metadata": {}})");
  ExpectError(SafetensorsSource::OpenDirectory(f.dir.path()).status(), absl::StatusCode::kDataLoss,
              {"model.safetensors.index.json", "weight_map"});
  f.WriteIndex({{"weight_map", {{"embed", "../model-00001-of-00002.safetensors"}}}});
  ExpectError(SafetensorsSource::OpenDirectory(f.dir.path()).status(), absl::StatusCode::kDataLoss,
              {"'embed'", "invalid shard name"});
  f.WriteIndex({{"weight_map", {{"embed", 7}}}});
  ExpectError(SafetensorsSource::OpenDirectory(f.dir.path()).status(), absl::StatusCode::kDataLoss, {"'embed'"});
}

TEST(SafetensorsDirTest, EmptyOrMissingDirectoryIsNotFound) {
  TempDir dir;
  ExpectError(SafetensorsSource::OpenDirectory(dir.path()).status(), absl::StatusCode::kNotFound,
              {dir.path(), "model.safetensors"});
  EXPECT_STATUS_CODE(SafetensorsSource::OpenDirectory(dir.path() + "/nope"), kNotFound);
  EXPECT_STATUS_CODE(OpenHfWeights(dir.path() + "/nope"), kNotFound);
}

TEST(SafetensorsDirTest, SingleFilePreferredOverIndex) {
  ShardedFixture f;
  f.dir.WriteFile("model.safetensors", Build({{"only", "F32", {1}, Bytes(Iota(1, 9))}}));
  f.WriteIndex(ShardedFixture::Index());  // Its shards are absent; it must not be read.
  auto src = SafetensorsSource::OpenDirectory(f.dir.path());
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_NE((*src)->FindTensor("only"), nullptr);
  EXPECT_EQ((*src)->tensors().size(), 1u);
}

}  // namespace
}  // namespace cascade::model
