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
    // Numeric bounds.
    R"({"type":"integer","minimum":-5,"maximum":123})",
    R"({"type":"integer","exclusiveMinimum":0})",
    R"({"type":"integer","maximum":-7})",
    R"({"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991})",
    R"({"type":"integer","minimum":100,"exclusiveMaximum":100000})",
    R"({"type":"number","exclusiveMinimum":0,"maximum":1})",
    R"({"type":"number","minimum":-2.5,"exclusiveMaximum":10})",
    R"({"type":"number","exclusiveMaximum":0})",
    R"({"type":"number","minimum":1e-3})",
    // Patterns (Python's re.search in the validator) and email.
    R"({"type":"string","pattern":"^\\d{3}-\\d{4}$"})",
    R"({"type":"string","pattern":"^[A-Z][a-z]+$"})",
    R"({"type":"string","pattern":"^(foo|bar)+$"})",
    R"({"type":"string","pattern":"^ab+c"})",
    R"({"type":"string","pattern":"^a|b$"})",
    R"({"type":"string","pattern":"^[^\\s\"]{2,5}\\.(?:x|y)?$"})",
    R"({"type":"string","pattern":"^[\\t\"\\\\/\\u00e9-\\u00ff]+$"})",
    R"({"type":"string","pattern":"^\\w+\\s\\S\\W\\D.$"})",
    R"({"type":"string","pattern":"^x{2,}y{0,3}z?$"})",
    R"({"type":"string","format":"email"})",
    R"({"type":"object","properties":{"age":{"type":"integer","minimum":0,"maximum":120},
        "code":{"type":"string","pattern":"^[A-Z]{2}-[0-9]+$"},"mail":{"type":"string","format":"email"}},
        "required":["age","code","mail"]})",
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
    int fails = 0;
    const json samples = RandomWalks(*parsed, rng, 40, 200, 200, 3000, &fails);
    EXPECT_EQ(samples.size(), 40u) << text << " walks failed: " << fails << "\n" << *g;
    cases.push_back(json{{"schema", schema}, {"samples", samples}});
  }
  const std::string err = ValidateJsonSamples(cases, "json_schema_samples.json");
  EXPECT_TRUE(err.empty()) << err;
}

