// What the quantized-checkpoint readers' tests (fp8_, int4_, mxfp4_checkpoint_test.cc) share:
// a Hugging Face directory declaring a quantization_config, and the check that opening one
// is refused with the expected code and reason.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/format/hf_model.h"
#include "tests/safetensors_writer.h"
#include "tests/test_support.h"

namespace cascade::testing {

// Directory `dir`/`name` with config.json {"quantization_config": q} and one safetensors
// file of `entries`. Returns its path.
inline std::string WriteCheckpoint(const TempDir& dir, const std::string& name, const nlohmann::json& q,
                                   const std::vector<SafetensorsEntry>& entries) {
  return WriteHfDirectory(dir.path() + "/" + name, nlohmann::json{{"quantization_config", q}}.dump(), entries);
}

// Opening checkpoint `dir` fails with `code`, the message containing `says`.
inline void ExpectRefused(const std::string& dir, absl::StatusCode code, const std::string& says) {
  auto w = model::OpenHfWeights(dir);
  EXPECT_THAT(w, StatusIs(code, ::testing::HasSubstr(says))) << dir;
}

}  // namespace cascade::testing
