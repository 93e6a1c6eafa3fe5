// Cost of grammar-constrained decoding (issue 41 item 5), in two parts.
//
// 1. Mask cost: for a set of JSON schemas (tool calls, nested objects, enums, numeric
//    bounds, patterns, recursion, json_object), random documents of each schema's grammar
//    are walked token by token over the 32,000-token Llama-2 vocabulary (at each step the
//    longest allowed token that continues the document). At every step the whole-vocabulary
//    mask (what the sampler computes when the model's first choice is rejected, llama.cpp's
//    llama_sampler_grammar_apply) is timed, cold (a fresh matcher, no mask cache) and as
//    the worker runs it (grammar::MaskCache shared by the sequences of one grammar), then
//    the token is accepted. Printed per schema: p50/p99/mean µs per token. --dump DIR
//    writes each case's GBNF and token ids (DIR/<case>.gbnf, DIR/<case>.ids) so that the
//    same grammars and tokens can be replayed through llama.cpp's grammar sampler; --peer
//    FILE reads that replay's figures ("<case> <p50_us> <p99_us> <mean_us>" lines) and
//    prints the ratios.
// 2. Decode: a batched decode step of B sequences (default 16) of the random-weight
//    llama-110m (bench_models, Q4_0, 32,000 vocabulary), unconstrained vs with a JSON-schema
//    grammar sampler per sequence (temperature 1: the random model's first draw is almost
//    always rejected, so the full mask runs on nearly every token, the worst case), and
//    the sampling time as a share of the step.
//   bazel run -c opt //bench:grammar_bench -- [--docs 4] [--batch 16] [--threads 2]
//       [--steps 48] [--dump DIR] [--peer FILE] [--decode 1|0]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

#include "bench/bench_models.h"
#include "libs/backend/registry.h"
#include "libs/engine/engine.h"
#include "libs/engine/sampling.h"
#include "libs/gguf/gguf.h"
#include "libs/grammar/gbnf.h"
#include "libs/grammar/json_schema.h"
#include "libs/grammar/mask_cache.h"
#include "libs/grammar/matcher.h"
#include "libs/grammar/random_walk.h"
#include "libs/model/model.h"
#include "libs/tokenizer/tokenizer.h"
#include "tests/shared_data.h"

namespace herd {
namespace {

using Clock = std::chrono::steady_clock;

double Us(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }

struct Case {
  const char* name;
  const char* schema;  // JSON schema; "" = json_object (any JSON object)
};

// Representative schemas: what agent frameworks send (tool arguments, zod objects with
// .int() bounds, enums, nullable, arrays), plus a recursive one and free JSON.
const Case kCases[] = {
    {"tool_call",
     R"({"type":"object","properties":{"name":{"enum":["get_weather","search_web","send_email","create_event","lookup_stock"]},
        "arguments":{"type":"object","properties":{"location":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]},
        "days":{"type":"integer","minimum":1,"maximum":14}},"required":["location","unit"],"additionalProperties":false}},
        "required":["name","arguments"],"additionalProperties":false})"},
    {"person_zod",
     R"({"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":40},
        "age":{"type":"integer","minimum":0,"maximum":150},"email":{"type":"string","format":"email"},
        "tags":{"type":"array","items":{"type":"string"},"maxItems":5},"nickname":{"type":["string","null"]}},
        "required":["name","age","email","tags","nickname"],"additionalProperties":false})"},
    {"order_nested",
     R"({"type":"object","properties":{"order_id":{"type":"string","pattern":"^[A-Z]{3}-\\d{4}$"},
        "items":{"type":"array","minItems":1,"maxItems":4,"items":{"type":"object","properties":{
          "sku":{"type":"string"},"qty":{"type":"integer","minimum":1},"price":{"type":"number"}},
          "required":["sku","qty","price"],"additionalProperties":false}},
        "shipping":{"anyOf":[{"type":"null"},{"type":"object","properties":{"street":{"type":"string"},
          "city":{"type":"string"},"zip":{"type":"string","pattern":"^\\d{5}$"}},"required":["street","city","zip"],
          "additionalProperties":false}]},
        "created":{"type":"string","format":"date-time"}},
        "required":["order_id","items","shipping","created"],"additionalProperties":false})"},
    {"enum_200", ""},  // filled in below: a 200-value enum of country-like codes
    {"tree_ref",
     R"({"$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},
        "children":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":3}},"required":["value","children"],
        "additionalProperties":false}},"$ref":"#/$defs/node"})"},
    {"uuid_list",
     R"({"type":"object","properties":{"ids":{"type":"array","items":{"type":"string","format":"uuid"},"maxItems":4},
        "ok":{"type":"boolean"},"score":{"type":"number","minimum":0,"maximum":1}},
        "required":["ids","ok","score"],"additionalProperties":false})"},
    {"json_object", ""},
};

