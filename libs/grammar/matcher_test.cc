#include "libs/grammar/matcher.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

#include "libs/grammar/json_schema.h"
#include "libs/grammar/mask_cache.h"
#include "libs/tokenizer/tokenizer.h"
#include "tests/shared_data.h"
#include "tests/shared_vocab.h"

namespace herd::grammar {
namespace {

Matcher Make(const std::string& text) {
  auto g = Grammar::Parse(text);
  EXPECT_TRUE(g.ok()) << g.status();
  auto m = Matcher::Create(*g);
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

// Whole-string match: every byte accepted and the grammar complete at the end.
bool Matches(const std::string& grammar, const std::string& text) {
  Matcher m = Make(grammar);
  if (!m.AcceptBytes(text).ok()) return false;
  return m.CanEnd() && m.partial().n_remain == 0;
}

TEST(Matcher, AcceptsAndRejectsStrings) {
  struct Case {
    const char* grammar;
    std::vector<const char*> yes, no;
  };
  const Case kCases[] = {
      {"root ::= \"abc\"", {"abc"}, {"ab", "abcd", "abd", ""}},
      {"root ::= [a-c]+ \"!\"?", {"a", "abcabc", "b!"}, {"", "!", "d", "a!!"}},
      {"root ::= \"x\"{2,3}", {"xx", "xxx"}, {"x", "xxxx"}},
      {"root ::= \"x\"{2}", {"xx"}, {"x", "xxx"}},
      {"root ::= \"x\"{1,}", {"x", "xxxxxxx"}, {""}},
      {"root ::= [^abc]*", {"", "xyz", "日本"}, {"a", "xa"}},
      {"root ::= . .", {"ab", "日本", "\xF0\x9F\x98\x80!"}, {"a", "abc"}},
      {"root ::= \"(\" root \")\" | \"\"", {"", "()", "((()))"}, {"(", "())", ")("}},
      {"root ::= item (\",\" item)*\nitem ::= [0-9]+ | \"'\" [a-z]* \"'\"",
       {"1", "1,'ab',22", "''"},
       {"1,", ",1", "'a"}},
      {"root ::= \"é\" [α-ω]", {"éβ"}, {"eβ", "éa"}},
      {"root ::= \"\\U0001F600\"", {"\xF0\x9F\x98\x80"}, {"\xF0\x9F\x98"}},
      {"root ::= [a-z]{0,3} \"z\"", {"z", "abz", "abcz", "zzzz"}, {"abcdz", ""}},
  };
  for (const Case& c : kCases) {
    for (const char* y : c.yes) EXPECT_TRUE(Matches(c.grammar, y)) << c.grammar << " should match '" << y << "'";
    for (const char* n : c.no) EXPECT_FALSE(Matches(c.grammar, n)) << c.grammar << " should not match '" << n << "'";
  }
}

TEST(Matcher, RejectedTextLeavesStateUnchanged) {
  Matcher m = Make("root ::= \"ab\" \"c\"");
  ASSERT_TRUE(m.AcceptBytes("a").ok());
  absl::Status st = m.AcceptBytes("bx");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(m.AcceptBytes("bc").ok());
  EXPECT_TRUE(m.CanEnd());
}

std::shared_ptr<const TokenPieces> Pieces() {
  // 0: "<eos>" (EOG), 1: "a", 2: "ab", 3: "b", 4: "" (control), 5: "\xC3" (first byte of é),
  // 6: "\xA9" (its second byte), 7: "é", 8: "c\0", 9: "abc", 10: " "
  return TokenPieces::Create(
      {"<eos>", "a", "ab", "b", "", "\xC3", "\xA9", "\xC3\xA9", std::string("c\0", 2), "abc", " "},
      {true, false, false, false, false, false, false, false, false, false, false});
}

std::vector<int32_t> Allowed(const Matcher& m, const TokenPieces& p) {
  std::vector<int32_t> ids, out;
  for (int32_t i = 0; i < p.n_tokens(); ++i) ids.push_back(i);
  std::vector<uint8_t> ok(ids.size());
  m.CheckTokens(p, ids.data(), ids.size(), ok.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ok[i]) out.push_back(ids[i]);
    EXPECT_EQ(ok[i] != 0, m.TokenAllowed(p, ids[i])) << ids[i];
  }
  return out;
}

TEST(Matcher, TokensEosAndPartialUtf8) {
  auto p = Pieces();
  Matcher m = Make("root ::= \"a\" \"b\"? \"é\"?");
  EXPECT_EQ(Allowed(m, *p), (std::vector<int32_t>{1, 2}));
  ASSERT_TRUE(m.AcceptToken(*p, 1).ok());
  // After "a": "b", "é", its first byte, and EOS (grammar complete) are allowed.
  EXPECT_EQ(Allowed(m, *p), (std::vector<int32_t>{0, 3, 5, 7}));
  ASSERT_TRUE(m.AcceptToken(*p, 5).ok());  // half of é
  EXPECT_EQ(m.partial().n_remain, 1);
  EXPECT_EQ(Allowed(m, *p), (std::vector<int32_t>{0, 6}));  // llama.cpp allows EOG here too
  EXPECT_FALSE(m.AcceptToken(*p, 3).ok());
  ASSERT_TRUE(m.AcceptToken(*p, 6).ok());
  EXPECT_EQ(Allowed(m, *p), (std::vector<int32_t>{0}));
  EXPECT_TRUE(m.AcceptToken(*p, 0).ok());
}

TEST(Matcher, EosOnlyWhenComplete) {
  auto p = Pieces();
  Matcher m = Make("root ::= \"ab\" \" \"*");
  EXPECT_FALSE(m.AcceptToken(*p, 0).ok());
  EXPECT_FALSE(m.AcceptToken(*p, 4).ok());  // control token: never
  EXPECT_FALSE(m.AcceptToken(*p, 8).ok());  // NUL byte: never
  EXPECT_FALSE(m.AcceptToken(*p, 99).ok());
  ASSERT_TRUE(m.AcceptToken(*p, 2).ok());
  EXPECT_EQ(Allowed(m, *p), (std::vector<int32_t>{0, 10}));
}

TEST(Matcher, NextCodePoints) {
  Matcher m = Make("root ::= [a-c] | \"x\" | [^\\x00-\\x7F]");
  auto r = m.NextCodePoints();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0], (std::pair<uint32_t, uint32_t>{'a', 'c'}));
  EXPECT_EQ(r[1], (std::pair<uint32_t, uint32_t>{'x', 'x'}));
  EXPECT_EQ(r[2], (std::pair<uint32_t, uint32_t>{0x80, 0x10FFFF}));
}

