// `TokenizerSpec` from a Hugging Face tokenizer.json (the `tokenizers` library's
// serialisation: https://huggingface.co/docs/tokenizers/api/models) plus the
// tokenizer_config.json beside it. Only model type "BPE" is supported, in its two common
// set-ups: ByteLevel pre-tokenizer/decoder (GPT-2 family) and Metaspace-style
// normalizer/decoder ("▁" for spaces; Llama 2, TinyStories). nlohmann::json's exceptions
// are caught here and returned as InvalidArgument.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "core/status.h"
#include "core/str_cat.h"
#include "model/format/tokenizer_files.h"

namespace cascade::model {
namespace {

using text::kSpmSpace;
using text::Tokenizer;
using text::TokenizerSpec;

using Json = nlohmann::json;

// The Llama 3, Qwen2 and o200k (gpt-oss) `Split` patterns as their tokenizer.json files spell them.
constexpr std::string_view kHfLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kHfQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr std::string_view kHfO200kPattern =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(cascade::StrCat(path, ": cannot open"));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The node and, for a "Sequence", its members, flattened in order.
void Flatten(const Json& node, const char* members, std::vector<const Json*>& out) {
  if (!node.is_object()) return;
  if (node.value("type", "") == "Sequence" && node.contains(members)) {
    for (const Json& m : node.at(members)) Flatten(m, members, out);
  } else {
    out.push_back(&node);
  }
}

bool HasType(const std::vector<const Json*>& nodes, std::string_view type) {
  return std::any_of(nodes.begin(), nodes.end(), [&](const Json* n) { return n->value("type", "") == type; });
}

// A special-token field of tokenizer_config.json: "text" or {"content": "text"}.
std::string TokenField(const Json& config, const char* key) {
  if (!config.contains(key)) return "";
  const Json& v = config.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v.at("content").get<std::string>();
  return "";
}

int32_t IdOf(const std::vector<std::string>& tokens, const std::string& text) {
  if (text.empty()) return -1;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] == text) return static_cast<int32_t>(i);
  }
  return -1;
}

// Name of the llama.cpp pre-tokenizer equivalent to a byte-level pre-tokenizer chain.
absl::StatusOr<std::string> ByteLevelPreTokenizer(const std::vector<const Json*>& pre, const std::string& path) {
  std::vector<std::string> kinds;
  for (const Json* n : pre) kinds.push_back(n->value("type", "?"));
  const std::string described = absl::StrJoin(kinds, ", ");
  if (pre.size() == 1 && kinds[0] == "ByteLevel" && pre[0]->value("use_regex", true)) {
    return std::string("gpt-2");
  }
  if (pre.size() == 2 && kinds[0] == "Digits" && kinds[1] == "ByteLevel" && pre[0]->value("individual_digits", false) &&
      pre[1]->value("use_regex", true)) {
    return std::string("smollm");
  }
  if (pre.size() == 2 && kinds[0] == "Split" && kinds[1] == "ByteLevel" && !pre[1]->value("use_regex", true)) {
    const Json& pattern = pre[0]->value("pattern", Json::object());
    const std::string regex = pattern.value("Regex", "");
    if (regex == kHfLlama3Pattern) return std::string("llama-bpe");
    if (regex == kHfQwen2Pattern) return std::string("qwen2");
    if (regex == kHfO200kPattern) return std::string("gpt-4o");
    return absl::UnimplementedError(
        cascade::StrCat(path, ": pre_tokenizer Split regex '", regex, "' is not supported"));
  }
  return absl::UnimplementedError(
      cascade::StrCat(path, ": pre_tokenizer [", described,
                      "] is not supported (supported: ByteLevel; Digits + ByteLevel; Llama 3, "
                      "Qwen2 or o200k Split + ByteLevel)"));
}

