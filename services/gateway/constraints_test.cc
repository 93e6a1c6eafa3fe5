#include "services/gateway/constraints.h"

#include <cmath>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "libs/gguf/gguf.h"
#include "libs/grammar/gbnf.h"
#include "libs/grammar/json_schema.h"
#include "tests/shared_data.h"
#include "tests/shared_vocab.h"

namespace herd::gateway {
namespace {

using json = nlohmann::json;

class ConstraintsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = SharedDir();
    if (dir.empty()) GTEST_SKIP() << kSharedDirMissing;
    auto v = LoadSharedVocab(dir);
    ASSERT_TRUE(v.ok()) << v.status();
    vocab_ = std::move(*v);
  }
  absl::Status Parse(const std::string& body, v1::SamplingParams* out) {
    return ParseConstraints(json::parse(body), *vocab_, out);
  }
  std::unique_ptr<tokenizer::Vocab> vocab_;
};

TEST_F(ConstraintsTest, GrammarForms) {
  v1::SamplingParams sp;
  ASSERT_TRUE(Parse(R"({"grammar": "root ::= \"a\""})", &sp).ok());
  EXPECT_EQ(sp.grammar(), "root ::= \"a\"");

  sp.Clear();
  ASSERT_TRUE(Parse(R"({"json_schema": {"type": "integer"}})", &sp).ok());
  EXPECT_TRUE(grammar::Grammar::Parse(sp.grammar()).ok());
  EXPECT_NE(sp.grammar().find("integral-part"), std::string::npos);

  sp.Clear();
  ASSERT_TRUE(Parse(R"({"response_format": {"type": "text"}})", &sp).ok());
  EXPECT_FALSE(sp.has_grammar());

  sp.Clear();
  ASSERT_TRUE(Parse(R"({"response_format": {"type": "json_object"}})", &sp).ok());
  EXPECT_EQ(sp.grammar(), grammar::JsonObjectGrammar());

  sp.Clear();
  ASSERT_TRUE(Parse(R"({"response_format": {"type": "json_object", "schema": {"type": "boolean"}}})", &sp).ok());
  EXPECT_EQ(sp.grammar(), *grammar::JsonSchemaToGrammar(json{{"type", "boolean"}}));

  sp.Clear();
  ASSERT_TRUE(Parse(R"({"response_format": {"type": "json_schema", "json_schema":
      {"name": "x", "strict": true, "schema": {"type": "array", "items": {"type": "null"}}}}})",
                    &sp)
                  .ok());
  EXPECT_EQ(sp.grammar(),
            *grammar::JsonSchemaToGrammar(json::parse(R"({"type": "array", "items": {"type": "null"}})")));

  sp.Clear();
  ASSERT_TRUE(Parse(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})", &sp).ok());
  EXPECT_EQ(sp.grammar(), grammar::JsonObjectGrammar());

  sp.Clear();
  ASSERT_TRUE(
      Parse(R"({"grammar": null, "json_schema": null, "response_format": null, "logit_bias": null})", &sp).ok());
  EXPECT_FALSE(sp.has_grammar());
  EXPECT_EQ(sp.logit_bias_size(), 0);
}

