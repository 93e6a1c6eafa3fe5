#include "libs/grammar/gbnf.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace herd::grammar {
namespace {

struct Bad {
  const char* text;
  const char* want;  // substring of the error message
};

TEST(GbnfParse, AcceptsLlamaCppSyntax) {
  const char* kGood[] = {
      "root ::= \"a\"",
      "root ::= \"a\" | \"b\"\n",
      "root ::= [a-z]+ [0-9]* \"x\"?",
      "root ::= ( \"a\" | \"b\" )*",
      "root ::= \"a\"{3}",
      "root ::= \"a\"{2,}",
      "root ::= \"a\"{2,5}",
      "root ::= \"a\"{0,0} \"b\"",
      "root ::= [^\"\\\\] .",
      "# comment\nroot ::= item # trailing\nitem ::= \"\\x41\\u00e9\\U0001F600\\t\\n\\r\\\\\\\"\\[\\]\"\n",
      "root ::= (\n  \"a\"\n  | \"b\"\n)",
      "root ::=\n  \"a\" |\n  \"b\"",
      "root ::= \"\"",
      "root ::= [a-]",
      "root ::= [-a]",
      "root ::= \"é日本\" [ä-ü]",
      "root ::= a\na ::= \"x\" a | \"\"",
      "root ::= \"(\" root \")\" | \"\"",
      "root   ::=   x-y\r\nx-y ::= \"1\"\r\n",
  };
  for (const char* g : kGood) {
    auto r = Grammar::Parse(g);
    EXPECT_TRUE(r.ok()) << g << ": " << r.status();
  }
}

TEST(GbnfParse, RejectsWithMessage) {
  const Bad kBad[] = {
      {"", "empty"},
      {"# only a comment\n", "empty"},
      {"root ::= foo", "undefined rule 'foo'"},
      {"a ::= \"x\"", "no 'root' rule"},
      {"root ::= \"abc", "unterminated string literal"},
      {"root ::= [abc", "unterminated character class"},
      {"root ::= \"\\q\"", "unknown escape"},
      {"root ::= \"\\x4\"", "expecting 2 hex chars"},
      {"root ::= \"\\u12G4\"", "expecting 4 hex chars"},
      {"root := \"a\"", "expecting ::="},
      {"root ::= ( \"a\"", "expecting ')'"},
      {"root ::= \"a\" )", "unexpected ')'"},
      {"root ::= *", "expecting preceding item"},
      {"root ::= \"a\"{2", "expecting ',' or '}'"},
      {"root ::= \"a\"{x}", "expecting an int"},
      {"root ::= \"a\"{5,2}", "maximum below minimum"},
      {"root ::= \"a\"{3000}", "repetition count over 2000"},
      {"root ::= root \"a\" | \"b\"", "left recursion in rule 'root'"},
      {"root ::= a\na ::= b \"x\"\nb ::= a | \"y\"", "left recursion"},
      {"root ::= e root \"x\" | \"y\"\ne ::= f\nf ::= \"\" | \"z\"", "left recursion"},
      {"root ::= (\"a\"?)*", "left recursion"},
      {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
      {"root ::= <[12]>", "token references"},
      {"root ::= []", "empty character class"},
      {"::= \"a\"", "expecting name"},
  };
  for (const Bad& b : kBad) {
    auto r = Grammar::Parse(b.text);
    ASSERT_FALSE(r.ok()) << b.text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << b.text;
    EXPECT_NE(std::string(r.status().message()).find(b.want), std::string::npos)
        << b.text << " -> " << r.status().message();
  }
}

TEST(GbnfParse, ErrorNamesLineAndColumn) {
  auto r = Grammar::Parse("root ::= a\na ::= \"x\" b\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("line 2, column 11"), std::string::npos) << r.status();
}

TEST(GbnfParse, SizeLimits) {
  GrammarLimits lim;
  lim.max_elements = 1000;
  auto r = Grammar::Parse("root ::= (\"abcdefghij\"{100}){100}", lim);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("too large"), std::string::npos) << r.status();
  lim = GrammarLimits();
  lim.max_text_bytes = 10;
  EXPECT_FALSE(Grammar::Parse("root ::= \"abcdefghijkl\"", lim).ok());
  std::string deep = "root ::= ";
  for (int i = 0; i < 500; ++i) deep += "(";
  deep += "\"a\"";
  for (int i = 0; i < 500; ++i) deep += ")";
  r = Grammar::Parse(deep);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("nested deeper"), std::string::npos);
  // 10^5 levels: refused the same way, the parser never recursing past its limit.
  const std::string hundred_k = "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
  r = Grammar::Parse(hundred_k);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("nested deeper"), std::string::npos) << r.status();
}

TEST(GbnfParse, RulesMatchLlamaCppLayout) {
  auto g = Grammar::Parse("root ::= [a-c] \"x\"*");
  ASSERT_TRUE(g.ok()) << g.status();
  const auto& rules = (*g)->rules();
  ASSERT_EQ(rules.size(), 2u);
  // root: CHAR a, RNG_UPPER c, RULE_REF root_1, END
  ASSERT_EQ(rules[0].size(), 4u);
  EXPECT_EQ(rules[0][0].type, ElementType::kChar);
  EXPECT_EQ(rules[0][0].value, 'a');
  EXPECT_EQ(rules[0][1].type, ElementType::kCharRngUpper);
  EXPECT_EQ(rules[0][2].type, ElementType::kRuleRef);
  EXPECT_EQ(rules[0][3].type, ElementType::kEnd);
  // root_1 ::= "x" root_1 |
  EXPECT_EQ((*g)->rule_names()[1], "root_1");
  ASSERT_EQ(rules[1].size(), 4u);
  EXPECT_EQ(rules[1][1].type, ElementType::kRuleRef);
  EXPECT_EQ(rules[1][1].value, 1u);
  EXPECT_EQ(rules[1][2].type, ElementType::kAlt);
}

TEST(GbnfParse, ToStringRoundTrips) {
  auto g = Grammar::Parse("root ::= [^\"\\\\a-c] \"x\\n\" | ( \"é\" [-^] )+ .\n");
  ASSERT_TRUE(g.ok()) << g.status();
  const std::string text = (*g)->ToString();
  auto g2 = Grammar::Parse(text);
  ASSERT_TRUE(g2.ok()) << text << g2.status();
  EXPECT_EQ((*g2)->rules().size(), (*g)->rules().size());
}

}  // namespace
}  // namespace herd::grammar
