// Tokenizer construction from Hugging Face tokenizer.json files and from hand-built
// specs: both merge forms, ByteLevel vs Metaspace detection, tokenizer_config.json,
// special-token handling, and the errors (each names its file and field).
// To add a case: write the JSON into a TempDir and assert on the built tokenizer.
#include <string>
#include <vector>

#include "model/format/tokenizer_files.h"
#include "tests/test_support.h"

namespace cascade::model {
namespace {

using text::Tokenizer;
using text::TokenizerSpec;

using ::cascade::testing::TempDir;
using ::testing::HasSubstr;

// A tiny byte-level vocabulary: bytes "a", "b", "c", "Ġ" plus merges a+b, ab+c, Ġ+abc.
std::string ByteLevelJson(const std::string& merges) {
  return R"({
    "added_tokens": [{"id": 7, "content": "<|end|>", "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "abc": 5,
              "Ġabc": 6, "<|end|>": 7}, "merges": )" +
         merges + R"(}})";
}

TEST(TokenizerJson, ByteLevelWithStringMerges) {
  TempDir dir;
  auto tok = TokenizerFromHfJson(dir.WriteFile("tokenizer.json", ByteLevelJson(R"(["a b", "ab c", "Ġ abc"])")));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), TokenizerSpec::Kind::kByteLevelBpe);
  EXPECT_EQ((*tok)->Encode("abc abc", false), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ((*tok)->Encode("abc<|end|>", false), (std::vector<int32_t>{5, 7}));
  EXPECT_EQ((*tok)->Decode({{5, 6, 7}}), "abc abc<|end|>");
  EXPECT_EQ((*tok)->Decode({{5, 6, 7}}, /*skip_special=*/true), "abc abc");
  EXPECT_TRUE((*tok)->IsEog(7));  // "<|end|>" ends a turn.
}

TEST(TokenizerJson, ByteLevelWithPairMerges) {
  TempDir dir;
  auto tok =
      TokenizerFromHfJson(dir.WriteFile("tokenizer.json", ByteLevelJson(R"([["a", "b"], ["ab", "c"], ["Ġ", "abc"]])")));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->Encode("abc abc", false), (std::vector<int32_t>{5, 6}));
}

TEST(TokenizerJson, MergeRankDecidesNotVocabOrder) {
  // "b c" outranks "a b": "abc" becomes a + bc, not ab + c.
  TempDir dir;
  auto tok = TokenizerFromHfJson(dir.WriteFile("tokenizer.json", R"({
    "pre_tokenizer": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4},
              "merges": ["b c", "a b"]}})"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->Encode("abc", false), (std::vector<int32_t>{0, 4}));
  EXPECT_EQ((*tok)->Encode("ab", false), (std::vector<int32_t>{3}));
}

TEST(TokenizerJson, MetaspaceStyleWithByteFallbackAndConfig) {
  TempDir dir;
  dir.WriteFile("tokenizer_config.json", R"({
    "bos_token": "<s>", "eos_token": {"content": "</s>"}, "add_bos_token": true,
    "chat_template": "{% for m in messages %}[INST] <<SYS>>{% endfor %}"})");
  auto tok = TokenizerFromHfJson(dir.WriteFile("tokenizer.json", R"({
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true},
                     {"id": 1, "content": "<s>", "special": true},
                     {"id": 2, "content": "</s>", "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": null,
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
      "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0xC3>": 3, "<0xA9>": 4,
                "▁": 5, "h": 6, "i": 7, "▁h": 8, "▁hi": 9},
      "merges": ["▁ h", "▁h i"]}})"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  const Tokenizer& t = **tok;
  EXPECT_EQ(t.kind(), TokenizerSpec::Kind::kSentencePieceBpe);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_TRUE(t.strips_leading_space());
  EXPECT_EQ(t.chat_template(), "{% for m in messages %}[INST] <<SYS>>{% endfor %}");
  // "hi hi" -> "▁hi▁hi"; "é" has no token: its UTF-8 bytes C3 A9 fall back.
  EXPECT_EQ(t.Encode("hi hi", true), (std::vector<int32_t>{1, 9, 9}));
  EXPECT_EQ(t.Encode("hé", false), (std::vector<int32_t>{8, 3, 4}));
  // Dummy prefix again after a special token.
  EXPECT_EQ(t.Encode("hi</s>hi", false), (std::vector<int32_t>{9, 2, 9}));
  EXPECT_EQ(t.Decode({{9, 9}}), "hi hi");
  EXPECT_EQ(t.Decode({{8, 3, 4}}), "hé");
  EXPECT_EQ(t.TokenPiece(3), "\xC3");
  // A character without a token or byte tokens becomes <unk>, consecutive ones fused.
  EXPECT_EQ(t.Encode("h\xE2\x82\xAC\xE2\x82\xAC", false), (std::vector<int32_t>{8, 0}));
}

