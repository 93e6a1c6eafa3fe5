#include "services/gateway/text_stream.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace herd::gateway {
namespace {

TEST(Utf8, ValidAndInvalid) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("hello"));
  EXPECT_TRUE(IsValidUtf8("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"));
  size_t bad = 0;
  EXPECT_FALSE(IsValidUtf8("bad \xff\xfe utf8", &bad));
  EXPECT_EQ(bad, 4u);
  EXPECT_FALSE(IsValidUtf8("\xC3"));              // truncated
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xE0\x80\xAF"));      // overlong
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\x80"));              // stray continuation
  EXPECT_EQ(SanitizeUtf8("a\xffz"), "a\xEF\xBF\xBDz");
  EXPECT_EQ(SanitizeUtf8("\xC3\xA9"), "\xC3\xA9");
  // Maximal subparts (Python's errors="replace"): an incomplete character is one U+FFFD.
  EXPECT_EQ(SanitizeUtf8("x\xE2\x82"), "x\xEF\xBF\xBD");
  EXPECT_EQ(SanitizeUtf8("\xF0\x9F\x98y"), "\xEF\xBF\xBDy");
  EXPECT_EQ(SanitizeUtf8("\xE2\x82\xE2\x82\xAC"), "\xEF\xBF\xBD\xE2\x82\xAC");
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: 3
  EXPECT_EQ(SanitizeUtf8("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

// Pushes pieces; returns the concatenated output.
std::string Feed(StopStringMatcher* m, const std::vector<std::string>& pieces,
                 std::vector<std::string>* outs = nullptr) {
  std::string all;
  for (const std::string& p : pieces) {
    std::string o = m->Push(p);
    if (outs != nullptr) outs->push_back(o);
    all += o;
    if (m->matched()) return all;
  }
  return all + m->Flush();
}

TEST(StopStrings, NoStopsPassesThrough) {
  StopStringMatcher m({});
  std::vector<std::string> outs;
  EXPECT_EQ(Feed(&m, {"a", "b", "c"}, &outs), "abc");
  EXPECT_EQ(outs, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_FALSE(m.matched());
}

TEST(StopStrings, SplitAcrossTokens) {
  StopStringMatcher m({"ab"});
  std::vector<std::string> outs;
  EXPECT_EQ(Feed(&m, {"x", "a", "b", "y"}, &outs), "x");
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.matched_stop(), "ab");
  // "a" was held back, never emitted.
  EXPECT_EQ(outs, (std::vector<std::string>{"x", "", ""}));
}

TEST(StopStrings, HeldPrefixReleasedWhenItDoesNotMatch) {
  StopStringMatcher m({"ab"});
  std::vector<std::string> outs;
  EXPECT_EQ(Feed(&m, {"a", "c", "a"}, &outs), "aca");
  EXPECT_FALSE(m.matched());
  EXPECT_EQ(outs, (std::vector<std::string>{"", "ac", ""}));
}

TEST(StopStrings, MatchInsideOnePieceCutsThere) {
  StopStringMatcher m({"STOP"});
  EXPECT_EQ(Feed(&m, {"hello STOP world"}), "hello ");
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.Push("more"), "");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopStrings, OverlappingPrefixes) {
  StopStringMatcher m({"aab"});
  EXPECT_EQ(Feed(&m, {"a", "a", "a", "b", "c"}), "a");
  EXPECT_TRUE(m.matched());
}

TEST(StopStrings, EarliestOfSeveral) {
  StopStringMatcher m({"world", "lo w"});
  EXPECT_EQ(Feed(&m, {"hel", "lo", " ", "wor", "ld"}), "hel");
  EXPECT_EQ(m.matched_stop(), "lo w");
}

TEST(StopStrings, MultiByteStop) {
  StopStringMatcher m({"\xC3\xA9t\xC3\xA9"});  // "été"
  std::vector<std::string> outs;
  EXPECT_EQ(Feed(&m, {"un \xC3\xA9", "t", "\xC3\xA9!"}, &outs), "un ");
  EXPECT_TRUE(m.matched());
  for (const std::string& o : outs) EXPECT_TRUE(IsValidUtf8(o)) << o;
}

TEST(StopStrings, FlushReleasesHeldText) {
  StopStringMatcher m({"abc"});
  EXPECT_EQ(m.Push("xab"), "x");
  EXPECT_EQ(m.pending_bytes(), 2u);
  EXPECT_EQ(m.Flush(), "ab");
}

}  // namespace
}  // namespace herd::gateway
