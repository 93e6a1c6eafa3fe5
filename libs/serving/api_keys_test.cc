#include "libs/serving/api_keys.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace herd::serving {
namespace {

std::string TempFile(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ApiKeys, FileSkipsCommentsAndBlankLines) {
  auto keys = ApiKeys::FromFile(TempFile("k1", "# team keys\n\n  sk-first-key-123  \nsk-second-key-456\n"));
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 2u);
  EXPECT_TRUE(keys->Accepts("sk-first-key-123"));
  EXPECT_TRUE(keys->Accepts("sk-second-key-456"));
  EXPECT_FALSE(keys->Accepts("sk-first-key-12"));
  EXPECT_FALSE(keys->Accepts("sk-first-key-1234"));
  EXPECT_FALSE(keys->Accepts(""));
  EXPECT_FALSE(keys->Accepts("# team keys"));
}

TEST(ApiKeys, ErrorsNameTheProblem) {
  auto missing = ApiKeys::FromFile("/nonexistent/keys.txt");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/keys.txt"), std::string::npos);
  auto empty = ApiKeys::FromFile(TempFile("k2", "# nothing\n\n"));
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  auto short_key = ApiKeys::FromFile(TempFile("k3", "abc\n"));
  EXPECT_EQ(short_key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_key.status().message().find(":1"), std::string::npos);  // names the line
  auto space = ApiKeys::FromList("good-key-1, bad key 2", "HERD_API_KEYS");
  EXPECT_EQ(space.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ApiKeys, LoadPrefersFileThenEnvironmentElseOff) {
  ::unsetenv("HERD_TEST_KEYS");
  auto off = ApiKeys::Load("", "HERD_TEST_KEYS");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->enabled());
  EXPECT_FALSE(off->Accepts("anything-at-all"));
  ::setenv("HERD_TEST_KEYS", "env-key-0001,env-key-0002", 1);
  auto env = ApiKeys::Load("", "HERD_TEST_KEYS");
  ASSERT_TRUE(env.ok());
  EXPECT_TRUE(env->Accepts("env-key-0002"));
  auto file = ApiKeys::Load(TempFile("k4", "file-key-0001\n"), "HERD_TEST_KEYS");
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE(file->Accepts("file-key-0001"));
  EXPECT_FALSE(file->Accepts("env-key-0001"));
}

TEST(ApiKeys, BearerToken) {
  EXPECT_EQ(ApiKeys::BearerToken("Bearer abc.def"), "abc.def");
  EXPECT_EQ(ApiKeys::BearerToken("bearer   tok "), "tok");
  EXPECT_EQ(ApiKeys::BearerToken("Basic dXNlcjpwYXNz"), "");
  EXPECT_EQ(ApiKeys::BearerToken("Bearer"), "");
  EXPECT_EQ(ApiKeys::BearerToken(""), "");
}

}  // namespace
}  // namespace herd::serving