TEST(JsonSchema, RefusesUnsupportedKeywords) {
  struct Bad {
    const char* schema;
    const char* want;
  };
  const Bad kBad[] = {
      {R"({"type":"string","pattern":"^(?=a)a+$"})", "json_schema/pattern: only (...) and (?:...) groups"},
      {R"({"type":"string","pattern":"^(a)\\1$"})", "json_schema/pattern: backreferences are not supported"},
      {R"({"type":"string","pattern":"^(?<n>a)$"})", "json_schema/pattern: only (...) and (?:...) groups"},
      {R"({"type":"string","pattern":"^a\\bc$"})", "\\b (word boundary) is not supported"},
      {R"({"type":"string","pattern":"^\\p{L}$"})", "the escape \\p is not supported"},
      {R"({"type":"string","pattern":"a$b"})", "'^' and '$' are supported only at the start and end"},
      {R"j({"type":"string","pattern":"(^a)"})j", "'^' and '$' are supported only at the start and end"},
      {R"({"type":"string","pattern":"^(a*)*$"})", "can match the empty string"},
      {R"({"type":"string","pattern":"^a{2001}$"})", "repetition count over 2000"},
      {R"({"type":"string","pattern":"^(a{1000}){1000}$"})", "too large once repetitions are expanded"},
      {R"({"type":"string","pattern":"^a{,3}$"})", "must start a quantifier"},
      {R"({"type":"string","pattern":"^a{3,2}$"})", "m below n"},
      {R"({"type":"string","pattern":"^a**$"})", "cannot follow a quantifier"},
      {R"({"type":"string","pattern":"^*a$"})", "nothing to repeat"},
      {R"({"type":"string","pattern":"^(ab"})", "missing ')'"},
      {R"({"type":"string","pattern":"^a)$"})", "unmatched ')'"},
      {R"({"type":"string","pattern":"^[ab"})", "missing ']'"},
      {R"({"type":"string","pattern":"^[z-a]$"})", "out of order"},
      {R"({"type":"string","pattern":"^[\\d-z]$"})", "cannot bound a range"},
      {R"({"type":"string","pattern":"^[]a]$"})", "escape it as \\]"},
      {R"({"type":"string","pattern":"^[^\\s\\S]$"})", "matches nothing"},
      {R"({"type":"string","pattern":"^a","maxLength":3})", "json_schema/pattern: together with maxLength"},
      {R"({"type":"string","pattern":3})", "json_schema/pattern: must be a string"},
      {R"({"type":"integer","minimum":3,"multipleOf":2})", "json_schema/multipleOf"},
      {R"({"type":"integer","minimum":5,"maximum":4})", "json_schema/minimum: no integer satisfies"},
      {R"({"type":"integer","exclusiveMinimum":4,"exclusiveMaximum":5})", "no integer satisfies"},
      {R"({"type":"number","minimum":0.25,"maximum":0.75})", "ranges within one unit are not supported"},
      {R"({"type":"integer","minimum":"3"})", "json_schema/minimum: must be a number"},
      {R"({"type":"integer","minimum":3,"exclusiveMinimum":true})", "draft-4 boolean form"},
      {R"({"type":"integer","minimum":1e19})", "json_schema/minimum: beyond +-1e18"},
      {R"({"type":"integer","maximum":-18446744073709551615})", "json_schema/maximum: beyond +-1e18"},
      {R"({"minimum":3})", "json_schema/minimum"},
      {R"({"type":"array","items":{"type":"integer"},"uniqueItems":true})", "json_schema/uniqueItems"},
      {R"({"type":"string","format":"hostname"})", "\"hostname\" is not supported"},
      {R"({"$ref":"http://example.com/x.json"})", "unresolvable or non-local reference"},
      {R"({"$ref":"#/$defs/missing"})", "unresolvable"},
      {R"(false)", "matches nothing"},
      {R"({"type":"foo"})", "unknown type"},
      {R"({"type":"string","maxLength":5000})", "over 2000"},
      {R"({"not":{"type":"null"}})", "json_schema/not"},
      {R"({"type":"object","properties":{"a":{"type":"integer"}},"minProperties":1})", "minProperties"},
      {R"j({"type":"object","properties":{"a":{"type":"string","pattern":"(?!x)"}}})j",
       "json_schema/properties/a/pattern"},
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

namespace herd::grammar {
namespace {

std::shared_ptr<const Grammar> SchemaGrammar(const std::string& schema) {
  auto g = JsonSchemaToGrammar(nlohmann::json::parse(schema));
  EXPECT_TRUE(g.ok()) << schema << ": " << g.status();
  if (!g.ok()) return nullptr;
  auto parsed = Grammar::Parse(*g);
  EXPECT_TRUE(parsed.ok()) << *g << parsed.status();
  return parsed.ok() ? *parsed : nullptr;
}

// The whole `text` is a sentence of `g`.
bool Accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  auto m = Matcher::Create(g);
  if (!m.ok()) return false;
  return m->AcceptBytes(text).ok() && m->CanEnd() && m->partial().n_remain == 0;
}

void ExpectAccepts(const std::string& schema, const std::vector<std::string>& yes, const std::vector<std::string>& no) {
  auto g = SchemaGrammar(schema);
  ASSERT_NE(g, nullptr);
  for (const std::string& t : yes) EXPECT_TRUE(Accepts(g, t)) << schema << " should accept " << t;
  for (const std::string& t : no) EXPECT_FALSE(Accepts(g, t)) << schema << " should reject " << t;
}

TEST(JsonSchema, IntegerBoundsSamples) {
  ExpectAccepts(R"({"type":"integer","minimum":-5,"maximum":123})",
                {"-5", "-1", "0", "-0", "9", "10", "99", "100", "123", "42 "},
                {"-6", "124", "1000", "007", "00", "-05", "+5", "1.0", "1e2", "", "-", "12a"});
  ExpectAccepts(R"({"type":"integer","exclusiveMinimum":-5,"exclusiveMaximum":123})", {"-4", "0", "122"},
                {"-5", "123", "-6", "124"});
  // zod: .positive() (exclusiveMinimum 0), .min(0).max(120), .int().
  ExpectAccepts(R"({"type":"integer","exclusiveMinimum":0})", {"1", "9", "10", "9999999999999999"},
                {"0", "-0", "-1", "01", "10000000000000000"});
  ExpectAccepts(R"({"type":"integer","minimum":0,"maximum":120})", {"0", "7", "99", "100", "120"},
                {"-0", "-1", "121", "200", "1000", "0120"});
  ExpectAccepts(R"({"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991})",
                {"0", "-0", "9007199254740991", "-9007199254740991", "9007199254740990", "1000000000000000",
                 "8999999999999999", "-123456789"},
                {"9007199254740992", "-9007199254740992", "9007199254741000", "10000000000000000", "09"});
  // Only one side.
  ExpectAccepts(R"({"type":"integer","minimum":37})", {"37", "38", "99", "100", "123456"}, {"36", "0", "-40", "037"});
  ExpectAccepts(R"({"type":"integer","maximum":-7})", {"-7", "-8", "-10", "-1000000"}, {"-6", "0", "7", "-07"});
  ExpectAccepts(R"({"type":"integer","maximum":15})", {"15", "0", "-0", "-1", "-999999"}, {"16", "20", "100"});
  ExpectAccepts(R"({"type":"integer","minimum":-15})", {"-15", "-0", "0", "999999"}, {"-16", "-20", "-100"});
  // Float bounds on an integer.
  ExpectAccepts(R"({"type":"integer","minimum":2.5,"exclusiveMaximum":7.5})", {"3", "7"}, {"2", "8"});
  // Both minimum and exclusiveMinimum: the stricter wins.
  ExpectAccepts(R"({"type":"integer","minimum":3,"exclusiveMinimum":3})", {"4"}, {"3"});
}

// Every integer text of up to four digits (and some non-canonical texts) against bounds
// drawn from edge values: accepted exactly when canonical and in range.
// A type list: each type's own keywords apply to it only (zod's .int().min(0).nullable(),
// .string().max(3).nullable()).
TEST(JsonSchema, TypeListsKeepEachTypesKeywords) {
  ExpectAccepts(R"({"type":["integer","null"],"minimum":0,"maximum":9})", {"0", "9", "null"}, {"-1", "10", "\"x\""});
  ExpectAccepts(R"({"type":["string","null"],"maxLength":3})", {"\"abc\"", "null"}, {"\"abcd\"", "1"});
  ExpectAccepts(R"({"type":["string","integer"],"pattern":"^a+$","minimum":5})", {"\"aa\"", "5", "6"}, {"\"b\"", "4"});
}

TEST(JsonSchema, IntegerBoundsExhaustive) {
  const std::vector<int> kEdges = {-1000, -999, -123, -100, -10, -9, -1, 0, 1, 9, 10, 11, 99, 100, 120, 999, 1000};
  std::mt19937 rng(7);
  int grammars = 0;
  for (int lo_i = -1; lo_i < static_cast<int>(kEdges.size()); ++lo_i) {
    for (int hi_i = -1; hi_i < static_cast<int>(kEdges.size()); ++hi_i) {
      for (int excl = 0; excl < 4; ++excl) {
        if ((lo_i < 0 && (excl & 1)) || (hi_i < 0 && (excl & 2))) continue;
        if (rng() % 3 != 0) continue;  // a third of the combinations keeps the test fast
        json schema = {{"type", "integer"}};
        int64_t lo = -1000000, hi = 1000000;
        if (lo_i >= 0) {
          schema[(excl & 1) ? "exclusiveMinimum" : "minimum"] = kEdges[static_cast<size_t>(lo_i)];
          lo = kEdges[static_cast<size_t>(lo_i)] + ((excl & 1) ? 1 : 0);
        }
        if (hi_i >= 0) {
          schema[(excl & 2) ? "exclusiveMaximum" : "maximum"] = kEdges[static_cast<size_t>(hi_i)];
          hi = kEdges[static_cast<size_t>(hi_i)] - ((excl & 2) ? 1 : 0);
        }
        auto text = JsonSchemaToGrammar(schema);
        if (lo > hi) {
          EXPECT_FALSE(text.ok()) << schema.dump();
          continue;
        }
        ASSERT_TRUE(text.ok()) << schema.dump() << text.status();
        auto g = Grammar::Parse(*text);
        ASSERT_TRUE(g.ok()) << *text;
        ++grammars;
        const bool negatives = lo_i < 0 || kEdges[static_cast<size_t>(lo_i)] < 0;
        for (int v = -1100; v <= 1100; ++v) {
          const bool in = v >= lo && v <= hi;
          ASSERT_EQ(Accepts(*g, std::to_string(v)), in) << schema.dump() << " " << v << "\n" << *text;
          if (v != 0) {
            const std::string padded = v < 0 ? "-0" + std::to_string(-v) : "0" + std::to_string(v);
            ASSERT_FALSE(Accepts(*g, padded)) << schema.dump() << " " << padded;
          }
        }
        EXPECT_EQ(Accepts(*g, "-0"), negatives && lo <= 0 && hi >= 0) << schema.dump();
      }
    }
  }
  EXPECT_GT(grammars, 150);
}

TEST(JsonSchema, HugeIntegerBoundsGiveSmallGrammars) {
  for (const char* s :
       {R"({"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991})",
        R"({"type":"integer","minimum":-999999999999999999,"maximum":999999999999999999})",
        R"({"type":"integer","minimum":123456789012345678})", R"({"type":"integer","maximum":-123456789012345678})",
        R"({"type":"integer","minimum":-1e30,"maximum":1e30})"}) {
    auto g = JsonSchemaToGrammar(json::parse(s));
    ASSERT_TRUE(g.ok()) << s << g.status();
    EXPECT_LT(g->size(), 3000u) << s << "\n" << *g;
  }
  ExpectAccepts(R"({"type":"integer","minimum":123456789012345678})",
                {"123456789012345678", "123456789012345679", "999999999999999999"},
                {"123456789012345677", "1", "1000000000000000000"});
  ExpectAccepts(R"({"type":"integer","minimum":-1e30,"maximum":1e30})", {"0", "-5", "9999999999999999"}, {"1e3"});
}

TEST(JsonSchema, NumberBounds) {
  // zod: z.number().positive().max(1).
  ExpectAccepts(R"({"type":"number","exclusiveMinimum":0,"maximum":1})",
                {"1", "0.5", "0.001", "0.0000000000001", "0.99999"},
                {"0", "-0", "0.0", "0.000", "1.5", "2", "-0.5", "1e-3", "01", "0.", ".5"});
  ExpectAccepts(R"({"type":"number","minimum":-2.5,"exclusiveMaximum":10})",
                {"-2", "-1.5", "-1.99", "0", "-0", "3.25", "9", "9.999", "-0.5"},
                {"-2.5", "-3", "10", "10.0", "11", "1e1", "-10"});
  ExpectAccepts(R"({"type":"number","exclusiveMaximum":0})", {"-1", "-0.5", "-100.25"}, {"0", "-0", "0.5", "1"});
  ExpectAccepts(R"({"type":"number","minimum":0})", {"0", "0.5", "12345.678", "100"}, {"-1", "-0.5", "-0", "1e5"});
  // At most 15 significant digits in a bounded number.
  ExpectAccepts(R"({"type":"number","minimum":0,"maximum":10})", {"9.99999999999999", "0.12345678901234"},
                {"9.999999999999999", "0.123456789012345", "10.5", "10.0"});
}

// Bounded numbers: every accepted text is in range (sound), over a grid of texts.
TEST(JsonSchema, NumberBoundsAreSound) {
  const char* kSchemas[] = {
      R"({"type":"number","minimum":-3,"maximum":7})",
      R"({"type":"number","exclusiveMinimum":-3,"exclusiveMaximum":7})",
      R"({"type":"number","minimum":-2.5,"maximum":7.25})",
      R"({"type":"number","exclusiveMinimum":0})",
      R"({"type":"number","exclusiveMaximum":-1})",
      R"({"type":"number","minimum":10,"exclusiveMaximum":12})",
  };
  for (const char* s : kSchemas) {
    const json schema = json::parse(s);
    auto g = SchemaGrammar(s);
    ASSERT_NE(g, nullptr);
    auto in = [&](double v) {
      if (schema.contains("minimum") && v < schema["minimum"].get<double>()) return false;
      if (schema.contains("maximum") && v > schema["maximum"].get<double>()) return false;
      if (schema.contains("exclusiveMinimum") && v <= schema["exclusiveMinimum"].get<double>()) return false;
      if (schema.contains("exclusiveMaximum") && v >= schema["exclusiveMaximum"].get<double>()) return false;
      return true;
    };
    int accepted = 0;
    for (int i = -20; i <= 20; ++i) {
      for (const char* frac : {"", ".0", ".5", ".25", ".001", ".999"}) {
        for (const char* sign : {"", "-"}) {
          if (*sign && i < 0) continue;
          const std::string t = std::string(sign) + std::to_string(std::abs(i)) + frac;
          const bool ok = Accepts(g, t);
          accepted += ok;
          if (ok) {
            EXPECT_TRUE(in(std::stod(t))) << s << " accepts " << t;
          }
          // Integers in range are always accepted.
          if (!*frac && in(std::stod(t)) && !(*sign && i == 0)) {
            EXPECT_TRUE(ok) << s << " rejects " << t;
          }
        }
      }
    }
    EXPECT_GT(accepted, 5) << s;
  }
}

TEST(JsonSchema, Patterns) {
  ExpectAccepts(R"({"type":"string","pattern":"^\\d{3}-\\d{4}$"})", {"\"555-1234\"", "\"000-0000\" "},
                {"\"55-1234\"", "\"5555-1234\"", "\"555-12345\"", "\"abc-defg\"", "\"555 1234\"", "555-1234"});
  ExpectAccepts(R"({"type":"string","pattern":"^[A-Z][a-z]+$"})", {"\"Hello\"", "\"Ab\""},
                {"\"hello\"", "\"A\"", "\"HEllo\"", "\"Hello1\"", "\"\""});
  ExpectAccepts(R"({"type":"string","pattern":"^(foo|bar)+$"})", {"\"foo\"", "\"barfoo\"", "\"foofoobar\""},
                {"\"\"", "\"fo\"", "\"foobaz\"", "\"foo bar\""});
  // Unanchored: a search, like the validators.
  ExpectAccepts(R"({"type":"string","pattern":"ab+c"})", {"\"abc\"", "\"xxabbbcyy\"", "\"abcabc\""},
                {"\"ac\"", "\"\"", "\"abx\""});
  ExpectAccepts(R"({"type":"string","pattern":"^ab"})", {"\"ab\"", "\"abzz\""}, {"\"zab\""});
  ExpectAccepts(R"({"type":"string","pattern":"ab$"})", {"\"ab\"", "\"zzab\""}, {"\"abz\""});
  ExpectAccepts(R"({"type":"string","pattern":"^a|b$"})", {"\"a\"", "\"axx\"", "\"xxb\""}, {"\"xa\"", "\"bx\""});
  ExpectAccepts(R"({"type":"string","pattern":""})", {"\"\"", "\"anything\""}, {});
  // Classes, negation, escapes, `.`; JSON escapes for quotes, backslashes and controls.
  ExpectAccepts(R"({"type":"string","pattern":"^[^a-c\"]{2}\\.x?$"})", {"\"zz.\"", "\"\\\\9.x\"", "\"\\n .\""},
                {"\"az.\"", "\"z\\\".\"", "\"zzz.\"", "\"zz\"", "\"zz.xx\""});
  ExpectAccepts(R"({"type":"string","pattern":"^[\\t\"\\\\]+$"})", {"\"\\t\\\"\\\\\""}, {"\"\t\"", "\"a\""});
  ExpectAccepts(R"({"type":"string","pattern":"^.$"})", {"\"a\"", "\"\\\"\"", "\"\xC3\xA9\"", "\"\\t\""},
                {"\"\\n\"", "\"\\r\"", "\"ab\"", "\"\""});
  ExpectAccepts(R"({"type":"string","pattern":"^\\w\\s\\W\\D\\S$"})", {"\"a -xc\"", "\"_\\t!x!\""},
                {"\"a -1c\"", "\"aa-xc\"", "\"a _xc\"", "\"a -x\xC3\xA9\""});
  ExpectAccepts(R"({"type":"string","pattern":"^(?:x{2,3}|y{2,})z{0,2}?$"})", {"\"xx\"", "\"xxxz\"", "\"yyyyyzz\""},
                {"\"x\"", "\"xxxx\"", "\"y\"", "\"xxzzz\""});
  ExpectAccepts(R"({"type":"string","pattern":"^\\u00e9\\x41[\\u00e0-\\u00ff]\\/\\-\\{\\}\\(\\)\\[\\]\\|$"})",
                {"\"\xC3\xA9"
                 "A\xC3\xBF/-{}()[]|\""},
                {"\"eA\xC3\xBF/-{}()[]|\""});
  ExpectAccepts(R"({"type":"string","pattern":"^(a|)b$"})", {"\"ab\"", "\"b\""}, {"\"aab\""});
  ExpectAccepts(R"({"type":"string","pattern":"^[-a]+[a-]$"})", {"\"-a-\"", "\"aa\""}, {"\"b\""});
  // Inside an object, with its name in the error path.
  ExpectAccepts(R"({"type":"object","properties":{"id":{"type":"string","pattern":"^[a-f0-9]{4}$"}},
                    "required":["id"]})",
                {"{\"id\": \"beef\"}"}, {"{\"id\": \"BEEF\"}", "{\"id\": \"beef0\"}"});
}