// gpt-oss's tokenizer.json splits with o200k's regex before a ByteLevel without its own:
// that is llama.cpp's "gpt-4o" pre-tokenizer (its splits are checked against Hugging Face
// tokenizers in tests/text/tokenizer_conformance_test.cc).
TEST(TokenizerJson, O200kSplitIsGpt4o) {
  TempDir dir;
  const std::string path = dir.WriteFile("tokenizer.json", R"({
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
       "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
    "model": {"type": "BPE", "vocab": {"a": 0, "A": 1, "Ġ": 2, "aA": 3}, "merges": ["a A"]}})");
  auto spec = TokenizerSpecFromHfJson(path);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->pre_tokenizer, "gpt-4o");
  auto tok = TokenizerFromHfJson(path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  // A case change splits a word, so "aA" is never merged (GPT-2's split would merge it).
  EXPECT_EQ((*tok)->Encode("aA a", false), (std::vector<int32_t>{0, 1, 2, 0}));
}

TEST(TokenizerJson, Errors) {
  TempDir dir;
  EXPECT_STATUS_CODE(TokenizerFromHfJson(dir.path() + "/missing.json"), kNotFound);

  auto bad = TokenizerFromHfJson(dir.WriteFile("bad.json", "{not json"));
  EXPECT_STATUS_CODE(bad, kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("bad.json"));

  auto wrong_type = TokenizerFromHfJson(dir.WriteFile("t1.json", R"({"model": {"type": "BPE",
      "vocab": {"a": "zero"}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}})"));
  EXPECT_STATUS_CODE(wrong_type, kInvalidArgument);

  auto unigram = TokenizerFromHfJson(dir.WriteFile("t2.json", R"({"model": {"type": "Unigram", "vocab": []}})"));
  EXPECT_STATUS_CODE(unigram, kUnimplemented);
  EXPECT_THAT(std::string(unigram.status().message()), HasSubstr("Unigram"));

  auto merge = TokenizerFromHfJson(dir.WriteFile("t3.json", ByteLevelJson(R"(["a x"])")));
  EXPECT_STATUS_CODE(merge, kInvalidArgument);
  EXPECT_THAT(std::string(merge.status().message()), HasSubstr("merges[0] 'a x'"));
  EXPECT_THAT(std::string(merge.status().message()), HasSubstr("t3.json"));

  auto merge_shape = TokenizerFromHfJson(dir.WriteFile("t4.json", ByteLevelJson("[[1, 2, 3]]")));
  EXPECT_STATUS_CODE(merge_shape, kInvalidArgument);

  // Ids far beyond the named tokens (seen while fuzzing tokenizer_json: a 95-byte file took 1 GB
  // and 49 s under ASan to build; tests/fuzz/corpus/tokenizer_json/sparse_ids.json).
  auto sparse = TokenizerFromHfJson(dir.WriteFile("t6.json", R"({"pre_tokenizer": {"type": "Metaspace"},
      "model": {"type": "BPE", "vocab": {"a": 9999999}, "merges": []}})"));
  EXPECT_STATUS_CODE(sparse, kInvalidArgument);
  EXPECT_THAT(std::string(sparse.status().message()), HasSubstr("token ids reach 9999999 but only 1 tokens are named"));
  auto holes = TokenizerFromHfJson(dir.WriteFile("t7.json", R"({"pre_tokenizer": {"type": "Metaspace"},
      "added_tokens": [{"id": 1025, "content": "<s>", "special": true}],
      "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})"));
  EXPECT_TRUE(holes.ok()) << holes.status();  // A few holes are allowed.

  // An added token's id too large for an integer is a float; converting it was undefined
  // behaviour (UBSan; found by tokenizer_json_fuzz, crash_added_id_float.json in its seeds).
  auto float_id = TokenizerFromHfJson(dir.WriteFile("t8.json", R"({"pre_tokenizer": {"type": "Metaspace"},
      "added_tokens": [{"id": 177777777777777777777777777777777777777, "content": "<s>"}],
      "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})"));
  EXPECT_STATUS_CODE(float_id, kInvalidArgument);
  EXPECT_THAT(std::string(float_id.status().message()),
              HasSubstr("added_tokens id 1.7777777777777777e+38 is not an integer"));

  auto pre = TokenizerFromHfJson(dir.WriteFile("t5.json", R"({
    "pre_tokenizer": {"type": "Whitespace"}, "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})"));
  EXPECT_STATUS_CODE(pre, kUnimplemented);
}

