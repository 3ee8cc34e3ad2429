// libFuzzer target: the grammar compilers (grammar/), which read a request's `grammar`,
// `regex` and JSON schema. The input's first byte picks what the rest is (byte % 3; the
// seeds in corpus/grammar/ start with the digit '0', '1' or '2'):
//   0: GBNF text. ParseGbnf gives a grammar or InvalidArgument; a grammar is then run:
//      `Accepts` on byte strings taken from the input, and a grammar::Matcher walked a few
//      hundred bytes, each byte picked among those the matcher allows.
//   1: a JSON schema. JsonSchemaToGbnf gives GBNF or InvalidArgument, and its GBNF must
//      compile; every text a walk of that grammar reaches an accepting state with is JSON.
//   2: a regular expression. RegexToGbnf gives GBNF or InvalidArgument, and its GBNF must
//      compile; the JSON-string spelling (RegexToGbnfExpression) too, and a walk of it
//      spells the inside of a JSON string.
// Never a crash, hang or leak; a broken invariant (the converters' own output refused by
// ParseGbnf, another status code, a matcher that disagrees with itself) aborts.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "nlohmann/json.hpp"

namespace {

using cascade::grammar::Grammar;
using cascade::grammar::Matcher;

// Inputs above this are refused: keeps each run well under a second (a repetition count
// may reach 10000, so a few hundred of them already make millions of elements).
constexpr size_t kMaxInputBytes = 4096;
// Bytes a matcher walk goes at most, and the work it may spend: every step tries all 256
// bytes, each Advance costing about the stacks alive, so a heavily ambiguous grammar (the
// regex 2(?:[a-z0-9.c?){2,7}.\u00e9[\x00-\x1f]{2,6}){1,32} as a JSON string keeps
// hundreds of stacks, each Advance expanding through its nested optional rules) walked
// 256 bytes in 12 s under the fuzzer's instrumentation, past its 10 s timeout.
constexpr int kWalkBytes = 256;
constexpr int64_t kWalkWork = 1'000'000;  // Stacks x bytes tried: ~1.5 s there, two walks.

[[noreturn]] void Fail(std::string_view what, std::string_view detail) {
  std::fprintf(stderr, "grammar_fuzz: %.*s\n%.*s\n", static_cast<int>(what.size()), what.data(),
               static_cast<int>(detail.size()), detail.data());
  std::abort();
}

// A refusal must be InvalidArgument (grammar/grammar.h, grammar/json_schema.h).
void CheckRefusal(const absl::Status& status, std::string_view what) {
  if (!status.ok() && status.code() != absl::StatusCode::kInvalidArgument) Fail(what, status.ToString());
}

// `gbnf`, which one of the converters wrote, compiled; aborts if it does not compile.
std::shared_ptr<const Grammar> MustCompile(const std::string& gbnf, std::string_view what) {
  absl::StatusOr<std::shared_ptr<const Grammar>> g = cascade::grammar::ParseGbnf(gbnf);
  if (!g.ok()) Fail(what, g.status().ToString() + "\n" + gbnf);
  return *std::move(g);
}

// A small deterministic generator (splitmix64), seeded from the input.
struct Rng {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

uint64_t Hash(std::string_view bytes) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a.
  for (char c : bytes) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  return h;
}

// Walks a matcher of `grammar` from its start, each byte picked by `seed` among those
// that continue, for up to kWalkBytes bytes and kWalkWork; calls `on_accepting` with the text so far at
// each accepting state. Checks that `Continues` agrees with `Advance` and `Accepts` with
// `Accepting`.
void Walk(const std::shared_ptr<const Grammar>& grammar, uint64_t seed,
          const std::function<void(std::string_view)>& on_accepting) {
  Matcher matcher(grammar);
  Rng rng{seed};
  Matcher::State state = matcher.start();
  std::string text;
  std::vector<uint8_t> next;
  int64_t work = 0;
  for (int step = 0;; ++step) {
    if (matcher.Accepting(state)) on_accepting(text);
    next.clear();
    for (int b = 0; b < 256; ++b) {
      if (matcher.Advance(state, static_cast<uint8_t>(b)) != Matcher::kDead) next.push_back(static_cast<uint8_t>(b));
    }
    if (next.empty() == matcher.Continues(state)) Fail("Continues disagrees with Advance", text);
    work += 256 * static_cast<int64_t>(matcher.StackCount(state));
    if (next.empty() || step == kWalkBytes || work > kWalkWork) break;
    const uint8_t byte = next[rng.Next() % next.size()];
    text += static_cast<char>(byte);
    state = matcher.Advance(state, byte);
  }
  if (cascade::grammar::Accepts(*grammar, text) != matcher.Accepting(state)) {
    Fail("Accepts disagrees with the matcher's walk", text);
  }
}

// Mode 0: GBNF text.
void FuzzGbnf(std::string_view text) {
  absl::StatusOr<std::shared_ptr<const Grammar>> grammar = cascade::grammar::ParseGbnf(text);
  CheckRefusal(grammar.status(), "ParseGbnf: not InvalidArgument");
  // A literal of any bytes compiles and derives exactly those bytes.
  const std::string_view bytes = text.substr(0, 64);
  absl::StatusOr<std::shared_ptr<const Grammar>> literal =
      cascade::grammar::ParseGbnf("root ::= " + cascade::grammar::GbnfLiteral(bytes));
  if (!literal.ok()) Fail("GbnfLiteral does not compile", literal.status().ToString());
  if (!cascade::grammar::Accepts(**literal, bytes)) Fail("GbnfLiteral does not derive its text", bytes);
  // The same grammar under another root name.
  CheckRefusal(cascade::grammar::ParseGbnf(cascade::grammar::RenameGbnfRule(text, "root", "start"), "start").status(),
               "ParseGbnf after RenameGbnfRule: not InvalidArgument");
  if (!grammar.ok()) return;
  (void)(*grammar)->ToString();
  // The text itself, its halves and its literals' contents, as candidates.
  (void)cascade::grammar::Accepts(**grammar, "");
  (void)cascade::grammar::Accepts(**grammar, text);
  (void)cascade::grammar::Accepts(**grammar, text.substr(0, text.size() / 2));
  (void)cascade::grammar::Accepts(**grammar, text.substr(text.size() / 2));
  std::string literals;
  for (size_t open = text.find('"'); open != std::string_view::npos;) {
    const size_t close = text.find('"', open + 1);
    if (close == std::string_view::npos) break;
    literals.append(text.substr(open + 1, close - open - 1));
    open = text.find('"', close + 1);
  }
  (void)cascade::grammar::Accepts(**grammar, literals);
  Walk(*grammar, Hash(text), [](std::string_view) {});
}

// `text` with every number's exponent digits cut to one 0. A number past a double's range
// (1e553) is JSON by its grammar (RFC 8259 section 6; llama.cpp's schema grammars allow it
// too), but nlohmann refuses it (out_of_range 406). Strings are copied as they are (a
// "\ue123" escape keeps its digits), so the cut changes no other text's validity.
std::string ShortExponents(std::string_view text) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i++];
    out.push_back(c);
    if (in_string) {
      if (c == '\\' && i < text.size()) {
        out.push_back(text[i++]);
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    if (c != 'e' && c != 'E') continue;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) out.push_back(text[i++]);
    if (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      out.push_back('0');
      while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    }
  }
  return out;
}

