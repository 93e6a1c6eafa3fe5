#include "libs/engine/sampling_proto.h"

#include <cmath>
#include <string>

#include "gtest/gtest.h"

namespace herd::engine {
namespace {

TEST(SamplingProtoTest, UnsetFieldsKeepTheDefaults) {
  auto p = SamplingParamsFromProto(herd::v1::SamplingParams());
  ASSERT_TRUE(p.ok()) << p.status();
  const SamplingParams d;
  EXPECT_EQ(p->temp, d.temp);
  EXPECT_EQ(p->top_k, d.top_k);
  EXPECT_EQ(p->top_p, d.top_p);
  EXPECT_EQ(p->min_p, d.min_p);
  EXPECT_EQ(p->repeat_penalty, d.repeat_penalty);
  EXPECT_EQ(p->penalty_last_n, d.penalty_last_n);
  EXPECT_EQ(p->seed, kRandomSeed);
  EXPECT_TRUE(p->grammar.empty());
  EXPECT_TRUE(p->logit_bias.empty());
}

TEST(SamplingProtoTest, RoundTrip) {
  SamplingParams p;
  p.temp = 0.0f;
  p.top_k = -1;
  p.top_p = 0.5f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.1f;
  p.penalty_last_n = -1;
  p.presence_penalty = 0.25f;
  p.frequency_penalty = -0.5f;
  p.seed = 77;
  p.grammar = "root ::= \"a\"";
  p.logit_bias = {{3, -INFINITY}, {5, 2.0f}};
  herd::v1::SamplingParams proto;
  SamplingParamsToProto(p, &proto);
  EXPECT_TRUE(proto.has_temperature() && proto.has_seed() && proto.has_grammar());
  auto back = SamplingParamsFromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->temp, p.temp);
  EXPECT_EQ(back->top_k, p.top_k);
  EXPECT_EQ(back->top_p, p.top_p);
  EXPECT_EQ(back->min_p, p.min_p);
  EXPECT_EQ(back->repeat_penalty, p.repeat_penalty);
  EXPECT_EQ(back->penalty_last_n, p.penalty_last_n);
  EXPECT_EQ(back->presence_penalty, p.presence_penalty);
  EXPECT_EQ(back->frequency_penalty, p.frequency_penalty);
  EXPECT_EQ(back->seed, p.seed);
  EXPECT_EQ(back->grammar, p.grammar);
  EXPECT_EQ(back->logit_bias, p.logit_bias);
  // A random seed stays off the wire.
  p.seed = kRandomSeed;
  SamplingParamsToProto(p, &proto);
  EXPECT_FALSE(proto.has_seed());
}

TEST(SamplingProtoTest, ErrorsNameTheProtoField) {
  struct Case {
    void (*mutate)(herd::v1::SamplingParams*);
    std::string want;
  };
  const Case cases[] = {
      {[](herd::v1::SamplingParams* s) { s->set_temperature(-1); },
       "sampling.temperature: must be a finite number >= 0 (got -1)"},
      {[](herd::v1::SamplingParams* s) { s->set_temperature(NAN); },
       "sampling.temperature: must be a finite number >= 0 (got nan)"},
      {[](herd::v1::SamplingParams* s) { s->set_top_p(1.5f); }, "sampling.top_p: must be in [0, 1] (got 1.5)"},
      {[](herd::v1::SamplingParams* s) { s->set_min_p(-0.5f); }, "sampling.min_p: must be in [0, 1] (got -0.5)"},
      {[](herd::v1::SamplingParams* s) { s->set_repeat_penalty(0); },
       "sampling.repeat_penalty: must be a finite number > 0 (got 0)"},
      {[](herd::v1::SamplingParams* s) { s->set_repeat_last_n(-2); }, "sampling.repeat_last_n: must be >= -1 (got -2)"},
      {[](herd::v1::SamplingParams* s) { s->set_presence_penalty(INFINITY); },
       "sampling.presence_penalty: must be finite (got inf)"},
      {[](herd::v1::SamplingParams* s) { s->set_frequency_penalty(-INFINITY); },
       "sampling.frequency_penalty: must be finite (got -inf)"},
      {[](herd::v1::SamplingParams* s) { s->add_logit_bias()->set_bias(NAN); },
       "sampling.logit_bias[0].bias: must be a finite number or -inf (got nan)"},
      {[](herd::v1::SamplingParams* s) { s->add_logit_bias()->set_token_id(-3); },
       "sampling.logit_bias[0].token_id: -3 is negative"},
      {[](herd::v1::SamplingParams* s) { s->set_grammar("root ::= x"); }, "sampling.grammar: undefined rule 'x'"},
  };
  for (const Case& c : cases) {
    herd::v1::SamplingParams s;
    c.mutate(&s);
    auto p = SamplingParamsFromProto(s);
    ASSERT_FALSE(p.ok()) << c.want;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.want;
    EXPECT_EQ(std::string(p.status().message()).rfind(c.want, 0), 0u) << p.status();
  }
  // The worker's prefix.
  herd::v1::SamplingParams s;
  s.set_top_p(2);
  auto p = SamplingParamsFromProto(s, "start.sampling.");
  EXPECT_EQ(std::string(p.status().message()).rfind("start.sampling.top_p: ", 0), 0u) << p.status();
  // Valid boundaries.
  s.Clear();
  s.set_temperature(0);
  s.set_top_p(0);
  s.set_min_p(1);
  s.set_repeat_last_n(-1);
  s.set_top_k(-5);
  s.add_logit_bias()->set_bias(-INFINITY);
  EXPECT_TRUE(SamplingParamsFromProto(s).ok());
}

TEST(SamplingProtoTest, LogitBiasIdsAgainstTheVocabulary) {
  herd::v1::SamplingParams s;
  s.add_logit_bias()->set_token_id(0);
  s.add_logit_bias()->set_token_id(511);
  EXPECT_TRUE(CheckLogitBiasIds(s, 512).ok());
  s.add_logit_bias()->set_token_id(512);
  absl::Status st = CheckLogitBiasIds(s, 512, "start.sampling.");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "start.sampling.logit_bias[2].token_id: 512 is outside the vocabulary [0, 512)");
}

}  // namespace
}  // namespace herd::engine