// Fills `spec.tokens` / `spec.token_types` from model.vocab and added_tokens, indexed by id.
absl::Status ReadVocab(const Json& j, const Json& model, const std::string& path, TokenizerSpec& spec) {
  int64_t max_id = -1;
  for (const auto& [text, id] : model.at("vocab").items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > 10'000'000) {
      return absl::InvalidArgumentError(cascade::StrCat(path, ": model.vocab['", text, "'] is not a valid id"));
    }
    max_id = std::max(max_id, id.get<int64_t>());
  }
  const Json added = j.value("added_tokens", Json::array());
  for (const Json& a : added) {
    // Integers only: get<int64_t> of a float out of range is undefined behaviour.
    const Json& json_id = a.at("id");
    if (!json_id.is_number_integer()) {
      return absl::InvalidArgumentError(
          cascade::StrCat(path, ": added_tokens id ", json_id.dump(), " is not an integer"));
    }
    const int64_t id = json_id.get<int64_t>();
    if (id < 0 || id > 10'000'000) {
      return absl::InvalidArgumentError(cascade::StrCat(path, ": added_tokens id ", id));
    }
    max_id = std::max(max_id, id);
  }
  if (max_id < 0) return absl::InvalidArgumentError(cascade::StrCat(path, ": model.vocab is empty"));
  // Ids are (nearly) dense in real files. Every id up to the largest gets a table entry, so
  // a few sparse ids in a tiny file would otherwise cost gigabytes and seconds.
  const int64_t n_named = static_cast<int64_t>(model.at("vocab").size() + added.size());
  if (max_id >= 2 * n_named + 1024) {
    return absl::InvalidArgumentError(cascade::StrCat(path, ": token ids reach ", max_id, " but only ", n_named,
                                                      " tokens are named (a vocabulary of mostly unused ids)"));
  }
  spec.tokens.assign(max_id + 1, "");
  spec.token_types.assign(max_id + 1, text::kTokenTypeUnused);  // Ids nothing names.
  for (const auto& [text, id] : model.at("vocab").items()) {
    spec.tokens[id.get<int64_t>()] = text;
    spec.token_types[id.get<int64_t>()] = text::kTokenTypeNormal;
  }
  for (const Json& a : added) {
    const int64_t id = a.at("id").get<int64_t>();
    spec.tokens[id] = a.at("content").get<std::string>();
    spec.token_types[id] = a.value("special", false) ? text::kTokenTypeControl : text::kTokenTypeUserDefined;
  }
  return absl::OkStatus();
}

// Fills `spec.merges` / `spec.merge_pairs` from model.merges: "left right" strings or [left, right] pairs.
absl::Status ReadMerges(const Json& model, const std::string& path, TokenizerSpec& spec) {
  for (const Json& m : model.value("merges", Json::array())) {
    if (m.is_string()) {
      spec.merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2) {
      spec.merge_pairs.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return absl::InvalidArgumentError(
          cascade::StrCat(path, ": model.merges entry ", m.dump(), " is neither 'a b' nor [a, b]"));
    }
  }
  return absl::OkStatus();
}

// Metaspace-style ("▁") hints found in a tokenizer's normalizer / pre-tokenizer / decoder chains.
struct MetaspaceHints {
  bool metaspace = false;  // Spaces are spelled "▁".
  bool prepend = false;    // A "▁" is prepended to the input.
};

MetaspaceHints FindMetaspaceHints(const std::vector<const Json*>& normalizers, const std::vector<const Json*>& pre,
                                  const std::vector<const Json*>& decoders) {
  bool prepend = false, metaspace = false;
  for (const Json* n : normalizers) {
    const std::string t = n->value("type", "");
    if (t == "Prepend" && n->value("prepend", "") == kSpmSpace) prepend = metaspace = true;
    if (t == "Replace" && n->value("content", "") == kSpmSpace) metaspace = true;
  }
  for (const Json* n : pre) {
    if (n->value("type", "") == "Metaspace") {
      metaspace = true;
      const std::string scheme = n->value("prepend_scheme", "");
      prepend = prepend || n->value("add_prefix_space", false) || scheme == "always" || scheme == "first";
    }
  }
  for (const Json* n : decoders) {
    const std::string t = n->value("type", "");
    if (t == "Metaspace" || (t == "Replace" && n->value("content", "") == " ")) metaspace = true;
  }
  return {.metaspace = metaspace, .prepend = prepend};
}

