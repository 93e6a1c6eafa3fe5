// herd embed -m MODEL -p TEXT [--pooling mean|cls|last] [--embd-normalize N] [flags]:
// llama.cpp's llama-embedding. The prompt is split at --embd-separator (default a
// newline) into inputs; each is tokenized with BOS/EOS per the vocabulary (special
// tokens parsed), evaluated alone, its final hidden states pooled
// (engine::Engine::Embed) and normalized (common_embd_normalize). Prints one line per
// input, "embedding N: v0 v1 ..." with every value ("%9.6f ", "%6.0f " for
// --embd-normalize 0), the format of llama-embedding's pooled output. The vectors are
// the ones the gateway's /v1/embeddings and Gateway.Embed return for the same text.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include "libs/engine/embedding.h"
#include "libs/engine/engine.h"
#include "libs/model/model.h"
#include "libs/tokenizer/tokenizer.h"
#include "tools/herd/args.h"
#include "tools/herd/backend_args.h"
#include "tools/herd/commands.h"

namespace herd::cli {
namespace {

const std::vector<FlagSpec>& EmbedFlags() {
  static const std::vector<FlagSpec> specs = WithBackendFlags({
      {{"-m", "--model"}, true, "GGUF model file", ""},
      {{"-p", "--prompt"}, true, "text to embed (split into inputs at --embd-separator)", ""},
      {{"--pooling"}, true, "mean, cls or last (default: the model's <arch>.pooling_type, else mean)", ""},
      {{"--embd-normalize"}, true, "-1 none, 0 max-abs (int16 range), 1 taxicab, 2 euclidean, >2 p-norm", "2"},
      {{"--embd-separator"}, true, "separator of the inputs in the prompt", "\\n"},
      {{"-c", "--ctx-size"}, true, "context size in tokens (0 = from the model, at most 4096)", "0"},
      {{"-b", "--batch-size"}, true, "tokens per forward pass", "512"},
      {{"-t", "--threads"}, true, "compute threads", "2"},
      {{"-ctk", "--cache-type-k", "-ctv", "--cache-type-v"}, true, "KV cache type: f16 or f32", "f16"},
      {{"-h", "--help"}, false, "show this help", ""},
  });
  return specs;
}

struct EmbedOptions {
  engine::EngineParams engine;
  int threads = 2;
  int normalize = 2;
  bool pooling_set = false;
  engine::Pooling pooling = engine::Pooling::kLast;
};

// Flags -> options; a usage error message on failure.
absl::StatusOr<EmbedOptions> OptionsFromArgs(const Args& args) {
  EmbedOptions o;
  auto c = args.GetInt("-c");
  auto b = args.GetInt("-b");
  auto t = args.GetInt("-t");
  auto n = args.GetInt("--embd-normalize");
  for (const absl::Status& s : {c.status(), b.status(), t.status(), n.status()}) {
    if (!s.ok()) return s;
  }
  if (*t < 1 || *t > 256) return absl::InvalidArgumentError("-t: threads must be in [1, 256]");
  if (*n < -1 || *n > 1000) return absl::InvalidArgumentError("--embd-normalize: must be in [-1, 1000]");
  o.engine.n_ctx = *c;
  o.engine.n_batch = *b;
  o.threads = static_cast<int>(*t);
  o.normalize = static_cast<int>(*n);
  const std::string kv = args.Get("-ctk");
  if (kv != "f16" && kv != "f32") return absl::InvalidArgumentError("--cache-type-k: '" + kv + "' is not f16 or f32");
  o.engine.kv_type = kv == "f32" ? GgmlType::F32 : GgmlType::F16;
  if (!args.Get("--pooling").empty()) {
    auto p = engine::ParsePooling(args.Get("--pooling"));
    if (!p.ok()) return absl::InvalidArgumentError(absl::StrCat("--", p.status().message()));
    o.pooling = *p;
    o.pooling_set = true;
  }
  return o;
}

void PrintEmbedding(size_t index, const std::vector<float>& v, int normalize) {
  std::printf("embedding %zu: ", index);
  for (float x : v) std::printf(normalize == 0 ? "%6.0f " : "%9.6f ", x);
  std::printf("\n");
}

}  // namespace

int CmdEmbed(int argc, char** argv) {
  const std::vector<FlagSpec>& specs = EmbedFlags();
  const std::string usage =
      "usage: herd embed -m MODEL -p TEXT [--pooling mean|cls|last] [--embd-normalize N]\n" + Args::Usage(specs);
  int exit_status = 0;
  auto args = ParseCommand(specs, argc, argv, usage, &exit_status);
  if (!args) return exit_status;
  if (args->Get("-m").empty()) return UsageError("-m MODEL is required", usage);
  if (args->Get("-p").empty()) return UsageError("-p TEXT is required", usage);
  auto opts = OptionsFromArgs(*args);
  if (!opts.ok()) return UsageError(std::string(opts.status().message()), usage);

  auto model = model::Model::Load(args->Get("-m"));
  if (!model.ok()) return Fail(model.status());
  auto vocab = tokenizer::Vocab::FromGguf((*model)->file());
  if (!vocab.ok()) return Fail(vocab.status());
  if (!opts->pooling_set) opts->pooling = engine::DefaultPooling((*model)->file(), (*model)->hparams().arch);
  auto backend = BackendFromArgs(*args, opts->threads, model->get());
  if (!backend.ok()) return Fail(backend.status());
  auto eng = engine::Engine::Create(**model, opts->engine, backend->get());
  if (!eng.ok()) return Fail(eng.status());
  std::string sep = args->Get("--embd-separator");
  if (sep == "\\n") sep = "\n";
  const std::vector<std::string> prompts = absl::StrSplit(args->Get("-p"), sep.empty() ? std::string("\n") : sep);
  std::fprintf(stderr, "herd: embed: %s, %zu input(s), pooling %s, embd_normalize %d, n_ctx %lld\n",
               args->Get("-m").c_str(), prompts.size(), engine::PoolingName(opts->pooling), opts->normalize,
               static_cast<long long>((*eng)->n_ctx()));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t> toks = (*vocab)->Tokenize(prompts[i], /*add_special=*/true, /*parse_special=*/true);
    auto v = (*eng)->Embed(toks, opts->pooling, 0);
    if (!v.ok()) return Fail(absl::Status(v.status().code(), absl::StrCat("input ", i, ": ", v.status().message())));
    absl::Status s = engine::NormalizeEmbedding(&*v, opts->normalize);
    if (!s.ok()) return Fail(s);
    PrintEmbedding(i, *v, opts->normalize);
  }
  return 0;
}

}  // namespace herd::cli
