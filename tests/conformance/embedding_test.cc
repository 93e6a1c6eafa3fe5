// Embeddings tied to llama.cpp's numbers. There are no llama.cpp embedding reference
// files, but the hidden states herd pools are exactly what llama.cpp's LM head reads
// (res->t_embd): hidden · output.weight (+ output.bias) = logits. For every A case
// (stories260K, F32 weights) the prompt's hidden states, times the output matrix in
// double, must equal llama.cpp's logits (alt_f32_kv_no_flash_attn: F32 K/V) within the
// tolerance reference_test holds herd's own logits to; and the pooled embeddings must be
// the mean / first / last of those same rows, with unit Euclidean norm.
#include "libs/engine/embedding.h"

#include <dirent.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "libs/engine/engine.h"
#include "libs/model/model.h"
#include "tests/cpu_backend_for_tests.h"
#include "tests/shared_data.h"

namespace herd {
namespace {

using json = nlohmann::json;

std::vector<std::string> StoriesCases(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.rfind("A-stories260K-", 0) == 0 && n.size() > 5 && n.substr(n.size() - 5) == ".json") {
      out.push_back(dir + "/" + n);
    }
  }
  closedir(d);
  return out;
}

TEST(EmbeddingReference, HiddenStatesReproduceLlamaCppLogits) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << "../shared not found: set HERD_SHARED";
  const std::vector<std::string> cases = StoriesCases(shared + "/reference");
  ASSERT_GE(cases.size(), 4u);
  auto model = model::Model::Load(shared + "/models/stories260K.gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  const model::Weights& w = (*model)->weights();
  ASSERT_EQ(w.output->type, GgmlType::F32) << "stories260K's output matrix is F32";
  ASSERT_EQ(w.output_b, nullptr);
  const float* out_w = static_cast<const float*>(w.output->data);
  const int64_t n_embd = (*model)->hparams().n_embd, n_vocab = (*model)->hparams().n_vocab;
  std::unique_ptr<Backend> backend_owner = CpuBackendForTests(2);
  Backend& backend = *backend_owner;
  for (const std::string& path : cases) {
    SCOPED_TRACE(path);
    std::ifstream in(path);
    const json ref = json::parse(in);
    const json& alt = ref["alt_f32_kv_no_flash_attn"];
    const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
    const auto positions = alt["logits"]["positions"].get<std::vector<int>>();
    engine::EngineParams ep;
    ep.n_ctx = 64;
    ep.kv_type = GgmlType::F32;
    auto eng = engine::Engine::Create(**model, ep, &backend);
    ASSERT_TRUE(eng.ok()) << eng.status();

    engine::Batch b;
    for (size_t i = 0; i < prompt.size(); ++i) b.Add(prompt[i], static_cast<int32_t>(i), 0, true);
    ASSERT_TRUE((*eng)->DecodeEmbeddings(b).ok());
    ASSERT_EQ((*eng)->n_embd_outputs(), static_cast<int64_t>(prompt.size()));
    std::vector<float> hidden;
    for (size_t t = 0; t < prompt.size(); ++t) {
      const float* h = (*eng)->Embedding(static_cast<int64_t>(t));
      hidden.insert(hidden.end(), h, h + n_embd);
    }
    double d = 0;
    for (size_t k = 0; k < positions.size(); ++k) {
      const size_t t = static_cast<size_t>(positions[k]);
      if (t >= prompt.size()) continue;  // generated positions: not part of the prompt
      const json& row = alt["logits"]["values"][k];
      for (int64_t v = 0; v < n_vocab; ++v) {
        double logit = 0;
        for (int64_t i = 0; i < n_embd; ++i) {
          logit += static_cast<double>(out_w[v * n_embd + i]) * hidden[t * static_cast<size_t>(n_embd) + i];
        }
        d = std::max(d, std::fabs(logit - row[static_cast<size_t>(v)].get<double>()));
      }
    }
    std::printf("%s: hidden · output vs llama.cpp logits: max |d| %.3g over %zu prompt positions\n", path.c_str(), d,
                prompt.size());
    EXPECT_LE(d, 1e-4);
    (*eng)->kv().Clear();

    // Pooling picks / averages exactly these rows; normalized vectors have unit norm.
    const int64_t n = static_cast<int64_t>(prompt.size());
    for (engine::Pooling p : {engine::Pooling::kMean, engine::Pooling::kCls, engine::Pooling::kLast}) {
      auto e = (*eng)->Embed(prompt, p, 3);
      ASSERT_TRUE(e.ok()) << e.status();
      EXPECT_EQ((*eng)->kv().used(), 0);
      auto want = engine::PoolHiddenStates(hidden.data(), n_embd, n, p);
      ASSERT_TRUE(want.ok());
      double dp = 0;
      for (int64_t i = 0; i < n_embd; ++i) dp = std::max(dp, std::fabs(static_cast<double>((*e)[i]) - (*want)[i]));
      EXPECT_LE(dp, 1e-5) << engine::PoolingName(p);
      ASSERT_TRUE(engine::NormalizeEmbedding(&*e, 2).ok());
      double sq = 0;
      for (float x : *e) sq += static_cast<double>(x) * x;
      EXPECT_NEAR(std::sqrt(sq), 1.0, 1e-6) << engine::PoolingName(p);
    }
  }
}

}  // namespace
}  // namespace herd