TEST_F(ConstraintsTest, Errors) {
  const std::pair<const char*, const char*> kBad[] = {
      {R"({"grammar": 5})", "grammar: must be a string"},
      {R"({"grammar": "root ::= x"})", "grammar: undefined rule 'x'"},
      {R"({"grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}})",
       "grammar, response_format: give only one"},
      {R"({"json_schema": {"type": "string"}, "response_format": {"type": "json_object"}})", "give only one"},
      {R"({"json_schema": {"type": "number", "minimum": 0, "multipleOf": 2}})", "json_schema/multipleOf"},
      {R"({"response_format": "json"})", "response_format: must be an object"},
      {R"({"response_format": {}})", "response_format.type: required"},
      {R"j({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "(?=a)"}}}})j",
       "response_format.json_schema.schema/pattern: only (...) and (?:...) groups are supported"},
      {R"({"response_format": {"type": "json_object", "schema": {"enum": []}}})", "response_format.schema/enum"},
      {R"({"logit_bias": 3})", "logit_bias: must be an object"},
      {R"({"logit_bias": {"-1": 1}})", "token id -1 is outside the vocabulary [0, 512)"},
      {R"({"logit_bias": {"12": "x"}})", "must be a number or false"},
      {R"({"logit_bias": [[1]]})", "logit_bias[0]: must be a [token, bias] pair"},
      {R"({"logit_bias": [[512, 1]]})", "logit_bias[0]: token id 512 is outside"},
      {R"({"logit_bias": [[null, 1]]})", "integer id or a string"},
      {R"({"logit_bias": [["", 1]]})", "the string has no tokens"},
  };
  for (const auto& [body, want] : kBad) {
    v1::SamplingParams sp;
    absl::Status st = Parse(body, &sp);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_NE(std::string(st.message()).find(want), std::string::npos) << body << " -> " << st;
  }
}

TEST_F(ConstraintsTest, LogitBiasForms) {
  v1::SamplingParams sp;
  ASSERT_TRUE(Parse(R"({"logit_bias": {"13": -100, "14": 2.5, "15": false}})", &sp).ok());
  ASSERT_EQ(sp.logit_bias_size(), 3);
  EXPECT_EQ(sp.logit_bias(0).token_id(), 13);
  EXPECT_EQ(sp.logit_bias(0).bias(), -100.0f);
  EXPECT_EQ(sp.logit_bias(1).bias(), 2.5f);
  EXPECT_TRUE(std::isinf(sp.logit_bias(2).bias()) && sp.logit_bias(2).bias() < 0);

  sp.Clear();
  ASSERT_TRUE(Parse(R"({"logit_bias": [[7, 1.5], ["Hello world", false]]})", &sp).ok());
  const std::vector<int32_t> ids = vocab_->Tokenize("Hello world", false, false);
  ASSERT_EQ(sp.logit_bias_size(), 1 + static_cast<int>(ids.size()));
  EXPECT_EQ(sp.logit_bias(0).token_id(), 7);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(sp.logit_bias(1 + static_cast<int>(i)).token_id(), ids[i]);
    EXPECT_TRUE(std::isinf(sp.logit_bias(1 + static_cast<int>(i)).bias()));
  }
}

// logit_bias cannot grow past the vocabulary: more entries than n_vocab, or strings that
// tokenize into more biased ids than that, are refused.
TEST_F(ConstraintsTest, LogitBiasIsBoundedByTheVocabulary) {
  auto body = [](int n, const nlohmann::json& token) {
    nlohmann::json lb = nlohmann::json::array();
    for (int i = 0; i < n; ++i) lb.push_back(nlohmann::json::array({token, 1}));
    return nlohmann::json{{"logit_bias", lb}}.dump();
  };
  v1::SamplingParams sp;
  EXPECT_TRUE(Parse(body(512, 12), &sp).ok());
  absl::Status st = Parse(body(513, 12), &sp);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("logit_bias: 513 entries exceed the vocabulary's 512 tokens"),
            std::string::npos)
      << st;
  v1::SamplingParams sp2;
  st = Parse(body(300, "Once upon a time"), &sp2);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("biased tokens (the vocabulary's size)"), std::string::npos) << st;
}

TEST_F(ConstraintsTest, HasConstraints) {
  EXPECT_FALSE(HasConstraints(json::parse(R"({"prompt": "x", "grammar": null})")));
  EXPECT_TRUE(HasConstraints(json::parse(R"({"logit_bias": {}})")));
  EXPECT_TRUE(HasConstraints(json::parse(R"({"response_format": {"type": "text"}})")));
  EXPECT_FALSE(HasConstraints(json::parse("[]")));
}

}  // namespace
}  // namespace herd::gateway
