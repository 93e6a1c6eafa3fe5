#include "libs/grammar/json_schema.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

#include "libs/grammar/gbnf.h"
#include "libs/grammar/matcher.h"
#include "libs/grammar/random_walk.h"

namespace herd::grammar {
namespace {

using json = nlohmann::json;

const char* kSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":10},"age":{"type":"integer"},
        "ok":{"type":"boolean"}},"required":["name","age"]})",
    R"({"type":"array","items":{"type":"number"},"minItems":1,"maxItems":4})",
    R"({"enum":["red","green",1,null,{"k":"v"}]})",
    R"({"const":{"a":[1,2,"x\"y"]}})",
    R"({"anyOf":[{"type":"string","maxLength":3},{"type":"null"}]})",
    R"({"oneOf":[{"type":"integer"},{"type":"boolean"}]})",
    R"({"type":["integer","boolean","null"]})",
    R"({"$defs":{"pt":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},"required":["x","y"]}},
        "type":"array","items":{"$ref":"#/$defs/pt"},"maxItems":3})",
    R"({"definitions":{"node":{"type":"object","properties":{"v":{"type":"integer"},
        "kids":{"type":"array","items":{"$ref":"#/definitions/node"},"maxItems":2}},"required":["v"]}},
        "$ref":"#/definitions/node"})",
    R"({"type":"object","properties":{"a":{"type":"string","maxLength":2},"ab":{"type":"null"}},
        "additionalProperties":{"type":"integer"}})",
    R"({"type":"object","additionalProperties":false,"properties":{"b":{"type":"null"},"c":{"const":3}}})",
    R"({"type":"object","additionalProperties":true})",
    R"({"type":"array","prefixItems":[{"type":"string","format":"date"},{"type":"string","format":"uuid"},
        {"type":"string","format":"time"},{"type":"string","format":"date-time"}],"items":false})",
    R"({"allOf":[{"properties":{"a":{"type":"integer"}}},{"$ref":"#/$defs/b"}],
        "$defs":{"b":{"type":"object","properties":{"b":{"type":"boolean"}}}}})",
    R"({"type":"string","minLength":2,"maxLength":5})",
    R"({"type":"array","minItems":2,"maxItems":3})",
    R"({})",
    R"({"title":"t","description":"d","type":"object","properties":{"list":{"type":"array",
        "items":{"type":"string","maxLength":4},"maxItems":3},"n":{"type":"number"}},"required":["list"]})",
};