TEST(JsonSchema, LongPatternIsRefused) {
  auto g = JsonSchemaToGrammar(json{{"type", "string"}, {"pattern", std::string(1001, 'a')}});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(std::string(g.status().message()).find("json_schema/pattern: longer than 1000"), std::string::npos)
      << g.status();
  // Deeply nested groups: refused before recursing further.
  std::string deep = "^" + std::string(5000, '(') + "a" + std::string(5000, ')') + "$";
  g = JsonSchemaToGrammar(json{{"type", "string"}, {"pattern", deep.substr(0, 999)}});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(std::string(g.status().message()).find("groups nested deeper than 32"), std::string::npos) << g.status();
  std::string ok = "^" + std::string(30, '(') + "a" + std::string(30, ')') + "$";
  EXPECT_TRUE(JsonSchemaToGrammar(json{{"type", "string"}, {"pattern", ok}}).ok());
}

TEST(JsonSchema, EmailFormat) {
  ExpectAccepts(R"({"type":"string","format":"email"})",
                {"\"a@b.co\"", "\"first.last+tag@mail.example.org\"", "\"x_y-z@sub-domain.example.com\""},
                {"\"a@b\"", "\"@b.co\"", "\"a@.co\"", "\"a..b@c.co\"", "\"a@b.c\"", "\"a b@c.co\"", "\"a@b-.co\"",
                 "\"a@-b.co\"", "\".a@b.co\"", "\"a@b.co1\"", "\"a\""});
}

}  // namespace
}  // namespace herd::grammar
