// herd-draft: the speculative-draft worker (herd.v1.Draft), scaled apart from the
// target workers. n-gram drafters need nothing but the request tokens; the
// draft-model type runs a small GGUF model on this worker's own engine and KV cache.
//
//   draft --port=50055 --metrics_port=9095 --spec_type=ngram-map-k
//   draft --model_draft=/models/small.gguf --target_vocab=/models/big.gguf
//   draft --model_draft=/models/small.gguf --loader=loader:50051 --target_model=big
//
// A draft model whose vocabulary differs from the target's (llama.cpp's
// common_speculative_are_compatible) is refused at start-up. Prints "draft listening
// on HOST:PORT" and "draft metrics on HOST:PORT" on stdout once serving (port 0 picks
// a free port). SIGTERM / SIGINT: health turns NOT_SERVING, in-flight calls finish.
#include <chrono>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"

#include "libs/base/log.h"
#include "libs/clients/loader_client.h"
#include "libs/engine/spec/session.h"
#include "libs/gguf/gguf.h"
#include "libs/serving/flags.h"
#include "libs/serving/metrics.h"
#include "libs/serving/security_flags.h"
#include "libs/serving/server.h"
#include "libs/serving/service_flags.h"
#include "libs/serving/service_main.h"
#include "libs/tokenizer/tokenizer.h"
#include "services/draft/draft_service.h"

ABSL_FLAG(int, port, 50055, "gRPC port (0 = pick a free port; the chosen one is printed).");
ABSL_FLAG(int, metrics_port, 9095, "Prometheus /metrics HTTP port (0 = pick a free port; -1 = disabled).");
ABSL_FLAG(std::string, spec_type, "",
          "Default drafter for requests that name none: none, ngram-simple, ngram-map-k, ngram-map-k4v, "
          "ngram-cache, draft-model (llama.cpp --spec-type; default: draft-model with --model_draft, else "
          "ngram-simple).");
ABSL_FLAG(int, spec_ngram_size_n, 12, "n-gram key size n (1..1024; llama.cpp --spec-ngram-size-n).");
ABSL_FLAG(int, spec_ngram_size_m, 48, "n-gram draft size m (1..1024; --spec-ngram-size-m).");
ABSL_FLAG(int, spec_ngram_check_rate, 1,
          "Search the history every this many new tokens (>= 1; --spec-ngram-check-rate).");
ABSL_FLAG(int, spec_ngram_min_hits, 1, "Hits a key needs before it drafts, ngram-map-* (>= 1; --spec-ngram-min-hits).");
ABSL_FLAG(int, draft_max, 16, "Most tokens per draft, n_max (0..1024; --draft-max).");
ABSL_FLAG(int, draft_min, 0, "Drafts shorter than this are dropped, n_min (0..draft_max; --draft-min).");
ABSL_FLAG(double, draft_p_min, 0.75,
          "Draft model: stop at a token less likely than this, p_min ([0,1]; --draft-p-min).");
ABSL_FLAG(std::string, model_draft, "", "GGUF draft model for the draft-model type (llama.cpp --model-draft).");
ABSL_FLAG(std::string, target_vocab, "",
          "GGUF of the target model (only its vocabulary is read), to check the draft model against.");
ABSL_FLAG(std::string, loader, "",
          "Loader address (host:port) to fetch the target vocabulary from (with --target_model).");
ABSL_FLAG(std::string, target_model, "",
          "Target model name at the loader; draft-model requests for other models are refused.");
ABSL_FLAG(std::string, lookup_cache_static, "",
          "ngram-cache: static n-gram cache file (llama.cpp --lookup-cache-static).");
ABSL_FLAG(std::string, lookup_cache_dynamic, "",
          "ngram-cache: dynamic n-gram cache file, read-only here (--lookup-cache-dynamic).");
ABSL_FLAG(int, draft_ctx, 4096, "Draft model KV cells shared by all sessions (0 = model context, capped at 4096).");
ABSL_FLAG(int, threads, 2, "Draft model compute threads (CPU; with a device backend, its CPU fallback's).");
ABSL_FLAG(int64_t, draft_ahead_max_seqs, 1,
          "--draft_ahead only after calls that drafted for at most this many sequences (under load the steps "
          "ahead take cores and the draft model's lock from the calls; spec::DraftModelParams).");
ABSL_FLAG(bool, draft_ahead, false,
          "Draft model: between calls, go on drafting past each greedy draft as if the target accepted it all "
          "(while the target verifies it); a next call whose history is that continuation gets its draft at once "
          "(spec::DraftModelParams::draft_ahead). For a draft worker with cores of its own: where it shares the "
          "target's, the steps ahead slow the target down under load.");
ABSL_FLAG(std::string, backend, "cpu",
          "The draft model's compute backend: cpu, vulkan, ... (libs/backend/registry.h).");
