// SpecConfig validation names the field; type names; proto overlay; the factory.
#include <cmath>
#include <string>

#include "gtest/gtest.h"

#include "libs/engine/spec/session.h"
#include "libs/engine/spec/spec_config.h"
#include "libs/engine/spec/spec_proto.h"

namespace herd::engine::spec {
namespace {

void ExpectBad(const SpecConfig& c, const std::string& field) {
  absl::Status s = ValidateSpecConfig(c);
  ASSERT_FALSE(s.ok()) << field;
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message().substr(0, field.size() + 1), field + ":") << s;
}

TEST(SpecConfig, DefaultsAreLlamaCpps) {
  SpecConfig c;
  EXPECT_EQ(c.type, SpecType::kNone);
  EXPECT_EQ(c.draft_max, 16);
  EXPECT_EQ(c.draft_min, 0);
  EXPECT_FLOAT_EQ(c.draft_p_min, 0.75f);
  EXPECT_EQ(c.ngram_size_n, 12);
  EXPECT_EQ(c.ngram_size_m, 48);
  EXPECT_EQ(c.ngram_check_rate, 1);
  EXPECT_EQ(c.ngram_min_hits, 1);
  EXPECT_TRUE(ValidateSpecConfig(c).ok());
}

TEST(SpecConfig, OutOfRangeNamesTheField) {
  auto with = [](auto f) {
    SpecConfig c;
    f(c);
    return c;
  };
  ExpectBad(with([](SpecConfig& c) { c.ngram_size_n = 0; }), "ngram_size_n");
  ExpectBad(with([](SpecConfig& c) { c.ngram_size_n = 1025; }), "ngram_size_n");
  ExpectBad(with([](SpecConfig& c) { c.ngram_size_m = 0; }), "ngram_size_m");
  ExpectBad(with([](SpecConfig& c) { c.ngram_size_m = 1025; }), "ngram_size_m");
  ExpectBad(with([](SpecConfig& c) { c.ngram_check_rate = 0; }), "ngram_check_rate");
  ExpectBad(with([](SpecConfig& c) { c.ngram_min_hits = 0; }), "ngram_min_hits");
  ExpectBad(with([](SpecConfig& c) { c.draft_max = -1; }), "draft_max");
  ExpectBad(with([](SpecConfig& c) { c.draft_max = 1025; }), "draft_max");
  ExpectBad(with([](SpecConfig& c) { c.draft_min = -1; }), "draft_min");
  ExpectBad(with([](SpecConfig& c) { c.draft_min = 17; }), "draft_min");
  ExpectBad(with([](SpecConfig& c) { c.draft_p_min = 1.5f; }), "draft_p_min");
  ExpectBad(with([](SpecConfig& c) { c.draft_p_min = -0.1f; }), "draft_p_min");
  ExpectBad(with([](SpecConfig& c) { c.draft_p_min = std::nanf(""); }), "draft_p_min");
  // The edges are fine.
  for (int v : {1, 1024}) {
    SpecConfig c;
    c.ngram_size_n = c.ngram_size_m = v;
    EXPECT_TRUE(ValidateSpecConfig(c).ok()) << v;
  }
  SpecConfig c;
  c.draft_max = 0;
  c.draft_p_min = 1.0f;
  EXPECT_TRUE(ValidateSpecConfig(c).ok());
}

TEST(SpecConfig, TypeNames) {
  for (SpecType t : {SpecType::kNone, SpecType::kNgramSimple, SpecType::kNgramMapK, SpecType::kNgramMapK4v,
                     SpecType::kNgramCache, SpecType::kDraftModel}) {
    auto p = ParseSpecType(SpecTypeName(t));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, t);
  }
  EXPECT_EQ(*ParseSpecType("ngram_map_k4v"), SpecType::kNgramMapK4v);
  EXPECT_EQ(*ParseSpecType(""), SpecType::kNone);
  EXPECT_EQ(*ParseSpecType("draft"), SpecType::kDraftModel);
  auto bad = ParseSpecType("eagle3", "spec_type");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("spec_type: unknown speculative type \"eagle3\""), std::string::npos);
  EXPECT_NE(bad.status().message().find("ngram-map-k4v"), std::string::npos);
}

TEST(SpecProto, OverlaysSetFieldsOnDefaults) {
  SpecConfig defaults;
  defaults.type = SpecType::kNgramSimple;
  defaults.ngram_size_n = 4;
  herd::v1::SpeculativeConfig p;
  p.set_draft_max(8);
  auto c = SpecConfigFromProto(p, defaults);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->type, SpecType::kNgramSimple);
  EXPECT_EQ(c->ngram_size_n, 4);
  EXPECT_EQ(c->draft_max, 8);
  p.set_type("ngram-map-k");
  p.set_ngram_size_n(0);
  auto bad = SpecConfigFromProto(p, defaults, "speculative.");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "speculative.ngram_size_n: 0 is outside 1..1024");
  p.set_type("nope");
  EXPECT_NE(SpecConfigFromProto(p, defaults, "speculative.").status().message().find("speculative.type:"),
            std::string::npos);
  herd::v1::SpeculativeConfig out;
  SpecConfigToProto(*c, &out);
  auto back = SpecConfigFromProto(out, SpecConfig());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *c);
  SpecStats st;
  st.type = SpecType::kNgramCache;
  st.calls = 5;
  st.acc_tokens = 3;
  herd::v1::SpeculativeStats ps;
  SpecStatsToProto(st, &ps);
  EXPECT_EQ(ps.type(), "ngram-cache");
  SpecStats st2 = SpecStatsFromProto(ps);
  EXPECT_EQ(st2.type, SpecType::kNgramCache);
  EXPECT_EQ(st2.calls, 5);
  EXPECT_EQ(st2.acc_tokens, 3);
}

TEST(CreateDrafter, EveryTypeAndTheDraftModelPrecondition) {
  for (SpecType t :
       {SpecType::kNone, SpecType::kNgramSimple, SpecType::kNgramMapK, SpecType::kNgramMapK4v, SpecType::kNgramCache}) {
    SpecConfig c;
    c.type = t;
    auto d = CreateDrafter(c, {});
    ASSERT_TRUE(d.ok()) << SpecTypeName(t);
    EXPECT_EQ((*d)->type(), t);
  }
  SpecConfig c;
  c.type = SpecType::kDraftModel;
  auto d = CreateDrafter(c, {});
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  c.ngram_size_m = 0;
  EXPECT_EQ(CreateDrafter(c, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace herd::engine::spec
