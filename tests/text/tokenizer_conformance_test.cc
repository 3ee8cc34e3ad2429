// Tokenizer conformance against independent references.
//
// * llama.cpp's vocab-only GGUF fixtures (testdata/vocab/ggml-vocab-*.gguf) with their
//   .inp/.out golden pairs, produced by the reference (Hugging Face / SentencePiece)
//   tokenizers: every vector must encode exactly, and decode back to its input.
// * Real models: stories260K (SPM + byte fallback), TinyStories-656K (GGUF vs its
//   tokenizer.json), SmolLM2-135M-Instruct (byte-level BPE, "smollm" pre-tokenizer).
//   Their expected ids come from tests/golden/tokenizer_goldens.py (SentencePiece and Hugging
//   Face `tokenizers` run on the vocabularies read out of the GGUF files), never from
//   this project's code.
//
// To add a vocab fixture: drop ggml-vocab-NAME.gguf(.inp/.out) into testdata/vocab and
// add NAME to `kVocabs`. To add a golden string: add it to the golden script, run it,
// and paste its ids here.
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "model/format/gguf.h"
#include "model/format/tokenizer_files.h"
#include "tests/test_support.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace cascade::text {
namespace {

using ::cascade::testing::DefaultModelPath;
using ::cascade::testing::ReadFileOrDie;
using ::cascade::testing::TestDataPath;

std::vector<std::string> SplitTests(const std::string& inp) {
  static const std::string kSep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t next = inp.find(kSep, pos);
    if (next == std::string::npos) break;
    out.push_back(inp.substr(pos, next - pos));
    pos = next + kSep.size();
  }
  return out;  // Text after the final separator (nothing) is not a test.
}

std::vector<std::vector<int32_t>> ReadExpected(const std::string& out) {
  std::vector<std::vector<int32_t>> result;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream ids(line);
    std::vector<int32_t> v;
    int32_t id;
    while (ids >> id) v.push_back(id);
    result.push_back(std::move(v));
  }
  return result;
}

std::string Ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

std::unique_ptr<Tokenizer> LoadGguf(const std::string& path) {
  auto gguf = model::GgufFile::Open(path);
  EXPECT_TRUE(gguf.ok()) << gguf.status();
  if (!gguf.ok()) return nullptr;
  auto tok = model::TokenizerFromGguf(**gguf);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

class TokenizerVocabConformance : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerVocabConformance, EncodesEveryVectorAndDecodesBack) {
  const std::string name = std::string("vocab/ggml-vocab-") + GetParam() + ".gguf";
  CASCADE_REQUIRE_FILE(path, TestDataPath(name));
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Tokenizer> tok = LoadGguf(path);
  const auto t1 = std::chrono::steady_clock::now();
  ASSERT_NE(tok, nullptr);
  const std::vector<std::string> tests = SplitTests(ReadFileOrDie(path + ".inp"));
  const std::vector<std::vector<int32_t>> expected = ReadExpected(ReadFileOrDie(path + ".out"));
  ASSERT_EQ(tests.size(), expected.size());
  int n_encoded = 0, n_decoded = 0;
  for (size_t i = 0; i < tests.size(); ++i) {
    const std::vector<int32_t> ids = tok->Encode(tests[i], /*add_special=*/false);
    if (ids == expected[i]) {
      ++n_encoded;
    } else {
      ADD_FAILURE() << GetParam() << " vector " << i << " '" << tests[i] << "'\n  got      " << Ids(ids)
                    << "\n  expected " << Ids(expected[i]);
    }
    // Decoding gives the input back. For SPM the dummy-prefix space added by Encode is
    // the one the first decoded token drops, so no exception is needed here.
    const std::string decoded = tok->Decode(expected[i]);
    if (decoded == tests[i]) {
      ++n_decoded;
    } else {
      ADD_FAILURE() << GetParam() << " vector " << i << " decodes to '" << decoded << "', not '" << tests[i] << "'";
    }
    // Streaming gives the same text.
    Detokenizer detok(*tok);
    std::string streamed;
    for (int32_t id : expected[i]) streamed += detok.Feed(id);
    streamed += detok.Flush();
    EXPECT_EQ(streamed, tests[i]) << GetParam() << " vector " << i;
  }
  const auto t2 = std::chrono::steady_clock::now();
  std::printf(
      "[ %-9s ] %d/%zu vectors encode exactly, %d/%zu decode back; load+build %.1f ms, "
      "encode+decode all %.2f ms, n_vocab %d\n",
      GetParam(), n_encoded, tests.size(), n_decoded, tests.size(),
      std::chrono::duration<double, std::milli>(t1 - t0).count(),
      std::chrono::duration<double, std::milli>(t2 - t1).count(), tok->n_vocab());
  EXPECT_EQ(n_encoded, static_cast<int>(tests.size()));
}

