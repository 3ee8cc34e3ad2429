// What constrained decoding costs per token on the coordinator (not a test): for each JSON
// schema of a file, a fresh request's grammar (grammar::TokenConstraint, its caches empty
// as a new request's are) walks a random valid answer token by token, each step one mask
// and one advance, as the serving loop does. The reference in the same run is the naive
// mask at the same states (the first 8 of each answer): every token's bytes through a
// matcher of its own, without the trie or the mask cache.
//
//   grammar_bench --schemas=FILE.json [--json=OUT] VOCAB.gguf...
//
// FILE.json holds a JSON array of schemas (scripts/bench_grammar.sh writes the 100 of
// tests/integration/structured_output_test.py). Prints a table per vocabulary, writes JSON.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "model/format/gguf.h"
#include "model/format/tokenizer_files.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_util.h"

namespace cascade {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

// A random valid answer through `c`, one mask and one advance per token (their time into
// `per_token`), until an end token or 400 tokens; `after(pick)` sees each token. Returns
// the tokens.
template <typename After>
int64_t Walk(grammar::TokenConstraint& c, std::mt19937& rng, std::vector<double>& per_token, After after) {
  std::vector<int32_t> allowed;
  int64_t n = 0;
  for (int step = 0; step < 400; ++step) {
    const auto ts = Clock::now();
    const grammar::TokenMask& mask = c.Mask(c.state());
    per_token.push_back(Since(ts));  // The mask is the cost; the pick below is the bench's.
    allowed.clear();
    for (int32_t id = 0; id < c.n_vocab(); ++id) {
      if (grammar::MaskAllows(mask, id)) allowed.push_back(id);
    }
    if (allowed.empty()) break;
    const int32_t pick = allowed[rng() % allowed.size()];
    const auto ta = Clock::now();
    bench::Check(c.Accept(pick), "grammar_bench", "accept");
    per_token.back() += Since(ta);
    ++n;
    if (c.IsEnd(pick)) break;
    after(pick);
  }
  return n;
}

nlohmann::json RunVocab(const std::string& path, const nlohmann::ordered_json& schemas) {
  auto gguf = model::GgufFile::Open(path);
  bench::Check(gguf.status(), "grammar_bench", path);
  auto tok = model::TokenizerFromGguf(**gguf);
  bench::Check(tok.status(), "grammar_bench", path);
  const text::Tokenizer& t = **tok;
  const auto t_trie = Clock::now();
  std::vector<std::string> pieces(t.n_vocab());
  std::vector<bool> excluded(t.n_vocab());
  std::vector<int32_t> ends;
  for (int32_t id = 0; id < t.n_vocab(); ++id) {
    pieces[id] = t.TokenPiece(id);
    excluded[id] = t.IsSpecial(id);
    if (t.IsEog(id)) ends.push_back(id);
  }
  auto trie = std::make_shared<const grammar::TokenTrie>(pieces, excluded);
  const double trie_s = Since(t_trie);

  std::mt19937 rng(1);
  std::vector<double> per_token, compile_s;
  std::vector<std::shared_ptr<grammar::GrammarMasks>> shared;
  int64_t tokens = 0, computed = 0;
  double naive_s = 0;
  int64_t naive_masks = 0, naive_allowed = 0;
  for (const nlohmann::ordered_json& schema : schemas) {
    const auto t0 = Clock::now();
    auto gbnf = grammar::JsonSchemaToGbnf(schema);
    bench::Check(gbnf.status(), "grammar_bench", "schema");
    auto g = grammar::ParseGbnf(*gbnf);
    bench::Check(g.status(), "grammar_bench", "grammar");
    compile_s.push_back(Since(t0));
    auto masks = std::make_shared<grammar::GrammarMasks>(*g, trie);
    shared.push_back(masks);
    grammar::TokenConstraint c(masks, ends);
    grammar::Matcher ref(*g);  // The naive reference follows the same tokens.
    grammar::Matcher::State ref_state = ref.start();
    int step = 0;
    tokens += Walk(c, rng, per_token, [&](int32_t pick) {
      if (step++ < 8) {  // The reference at the same state: each token's bytes through the matcher.
        const auto tn = Clock::now();
        int64_t n_ok = 0;
        for (int32_t id = 0; id < t.n_vocab(); ++id) {
          n_ok += !excluded[id] && ref.Advance(ref_state, pieces[id]) != grammar::Matcher::kDead;
        }
        naive_s += Since(tn);
        ++naive_masks;
        naive_allowed += n_ok;
      }
      ref_state = ref.Advance(ref_state, pieces[pick]);
    });
    computed += c.masks_computed();
  }
  // Warm: each schema again, a new request (and a new random answer) over the masks the
  // first one left, as requests with the same schema share them in a serving loop.
  std::vector<double> warm;
  int64_t warm_tokens = 0, warm_computed = 0;
  for (const auto& masks : shared) {
    const int64_t before = masks->masks_computed();
    grammar::TokenConstraint c(masks, ends);
    warm_tokens += Walk(c, rng, warm, [](int32_t) {});
    warm_computed += masks->masks_computed() - before;
  }
  double sum = 0;
  for (double x : per_token) sum += x;
  nlohmann::json out = {{"vocab", path},
                        {"n_vocab", t.n_vocab()},
                        {"trie_build_s", trie_s},
                        {"schemas", schemas.size()},
                        {"tokens", tokens},
                        {"masks_computed", computed},
                        {"mean_us_per_token", 1e6 * sum / std::max<size_t>(1, per_token.size())},
                        {"p50_us_per_token", 1e6 * Percentile(per_token, 0.5)},
                        {"p99_us_per_token", 1e6 * Percentile(per_token, 0.99)},
                        {"max_us_per_token", 1e6 * Percentile(per_token, 1.0)},
                        {"compile_ms_mean", 1e3 *
                                                [&] {
                                                  double s = 0;
                                                  for (double x : compile_s) s += x;
                                                  return s / std::max<size_t>(1, compile_s.size());
                                                }()},
                        {"warm_tokens", warm_tokens},
                        {"warm_masks_computed", warm_computed},
                        {"warm_mean_us_per_token", 1e6 * Mean(warm)},
                        {"warm_p99_us_per_token", 1e6 * Percentile(warm, 0.99)},
                        {"naive_mask_us", naive_masks > 0 ? 1e6 * naive_s / naive_masks : 0.0},
                        {"naive_masks", naive_masks}};
  (void)naive_allowed;
  return out;
}

}  // namespace
}  // namespace cascade