// Marks the "<0xNN>" tokens of a byte-fallback vocabulary as byte tokens.
void MarkByteTokens(TokenizerSpec& spec) {
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    const std::string& t = spec.tokens[i];
    if (spec.token_types[i] == text::kTokenTypeNormal && t.size() == 6 && t.rfind("<0x", 0) == 0 && t[5] == '>') {
      spec.token_types[i] = text::kTokenTypeByte;
    }
  }
}

// Sets `spec.kind` (and pre-tokenizer / space prefix) from which of the two supported set-ups `j` uses.
absl::Status ReadSetUp(const Json& j, const std::string& path, TokenizerSpec& spec) {
  std::vector<const Json*> normalizers, pre, decoders;
  // Pointers into `j` (not into copies: `Flatten` keeps addresses).
  static const Json* const kNull = new Json();
  auto member = [&](const char* key) -> const Json& { return j.contains(key) ? j.at(key) : *kNull; };
  Flatten(member("normalizer"), "normalizers", normalizers);
  Flatten(member("pre_tokenizer"), "pretokenizers", pre);
  Flatten(member("decoder"), "decoders", decoders);
  const bool byte_level = HasType(pre, "ByteLevel") || HasType(decoders, "ByteLevel");
  const MetaspaceHints hints = FindMetaspaceHints(normalizers, pre, decoders);
  if (byte_level) {
    spec.kind = TokenizerSpec::Kind::kByteLevelBpe;
    CASCADE_ASSIGN_OR_RETURN(spec.pre_tokenizer, ByteLevelPreTokenizer(pre, path));
    spec.add_space_prefix = false;
  } else if (hints.metaspace) {
    spec.kind = TokenizerSpec::Kind::kSentencePieceBpe;
    spec.add_space_prefix = hints.prepend;
    if (spec.byte_fallback) MarkByteTokens(spec);
  } else {
    return absl::UnimplementedError(
        cascade::StrCat(path, ": neither a ByteLevel nor a Metaspace-style (\"▁\") BPE tokenizer"));
  }
  return absl::OkStatus();
}

// BOS/EOS from the post-processor template (tokenizer_config.json may override them later).
void ReadPostProcessor(const Json& j, TokenizerSpec& spec) {
  const Json post = j.value("post_processor", Json());
  if (post.is_object() && post.value("type", "") == "TemplateProcessing" && post.contains("single") &&
      post.at("single").is_array() && !post.at("single").empty()) {
    const Json& single = post.at("single");
    auto special_id = [&](const Json& item) -> int32_t {
      if (!item.contains("SpecialToken")) return -1;
      return IdOf(spec.tokens, item.at("SpecialToken").value("id", ""));
    };
    if (int32_t id = special_id(single.front()); id >= 0) {
      spec.bos_id = id;
      spec.add_bos = true;
    }
    if (int32_t id = special_id(single.back()); id >= 0 && single.size() > 1) {
      spec.eos_id = id;
      spec.add_eos = true;
    }
  }
}

absl::StatusOr<TokenizerSpec> ParseTokenizerJson(const Json& j, const std::string& path) {
  TokenizerSpec spec;
  spec.source = path;
  if (!j.is_object() || !j.contains("model")) {
    return absl::InvalidArgumentError(cascade::StrCat(path, ": no 'model' object"));
  }
  const Json& model = j.at("model");
  const std::string type = model.value("type", model.contains("merges") ? "BPE" : "");
  if (type != "BPE") {
    return absl::UnimplementedError(cascade::StrCat(path, ": model.type '", type, "' is not supported (only 'BPE')"));
  }
  if (!model.contains("vocab") || !model.at("vocab").is_object()) {
    return absl::InvalidArgumentError(cascade::StrCat(path, ": model.vocab is missing"));
  }
  CASCADE_RETURN_IF_ERROR(ReadVocab(j, model, path, spec));
  CASCADE_RETURN_IF_ERROR(ReadMerges(model, path, spec));
  spec.byte_fallback = model.value("byte_fallback", false);
  spec.ignore_merges = model.value("ignore_merges", false);
  if (model.contains("unk_token") && model.at("unk_token").is_string()) {
    spec.unk_id = IdOf(spec.tokens, model.at("unk_token").get<std::string>());
  }
  CASCADE_RETURN_IF_ERROR(ReadSetUp(j, path, spec));
  ReadPostProcessor(j, spec);
  return spec;
}

