// herd perplexity -m MODEL -f TEXT [-c N] [-b N] [--chunks N] [-t N] [-ctk f16|f32]:
// llama-perplexity's measurement (libs/quant/perplexity.h). Prints the running
// perplexity after each chunk ("[1]1.7865,[2]1.7151,...") and the final line
// "Final estimate: PPL = 1.7055 +/- 0.03718", as llama-perplexity does.
#include <cstdio>
#include <string>

#include "libs/base/mmap.h"
#include "libs/model/model.h"
#include "libs/quant/perplexity.h"
#include "libs/tokenizer/tokenizer.h"
#include "tools/herd/args.h"
#include "tools/herd/backend_args.h"
#include "tools/herd/commands.h"

namespace herd::cli {
namespace {}  // namespace

int CmdPerplexity(int argc, char** argv) {
  static const std::vector<FlagSpec> specs = WithBackendFlags({
      {{"-m", "--model"}, true, "GGUF model file", ""},
      {{"-f", "--file"}, true, "text file to evaluate", ""},
      {{"-c", "--ctx-size"}, true, "tokens per chunk", "512"},
      {{"-b", "--batch-size"}, true, "tokens per batch: batch/ctx chunks are evaluated together", "2048"},
      {{"--chunks"}, true, "chunks to evaluate (-1 = all)", "-1"},
      {{"-t", "--threads"}, true, "compute threads", "2"},
      {{"-ctk", "--cache-type-k", "-ctv", "--cache-type-v"}, true, "KV cache type: f16 or f32", "f16"},
      {{"-h", "--help"}, false, "show this help", ""},
  });
  const std::string usage = "usage: herd perplexity -m MODEL -f TEXT [-c N] [flags]\n" + Args::Usage(specs);
  int exit_status = 0;
  auto args = ParseCommand(specs, argc, argv, usage, &exit_status);
  if (!args) return exit_status;
  if (args->Get("-m").empty() || args->Get("-f").empty()) {
    std::fprintf(stderr, "herd: perplexity: -m MODEL and -f TEXT are required\n%s", usage.c_str());
    return 2;
  }
  auto n_ctx = args->GetInt("-c");
  auto n_batch = args->GetInt("-b");
  auto chunks = args->GetInt("--chunks");
  auto threads = args->GetInt("-t");
  for (const absl::Status& s : {n_ctx.status(), n_batch.status(), chunks.status(), threads.status()}) {
    if (!s.ok()) return UsageError(std::string(s.message()), usage);
  }
  if (*threads < 1 || *threads > 256) {
    std::fprintf(stderr, "herd: -t: threads must be in [1, 256]\n");
    return 2;
  }
  quant::PerplexityOptions o;
  o.n_ctx = *n_ctx;
  o.n_batch = *n_batch;
  o.n_chunks = *chunks;
  const std::string kv = args->Get("-ctk");
  if (kv == "f16") {
    o.kv_type = GgmlType::F16;
  } else if (kv == "f32") {
    o.kv_type = GgmlType::F32;
  } else {
    std::fprintf(stderr, "herd: --cache-type-k: '%s' is not f16 or f32\n", kv.c_str());
    return 2;
  }

  auto text = ReadFileToString(args->Get("-f"));
  if (!text.ok()) return Fail(text.status());
  auto model = model::Model::Load(args->Get("-m"));
  if (!model.ok()) return Fail(model.status());
  auto vocab = tokenizer::Vocab::FromGguf((*model)->file());
  if (!vocab.ok()) return Fail(vocab.status());
  auto backend = BackendFromArgs(*args, static_cast<int>(*threads), model->get());
  if (!backend.ok()) return Fail(backend.status());
  std::fprintf(stderr,
               "herd: perplexity: %s over %s (%zu bytes), n_ctx %lld, n_batch %lld, KV cache %s, backend %s, %lld "
               "threads\n",
               args->Get("-m").c_str(), args->Get("-f").c_str(), text->size(), static_cast<long long>(o.n_ctx),
               static_cast<long long>(o.n_batch), GgmlTypeName(o.kv_type).c_str(),
               DescribeBackend(args->Get("--backend"), **backend).c_str(), static_cast<long long>(*threads));
  auto res = quant::Perplexity(**model, **vocab, backend->get(), *text, o, [](int64_t chunk, double ppl) {
    std::printf("[%lld]%.4f,", static_cast<long long>(chunk + 1), ppl);
    std::fflush(stdout);
  });
  if (!res.ok()) {
    std::printf("\n");
    return Fail(res.status());
  }
  std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", res->ppl, res->ppl_err);
  std::fprintf(stderr, "herd: %lld tokens, %lld chunks of %lld (%lld per batch), %lld scored\n",
               static_cast<long long>(res->n_tokens), static_cast<long long>(res->n_chunks),
               static_cast<long long>(res->n_ctx), static_cast<long long>(res->n_seq),
               static_cast<long long>(res->count));
  return 0;
}

}  // namespace herd::cli