int main(int argc, char** argv) {
  std::string schemas_path, json_path;
  std::vector<std::string> vocabs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--schemas=", 0) == 0) {
      schemas_path = a.substr(10);
    } else if (a.rfind("--json=", 0) == 0) {
      json_path = a.substr(7);
    } else {
      vocabs.push_back(a);
    }
  }
  if (schemas_path.empty() || vocabs.empty()) {
    std::fprintf(stderr, "usage: grammar_bench --schemas=FILE.json [--json=OUT] VOCAB.gguf...\n");
    return 2;
  }
  std::ifstream in(schemas_path);
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::ordered_json schemas = nlohmann::ordered_json::parse(ss.str(), nullptr, false);
  if (!schemas.is_array()) {
    std::fprintf(stderr, "grammar_bench: %s is not a JSON array of schemas\n", schemas_path.c_str());
    return 2;
  }
  nlohmann::json all = nlohmann::json::array();
  std::printf("%-28s %7s %8s %8s %9s %9s %9s %9s %10s %10s\n", "vocabulary", "n_vocab", "trie ms", "tokens", "computed",
              "mean us", "p50 us", "p99 us", "naive us", "compile ms");
  for (const std::string& v : vocabs) {
    const nlohmann::json r = cascade::RunVocab(v, schemas);
    const std::string name = v.substr(v.find_last_of('/') + 1);
    std::printf("%-28s %7d %8.1f %8lld %9lld %9.1f %9.1f %9.1f %10.0f %10.2f %12.1f %11.1f\n", name.c_str(),
                r["n_vocab"].get<int>(), 1e3 * r["trie_build_s"].get<double>(),
                static_cast<long long>(r["tokens"].get<int64_t>()),
                static_cast<long long>(r["masks_computed"].get<int64_t>()), r["mean_us_per_token"].get<double>(),
                r["p50_us_per_token"].get<double>(), r["p99_us_per_token"].get<double>(),
                r["naive_mask_us"].get<double>(), r["compile_ms_mean"].get<double>(),
                r["warm_mean_us_per_token"].get<double>(), r["warm_p99_us_per_token"].get<double>());
    all.push_back(r);
  }
  if (!json_path.empty()) std::ofstream(json_path) << all.dump(2) << "\n";
  return 0;
}
