// Speculative decoding benchmark (single process, CPU): for a rewrite-style prompt,
// accepted tokens per target forward pass and wall-clock speedup of every drafter type
// against no speculation, on stories260K and on a larger random-weight llama with
// stories260K's vocabulary (where the target pass dominates; its draft model is
// stories260K). Greedy outputs are checked equal to plain generation.
//   bazel run -c opt //libs/engine/spec:spec_bench -- [--n_predict=192] [--draft_max=16]
//       [--draft_min=0] [--ngram_n=4] [--ngram_m=16] [--threads=2] [--big_embd=768]
//       [--big_layers=12] [--big_ff=2048] [--skip_big]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"

#include "libs/backend/registry.h"
#include "libs/engine/spec/spec_generate.h"
#include "libs/gguf/gguf.h"
#include "libs/tensor/quants.h"
#include "tests/shared_data.h"

ABSL_FLAG(int, n_predict, 192, "Tokens to generate per run.");
ABSL_FLAG(int, draft_max, 16, "n_max.");
ABSL_FLAG(int, draft_min, 0, "n_min.");
ABSL_FLAG(double, draft_p_min, 0.75, "p_min (draft-model).");
ABSL_FLAG(int, ngram_n, 4, "n-gram key size n.");
ABSL_FLAG(int, ngram_m, 16, "n-gram draft size m.");
ABSL_FLAG(int, threads, 2, "Compute threads (target and draft model each).");
ABSL_FLAG(std::string, backend, "cpu", "Compute backend of the target and the draft model (libs/backend/registry.h).");
ABSL_FLAG(int, device, 0, "Device index within --backend.");
ABSL_FLAG(int, big_embd, 768, "Random model: embedding size.");
ABSL_FLAG(int, big_layers, 12, "Random model: layers.");
ABSL_FLAG(int, big_ff, 2048, "Random model: feed-forward size.");
ABSL_FLAG(int, big_heads, 12, "Random model: attention heads.");
ABSL_FLAG(bool, skip_big, false, "Only stories260K.");