TEST(Matcher, TooAmbiguousIsAnError) {
  auto g = Grammar::Parse("root ::= x*\nx ::= \"a\" | \"a\" \"a\" | \"a\" \"a\" \"a\" \"b\"?");
  ASSERT_TRUE(g.ok());
  MatcherLimits lim;
  lim.max_stacks = 4;
  auto m = Matcher::Create(*g, lim);
  ASSERT_TRUE(m.ok());
  absl::Status st;
  for (int i = 0; i < 10 && st.ok(); ++i) st = m->AcceptCodePoint('a');
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
}

TEST(Matcher, RealVocabulary) {
  const std::string dir = SharedDir();
  if (dir.empty()) GTEST_SKIP() << kSharedDirMissing;
  auto v = LoadSharedVocab(dir);
  ASSERT_TRUE(v.ok()) << v.status();
  auto p = TokenPieces::FromVocab(**v);
  Matcher m = Make("root ::= \"Once upon a time\" \".\"");
  std::vector<int32_t> allowed = Allowed(m, *p);
  ASSERT_FALSE(allowed.empty());
  for (int32_t id : allowed) {
    const std::string piece = p->Piece(id);
    EXPECT_EQ(std::string("Once upon a time.").rfind(piece, 0), 0u) << piece;
  }
  EXPECT_FALSE(m.TokenAllowed(*p, (*v)->bos()));
  EXPECT_FALSE(m.TokenAllowed(*p, (*v)->eos()));
}