INSTANTIATE_TEST_SUITE_P(TokenizerConformance, TokenizerVocabConformance,
                         ::testing::Values("gpt-2", "llama-spm", "llama-bpe", "qwen2"), [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

struct Golden {
  std::string text;
  std::vector<int32_t> ids;
};

// From tests/golden/tokenizer_goldens.py (SentencePiece on the GGUF's pieces/scores).
const std::vector<Golden>& Stories260KGoldens() {
  static const auto* g = new std::vector<Golden>{
      {"Once upon a time, there was a little girl named Lily.",
       {403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426}},
      {"Hello world", {346, 306, 414, 263, 304, 341}},
      {" leading space and  two  spaces",
       {410, 278, 411, 380, 299, 262, 427, 412, 331, 269, 410, 259, 424, 414, 410, 262, 427, 412, 331, 419}},
      {"Tim had 123 apples and 4567 pears.",
       {326, 381, 410, 475, 479, 472, 261, 339, 305, 419, 269, 410, 484, 480, 490, 491, 282, 411, 295, 419, 426}},
      {"Ünïcödé ½ months 😀 日本語",
       {410, 198, 159, 416, 198, 178, 429, 198, 185, 418, 485, 410, 197, 192, 284, 289, 413,
        415, 419, 410, 243, 162, 155, 131, 410, 233, 154, 168, 233, 159, 175, 235, 173, 161}},
      {"tabs\tand\nnew lines\n\n", {259, 412, 430, 419, 12, 412, 264, 13, 416, 411, 424, 278, 271, 406, 13, 13}},
  };
  return *g;
}

// From tests/golden/tokenizer_goldens.py (Hugging Face tokenizers on tokenizer.json).
const std::vector<Golden>& TinyStories656KGoldens() {
  static const auto* g = new std::vector<Golden>{
      {"Once upon a time, there was a little girl named Lily.", {80, 147, 201, 282, 215, 286, 598, 629, 10}},
      {"Hello world", {80, 1288, 139, 410, 555}},
      {" leading space and  two  spaces", {80, 80, 656, 56, 149, 415, 53, 1735, 80, 1209, 80, 415, 53, 1499}},
      {"Tim had 123 apples and 4567 pears.",
       {80, 285, 198, 12, 13, 14, 85, 68, 125, 791, 15, 16, 17, 18, 80, 549, 101, 71, 10}},
      {"Ünïcödé ½ months 😀 日本語", {80, 0, 66, 0, 55, 0, 56, 0, 80, 0, 80, 1225, 83, 89, 0, 80, 0}},
      {"tabs\tand\nnew lines\n\n", {80, 292, 54, 71, 0, 1059, 3, 342, 64, 96, 233, 3, 3}},
  };
  return *g;
}

// From tests/golden/tokenizer_goldens.py (Hugging Face tokenizers on the GGUF's
// vocab/merges with SmolLM2's Digits + ByteLevel pre-tokenizer).
const std::vector<Golden>& SmolLm2Goldens() {
  static const auto* g = new std::vector<Golden>{
      {"Once upon a time, there was a little girl named Lily.",
       {6403, 1980, 253, 655, 28, 665, 436, 253, 1838, 8180, 3365, 14176, 30}},
      {"Hello world", {19556, 905}},
      {" leading space and  two  spaces", {2899, 1898, 284, 216, 827, 216, 5600}},
      {"Tim had 123 apples and 4567 pears.", {17170, 761, 216, 33, 34, 35, 13855, 284, 216, 36, 37, 38, 39, 41684, 30}},
      {"Ünïcödé ½ months 😀 日本語",
       {142, 246, 94, 25972, 83, 7466, 84, 2756, 216, 16738, 2704, 40303, 218, 17097, 241, 115, 40993, 179, 120, 248}},
      {"tabs\tand\nnew lines\n\n", {100, 7366, 197, 397, 198, 2241, 3204, 1116}},
      {"<|im_start|>user\nWhat is 2+2?<|im_end|>\n", {1, 4093, 198, 1780, 314, 216, 34, 27, 34, 47, 2, 198}},
  };
  return *g;
}

// From tests/golden/tokenizer_goldens.py --only smollm2-o200k (Hugging Face tokenizers on
// SmolLM2's vocab/merges behind gpt-oss's o200k `Split` regex + ByteLevel).
const std::vector<Golden>& SmolLm2O200kGoldens() {
  static const auto* g = new std::vector<Golden>{
      {"Once upon a time, there was a little girl named Lily.",
       {6403, 1980, 253, 655, 28, 665, 436, 253, 1838, 8180, 3365, 14176, 30}},
      {"Hello world", {19556, 905}},
      {" leading space and  two  spaces", {2899, 1898, 284, 216, 827, 216, 5600}},
      {"Tim had 123 apples and 4567 pears.", {17170, 761, 216, 33, 34, 35, 13855, 284, 216, 36, 37, 38, 39, 41684, 30}},
      {"Ünïcödé ½ months 😀 日本語",
       {142, 246, 94, 25972, 83, 7466, 84, 2756, 216, 16738, 2704, 40303, 218, 17097, 241, 115, 40993, 179, 120, 248}},
      {"tabs\tand\nnew lines\n\n", {100, 7366, 197, 397, 198, 2241, 3204, 1116}},
      {"HelloWorld iPhone XMLHttpRequest McDonald's",
       {19556, 11265, 2056, 17739, 18391, 42743, 13519, 4139, 20214, 506}},
      {"THEY'RE here, don't WE'LL I'm", {15964, 73, 23, 3256, 1535, 28, 1326, 982, 26587, 23, 16421, 339, 5248}},
      {"1234567 and 12 apples/oranges", {33, 34, 35, 36, 37, 38, 39, 284, 216, 33, 34, 13855, 31, 270, 5120}},
      {"path/to/file.txt://x\n\n  two spaces   three\tTab",
       {1537, 31, 1141, 31, 2153, 30, 9047, 1742, 104, 1116, 216, 827, 5600, 256, 1296, 197, 30064}},
      {"  leading\r\n\r\nCRLF lines", {216, 2899, 18682, 9088, 60, 54, 3204}},
      {"Ünïcödé ÀÉÎ naïve 😀 日本語 ½",
       {142,   246,   94,    25972, 83,    7466, 84,  2756,  5549, 218, 39614, 142, 232,
        15486, 46494, 40303, 218,   17097, 241,  115, 40993, 179,  120, 248,   216, 16738}},
  };
  return *g;
}

void ExpectGoldens(const Tokenizer& tok, const std::vector<Golden>& goldens, bool round_trip) {
  for (const Golden& g : goldens) {
    EXPECT_EQ(Ids(tok.Encode(g.text, /*add_special=*/false)), Ids(g.ids)) << "'" << g.text << "'";
    if (round_trip) {
      EXPECT_EQ(tok.Decode(g.ids), g.text);
    }
  }
}

TEST(TokenizerStories260K, SentencePieceWithByteFallback) {
  CASCADE_REQUIRE_FILE(path, TestDataPath("models/stories260K.gguf"));
  std::unique_ptr<Tokenizer> tok = LoadGguf(path);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), TokenizerSpec::Kind::kSentencePieceBpe);
  EXPECT_EQ(tok->n_vocab(), 512);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->IsEog(2));
  EXPECT_FALSE(tok->IsEog(1));
  ExpectGoldens(*tok, Stories260KGoldens(), /*round_trip=*/true);
  // add_bos (GGUF default for SPM) puts BOS first; "<s>" in the text is the BOS token.
  const std::vector<int32_t> ids = tok->Encode("Hello world", /*add_special=*/true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(tok->Encode("<s>Hello world", false), ids);
  // Byte tokens: "😀" is four <0xNN> tokens; the piece of each is one raw byte.
  EXPECT_EQ(tok->TokenPiece(243), "\xF0");
  EXPECT_EQ(tok->TokenText(243), "<0xF0>");
  // Decoding: special tokens render as text unless skipped; the dummy-prefix space goes.
  EXPECT_EQ(tok->Decode(ids), "<s> Hello world");
  EXPECT_EQ(tok->Decode(ids, /*skip_special=*/true), "Hello world");
}

