#include "libs/base/json_nesting.h"

#include <string>

#include "gtest/gtest.h"

namespace herd {
namespace {

std::string Nested(int depth, const char* open, const char* close) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += open;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}

TEST(JsonNesting, AcceptsUpToTheLimit) {
  EXPECT_TRUE(CheckJsonNesting("", "body").ok());
  EXPECT_TRUE(CheckJsonNesting("42", "body").ok());
  EXPECT_TRUE(CheckJsonNesting(Nested(kMaxJsonNesting, "[", "]"), "body").ok());
  EXPECT_TRUE(CheckJsonNesting(Nested(kMaxJsonNesting, "{\"k\":", "}"), "body").ok());
  // Siblings do not add up: depth, not count.
  std::string wide = "[";
  for (int i = 0; i < 10000; ++i) wide += "[],";
  wide += "[]]";
  EXPECT_TRUE(CheckJsonNesting(wide, "body", 2).ok());
  EXPECT_FALSE(CheckJsonNesting(wide, "body", 1).ok());
}

TEST(JsonNesting, RefusesOneLevelMoreNamingTheFieldAndLimit) {
  const absl::Status s = CheckJsonNesting(Nested(kMaxJsonNesting + 1, "{\"k\":", "}"), "request body");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(), "request body: JSON nested deeper than 256 levels (arrays and objects)");
  EXPECT_FALSE(CheckJsonNesting(Nested(3, "[", "]"), "tools", 2).ok());
}

TEST(JsonNesting, MillionDeepIsRefusedWithoutRecursion) {
  // Unbalanced too: the scan stops at the first level past the limit.
  const std::string deep(1000000, '[');
  EXPECT_FALSE(CheckJsonNesting(deep, "body").ok());
  EXPECT_FALSE(CheckJsonNesting(Nested(1000000, "{\"type\":\"object\",\"properties\":{\"k\":", "}}"), "schema").ok());
}

TEST(JsonNesting, BracketsInStringsDoNotCount) {
  const std::string in_string = "[\"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"]";
  EXPECT_TRUE(CheckJsonNesting(in_string, "body", 1).ok());
  // An escaped backslash ends the escape: the quote after it closes the string.
  EXPECT_FALSE(CheckJsonNesting("[\"\\\\\", [[]]]", "body", 2).ok());
  EXPECT_TRUE(CheckJsonNesting("[\"\\\\\", []]", "body", 2).ok());
  // Closing brackets never go below zero (malformed text is the parser's to report).
  EXPECT_TRUE(CheckJsonNesting("]]]]][", "body", 1).ok());
}

TEST(JsonNesting, NulByteIsRefusedWhereverItIs) {
  // nlohmann would parse "{}" out of the first and accept it.
  const absl::Status s = CheckJsonNesting(std::string("{}\0{\"k\":1}", 10), "request body");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "request body: NUL byte at offset 2 (not valid in JSON text)");
  EXPECT_FALSE(CheckJsonNesting(std::string("[\"a\0b\"]", 7), "body").ok());  // inside a string too
  EXPECT_FALSE(CheckJsonNesting(std::string(1, '\0'), "body").ok());
  EXPECT_TRUE(CheckJsonNesting("[\"a\\u0000b\"]", "body").ok());  // the escape is fine
}

}  // namespace
}  // namespace herd
