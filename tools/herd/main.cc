// herd: the command-line front end.
//   herd run -m MODEL -p PROMPT [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed S] [-t N]
//            [--spec-type TYPE] [--draft-max N] [--draft-min N] [--model-draft GGUF] ... (speculative)
//   herd tokenize -m MODEL -p TEXT
//   herd inspect MODEL [--tensor NAME [--rows A:B] [--dequant]]
//   herd convert --llama2c MODEL.bin --tokenizer TOK.bin -o OUT.gguf
// Generated text goes to stdout; logs and timings to stderr. Errors: one line on
// stderr and exit status 1 (2 for usage errors).
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "libs/backend/backend.h"
#include "libs/base/cpu_features.h"
#include "libs/base/json_nesting.h"
#include "libs/base/mmap.h"
#include "libs/base/status_macros.h"
#include "libs/base/version.h"
#include "libs/engine/generate.h"
#include "libs/engine/spec/spec_generate.h"
#include "libs/gguf/gguf.h"
#include "libs/grammar/json_schema.h"
#include "libs/model/llama2c.h"
#include "libs/model/model.h"
#include "libs/tokenizer/tokenizer.h"
#include "tools/herd/args.h"
#include "tools/herd/backend_args.h"
#include "tools/herd/commands.h"
#include "tools/herd/load_progress.h"