// Mode 1: a JSON schema.
void FuzzJsonSchema(std::string_view text) {
  const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return;
  absl::StatusOr<std::string> gbnf = cascade::grammar::JsonSchemaToGbnf(schema);
  CheckRefusal(gbnf.status(), "JsonSchemaToGbnf: not InvalidArgument");
  if (!gbnf.ok()) return;
  const std::shared_ptr<const Grammar> grammar =
      MustCompile(*gbnf, "ParseGbnf refuses JsonSchemaToGbnf's output for the schema " + schema.dump());
  Walk(grammar, Hash(text), [&](std::string_view walked) {
    if (!nlohmann::ordered_json::accept(ShortExponents(walked))) {
      Fail("the schema's grammar accepts a text that is not JSON", walked);
    }
  });
}

// Mode 2: a regular expression.
void FuzzRegex(std::string_view pattern) {
  absl::StatusOr<std::string> gbnf = cascade::grammar::RegexToGbnf(pattern);
  CheckRefusal(gbnf.status(), "RegexToGbnf: not InvalidArgument");
  if (gbnf.ok()) {
    const std::shared_ptr<const Grammar> grammar =
        MustCompile(*gbnf, "ParseGbnf refuses RegexToGbnf's output for the pattern " + std::string(pattern));
    Walk(grammar, Hash(pattern), [](std::string_view) {});
  }
  absl::StatusOr<std::string> expr =
      cascade::grammar::RegexToGbnfExpression(pattern, cascade::grammar::RegexEscape::kJsonString);
  CheckRefusal(expr.status(), "RegexToGbnfExpression: not InvalidArgument");
  if (!expr.ok()) return;
  const std::shared_ptr<const Grammar> grammar = MustCompile(
      "root ::= " + *expr, "ParseGbnf refuses RegexToGbnfExpression's output for the pattern " + std::string(pattern));
  Walk(grammar, Hash(pattern) + 1, [](std::string_view walked) {
    const std::string quoted = "\"" + std::string(walked) + "\"";
    if (!nlohmann::ordered_json::accept(quoted)) Fail("a JSON-string spelling that is not a JSON string", walked);
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > kMaxInputBytes) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: FuzzGbnf(rest); break;
    case 1: FuzzJsonSchema(rest); break;
    default: FuzzRegex(rest); break;
  }
  return 0;
}