TEST(TokenizerTinyStories656K, GgufAndTokenizerJsonAgree) {
  CASCADE_REQUIRE_FILE(json_path, TestDataPath("models/tinystories-656k/tokenizer.json"));
  CASCADE_REQUIRE_FILE(gguf_path, TestDataPath("models/tinystories-656k-q8_0.gguf"));
  auto from_json = model::TokenizerFromHfJson(json_path);
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  std::unique_ptr<Tokenizer> from_gguf = LoadGguf(gguf_path);
  ASSERT_NE(from_gguf, nullptr);
  EXPECT_EQ((*from_json)->n_vocab(), from_gguf->n_vocab());
  EXPECT_EQ((*from_json)->bos_id(), from_gguf->bos_id());
  EXPECT_EQ((*from_json)->eos_id(), from_gguf->eos_id());
  // The GGUF has placeholder scores (-1000 everywhere) and no merges; the rank-by-id rule
  // (tokenizer_vocab.cc) must reproduce the merge-ranked tokenizer.json exactly.
  ExpectGoldens(**from_json, TinyStories656KGoldens(), /*round_trip=*/false);
  ExpectGoldens(*from_gguf, TinyStories656KGoldens(), /*round_trip=*/false);
  const std::string more[] = {
      "The little dog ran to the park. He saw a big red ball! \"Can I play?\" he asked.",
      "Numbers 0 1 22 333 4444 and 3.14159",
      "naïve café — déjà vu",
      "<|start_story|>Once there was",
  };
  for (const std::string& s : more) {
    EXPECT_EQ(Ids((*from_json)->Encode(s, true)), Ids(from_gguf->Encode(s, true))) << s;
  }
  // Round trips where every character is in the vocabulary. (Exception: characters the
  // vocabulary lacks, e.g. "Ü", "\t", with no byte tokens to fall back on, become <unk>
  // and cannot come back; the goldens above check those ids exactly instead.)
  const std::string text = "Once upon a time, there was a little girl named Lily.";
  EXPECT_EQ(from_gguf->Decode(from_gguf->Encode(text, true), /*skip_special=*/true), text);
  EXPECT_EQ((*from_json)->Decode((*from_json)->Encode(text, false)), text);
}