absl::Status ApplyTokenizerConfig(const Json& c, const std::string& path, TokenizerSpec& spec) {
  if (!c.is_object()) return absl::InvalidArgumentError(cascade::StrCat(path, ": not an object"));
  auto id_field = [&](const char* key, int32_t& out) -> absl::Status {
    const std::string text = TokenField(c, key);
    if (text.empty()) return absl::OkStatus();
    const int32_t id = IdOf(spec.tokens, text);
    if (id < 0) {
      return absl::InvalidArgumentError(cascade::StrCat(path, ": ", key, " '", text, "' is not in the vocabulary"));
    }
    out = id;
    return absl::OkStatus();
  };
  CASCADE_RETURN_IF_ERROR(id_field("bos_token", spec.bos_id));
  CASCADE_RETURN_IF_ERROR(id_field("eos_token", spec.eos_id));
  CASCADE_RETURN_IF_ERROR(id_field("unk_token", spec.unk_id));
  CASCADE_RETURN_IF_ERROR(id_field("pad_token", spec.pad_id));
  if (c.contains("add_bos_token") && c.at("add_bos_token").is_boolean()) {
    spec.add_bos = c.at("add_bos_token").get<bool>();
  }
  if (c.contains("add_eos_token") && c.at("add_eos_token").is_boolean()) {
    spec.add_eos = c.at("add_eos_token").get<bool>();
  }
  if (c.contains("chat_template")) {
    const Json& t = c.at("chat_template");
    if (t.is_string()) {
      spec.chat_template = t.get<std::string>();
    } else if (t.is_array()) {  // [{"name": "default", "template": "..."}, ...]
      for (const Json& named : t) {
        if (named.value("name", "") == "default") spec.chat_template = named.value("template", "");
      }
    }
  }
  return absl::OkStatus();
}

// `ApplyTokenizerConfig` over the text of a tokenizer_config.json named `path`.
absl::Status ApplyTokenizerConfigText(std::string_view text, const std::string& path, TokenizerSpec& spec) {
  try {
    Json c = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (c.is_discarded()) return absl::InvalidArgumentError(cascade::StrCat(path, ": not valid JSON"));
    return ApplyTokenizerConfig(c, path, spec);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(cascade::StrCat(path, ": ", e.what()));
  }
}

}  // namespace

absl::StatusOr<TokenizerSpec> TokenizerSpecFromHfJsonText(std::string_view tokenizer_json, std::string_view source,
                                                          std::string_view tokenizer_config_json,
                                                          std::string_view config_source) {
  const std::string path(source);
  TokenizerSpec spec;
  try {
    Json j = Json::parse(tokenizer_json, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return absl::InvalidArgumentError(cascade::StrCat(path, ": not valid JSON"));
    CASCADE_ASSIGN_OR_RETURN(spec, ParseTokenizerJson(j, path));
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(cascade::StrCat(path, ": ", e.what()));
  }
  if (!tokenizer_config_json.empty()) {
    CASCADE_RETURN_IF_ERROR(ApplyTokenizerConfigText(tokenizer_config_json, std::string(config_source), spec));
  }
  return spec;
}

absl::StatusOr<TokenizerSpec> TokenizerSpecFromHfJson(const std::string& tokenizer_json_path) {
  CASCADE_ASSIGN_OR_RETURN(std::string text, ReadFile(tokenizer_json_path));
  CASCADE_ASSIGN_OR_RETURN(TokenizerSpec spec, TokenizerSpecFromHfJsonText(text, tokenizer_json_path));
  const std::string config_path =
      (std::filesystem::path(tokenizer_json_path).parent_path() / "tokenizer_config.json").string();
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) {
    CASCADE_ASSIGN_OR_RETURN(std::string config_text, ReadFile(config_path));
    CASCADE_RETURN_IF_ERROR(ApplyTokenizerConfigText(config_text, config_path, spec));
  }
  return spec;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromHfJson(const std::string& tokenizer_json_path) {
  CASCADE_ASSIGN_OR_RETURN(TokenizerSpec spec, TokenizerSpecFromHfJson(tokenizer_json_path));
  return Tokenizer::FromSpec(std::move(spec));
}

}  // namespace cascade::model