// Cost of applying a grammar to a whole 32000-token vocabulary (the sampler's fallback
// path), printed for reference; the bound is loose (shared, loaded test machines).
TEST(Matcher, WholeVocabularyCheckIsFast) {
  const std::string dir = SharedDir();
  if (dir.empty()) GTEST_SKIP() << kSharedDirMissing;
  auto v = LoadSharedVocab(dir, "llama-2-tiny-random.gguf");
  ASSERT_TRUE(v.ok()) << v.status();
  const auto t0 = std::chrono::steady_clock::now();
  auto p = TokenPieces::FromVocab(**v);
  const auto t1 = std::chrono::steady_clock::now();
  Matcher m = Make(
      "root ::= \"{\" ws (pair (\",\" ws pair)*)? \"}\"\n"
      "pair ::= str ws \":\" ws val ws\nval ::= str | [0-9]+ | root\n"
      "str ::= \"\\\"\" [^\"\\\\]* \"\\\"\"\nws ::= [ \\n]{0,2}");
  ASSERT_TRUE(m.AcceptBytes("{\"a\": ").ok());
  std::vector<int32_t> ids(static_cast<size_t>(p->n_tokens()));
  for (int32_t i = 0; i < p->n_tokens(); ++i) ids[static_cast<size_t>(i)] = i;
  std::vector<uint8_t> ok(ids.size());
  const int kReps = 10;
  for (int r = 0; r < kReps; ++r) m.CheckTokens(*p, ids.data(), ids.size(), ok.data());
  const auto t2 = std::chrono::steady_clock::now();
  int n_ok = 0;
  for (uint8_t b : ok) n_ok += b;
  const double decode_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  const double check_ms = std::chrono::duration<double, std::milli>(t2 - t1).count() / kReps;
  std::printf("TokenPieces::FromVocab(%d tokens): %.1f ms; CheckTokens(all): %.2f ms, %d allowed\n", p->n_tokens(),
              decode_ms, check_ms, n_ok);
  EXPECT_GT(n_ok, 10);
  EXPECT_LT(n_ok, p->n_tokens() / 2);
  EXPECT_LT(check_ms, 2000.0);
}

}  // namespace
}  // namespace herd::grammar

