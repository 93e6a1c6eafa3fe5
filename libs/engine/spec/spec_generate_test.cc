// Speculative generation on the real models equals plain generation. For every type
// and every (n_min, n_max) in {(1,2), (1,4), (4,8), (4,12), (8,16)}, greedy outputs on
// stories260K and llama-2-tiny-random equal Generate()'s over several prompts,
// including one holding a long passage the model repeats, where the n-gram types must
// have drafts accepted. Also temp > 0 with sampled draft-model drafts.
#include "libs/engine/spec/spec_generate.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

#include "tests/cpu_backend_for_tests.h"
#include "tests/shared_data.h"

namespace herd::engine::spec {
namespace {

constexpr SpecType kTypes[] = {SpecType::kNgramSimple, SpecType::kNgramMapK, SpecType::kNgramMapK4v,
                               SpecType::kNgramCache, SpecType::kDraftModel};
constexpr std::pair<int, int> kMinMax[] = {{1, 2}, {1, 4}, {4, 8}, {4, 12}, {8, 16}};

struct Loaded {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<tokenizer::Vocab> vocab;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<DraftModel> draft;  // the same model drafting for itself
};

class SpecGenerateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shared_ = SharedDir();
    if (shared_.empty()) GTEST_SKIP() << kSharedDirMissing;
  }
  Loaded Load(const std::string& name) {
    Loaded l;
    const std::string path = shared_ + "/models/" + name;
    auto m = model::Model::Load(path);
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return l;
    l.model = *std::move(m);
    auto v = tokenizer::Vocab::FromGguf(l.model->file());
    EXPECT_TRUE(v.ok()) << v.status();
    l.vocab = *std::move(v);
    EngineParams ep;
    ep.n_ctx = 512;
    auto e = Engine::Create(*l.model, ep, &backend_);
    EXPECT_TRUE(e.ok()) << e.status();
    l.engine = *std::move(e);
    DraftModelParams dp;
    dp.n_ctx = 512;
    auto d = DraftModel::Load(path, dp);
    EXPECT_TRUE(d.ok()) << d.status();
    l.draft = *std::move(d);
    EXPECT_TRUE(l.draft->AttachTarget(*l.vocab).ok());
    return l;
  }
  // The repeat prompt: the model's own greedy story, then its first words again.
  std::string RepeatPrompt() const {
    std::ifstream in(shared_ + "/models/stories260K.run_c_t0_n256.txt");
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string story = ss.str().substr(0, 330);
    return story + "\n" + story.substr(0, 40);
  }

  std::string shared_;
  std::unique_ptr<Backend> backend_owner_ = CpuBackendForTests(2);
  Backend& backend_ = *backend_owner_;
};

void CheckModel(Loaded& l, const std::vector<std::string>& prompts, int n_predict, size_t repeat_prompt) {
  for (size_t pi = 0; pi < prompts.size(); ++pi) {
    GenerateParams gp;
    gp.prompt = prompts[pi];
    gp.n_predict = n_predict;
    gp.sampling.temp = 0.0f;
    auto plain = Generate(*l.engine, *l.vocab, gp);
    ASSERT_TRUE(plain.ok()) << plain.status();
    for (SpecType t : kTypes) {
      for (auto [n_min, n_max] : kMinMax) {
        SCOPED_TRACE(testing::Message() << "prompt " << pi << ", " << SpecTypeName(t) << ", n_min " << n_min
                                        << ", n_max " << n_max);
        SpecConfig c;
        c.type = t;
        c.draft_min = n_min;
        c.draft_max = n_max;
        c.ngram_size_n = 3;  // the defaults (12/48) find little in 100-token outputs
        c.ngram_size_m = 16;
        SpecResources r;
        r.draft_model = l.draft.get();
        auto s = SpecSession::Create(c, r);
        ASSERT_TRUE(s.ok()) << s.status();
        auto spec = GenerateSpeculative(*l.engine, *l.vocab, gp, s->get());
        ASSERT_TRUE(spec.ok()) << spec.status();
        EXPECT_EQ(spec->gen.output_ids, plain->output_ids);
        EXPECT_EQ(spec->gen.text, plain->text);
        EXPECT_EQ(spec->gen.stop, plain->stop);
        const SpecStats& st = spec->stats;
        EXPECT_LE(st.acc_tokens, st.gen_tokens);
        EXPECT_EQ(st.type, t);
        if (pi == repeat_prompt && t != SpecType::kDraftModel) {
          EXPECT_GT(st.acc_tokens, 0) << st.ToString();
        }
        if (t == SpecType::kDraftModel && n_min <= 4) {
          // Drafting for itself, every draft is the greedy continuation.
          EXPECT_EQ(st.acc_tokens, st.gen_tokens) << st.ToString();
        }
        if (pi == repeat_prompt && n_min == 1 && n_max == 4) {
          std::printf("%-14s %s, %.2f tokens/pass\n", SpecTypeName(t), st.ToString().c_str(), spec->tokens_per_pass());
        }
      }
    }
  }
}

TEST_F(SpecGenerateTest, GreedyEqualsPlainOnStories260K) {
  Loaded l = Load("stories260K.gguf");
  ASSERT_NE(l.engine, nullptr);
  CheckModel(l, {"Once upon a time", "One day, Lily met a Shoggoth", RepeatPrompt()}, 96, 2);
}

TEST_F(SpecGenerateTest, GreedyEqualsPlainOnLlama2TinyRandom) {
  Loaded l = Load("llama-2-tiny-random.gguf");
  ASSERT_NE(l.engine, nullptr);
  CheckModel(l, {"Once upon a time", "The quick brown fox", RepeatPrompt()}, 64, 2);
}

TEST_F(SpecGenerateTest, SampledDraftsAtTemperature) {
  Loaded l = Load("stories260K.gguf");
  ASSERT_NE(l.engine, nullptr);
  GenerateParams gp;
  gp.prompt = "Once upon a time";
  gp.n_predict = 64;
  gp.sampling.temp = 0.8f;
  gp.sampling.seed = 42;
  SpecConfig c;
  c.type = SpecType::kDraftModel;
  c.draft_max = 6;
  c.draft_p_min = 0.0f;
  SpecResources r;
  r.draft_model = l.draft.get();
  auto s = SpecSession::Create(c, r, /*seed=*/9);
  ASSERT_TRUE(s.ok());
  auto spec = GenerateSpeculative(*l.engine, *l.vocab, gp, s->get());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_GT(spec->gen.output_ids.size(), 8u);
  // Draft and target are the same model: nearly every sampled draft token is accepted
  // (p/q = 1 up to the top-k cut of q and batching rounding).
  EXPECT_GT(spec->stats.acceptance_rate(), 0.5) << spec->stats.ToString();
  // n-gram drafts at temperature: each output token is one Sample() call on the same
  // logits, as in plain generation with the same seed.
  auto plain = Generate(*l.engine, *l.vocab, gp);
  ASSERT_TRUE(plain.ok());
  c.type = SpecType::kNgramSimple;
  c.ngram_size_n = 2;
  auto s2 = SpecSession::Create(c, r);
  auto ng = GenerateSpeculative(*l.engine, *l.vocab, gp, s2->get());
  ASSERT_TRUE(ng.ok());
  EXPECT_EQ(ng->gen.output_ids, plain->output_ids);
}

}  // namespace
}  // namespace herd::engine::spec
