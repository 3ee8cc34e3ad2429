// WeightLoader: what a host backend keeps of each kind of weight. A matrix the CPU repacks
// no longer reads the file; a table read only by row (an untied token embedding) is the
// file's rows as they are, so only the rows tokens look up become resident; a lookup
// returns the same values either way.
#include "model/layers/weight_loader.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/ops.h"
#include "model/format/model_files.h"
#include "tests/random_model.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

TEST(WeightLoaderTest, LookupTablesReadTheFileRowsMatricesArePrepared) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/model.gguf";
  testing::WriteRandomModel({.weight_type = DType::kQ8_0, .n_layers = 1}, path);
  auto files = OpenModelFiles(path);
  ASSERT_TRUE(files.ok()) << files.status();
  auto backend = kernels::MakeCpuBackend({});
  WeightLoader loader(files->weights.get(), backend.get());
  const ModelConfig& c = files->config;
  auto table = loader.LookupTable("token_embd.weight", c.n_vocab, c.n_embd, {});
  auto matrix = loader.Matrix("token_embd.weight", c.n_vocab, c.n_embd, {});
  ASSERT_TRUE(table.ok() && matrix.ok()) << table.status() << matrix.status();
  EXPECT_TRUE((*table)->reads_source());
  auto file_rows = files->weights->ReadRows("token_embd.weight", 0, c.n_vocab);
  ASSERT_TRUE(file_rows.ok()) << file_rows.status();
  EXPECT_EQ((*table)->source().data, file_rows->data) << "the table is the file's own rows";
  // Q8_0 is repacked on every ISA but the portable one.
  if (kernels::ActiveCpuIsa() != kernels::CpuIsa::kGeneric) {
    EXPECT_FALSE((*matrix)->reads_source());
  }
  const std::vector<int32_t> ids = {0, 7, static_cast<int32_t>(c.n_vocab - 1)};
  std::vector<float> by_row(ids.size() * c.n_embd), prepared(ids.size() * c.n_embd);
  const auto out = [&](std::vector<float>& v) {
    return TensorView(v.data(), DType::kF32, {static_cast<int64_t>(ids.size()), c.n_embd});
  };
  ASSERT_TRUE(backend->Embedding(out(by_row), **table, ids).ok());
  ASSERT_TRUE(backend->Embedding(out(prepared), **matrix, ids).ok());
  EXPECT_EQ(by_row, prepared);
  // A vocabulary shard (TP) is its rows of the file.
  auto shard = loader.LookupTable("token_embd.weight", c.n_vocab, c.n_embd, {8, 40});
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ((*shard)->n_out(), 32);
  EXPECT_EQ((*shard)->source().data,
            static_cast<const uint8_t*>((*table)->source().data) + 8 * (*table)->source().RowBytes());
  EXPECT_STATUS_CODE(loader.LookupTable("no.such.weight", c.n_vocab, c.n_embd, {}).status(), kNotFound);
}

}  // namespace
}  // namespace cascade::model