std::string Enum200Schema() {
  nlohmann::json values = nlohmann::json::array();
  std::mt19937 rng(3);
  for (int i = 0; i < 200; ++i) {
    std::string s = "region-";
    for (int j = 0; j < 6; ++j) s.push_back(static_cast<char>('a' + rng() % 26));
    values.push_back(s);
  }
  nlohmann::json schema = {{"type", "object"},
                           {"properties", {{"region", {{"enum", values}}}, {"count", {{"type", "integer"}}}}},
                           {"required", {"region", "count"}},
                           {"additionalProperties", false}};
  return schema.dump();
}

absl::StatusOr<std::string> CaseGrammar(const Case& c) {
  const std::string name = c.name;
  if (name == "json_object") return grammar::JsonObjectGrammar();
  const std::string text = name == "enum_200" ? Enum200Schema() : std::string(c.schema);
  nlohmann::json schema = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(name, ": schema is not JSON"));
  return grammar::JsonSchemaToGrammar(schema);
}

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}
double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// Token ids of `doc` under `g`: at each step the longest allowed token whose piece
// continues the document. Times the whole-vocabulary mask at every step, cold (a fresh
// CheckTokens) into *cold and through `cache` into *cached.
bool Trajectory(const std::shared_ptr<const grammar::Grammar>& g, const grammar::TokenPieces& pieces,
                const std::string& doc, grammar::MaskCache* cache, std::vector<int32_t>* ids, std::vector<double>* cold,
                std::vector<double>* cached, std::vector<double>* accept) {
  auto m = grammar::Matcher::Create(g);
  if (!m.ok()) return false;
  const int32_t n = pieces.n_tokens();
  std::vector<int32_t> all(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
  std::vector<uint8_t> ok(static_cast<size_t>(n)), ok2(static_cast<size_t>(n));
  size_t pos = 0;
  while (pos < doc.size()) {
    auto t0 = Clock::now();
    m->CheckTokens(pieces, all.data(), all.size(), ok.data());
    auto t1 = Clock::now();
    cache->Mask(*m, ok2.data());
    auto t2 = Clock::now();
    cold->push_back(Us(t0, t1));
    cached->push_back(Us(t1, t2));
    if (ok != ok2) {
      std::fprintf(stderr, "mask cache disagrees with CheckTokens at byte %zu\n", pos);
      std::exit(1);
    }
    int32_t best = -1;
    size_t best_len = 0;
    for (int32_t i = 0; i < n; ++i) {
      if (!ok[static_cast<size_t>(i)] || pieces.IsEog(i)) continue;
      const std::string& p = pieces.Piece(i);
      if (p.size() > best_len && doc.compare(pos, p.size(), p) == 0) {
        best = i;
        best_len = p.size();
      }
    }
    if (best < 0) {
      std::fprintf(stderr, "no allowed token continues the document at byte %zu\n", pos);
      return false;
    }
    auto t3 = Clock::now();
    if (!m->AcceptToken(pieces, best).ok()) return false;
    accept->push_back(Us(t3, Clock::now()));
    ids->push_back(best);
    pos += best_len;
  }
  return m->CanEnd();
}

// The token trajectories of part 1, by schema (part 2's "model follows the schema").
std::map<std::string, std::vector<std::vector<int32_t>>>& Trajectories() {
  static auto* t = new std::map<std::string, std::vector<std::vector<int32_t>>>;
  return *t;
}

// "<case> <p50_us> <p99_us> <mean_us>" lines of the llama.cpp replay.
std::map<std::string, std::vector<double>> ReadPeer(const std::string& path) {
  std::map<std::string, std::vector<double>> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 4) continue;
    std::vector<double> v;
    for (size_t i = 1; i < 4; ++i) {
      double x;
      if (absl::SimpleAtod(f[i], &x)) v.push_back(x);
    }
    if (v.size() == 3) out[f[0]] = v;
  }
  return out;
}