ABSL_FLAG(int, device, 0, "Device index within --backend.");
ABSL_FLAG(int, max_sessions, 1024, "Most sessions held; the least recently used is evicted for a new one.");
ABSL_FLAG(double, session_idle_s, 300, "Sessions unused this many seconds are evicted.");
ABSL_FLAG(int64_t, max_history, 1 << 20, "Most history tokens per session.");

namespace {

int Fail(const std::string& msg) { return herd::serving::StartupFailure("herd-draft", msg); }

}  // namespace

int main(int argc, char** argv) {
  herd::serving::ParseServiceFlags(
      argc, argv, "herd-draft",
      "herd-draft [--port=N] [--metrics_port=N] [--spec_type=TYPE] [--model_draft=GGUF "
      "(--target_vocab=GGUF | --loader=ADDR --target_model=NAME)]: the herd speculative-draft worker",
      "services/draft/");
  namespace spec = herd::engine::spec;

  auto flags = herd::serving::ReadServiceFlags(absl::GetFlag(FLAGS_port), absl::GetFlag(FLAGS_metrics_port));
  if (!flags.ok()) return Fail(std::string(flags.status().message()));
  const std::string host = flags->host;
  const int metrics_port = flags->metrics_port;
  if (absl::GetFlag(FLAGS_max_sessions) < 1) return Fail("--max_sessions must be >= 1");
  if (!(absl::GetFlag(FLAGS_session_idle_s) > 0)) return Fail("--session_idle_s must be > 0");
  if (absl::GetFlag(FLAGS_max_history) < 1) return Fail("--max_history must be >= 1");
  if (absl::GetFlag(FLAGS_threads) < 1 || absl::GetFlag(FLAGS_threads) > 256) {
    return Fail("--threads must be in 1..256");
  }
  if (absl::GetFlag(FLAGS_draft_ctx) < 0) return Fail("--draft_ctx must be >= 0");

  const std::string model_draft = absl::GetFlag(FLAGS_model_draft);
  spec::SpecConfig defaults;
  const std::string type_flag = absl::GetFlag(FLAGS_spec_type);
  if (type_flag.empty()) {
    defaults.type = model_draft.empty() ? spec::SpecType::kNgramSimple : spec::SpecType::kDraftModel;
  } else {
    auto t = spec::ParseSpecType(type_flag, "--spec_type");
    if (!t.ok()) return Fail(std::string(t.status().message()));
    defaults.type = *t;
  }
  defaults.ngram_size_n = absl::GetFlag(FLAGS_spec_ngram_size_n);
  defaults.ngram_size_m = absl::GetFlag(FLAGS_spec_ngram_size_m);
  defaults.ngram_check_rate = absl::GetFlag(FLAGS_spec_ngram_check_rate);
  defaults.ngram_min_hits = absl::GetFlag(FLAGS_spec_ngram_min_hits);
  defaults.draft_max = absl::GetFlag(FLAGS_draft_max);
  defaults.draft_min = absl::GetFlag(FLAGS_draft_min);
  defaults.draft_p_min = static_cast<float>(absl::GetFlag(FLAGS_draft_p_min));
  if (absl::Status s = spec::ValidateSpecConfig(defaults); !s.ok())
    return Fail(spec::SpecConfigMessageForFlags(std::string(s.message())));
  if (defaults.type == spec::SpecType::kDraftModel && model_draft.empty()) {
    return Fail("--spec_type=draft-model needs --model_draft");
  }

  herd::draft::DraftServiceOptions opts;
  opts.defaults = defaults;
  opts.target_model = absl::GetFlag(FLAGS_target_model);
  opts.max_sessions = absl::GetFlag(FLAGS_max_sessions);
  opts.session_idle = std::chrono::milliseconds(static_cast<int64_t>(absl::GetFlag(FLAGS_session_idle_s) * 1000));
  opts.max_history = absl::GetFlag(FLAGS_max_history);

  // The target's vocabulary: for the draft model's compatibility check and token ranges.
  std::unique_ptr<herd::tokenizer::Vocab> target_vocab;
  const std::string target_vocab_path = absl::GetFlag(FLAGS_target_vocab), loader = absl::GetFlag(FLAGS_loader);
  if (!target_vocab_path.empty()) {
    auto f = herd::gguf::GgufFile::Open(target_vocab_path);
    if (!f.ok()) return Fail(absl::StrCat("--target_vocab: ", f.status().message()));
    auto v = herd::tokenizer::Vocab::FromGguf(**f);
    if (!v.ok()) return Fail(absl::StrCat("--target_vocab ", target_vocab_path, ": ", v.status().message()));
    target_vocab = *std::move(v);
  } else if (!loader.empty()) {
    if (opts.target_model.empty()) return Fail("--loader needs --target_model");
    auto client_security = herd::serving::ClientSecurityFromFlags();
    if (!client_security.ok()) return Fail(std::string(client_security.status().message()));
    auto channel = herd::loader::MakeLoaderChannel(loader, 64 << 20, *client_security);
    auto stub = herd::v1::Loader::NewStub(channel);
    auto f = herd::loader::FetchVocabGguf(stub.get(), opts.target_model, std::chrono::seconds(30));
    if (!f.ok()) {
      return Fail(absl::StrCat("target vocabulary of ", opts.target_model, " from loader ", loader, ": ",
                               f.status().message()));
    }
    auto v = herd::tokenizer::Vocab::FromGguf(**f);
    if (!v.ok()) return Fail(absl::StrCat("target vocabulary of ", opts.target_model, ": ", v.status().message()));
    target_vocab = *std::move(v);
  }
  if (target_vocab) opts.target_n_vocab = target_vocab->n_tokens();

  std::unique_ptr<spec::DraftModel> draft_model;
  if (!model_draft.empty()) {
    if (!target_vocab) {
      return Fail(
          "--model_draft needs the target's vocabulary to check it against: --target_vocab=GGUF or "
          "--loader=ADDR --target_model=NAME");
    }
    spec::DraftModelParams dp;
    dp.n_ctx = absl::GetFlag(FLAGS_draft_ctx);
    dp.n_threads = absl::GetFlag(FLAGS_threads);
    dp.draft_ahead = absl::GetFlag(FLAGS_draft_ahead);
    dp.draft_ahead_max_seqs = absl::GetFlag(FLAGS_draft_ahead_max_seqs);
    dp.backend = absl::GetFlag(FLAGS_backend);
    dp.device = absl::GetFlag(FLAGS_device);
    auto dm = spec::DraftModel::Load(model_draft, dp);
    if (!dm.ok()) return Fail(std::string(dm.status().message()));
    if (absl::Status s = (*dm)->AttachTarget(*target_vocab); !s.ok()) {
      return Fail(absl::StrCat("--model_draft ", model_draft, ": ", s.message()));
    }
    draft_model = *std::move(dm);
    opts.resources.draft_model = draft_model.get();
    HERD_LOG(Info) << "draft: draft model " << model_draft << " (" << draft_model->model().hparams().arch << ", "
                   << draft_model->vocab().n_tokens() << " tokens, " << draft_model->n_ctx() << " KV cells)";
  }
  for (const auto& [flag, path, slot] :
       {std::make_tuple("--lookup_cache_static", absl::GetFlag(FLAGS_lookup_cache_static),
                        &opts.resources.ngram_cache.static_cache),
        std::make_tuple("--lookup_cache_dynamic", absl::GetFlag(FLAGS_lookup_cache_dynamic),
                        &opts.resources.ngram_cache.dynamic_cache)}) {
    if (path.empty()) continue;
    auto c = spec::NgramCacheLoad(path);
    if (!c.ok()) return Fail(absl::StrCat(flag, ": ", c.status().message()));
    HERD_LOG(Info) << "draft: " << flag << " " << path << ": " << c->size() << " n-grams";
    *slot = std::make_shared<const spec::NgramCache>(*std::move(c));
  }

  herd::serving::Registry registry;
  opts.registry = &registry;
  herd::draft::DraftServiceImpl service(opts);

  auto security = herd::serving::InternalSecurityFromFlags();
  if (!security.ok()) return Fail(std::string(security.status().message()));
  herd::serving::ServiceMain process("draft");
  auto m =
      process.StartMetrics(&registry, herd::serving::MetricsServerOptions(&security->cluster_keys), host, metrics_port);
  if (!m.ok()) return Fail(std::string(m.status().message()));
  herd::serving::GrpcServerOptions gopts = herd::serving::GrpcOptions(*flags, std::move(security->server));
  HERD_LOG(Info) << "draft: gRPC " << herd::serving::DescribeServerSecurity(gopts.security);
  auto server = process.StartGrpc(gopts, {&service}, "herd.v1.Draft");
  if (!server.ok()) return Fail(std::string(server.status().message()));
  // A SIGTERM/SIGINT from here until Wait() is caught and honoured there.
  herd::serving::CatchSignalsEarly();

  HERD_LOG(Info) << "draft: default type " << spec::SpecTypeName(defaults.type) << ", draft_max " << defaults.draft_max
                 << ", n " << defaults.ngram_size_n << ", m " << defaults.ngram_size_m << ", max_sessions "
                 << opts.max_sessions;
  process.PrintListening(host);

  process.Wait(gopts.shutdown_grace);
  process.StopMetrics();
  HERD_LOG(Info) << "draft: stopped";
  return 0;
}