TEST(JsonSchema, RandomWalksValidate) {
  std::mt19937 rng(42);
  json cases = json::array();
  for (const char* text : kSchemas) {
    const json schema = json::parse(text);
    auto g = JsonSchemaToGrammar(schema);
    ASSERT_TRUE(g.ok()) << text << ": " << g.status();
    auto parsed = Grammar::Parse(*g);
    ASSERT_TRUE(parsed.ok()) << *g << parsed.status();
    json samples = json::array();
    int fails = 0;
    while (samples.size() < 40 && fails < 200) {
      auto m = Matcher::Create(*parsed);
      ASSERT_TRUE(m.ok());
      auto s = RandomWalk(*m, rng, 200, 3000);
      if (s.ok()) {
        samples.push_back(*s);
      } else {
        ++fails;
      }
    }
    EXPECT_EQ(samples.size(), 40u) << text << " walks failed: " << fails << "\n" << *g;
    cases.push_back(json{{"schema", schema}, {"samples", samples}});
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/json_schema_samples.json";
  {
    std::ofstream f(path);
    f << cases.dump(1, ' ', false, json::error_handler_t::replace);
  }
  const std::string cmd = "/usr/bin/python3 libs/grammar/validate_json.py " + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int rc = pclose(p);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ok "), std::string::npos) << out;
}

TEST(JsonSchema, RefusesUnsupportedKeywords) {
  struct Bad {
    const char* schema;
    const char* want;
  };
  const Bad kBad[] = {
      {R"({"type":"string","pattern":"^a+$"})", "json_schema/pattern: not supported"},
      {R"({"type":"integer","minimum":3})", "json_schema/minimum"},
      {R"({"type":"array","items":{"type":"integer"},"uniqueItems":true})", "json_schema/uniqueItems"},
      {R"({"type":"string","format":"email"})", "\"email\" is not supported"},
      {R"({"$ref":"http://example.com/x.json"})", "unresolvable or non-local reference"},
      {R"({"$ref":"#/$defs/missing"})", "unresolvable"},
      {R"(false)", "matches nothing"},
      {R"({"type":"foo"})", "unknown type"},
      {R"({"type":"string","maxLength":5000})", "over 2000"},
      {R"({"not":{"type":"null"}})", "json_schema/not"},
      {R"({"type":"object","properties":{"a":{"type":"integer"}},"minProperties":1})", "minProperties"},
      {R"({"type":"object","properties":{"a":{"type":"string","pattern":"x"}}})", "json_schema/properties/a/pattern"},
      {R"({"type":"object","properties":{"a":{}},"required":["b"]})", "\"b\" has no entry in properties"},
      {R"({"type":"array","items":{"type":"integer"},"minItems":3,"maxItems":2})", "below minItems"},
      {R"({"if":{"type":"null"},"then":{"type":"null"}})", "json_schema/if"},
  };
  for (const Bad& b : kBad) {
    auto g = JsonSchemaToGrammar(json::parse(b.schema));
    ASSERT_FALSE(g.ok()) << b.schema << " -> " << *g;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(g.status().message()).find(b.want), std::string::npos) << b.schema << ": " << g.status();
  }
}

TEST(JsonSchema, JsonObjectGrammar) {
  const std::string g = JsonObjectGrammar();
  auto parsed = Grammar::Parse(g);
  ASSERT_TRUE(parsed.ok()) << g;
  for (const char* yes : {"{}", "{\"a\": 1}", "{ \"a\" : [1, {\"b\": null}], \"c\": \"\\u00e9\" }"}) {
    auto m = Matcher::Create(*parsed);
    ASSERT_TRUE(m.ok());
    EXPECT_TRUE(m->AcceptBytes(yes).ok() && m->CanEnd()) << yes;
  }
  for (const char* no : {"[]", "1", "\"s\"", "{\"a\"}", "{a: 1}"}) {
    auto m = Matcher::Create(*parsed);
    ASSERT_TRUE(m.ok());
    EXPECT_FALSE(m->AcceptBytes(no).ok() && m->CanEnd()) << no;
  }
}

TEST(JsonSchema, LlamaCppRuleShapes) {
  auto g =
      JsonSchemaToGrammar(json::parse(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})"));
  ASSERT_TRUE(g.ok());
  EXPECT_NE(g->find("root ::= \"{\" space a-kv \"}\" space"), std::string::npos) << *g;
  EXPECT_NE(g->find("a-kv ::= \"\\\"a\\\"\" space \":\" space integer"), std::string::npos) << *g;
  EXPECT_NE(g->find("space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}"), std::string::npos) << *g;
}

}  // namespace
}  // namespace herd::grammar

namespace herd::grammar {
namespace {

// A parsed schema 10^6 levels deep (nlohmann parses iteratively; the converter copies
// subschemas, a recursion per level): refused before any walk, naming the limit.
TEST(JsonSchema, MillionDeepParsedSchemaIsRefused) {
  std::string text;
  for (int i = 0; i < 1000000; ++i) text += R"({"type":"object","properties":{"k":)";
  text += "{}";
  for (int i = 0; i < 1000000; ++i) text += "}}";
  const nlohmann::json schema = nlohmann::json::parse(text);
  auto g = JsonSchemaToGrammar(schema);
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(g.status())) << g.status();
  EXPECT_NE(std::string(g.status().message()).find("json_schema: JSON nested deeper than 256 levels"),
            std::string::npos)
      << g.status();
  // 40 schema levels (80 JSON levels) convert.
  std::string ok;
  for (int i = 0; i < 40; ++i) ok += R"({"type":"object","properties":{"k":)";
  ok += "{}";
  for (int i = 0; i < 40; ++i) ok += "}}";
  EXPECT_TRUE(JsonSchemaToGrammar(nlohmann::json::parse(ok)).ok());
}

}  // namespace
}  // namespace herd::grammar