namespace herd::cli {
namespace {

const std::vector<FlagSpec>& RunFlags() {
  static const std::vector<FlagSpec> specs = WithBackendFlags({
      {{"-m", "--model"}, true, "GGUF model file", ""},
      {{"-p", "--prompt"}, true, "prompt text", ""},
      {{"-f", "--file"}, true, "read the prompt from a file", ""},
      {{"-n", "--n-predict"}, true, "tokens to generate (-1 = until end of generation or a full context)", "-1"},
      {{"-c", "--ctx-size"}, true, "context size in tokens (0 = from the model, at most 4096)", "0"},
      {{"-ngl", "--n-gpu-layers"},
       true,
       "accepted for llama.cpp compatibility: a --backend device computes every layer it supports",
       ""},
      {{"-b", "--batch-size"}, true, "prompt processing batch size", "512"},
      {{"-t", "--threads"}, true, "compute threads", "2"},
      {{"--temp"}, true, "temperature (0 = greedy)", "0.8"},
      {{"--top-k"}, true, "top-k sampling (<= 0 = off)", "40"},
      {{"--top-p"}, true, "top-p sampling (1 = off)", "0.95"},
      {{"--min-p"}, true, "min-p sampling (0 = off)", "0.05"},
      {{"--repeat-penalty"}, true, "repetition penalty (1 = off)", "1.0"},
      {{"--repeat-last-n"}, true, "tokens the penalties look back (-1 = context)", "64"},
      {{"--presence-penalty"}, true, "presence penalty", "0.0"},
      {{"--frequency-penalty"}, true, "frequency penalty", "0.0"},
      {{"-s", "--seed"}, true, "RNG seed (-1 = random)", "-1"},
      {{"-ctk", "--cache-type-k", "-ctv", "--cache-type-v"}, true, "KV cache type: f16 or f32", "f16"},
      {{"--ignore-eos"}, false, "keep generating past end-of-generation tokens", ""},
      {{"--display-prompt"}, false, "print the prompt before the generated text", ""},
      {{"--grammar"}, true, "GBNF grammar the output must follow (llama.cpp syntax)", ""},
      {{"--grammar-file"}, true, "read the GBNF grammar from a file", ""},
      {{"-j", "--json-schema"}, true, "JSON schema the output must follow (converted to GBNF)", ""},
      // Speculative decoding (llama.cpp common_params_speculative).
      {{"--spec-type"},
       true,
       "speculative decoding: none, ngram-simple, ngram-map-k, ngram-map-k4v, ngram-cache, draft-model "
       "(default: draft-model with --model-draft, else none)",
       ""},
      {{"--spec-ngram-size-n"}, true, "n-gram key size n (1..1024)", "12"},
      {{"--spec-ngram-size-m"}, true, "n-gram draft size m (1..1024)", "48"},
      {{"--spec-ngram-check-rate"}, true, "search the history every this many new tokens", "1"},
      {{"--spec-ngram-min-hits"}, true, "hits a key needs before it drafts (ngram-map-*)", "1"},
      {{"--draft-max", "--draft", "--draft-n"}, true, "most tokens per draft (n_max)", "16"},
      {{"--draft-min", "--draft-n-min"}, true, "drafts shorter than this are dropped (n_min)", "0"},
      {{"--draft-p-min"}, true, "draft model: stop drafting at a token less likely than this", "0.75"},
      {{"-md", "--model-draft"}, true, "GGUF draft model (draft-model type)", ""},
      {{"-lcs", "--lookup-cache-static"}, true, "ngram-cache: static n-gram cache file (read)", ""},
      {{"-lcd", "--lookup-cache-dynamic"},
       true,
       "ngram-cache: dynamic n-gram cache file (read if present, updated with this generation and written back)",
       ""},
      {{"-h", "--help"}, false, "show this help", ""},
  });
  return specs;
}

// The speculative configuration of `herd run` (type none: no speculation).
absl::StatusOr<engine::spec::SpecConfig> SpecConfigFromArgs(const Args& args) {
  namespace spec = engine::spec;
  spec::SpecConfig c;
  if (!args.Get("--spec-type").empty()) {
    HERD_ASSIGN_OR_RETURN(c.type, spec::ParseSpecType(args.Get("--spec-type"), "--spec-type"));
  } else if (!args.Get("-md").empty()) {
    c.type = spec::SpecType::kDraftModel;
  }
  struct IntOpt {
    const char* flag;
    int32_t* out;
  };
  for (const IntOpt& o :
       {IntOpt{"--spec-ngram-size-n", &c.ngram_size_n}, IntOpt{"--spec-ngram-size-m", &c.ngram_size_m},
        IntOpt{"--spec-ngram-check-rate", &c.ngram_check_rate}, IntOpt{"--spec-ngram-min-hits", &c.ngram_min_hits},
        IntOpt{"--draft-max", &c.draft_max}, IntOpt{"--draft-min", &c.draft_min}}) {
    HERD_ASSIGN_OR_RETURN(auto v, args.GetInt(o.flag));
    if (v < INT32_MIN || v > INT32_MAX) return absl::InvalidArgumentError(absl::StrCat(o.flag, ": out of range"));
    *o.out = static_cast<int32_t>(v);
  }
  HERD_ASSIGN_OR_RETURN(auto p_min, args.GetDouble("--draft-p-min"));
  c.draft_p_min = static_cast<float>(p_min);
  if (absl::Status s = spec::ValidateSpecConfig(c); !s.ok()) {
    // Name the option, llama.cpp's way.
    static const std::pair<const char*, const char*> kMap[] = {{"ngram_size_n:", "--spec-ngram-size-n:"},
                                                               {"ngram_size_m:", "--spec-ngram-size-m:"},
                                                               {"ngram_check_rate:", "--spec-ngram-check-rate:"},
                                                               {"ngram_min_hits:", "--spec-ngram-min-hits:"},
                                                               {"draft_max:", "--draft-max:"},
                                                               {"draft_min:", "--draft-min:"},
                                                               {"draft_p_min:", "--draft-p-min:"}};
    std::string msg(s.message());
    for (const auto& [from, to] : kMap) {
      if (msg.rfind(from, 0) == 0) {
        msg = std::string(to) + msg.substr(std::string(from).size());
        break;
      }
    }
    return absl::InvalidArgumentError(msg);
  }
  if (c.type == spec::SpecType::kDraftModel && args.Get("-md").empty()) {
    return absl::InvalidArgumentError("--spec-type draft-model needs --model-draft GGUF");
  }
  return c;
}

// An early end of a command: its exit status, the message already printed.
// std::nullopt: carry on.
using EarlyExit = std::optional<int>;

// `herd run`'s settings, read from its flags and validated.
struct RunOptions {
  std::string model;            // -m
  std::string model_draft;      // -md
  std::string lookup_static;    // -lcs
  std::string lookup_dynamic;   // -lcd
  int threads = 0;              // -t
  std::string backend = "cpu";  // --backend
  int device = 0;               // --device
  bool ggml_order = false;      // --ggml-order
  bool display_prompt = false;
  engine::GenerateParams gp;
  engine::EngineParams ep;
  engine::spec::SpecConfig spec;
};

// The numeric flags of `herd run` into o->gp, o->ep and o->threads. Errors are usage
// errors, reported in flag order (parse errors first, then ranges).
EarlyExit ReadRunNumbers(const Args& args, const std::string& usage, RunOptions* o) {
  auto n_predict = args.GetInt("-n");
  auto n_ctx = args.GetInt("-c");
  auto n_batch = args.GetInt("-b");
  auto threads = args.GetInt("-t");
  auto temp = args.GetDouble("--temp");
  auto top_k = args.GetInt("--top-k");
  auto top_p = args.GetDouble("--top-p");
  auto min_p = args.GetDouble("--min-p");
  auto rp = args.GetDouble("--repeat-penalty");
  auto rln = args.GetInt("--repeat-last-n");
  auto pp = args.GetDouble("--presence-penalty");
  auto fp = args.GetDouble("--frequency-penalty");
  auto seed = args.GetInt("-s");
  for (const absl::Status& s :
       {n_predict.status(), n_ctx.status(), n_batch.status(), threads.status(), temp.status(), top_k.status(),
        top_p.status(), min_p.status(), rp.status(), rln.status(), pp.status(), fp.status(), seed.status()}) {
    if (!s.ok()) return UsageError(std::string(s.message()), usage);
  }
  if (*threads < 1 || *threads > 256) return UsageError("-t: threads must be in [1, 256]", usage);
  if (*n_predict < -1) return UsageError("-n: must be >= -1", usage);
  auto device = args.GetInt("--device");
  if (!device.ok()) return UsageError(std::string(device.status().message()), usage);
  o->threads = static_cast<int>(*threads);
  o->backend = args.Get("--backend");
  o->device = static_cast<int>(*device);
  o->ggml_order = args.Has("--ggml-order");
  o->ep.n_ctx = *n_ctx;
  o->ep.n_batch = *n_batch;
  engine::GenerateParams& gp = o->gp;
  gp.n_predict = static_cast<int32_t>(*n_predict);
  gp.sampling.temp = static_cast<float>(*temp);
  gp.sampling.top_k = static_cast<int32_t>(*top_k);
  gp.sampling.top_p = static_cast<float>(*top_p);
  gp.sampling.min_p = static_cast<float>(*min_p);
  gp.sampling.repeat_penalty = static_cast<float>(*rp);
  gp.sampling.penalty_last_n = static_cast<int32_t>(*rln);
  gp.sampling.presence_penalty = static_cast<float>(*pp);
  gp.sampling.frequency_penalty = static_cast<float>(*fp);
  gp.sampling.seed = *seed < 0 ? engine::kRandomSeed : static_cast<uint32_t>(*seed);
  return std::nullopt;
}

// Constrained output (llama.cpp --grammar / --grammar-file / --json-schema): at most
// one of them, as a GBNF grammar in sampling->grammar.
EarlyExit ReadRunGrammar(const Args& args, const std::string& usage, engine::SamplingParams* sampling) {
  const int n_constraints = args.Has("--grammar") + args.Has("--grammar-file") + args.Has("-j");
  if (n_constraints > 1) return UsageError("--grammar, --grammar-file, --json-schema: give only one", usage);
  if (args.Has("--grammar")) sampling->grammar = args.Get("--grammar");
  if (args.Has("--grammar-file")) {
    auto text = ReadFileToString(args.Get("--grammar-file"));
    if (!text.ok()) return Fail(text.status());
    sampling->grammar = *text;
  }
  if (args.Has("-j")) {
    if (absl::Status s = CheckJsonNesting(args.Get("-j"), "--json-schema"); !s.ok()) return Fail(s);
    const nlohmann::json schema = nlohmann::json::parse(args.Get("-j"), nullptr, /*allow_exceptions=*/false);
    if (schema.is_discarded()) return UsageError("--json-schema: invalid JSON", usage);
    auto g = grammar::JsonSchemaToGrammar(schema);
    if (!g.ok()) return Fail(g.status());
    sampling->grammar = *g;
  }
  return std::nullopt;
}

// Every flag of `herd run` (but -h) into *o, checked in the order errors are reported.
EarlyExit ParseRunOptions(const Args& args, const std::string& usage, RunOptions* o) {
  o->model = args.Get("-m");
  if (o->model.empty()) return UsageError("run: -m MODEL is required", usage);
  if (args.Has("-ngl")) {
    std::fprintf(stderr,
                 "herd: note: -ngl is accepted for llama.cpp compatibility; --backend picks the device, which "
                 "computes every layer (ops it lacks run on the CPU)\n");
  }
  o->gp.prompt = args.Get("-p");
  if (args.Has("-f")) {
    auto text = ReadFileToString(args.Get("-f"));
    if (!text.ok()) return Fail(text.status());
    o->gp.prompt = *text;
  }
  if (EarlyExit e = ReadRunNumbers(args, usage, o)) return e;
  o->gp.ignore_eos = args.Has("--ignore-eos");
  if (EarlyExit e = ReadRunGrammar(args, usage, &o->gp.sampling)) return e;
  absl::Status vs = engine::ValidateSamplingParams(o->gp.sampling);
  if (!vs.ok()) return Fail(vs);
  auto spec_config = SpecConfigFromArgs(args);
  if (!spec_config.ok()) return UsageError(std::string(spec_config.status().message()), usage);
  o->spec = *spec_config;
  const std::string kv = args.Get("-ctk");
  if (kv == "f16") {
    o->ep.kv_type = GgmlType::F16;
  } else if (kv == "f32") {
    o->ep.kv_type = GgmlType::F32;
  } else {
    return UsageError(absl::StrCat("--cache-type-k: '", kv, "' is not f16 or f32"), usage);
  }
  o->model_draft = args.Get("-md");
  o->lookup_static = args.Get("-lcs");
  o->lookup_dynamic = args.Get("-lcd");
  o->display_prompt = args.Has("--display-prompt");
  return std::nullopt;
}

// Streams generated text to stdout as it comes.
void PrintPiece(const std::string& piece) {
  std::fwrite(piece.data(), 1, piece.size(), stdout);
  std::fflush(stdout);
}

double TokensPerSecond(int64_t n, double ms) { return ms > 0 ? 1000.0 * static_cast<double>(n) / ms : 0.0; }

// The model and backend lines on stderr.
void PrintRunSetup(const RunOptions& o, const model::Model& model, const Backend& backend, engine::Engine& eng) {
  const model::Hparams& hp = model.hparams();
  std::fprintf(stderr,
               "herd: model %s: arch %s, n_vocab %lld, n_embd %lld, n_layer %lld, n_head %lld, n_head_kv %lld, "
               "%.2f MiB weights\n",
               o.model.c_str(), hp.arch.c_str(), static_cast<long long>(hp.n_vocab), static_cast<long long>(hp.n_embd),
               static_cast<long long>(hp.n_layer), static_cast<long long>(hp.n_head),
               static_cast<long long>(hp.n_head_kv), model.weight_bytes() / 1048576.0);
  std::fprintf(stderr, "herd: backend %s, %d threads, isa %s, n_ctx %lld, KV cache %s (%.2f MiB)\n",
               DescribeBackend(o.backend, backend).c_str(), o.threads, IsaName(BestIsa()),
               static_cast<long long>(eng.n_ctx()), GgmlTypeName(o.ep.kv_type).c_str(), eng.kv().bytes() / 1048576.0);
}

// Plain generation (no speculation), then its stop and timing lines.
int RunPlain(engine::Engine& eng, const tokenizer::Vocab& vocab, const engine::GenerateParams& gp) {
  auto res = engine::Generate(eng, vocab, gp, PrintPiece);
  if (!res.ok()) return Fail(res.status());
  std::fflush(stdout);
  std::fprintf(stderr, "\nherd: stop: %s\n", engine::StopReasonName(res->stop));
  std::fprintf(stderr, "herd: pp: %lld tokens in %.2f ms (%.2f tokens/s)\n", static_cast<long long>(res->pp_tokens),
               res->pp_ms, TokensPerSecond(res->pp_tokens, res->pp_ms));
  std::fprintf(stderr, "herd: tg: %lld tokens in %.2f ms (%.2f tokens/s)\n", static_cast<long long>(res->tg_tokens),
               res->tg_ms, TokensPerSecond(res->tg_tokens, res->tg_ms));
  return 0;
}

// What speculative decoding in `herd run` holds while it runs.
struct SpecState {
  engine::spec::SpecResources resources;
  std::unique_ptr<engine::spec::DraftModel> draft_model;  // -md
  engine::spec::NgramCache dynamic;                       // -lcd (empty when the file is new)
};

// Loads the draft model (-md) and the n-gram caches (-lcs, -lcd) into *st.
absl::Status LoadSpecResources(const RunOptions& o, const engine::Engine& eng, const tokenizer::Vocab& vocab,
                               SpecState* st) {
  namespace spec = engine::spec;
  if (!o.model_draft.empty()) {
    spec::DraftModelParams dp;
    dp.n_ctx = eng.n_ctx();
    dp.n_threads = o.threads;
    dp.backend = o.backend;
    dp.device = o.device;
    HERD_ASSIGN_OR_RETURN(auto dm, spec::DraftModel::Load(o.model_draft, dp));
    if (absl::Status s = dm->AttachTarget(vocab); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--model-draft ", o.model_draft, ": ", s.message()));
    }
    st->draft_model = std::move(dm);
    st->resources.draft_model = st->draft_model.get();
    std::fprintf(stderr, "herd: draft model %s: arch %s, n_vocab %lld\n", o.model_draft.c_str(),
                 st->draft_model->model().hparams().arch.c_str(),
                 static_cast<long long>(st->draft_model->vocab().n_tokens()));
  }
  if (!o.lookup_static.empty()) {
    HERD_ASSIGN_OR_RETURN(auto c, spec::NgramCacheLoad(o.lookup_static));
    st->resources.ngram_cache.static_cache = std::make_shared<const spec::NgramCache>(std::move(c));
  }
  if (!o.lookup_dynamic.empty()) {
    auto c = spec::NgramCacheLoad(o.lookup_dynamic);
    if (c.ok()) {
      st->dynamic = *std::move(c);
    } else if (!absl::IsNotFound(c.status())) {
      return c.status();
    }
    st->resources.ngram_cache.dynamic_cache = std::make_shared<const spec::NgramCache>(st->dynamic);
  }
  return absl::OkStatus();
}

// The stop and timing lines of a speculative generation, then llama.cpp's speculative
// summary and common_speculative_print_stats line.
void PrintSpecResult(const engine::spec::SpecConfig& config, const engine::spec::SpecGenerateResult& res) {
  const engine::GenerateResult& g = res.gen;
  std::fprintf(stderr, "\nherd: stop: %s\n", engine::StopReasonName(g.stop));
  std::fprintf(stderr, "herd: pp: %lld tokens in %.2f ms (%.2f tokens/s)\n", static_cast<long long>(g.pp_tokens),
               g.pp_ms, TokensPerSecond(g.pp_tokens, g.pp_ms));
  const int64_t n_out = static_cast<int64_t>(g.output_ids.size());
  std::fprintf(stderr,
               "herd: tg: %lld tokens in %.2f ms (%.2f tokens/s), %lld target passes (%.2f tokens/pass), "
               "drafting %.2f ms\n",
               static_cast<long long>(n_out), g.tg_ms, TokensPerSecond(n_out, g.tg_ms),
               static_cast<long long>(res.target_passes), res.tokens_per_pass(), res.draft_ms);
  const engine::spec::SpecStats& st = res.stats;
  std::fprintf(stderr,
               "herd: n_draft   = %d\nherd: n_predict = %lld\nherd: n_drafted = %lld\n"
               "herd: n_accept  = %lld\nherd: accept    = %.3f%%\n",
               config.draft_max, static_cast<long long>(n_out), static_cast<long long>(st.gen_tokens),
               static_cast<long long>(st.acc_tokens), 100.0 * st.acceptance_rate());
  std::fprintf(stderr, "herd: %s\n", st.ToString().c_str());
}

// llama-lookup: the dynamic n-gram cache learns this generation and is written back to `path`.
absl::Status SaveDynamicCache(const std::string& path, const engine::GenerateResult& g,
                              engine::spec::NgramCache* dynamic) {
  namespace spec = engine::spec;
  std::vector<int32_t> all = g.prompt_ids;
  all.insert(all.end(), g.output_ids.begin(), g.output_ids.end());
  spec::NgramCacheUpdate(dynamic, spec::kNgramCacheMin, spec::kNgramCacheMax, all, static_cast<int64_t>(all.size()));
  HERD_RETURN_IF_ERROR(spec::NgramCacheSave(*dynamic, path));
  std::fprintf(stderr, "herd: dynamic n-gram cache %s: %zu n-grams\n", path.c_str(), dynamic->size());
  return absl::OkStatus();
}

// Speculative decoding in this process (llama.cpp speculative-simple / lookup).
int RunSpeculative(const RunOptions& o, engine::Engine& eng, const tokenizer::Vocab& vocab) {
  namespace spec = engine::spec;
  SpecState st;
  if (absl::Status s = LoadSpecResources(o, eng, vocab, &st); !s.ok()) return Fail(s);
  auto session = spec::SpecSession::Create(o.spec, st.resources, o.gp.sampling.seed);
  if (!session.ok()) return Fail(session.status());
  std::fprintf(stderr, "herd: speculative: type %s, draft_max %d, draft_min %d, draft_p_min %.2f, n %d, m %d\n",
               spec::SpecTypeName(o.spec.type), o.spec.draft_max, o.spec.draft_min, o.spec.draft_p_min,
               o.spec.ngram_size_n, o.spec.ngram_size_m);
  auto res = spec::GenerateSpeculative(eng, vocab, o.gp, session->get(), PrintPiece);
  if (!res.ok()) return Fail(res.status());
  std::fflush(stdout);
  PrintSpecResult(o.spec, *res);
  if (!o.lookup_dynamic.empty()) {
    if (absl::Status s = SaveDynamicCache(o.lookup_dynamic, res->gen, &st.dynamic); !s.ok()) return Fail(s);
  }
  return 0;
}

// Loads the model and runs the generation `o` describes: the text on stdout, the rest
// on stderr.
int RunModel(const RunOptions& o) {
  auto model = model::Model::Load(o.model);
  if (!model.ok()) return Fail(model.status());
  PageInWithProgressBar((*model)->file(), o.model);
  auto vocab = tokenizer::Vocab::FromGguf((*model)->file());
  if (!vocab.ok()) return Fail(vocab.status());
  auto backend = OpenBackend(o.backend, o.device, o.threads, model->get(), o.ggml_order);
  if (!backend.ok()) return Fail(backend.status());
  auto eng = engine::Engine::Create(**model, o.ep, backend->get());
  if (!eng.ok()) return Fail(eng.status());
  PrintRunSetup(o, **model, **backend, **eng);
  if (o.display_prompt) std::fwrite(o.gp.prompt.data(), 1, o.gp.prompt.size(), stdout);
  if (o.spec.type == engine::spec::SpecType::kNone) return RunPlain(**eng, **vocab, o.gp);
  return RunSpeculative(o, **eng, **vocab);
}

// herd run: flags, then the generation.
int CmdRun(int argc, char** argv) {
  const auto& specs = RunFlags();
  const std::string usage = "usage: herd run -m MODEL -p PROMPT [flags]\n" + Args::Usage(specs);
  int exit_status = 0;
  auto args = ParseCommand(specs, argc, argv, usage, &exit_status);
  if (!args) return exit_status;
  RunOptions o;
  if (EarlyExit e = ParseRunOptions(*args, usage, &o)) return *e;
  return RunModel(o);
}

int CmdTokenize(int argc, char** argv) {
  static const std::vector<FlagSpec> specs = {
      {{"-m", "--model"}, true, "GGUF model file (vocabulary)", ""},
      {{"-p", "--prompt"}, true, "text to tokenize", ""},
      {{"-f", "--file"}, true, "read the text from a file", ""},
      {{"--no-bos"}, false, "do not add BOS/EOS", ""},
      {{"--no-parse-special"}, false, "treat special-token text as plain text", ""},
      {{"-h", "--help"}, false, "show this help", ""},
  };
  const std::string usage = "usage: herd tokenize -m MODEL -p TEXT\n" + Args::Usage(specs);
  int exit_status = 0;
  auto args = ParseCommand(specs, argc, argv, usage, &exit_status);
  if (!args) return exit_status;
  if (args->Get("-m").empty()) return UsageError("tokenize: -m MODEL is required", usage);
  if (!args->Has("-p") && !args->Has("-f")) return UsageError("tokenize: -p TEXT or -f FILE is required", usage);
  std::string text = args->Get("-p");
  if (args->Has("-f")) {
    auto t = ReadFileToString(args->Get("-f"));
    if (!t.ok()) return Fail(t.status());
    text = *t;
  }
  auto file = gguf::GgufFile::Open(args->Get("-m"));
  if (!file.ok()) return Fail(file.status());
  auto vocab = tokenizer::Vocab::FromGguf(**file);
  if (!vocab.ok()) return Fail(vocab.status());
  std::vector<int32_t> ids = (*vocab)->Tokenize(text, !args->Has("--no-bos"), !args->Has("--no-parse-special"));
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) absl::StrAppend(&out, i ? ", " : "", ids[i]);
  std::printf("%s]\n", out.c_str());
  return 0;
}

int CmdConvert(int argc, char** argv) {
  static const std::vector<FlagSpec> specs = {
      {{"--llama2c"}, true, "llama2.c checkpoint (model.bin)", ""},
      {{"--tokenizer"}, true, "llama2.c tokenizer (tokenizer.bin)", ""},
      {{"-o", "--output"}, true, "output GGUF path", ""},
      {{"-h", "--help"}, false, "show this help", ""},
  };
  const std::string usage =
      "usage: herd convert --llama2c MODEL.bin --tokenizer TOK.bin -o OUT.gguf\n" + Args::Usage(specs);
  int exit_status = 0;
  auto args = ParseCommand(specs, argc, argv, usage, &exit_status);
  if (!args) return exit_status;
  if (args->Get("--llama2c").empty() || args->Get("--tokenizer").empty() || args->Get("-o").empty()) {
    return UsageError("convert: --llama2c, --tokenizer and -o are required", usage);
  }
  absl::Status s = model::ConvertLlama2c(args->Get("--llama2c"), args->Get("--tokenizer"), args->Get("-o"));
  if (!s.ok()) return Fail(s);
  std::fprintf(stderr, "herd: wrote %s\n", args->Get("-o").c_str());
  return 0;
}

const char kUsage[] =
    "usage: herd <command> [flags]\n"
    "commands:\n"
    "  run       generate text from a GGUF model (herd run -h for flags)\n"
    "  tokenize  print the token ids of a text\n"
    "  inspect   print a GGUF file's metadata and tensor table, or one tensor's rows (--tensor)\n"
    "  convert   convert a llama2.c checkpoint to GGUF\n"
    "  quantize  quantize a GGUF model (herd quantize IN OUT TYPE)\n"
    "  perplexity  perplexity of a model over a text file\n"
    "  up        start a local cluster: loader, workers, gateway\n"
    "  generate  stream a generation from a gateway\n"
    "  embed     print the embedding of a text (llama-embedding)\n"
    "  chat-template  render a conversation with a model's chat template\n"
    "  health    grpc.health.v1 check of a herd service (exit 0 when SERVING)\n"
    "every command answers -h; herd --version prints the version\n";

}  // namespace
}  // namespace herd::cli

int main(int argc, char** argv) {
  using namespace herd::cli;
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "run") return CmdRun(argc, argv);
  if (cmd == "tokenize") return CmdTokenize(argc, argv);
  if (cmd == "inspect") return CmdInspect(argc, argv);
  if (cmd == "convert") return CmdConvert(argc, argv);
  if (cmd == "quantize") return CmdQuantize(argc, argv);
  if (cmd == "perplexity") return CmdPerplexity(argc, argv);
  if (cmd == "up") return CmdUp(argc, argv);
  if (cmd == "generate") return CmdGenerate(argc, argv);
  if (cmd == "embed") return CmdEmbed(argc, argv);
  if (cmd == "health") return CmdHealth(argc, argv);
  if (cmd == "chat-template") return CmdChatTemplate(argc, argv);
  if (cmd == "--version" || cmd == "version") {
    std::printf("%s\n", herd::VersionLine("herd").c_str());
    return 0;
  }
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::fprintf(stderr, "herd: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}