int MaskCost(const std::shared_ptr<const grammar::TokenPieces>& pieces_ptr, int docs, const std::string& dump,
             const std::string& peer_path) {
  const grammar::TokenPieces& pieces = *pieces_ptr;
  const auto peer = peer_path.empty() ? std::map<std::string, std::vector<double>>{} : ReadPeer(peer_path);
  std::printf("## Whole-vocabulary mask per token (%d tokens; µs)\n\n", pieces.n_tokens());
  std::printf(
      "| schema | GBNF bytes | compile ms | tokens | cold p50 | cold p99 | cold mean | cached p50 | cached p99 "
      "| cached mean | accept p50 |%s\n",
      peer.empty() ? "" : " llama.cpp p50 | llama.cpp p99 | llama.cpp mean | ratio mean (llama.cpp/herd cold) |");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|%s\n", peer.empty() ? "" : "---|---|---|---|");
  for (const Case& c : kCases) {
    auto t0 = Clock::now();
    absl::StatusOr<std::string> text = CaseGrammar(c);
    if (!text.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name, text.status().ToString().c_str());
      return 1;
    }
    auto parsed = grammar::Grammar::Parse(*text);
    if (!parsed.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name, parsed.status().ToString().c_str());
      return 1;
    }
    std::shared_ptr<const grammar::Grammar> g = std::move(*parsed);
    if (absl::Status st = grammar::CheckMatchCost(g); !st.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name, st.ToString().c_str());
      return 1;
    }
    const double compile_ms = Us(t0, Clock::now()) / 1000;
    grammar::MaskCache cache(g, pieces_ptr);
    std::vector<double> cold, cached, accept;
    std::vector<std::vector<int32_t>> trajectories;
    std::mt19937 rng(17);
    for (int d = 0; d < docs; ++d) {
      auto m = grammar::Matcher::Create(g);
      if (!m.ok()) return 1;
      absl::StatusOr<std::string> doc = grammar::RandomWalk(*m, rng, 160, 4000);
      if (!doc.ok()) {
        --d;
        continue;
      }
      std::vector<int32_t> ids;
      if (!Trajectory(g, pieces, *doc, &cache, &ids, &cold, &cached, &accept)) {
        std::fprintf(stderr, "%s: could not walk document %d: %s\n", c.name, d, doc->c_str());
        return 1;
      }
      trajectories.push_back(std::move(ids));
    }
    Trajectories()[c.name] = trajectories;
    if (!dump.empty()) {
      std::ofstream(dump + "/" + c.name + ".gbnf") << *text;
      std::ofstream ids(dump + "/" + c.name + ".ids");
      for (const auto& t : trajectories) ids << absl::StrJoin(t, " ") << "\n";
    }
    std::printf("| %s | %zu | %.2f | %zu | %.0f | %.0f | %.0f | %.1f | %.0f | %.1f | %.1f |", c.name, text->size(),
                compile_ms, cold.size(), Pct(cold, 0.5), Pct(cold, 0.99), Mean(cold), Pct(cached, 0.5),
                Pct(cached, 0.99), Mean(cached), Pct(accept, 0.5));
    if (!peer.empty()) {
      auto it = peer.find(c.name);
      if (it == peer.end()) {
        std::printf(" - | - | - | - |");
      } else {
        std::printf(" %.0f | %.0f | %.0f | %.2f |", it->second[0], it->second[1], it->second[2],
                    it->second[2] / std::max(Mean(cold), 1e-9));
      }
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

// Part 2: a decode step of `batch` sequences vs the grammar samplers' time per step.
int DecodeShare(const std::shared_ptr<const grammar::TokenPieces>& pieces, const std::string& model_path, int batch,
                int threads, int steps) {
  auto m = model::Model::Load(model_path);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
    return 1;
  }
  BackendOptions bo;
  bo.n_threads = threads;
  auto backend = CreateBackend("cpu", bo);
  if (!backend.ok() || !(*m)->PlaceWeights(backend->get()).ok()) return 1;
  engine::EngineParams ep;
  ep.n_ctx = 4096;
  auto e = engine::Engine::Create(**m, ep, backend->get());
  if (!e.ok()) return 1;
  const int32_t n_vocab = static_cast<int32_t>((*e)->n_vocab());
  std::printf("\n## Decode step at B=%d (llama-110m Q4_0 random weights, %d threads), %d steps\n\n", batch, threads,
              steps);
  std::printf(
      "| sampling (temperature 1, top_k 40) | decode ms/step | sampling ms/step (%d sequences) | sampling / "
      "decode | grammar cost / decode |\n",
      batch);
  std::printf("|---|---|---|---|---|\n");
  struct Mode {
    std::string schema;
    bool worker;  // GrammarCache + top-k search (the worker's path) vs whole-vocabulary masks
    bool follow;  // logits favour a valid continuation (+30 on part 1's trajectory token)
  };
  std::vector<Mode> modes = {{"", true, false}};
  for (const char* name : {"tool_call", "person_zod", "order_nested", "json_object"}) {
    modes.push_back({name, false, false});
    modes.push_back({name, true, false});
    modes.push_back({name, true, true});
  }
  double plain_sample_ms = 0;  // the unconstrained row's sampling time
  for (const Mode& mode : modes) {
    std::vector<std::unique_ptr<engine::Sampler>> samplers;
    grammar::GrammarCache grammars(pieces);
    for (int q = 0; q < batch; ++q) {
      engine::SamplingParams sp;
      sp.temp = 1.0f;
      sp.seed = static_cast<uint32_t>(100 + q);
      for (const Case& c : kCases) {
        if (mode.schema == c.name) sp.grammar = *CaseGrammar(c);
      }
      auto s = engine::Sampler::Create(sp, n_vocab, pieces, mode.worker ? &grammars : nullptr);
      if (s.ok()) (*s)->set_grammar_top_k_search(mode.worker);
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
        return 1;
      }
      samplers.push_back(std::move(*s));
    }
    (*e)->kv().Clear();
    engine::Batch b;
    std::vector<int32_t> next(static_cast<size_t>(batch), 1);
    for (int q = 0; q < batch; ++q) b.Add(1, 0, q, true);
    if (!(*e)->Decode(b).ok()) return 1;
    double decode_us = 0, sample_us = 0;
    const std::vector<std::vector<int32_t>>& traj = Trajectories()[mode.schema];
    std::vector<size_t> at(static_cast<size_t>(batch), 0);  // position in the trajectory
    std::vector<std::vector<float>> boosted(static_cast<size_t>(batch));
    for (int i = 1; i <= steps; ++i) {
      for (int q = 0; q < batch && mode.follow && !traj.empty(); ++q) {
        const std::vector<int32_t>& tq = traj[static_cast<size_t>(q) % traj.size()];
        const float* lg = (*e)->Logits(q);
        boosted[static_cast<size_t>(q)].assign(lg, lg + n_vocab);
        boosted[static_cast<size_t>(q)][static_cast<size_t>(tq[at[static_cast<size_t>(q)] % tq.size()])] += 30;
      }
      auto t0 = Clock::now();
      for (int q = 0; q < batch; ++q) {
        engine::Sampler& s = *samplers[static_cast<size_t>(q)];
        const bool follow = mode.follow && !traj.empty();
        int32_t t = s.Sample(follow ? boosted[static_cast<size_t>(q)].data() : (*e)->Logits(q));
        const size_t want = follow ? traj[static_cast<size_t>(q) % traj.size()].size() : 0;
        if (t < 0 || !s.Accept(t).ok() || (s.matcher() != nullptr && s.matcher()->CanEnd()) ||
            (follow && ++at[static_cast<size_t>(q)] >= want)) {
          s.Reset();  // a finished (or dead) document: start the next one
          at[static_cast<size_t>(q)] = 0;
          t = 1;
        }
        next[static_cast<size_t>(q)] = t;
      }
      auto t1 = Clock::now();
      b.Clear();
      for (int q = 0; q < batch; ++q) b.Add(next[static_cast<size_t>(q)], i, q, true);
      if (!(*e)->Decode(b).ok()) return 1;
      auto t2 = Clock::now();
      sample_us += Us(t0, t1);
      decode_us += Us(t1, t2);
    }
    const std::string label = mode.schema.empty() ? std::string("unconstrained")
                              : mode.follow       ? mode.schema + ", model follows the schema (herd worker)"
                              : mode.worker ? mode.schema + ", random model (herd worker: mask cache + top-k search)"
                                            : mode.schema + ", random model (whole-vocabulary mask, llama.cpp's path)";
    const double sample_ms = sample_us / steps / 1000, decode_ms = decode_us / steps / 1000;
    if (mode.schema.empty()) plain_sample_ms = sample_ms;
    std::printf("| %s | %.2f | %.2f | %.1f%% | %.1f%% |\n", label.c_str(), decode_ms, sample_ms,
                100 * sample_ms / decode_ms, 100 * (sample_ms - plain_sample_ms) / decode_ms);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace herd

int main(int argc, char** argv) {
  using namespace herd;
  int docs = 4, batch = 16, threads = 2, steps = 48;
  bool decode = true;
  std::string dump, peer;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--docs")
      docs = std::atoi(v.c_str());
    else if (k == "--batch")
      batch = std::atoi(v.c_str());
    else if (k == "--threads")
      threads = std::atoi(v.c_str());
    else if (k == "--steps")
      steps = std::atoi(v.c_str());
    else if (k == "--dump")
      dump = v;
    else if (k == "--peer")
      peer = v;
    else if (k == "--decode")
      decode = v != "0";
    else {
      std::fprintf(stderr,
                   "usage: grammar_bench [--docs 4] [--batch 16] [--threads 2] [--steps 48] [--dump DIR] "
                   "[--peer FILE] [--decode 1|0]\n");
      return 2;
    }
  }
  const std::string shared = SharedDir();
  if (shared.empty()) {
    std::fprintf(stderr, "%s\n", kSharedDirMissing);
    return 1;
  }
  const std::string vocab_path = shared + "/models/vocab/ggml-vocab-llama-spm.gguf";
  auto f = gguf::GgufFile::Open(vocab_path);
  if (!f.ok()) {
    std::fprintf(stderr, "%s\n", f.status().ToString().c_str());
    return 1;
  }
  auto v = tokenizer::Vocab::FromGguf(**f);
  if (!v.ok()) return 1;
  std::shared_ptr<const grammar::TokenPieces> pieces = grammar::TokenPieces::FromVocab(**v);
  if (int rc = MaskCost(pieces, docs, dump, peer); rc != 0) return rc;
  if (!decode) return 0;
  bool reused = false;
  auto path = bench::CachedModel(*bench::FindShape("llama-110m"), GgmlType::Q4_0, bench::DefaultCacheDir(), vocab_path,
                                 &reused);
  if (!path.ok()) {
    std::fprintf(stderr, "%s\n", path.status().ToString().c_str());
    return 1;
  }
  return DecodeShare(pieces, *path, batch, threads, steps);
}