namespace herd::grammar {
namespace {

std::shared_ptr<const Grammar> MustParse(const std::string& text) {
  auto g = Grammar::Parse(text);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : nullptr;
}

// The grammar of {"enum": ["item-0", ..., "item-<n-1>"]} (common prefixes factored by
// the converter).
std::string EnumSchemaGrammar(int n) {
  nlohmann::json e = nlohmann::json::array();
  for (int i = 0; i < n; ++i) e.push_back(absl::StrCat("item-", i));
  auto g = JsonSchemaToGrammar(nlohmann::json{{"enum", e}});
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : "";
}

// Grammars whose ambiguity multiplies parse stacks are refused before use; ordinary
// ones (JSON, JSON schemas, literal alternatives) pass. The probe's measures are printed.
TEST(MatchCost, AmbiguousGrammarsAreRefusedOrdinaryOnesPass) {
  std::string doubling;
  for (int i = 0; i < 40; ++i) doubling += absl::StrCat("r", i, " ::= r", i + 1, " r", i + 1, "\n");
  doubling = "root ::= r0\n" + doubling + "r40 ::= \"a\" | \"b\"\n";
  std::string many = "root ::= ";
  for (int i = 0; i < 10000; ++i) absl::StrAppend(&many, i ? " | " : "", "\"item-", i, "\"");
  struct Case {
    std::string name, grammar;
    bool ok;
  };
  const std::vector<Case> cases = {
      {"nested repetitions", R"(root ::= ("a"{0,1000}){0,1000})", false},
      {"ambiguous star", R"(root ::= ("a" | "a" "a")* "b")", true},
      {"10,000 alternatives with a common prefix", many, false},
      {"doubling rules", doubling, true},
      {"json object", JsonObjectGrammar(), true},
      {"json schema enum of 10,000 strings", EnumSchemaGrammar(10000), true},
      {"literal choice", R"(root ::= "yes" | "no" | "maybe")", true},
  };
  for (const Case& c : cases) {
    auto g = MustParse(c.grammar);
    ASSERT_NE(g, nullptr) << c.name;
    MatchCost cost;
    const absl::Time t0 = absl::Now();
    absl::Status s = CheckMatchCost(g, {}, &cost);
    std::printf("%-42s %-6s stacks %zu elements %zu steps %d  %.1f ms\n", c.name.c_str(), s.ok() ? "ok" : "400",
                cost.max_stacks, cost.max_stack_elements, cost.steps, absl::ToDoubleMilliseconds(absl::Now() - t0));
    EXPECT_EQ(s.ok(), c.ok) << c.name << ": " << s.message().substr(0, 300);
    if (!s.ok()) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_TRUE(absl::StartsWith(s.message(), "grammar: too costly to match")) << s;
    }
  }
}

// MaskCache gives exactly CheckTokens' mask over the whole vocabulary at every state of
// a walk through a JSON-schema grammar (stories260K's 512 tokens), shares masks between
// matchers of one grammar, and keeps at most max_entries.
TEST(MaskCache, EqualsCheckTokensAndIsBounded) {
  const std::string dir = SharedDir();
  if (dir.empty()) GTEST_SKIP() << kSharedDirMissing;
  auto v = LoadSharedVocab(dir);
  ASSERT_TRUE(v.ok()) << v.status();
  std::shared_ptr<const TokenPieces> p = TokenPieces::FromVocab(**v);
  auto text = JsonSchemaToGrammar(nlohmann::json::parse(
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"n":{"type":"integer"},
          "tags":{"type":"array","items":{"enum":["ab","cd","once upon"]}}},"required":["name","n","tags"]})"));
  ASSERT_TRUE(text.ok()) << text.status();
  auto g = Grammar::Parse(*text);
  ASSERT_TRUE(g.ok());
  MaskCache cache(*g, p, MaskCache::Limits{16, 1 << 16});
  GrammarCache grammars(p, 1);
  std::mt19937 rng(9);
  std::vector<int32_t> all(static_cast<size_t>(p->n_tokens()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
  std::vector<uint8_t> want(all.size()), got(all.size());
  int steps = 0;
  for (int walk = 0; walk < 6; ++walk) {
    auto m = Matcher::Create(*g);
    ASSERT_TRUE(m.ok());
    for (int i = 0; i < 60; ++i) {
      m->CheckTokens(*p, all.data(), all.size(), want.data());
      cache.Mask(*m, got.data());
      ASSERT_EQ(want, got) << "walk " << walk << " step " << i;
      std::vector<int32_t> ok_ids;
      for (size_t t = 0; t < all.size(); ++t) {
        if (want[t] && !p->IsEog(static_cast<int32_t>(t))) ok_ids.push_back(static_cast<int32_t>(t));
      }
      if (ok_ids.empty()) break;
      ASSERT_TRUE(m->AcceptToken(*p, ok_ids[rng() % ok_ids.size()]).ok());
      ++steps;
    }
  }
  const MaskCache::Stats st = cache.stats();
  EXPECT_GT(steps, 100);
  EXPECT_GT(st.hits, 0u);
  EXPECT_LE(st.entries, 16u);
  // A matcher of another grammar object is answered, never cached.
  auto g2 = Grammar::Parse(*text);
  ASSERT_TRUE(g2.ok());
  auto m2 = Matcher::Create(*g2);
  ASSERT_TRUE(m2.ok());
  m2->CheckTokens(*p, all.data(), all.size(), want.data());
  cache.Mask(*m2, got.data());
  EXPECT_EQ(want, got);
  // GrammarCache: one parse per text, the oldest text dropped beyond max_grammars.
  auto a1 = grammars.Get(*text), a2 = grammars.Get(*text);
  ASSERT_TRUE(a1.ok() && a2.ok());
  EXPECT_EQ(a1->get(), a2->get());
  ASSERT_TRUE(grammars.Get("root ::= \"x\"").ok());
  auto a3 = grammars.Get(*text);
  ASSERT_TRUE(a3.ok());
  EXPECT_NE(a1->get(), a3->get());
  EXPECT_EQ(grammars.Get("root ::= (").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace herd::grammar