TEST(TokenizerJson, FromTextWithoutFiles) {
  // The same reader over the files' contents (what the fuzz target calls); empty config
  // text means there is none, and errors name the sources given.
  auto spec = TokenizerSpecFromHfJsonText(ByteLevelJson(R"(["a b"])"), "mem/tokenizer.json",
                                          R"({"eos_token": "<|end|>", "chat_template": "<|im_start|>"})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->source, "mem/tokenizer.json");
  EXPECT_EQ(spec->eos_id, 7);
  EXPECT_EQ(spec->chat_template, "<|im_start|>");
  EXPECT_EQ(TokenizerSpecFromHfJsonText(ByteLevelJson("[]"), "t.json")->eos_id, -1);

  auto bad_json = TokenizerSpecFromHfJsonText("{", "mem/tokenizer.json");
  EXPECT_STATUS_CODE(bad_json, kInvalidArgument);
  EXPECT_THAT(std::string(bad_json.status().message()), HasSubstr("mem/tokenizer.json"));
  auto bad_config = TokenizerSpecFromHfJsonText(ByteLevelJson("[]"), "t.json", R"({"bos_token": "<x>"})", "mem/c.json");
  EXPECT_STATUS_CODE(bad_config, kInvalidArgument);
  EXPECT_THAT(std::string(bad_config.status().message()), HasSubstr("mem/c.json: bos_token '<x>'"));
}

TEST(TokenizerSpecValidation, Errors) {
  TokenizerSpec empty;
  empty.source = "spec.gguf";
  auto s = Tokenizer::FromSpec(empty);
  EXPECT_STATUS_CODE(s, kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("spec.gguf"));

  TokenizerSpec spec;
  spec.tokens = {"a", "b"};
  spec.scores = {0.0f};
  EXPECT_STATUS_CODE(Tokenizer::FromSpec(spec), kInvalidArgument);
  spec.scores.clear();
  spec.eos_id = 5;
  EXPECT_STATUS_CODE(Tokenizer::FromSpec(spec), kInvalidArgument);
  spec.eos_id = -1;
  spec.kind = TokenizerSpec::Kind::kByteLevelBpe;  // Needs merges.
  EXPECT_STATUS_CODE(Tokenizer::FromSpec(spec), kInvalidArgument);
  spec.merges = {"a b"};  // "ab" is not a token.
  EXPECT_STATUS_CODE(Tokenizer::FromSpec(spec), kInvalidArgument);
  spec.tokens.push_back("ab");
  spec.pre_tokenizer = "no-such-pre";
  EXPECT_STATUS_CODE(Tokenizer::FromSpec(spec), kUnimplemented);
  spec.pre_tokenizer = "gpt-2";
  auto ok = Tokenizer::FromSpec(spec);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->Encode("ab", false), (std::vector<int32_t>{2}));
  // A byte with no token in this vocabulary (and no unk) is dropped, never a crash.
  EXPECT_EQ((*ok)->Encode("a\xFF", false), (std::vector<int32_t>{0}));
}

}  // namespace
}  // namespace cascade::model