TEST(TokenizerSmolLm2, ByteLevelBpeWithSmolLmPreTokenizer) {
  CASCADE_REQUIRE_FILE(path, DefaultModelPath());
  auto gguf = model::GgufFile::Open(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto spec = model::TokenizerSpecFromGguf(**gguf);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->pre_tokenizer, "smollm");
  const auto t0 = std::chrono::steady_clock::now();
  auto built = Tokenizer::FromSpec(*std::move(spec));
  const auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(built.ok()) << built.status();
  const Tokenizer& tok = **built;
  const double build_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  EXPECT_EQ(tok.n_vocab(), 49152);
  EXPECT_EQ(tok.kind(), TokenizerSpec::Kind::kByteLevelBpe);
  ExpectGoldens(tok, SmolLm2Goldens(), /*round_trip=*/true);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_TRUE(tok.IsEog(2));  // <|im_end|>
  EXPECT_TRUE(tok.IsEog(0));  // <|endoftext|>
  EXPECT_FALSE(tok.IsEog(1));
  EXPECT_FALSE(tok.add_bos());
  EXPECT_NE(tok.chat_template().find("<|im_start|>"), std::string::npos);

  // Encoding speed: ~100 KB of mixed text.
  std::string big;
  while (big.size() < 100'000) {
    for (const Golden& g : SmolLm2Goldens()) big += g.text + " ";
  }
  const auto t2 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok.Encode(big, false);
  const auto t3 = std::chrono::steady_clock::now();
  EXPECT_EQ(tok.Decode(ids), big);
  const double encode_ms = std::chrono::duration<double, std::milli>(t3 - t2).count();
  std::printf(
      "[ smollm2   ] vocab build %.1f ms (n_vocab %d); encode %zu bytes -> %zu ids in "
      "%.1f ms (%.1f MB/s)\n",
      build_ms, tok.n_vocab(), big.size(), ids.size(), encode_ms, big.size() / 1e3 / encode_ms);
  // Timings are printed, not asserted tightly (shared machines); this bound only catches
  // a pathological regression.
  EXPECT_LT(build_ms, 2000.0);

  // One tokenizer serves many threads at once with identical results.
  std::vector<std::vector<int32_t>> results(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = tok.Encode(big, false); });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& r : results) EXPECT_EQ(r, ids);
}

// o200k's pre-tokenizer (GPT-4o, gpt-oss; llama.cpp's "gpt-4o"): its 200k vocabulary
// cannot be fetched here, so SmolLM2's vocabulary and merges stand behind its split, which
// is what differs (case changes inside words, contractions, "/" after punctuation, digits
// in threes), against Hugging Face tokenizers running gpt-oss's Split regex.
TEST(TokenizerO200k, SplitsAsHuggingFaceTokenizersDo) {
  CASCADE_REQUIRE_FILE(path, DefaultModelPath());
  auto gguf = model::GgufFile::Open(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto spec = model::TokenizerSpecFromGguf(**gguf);
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->pre_tokenizer = "gpt-4o";
  auto tok = Tokenizer::FromSpec(*std::move(spec));
  ASSERT_TRUE(tok.ok()) << tok.status();
  ExpectGoldens(**tok, SmolLm2O200kGoldens(), /*round_trip=*/true);
}

}  // namespace
}  // namespace cascade::text