namespace herd::engine::spec {
namespace {

using Clock = std::chrono::steady_clock;

// A random-weight llama (F16 matrices) with the tokenizer of `vocab_src`. Embeddings
// are large next to the layers' weights and tied to the output, so greedy decoding
// soon settles into a loop: the text repeats, as in a rewrite, and the target's
// forward pass is what costs.
absl::StatusOr<std::unique_ptr<model::Model>> RandomModel(const gguf::GgufFile& vocab_src, int64_t n_embd,
                                                          int64_t n_layer, int64_t n_ff, int64_t n_head) {
  gguf::GgufWriter w;
  w.SetValue("general.architecture", gguf::Value::String("llama"));
  w.SetValue("general.name", gguf::Value::String("random-llama"));
  w.SetValue("llama.context_length", gguf::Value::U32(2048));
  w.SetValue("llama.embedding_length", gguf::Value::U32(static_cast<uint32_t>(n_embd)));
  w.SetValue("llama.block_count", gguf::Value::U32(static_cast<uint32_t>(n_layer)));
  w.SetValue("llama.feed_forward_length", gguf::Value::U32(static_cast<uint32_t>(n_ff)));
  w.SetValue("llama.attention.head_count", gguf::Value::U32(static_cast<uint32_t>(n_head)));
  w.SetValue("llama.attention.layer_norm_rms_epsilon", gguf::Value::F32(1e-5f));
  for (const gguf::KeyValue& kv : vocab_src.metadata()) {
    if (kv.key.rfind("tokenizer.", 0) == 0) w.SetValue(kv.key, kv.value);
  }
  auto n_vocab = vocab_src.GetStringArray("tokenizer.ggml.tokens");
  if (!n_vocab.ok()) return n_vocab.status();
  const int64_t nv = static_cast<int64_t>(n_vocab->size());
  std::vector<std::unique_ptr<std::vector<uint8_t>>> store;
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  auto add = [&](const std::string& name, int64_t ne0, int64_t ne1, float scale = 1.0f) -> absl::Status {
    const GgmlType t = ne1 == 1 ? GgmlType::F32 : GgmlType::F16;
    std::vector<float> row(static_cast<size_t>(ne0));
    auto buf = std::make_unique<std::vector<uint8_t>>(GgmlRowSize(t, ne0) * static_cast<size_t>(ne1));
    for (int64_t r = 0; r < ne1; ++r) {
      for (float& x : row) x = ne1 == 1 ? 1.0f : scale * nd(rng);
      QuantizeRow(t, row.data(), buf->data() + static_cast<size_t>(r) * GgmlRowSize(t, ne0), ne0);
    }
    std::vector<int64_t> ne = {ne0};
    if (ne1 > 1) ne.push_back(ne1);
    absl::Status st = w.AddTensor(name, t, ne, buf->data(), buf->size());
    store.push_back(std::move(buf));
    return st;
  };
  absl::Status st = add("token_embd.weight", n_embd, nv, 20.0f);  // tied output
  if (st.ok()) st = add("output_norm.weight", n_embd, 1);
  for (int64_t il = 0; il < n_layer && st.ok(); ++il) {
    const std::string p = absl::StrCat("blk.", il, ".");
    st = add(p + "attn_norm.weight", n_embd, 1);
    for (const char* m : {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight"}) {
      if (st.ok()) st = add(p + m, n_embd, n_embd);
    }
    if (st.ok()) st = add(p + "ffn_norm.weight", n_embd, 1);
    if (st.ok()) st = add(p + "ffn_gate.weight", n_embd, n_ff);
    if (st.ok()) st = add(p + "ffn_up.weight", n_embd, n_ff);
    if (st.ok()) st = add(p + "ffn_down.weight", n_ff, n_embd);
  }
  if (!st.ok()) return st;
  auto f = gguf::GgufFile::FromBytes(w.WriteToString(), "random-llama");
  if (!f.ok()) return f.status();
  return model::Model::FromGguf(*std::move(f));
}

int Run(const std::string& name, model::Model& target, const std::string& draft_path, const std::string& prompt) {
  BackendOptions bo;
  bo.n_threads = absl::GetFlag(FLAGS_threads);
  bo.device = absl::GetFlag(FLAGS_device);
  auto made = CreateBackend(absl::GetFlag(FLAGS_backend), bo);
  if (!made.ok()) return std::fprintf(stderr, "%s\n", made.status().ToString().c_str()), 1;
  Backend& backend = **made;
  if (absl::Status s = target.PlaceWeights(&backend); !s.ok())
    return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
  auto vocab = tokenizer::Vocab::FromGguf(target.file());
  if (!vocab.ok()) return std::fprintf(stderr, "%s\n", vocab.status().ToString().c_str()), 1;
  EngineParams ep;
  ep.n_ctx = 1024;
  auto engine = Engine::Create(target, ep, &backend);
  if (!engine.ok()) return std::fprintf(stderr, "%s\n", engine.status().ToString().c_str()), 1;
  DraftModelParams dp;
  dp.n_ctx = 1024;
  dp.n_threads = absl::GetFlag(FLAGS_threads);
  dp.backend = absl::GetFlag(FLAGS_backend);
  dp.device = absl::GetFlag(FLAGS_device);
  auto draft = DraftModel::Load(draft_path, dp);
  if (!draft.ok()) return std::fprintf(stderr, "%s\n", draft.status().ToString().c_str()), 1;
  if (absl::Status s = (*draft)->AttachTarget(**vocab); !s.ok())
    return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;

  GenerateParams gp;
  gp.prompt = prompt;
  gp.n_predict = absl::GetFlag(FLAGS_n_predict);
  gp.sampling.temp = 0.0f;
  gp.ignore_eos = true;
  (void)Generate(**engine, **vocab, gp);  // warm-up
  absl::StatusOr<GenerateResult> plain;
  double plain_ms = 1e300;
  for (int rep = 0; rep < 2; ++rep) {
    auto t0 = Clock::now();
    plain = Generate(**engine, **vocab, gp);
    plain_ms = std::min(plain_ms, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  if (!plain.ok()) return std::fprintf(stderr, "%s\n", plain.status().ToString().c_str()), 1;
  std::printf("\n## %s: %lld weight bytes, prompt %zu tokens, %zu generated\n\n", name.c_str(),
              static_cast<long long>(target.weight_bytes()), plain->prompt_ids.size(), plain->output_ids.size());
  std::printf("| type | tokens/pass | acceptance | #gen drafts | #acc tokens | ms | speedup | output |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  std::printf("| none | 1.00 | - | - | - | %.0f | 1.00x | - |\n", plain_ms);
  for (SpecType t : {SpecType::kNgramSimple, SpecType::kNgramMapK, SpecType::kNgramMapK4v, SpecType::kNgramCache,
                     SpecType::kDraftModel}) {
    SpecConfig c;
    c.type = t;
    c.draft_max = absl::GetFlag(FLAGS_draft_max);
    c.draft_min = absl::GetFlag(FLAGS_draft_min);
    c.draft_p_min = static_cast<float>(absl::GetFlag(FLAGS_draft_p_min));
    c.ngram_size_n = absl::GetFlag(FLAGS_ngram_n);
    c.ngram_size_m = absl::GetFlag(FLAGS_ngram_m);
    SpecResources r;
    r.draft_model = draft->get();
    absl::StatusOr<SpecGenerateResult> res;
    double ms = 1e300;
    for (int rep = 0; rep < 2; ++rep) {  // best of two (shared machines are noisy)
      auto s = SpecSession::Create(c, r);
      if (!s.ok()) return std::fprintf(stderr, "%s\n", s.status().ToString().c_str()), 1;
      auto t1 = Clock::now();
      res = GenerateSpeculative(**engine, **vocab, gp, s->get());
      ms = std::min(ms, std::chrono::duration<double, std::milli>(Clock::now() - t1).count());
      if (!res.ok()) return std::fprintf(stderr, "%s\n", res.status().ToString().c_str()), 1;
    }
    std::printf("| %s | %.2f | %.3f | %lld | %lld | %.0f | %.2fx | %s |\n", SpecTypeName(t), res->tokens_per_pass(),
                res->stats.acceptance_rate(), static_cast<long long>(res->stats.gen_drafts),
                static_cast<long long>(res->stats.acc_tokens), ms, plain_ms / ms,
                res->gen.output_ids == plain->output_ids ? "same" : "DIFFERENT");
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace herd::engine::spec

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using namespace herd::engine::spec;
  const std::string shared = herd::SharedDir();
  if (shared.empty()) return std::fprintf(stderr, "%s\n", herd::kSharedDirMissing), 1;
  const std::string stories = shared + "/models/stories260K.gguf";
  std::ifstream in(shared + "/models/stories260K.run_c_t0_n256.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string story = ss.str();
  const std::string prompt = "Rewrite the story below, keeping every sentence.\n\n" + story.substr(0, 330) +
                             "\n\nRewritten story:\n" + story.substr(0, 40);
  auto m = herd::model::Model::Load(stories);
  if (!m.ok()) return std::fprintf(stderr, "%s\n", m.status().ToString().c_str()), 1;
  int rc = Run("stories260K (draft: itself)", **m, stories, prompt);
  if (rc != 0 || absl::GetFlag(FLAGS_skip_big)) return rc;
  auto big = RandomModel((*m)->file(), absl::GetFlag(FLAGS_big_embd), absl::GetFlag(FLAGS_big_layers),
                         absl::GetFlag(FLAGS_big_ff), absl::GetFlag(FLAGS_big_heads));
  if (!big.ok()) return std::fprintf(stderr, "%s\n", big.status().ToString().c_str()), 1;
  return Run(absl::StrCat("random llama ", absl::GetFlag(FLAGS_big_embd), "x", absl::GetFlag(FLAGS_big_layers),
                          " F16 (draft: stories260K)"),
             **big, stories, prompt);
}
