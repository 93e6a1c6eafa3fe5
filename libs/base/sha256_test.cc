#include "libs/base/sha256.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

#include "tests/shared_data.h"

namespace herd {
namespace {

// FIPS 180-4 / NIST CAVP examples.
TEST(Sha256, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopq"
                      "rlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(Sha256Hex("The quick brown fox jumps over the lazy dog"),
            "d7a8fbb307d7809469ca9abcb0082e4f8d5651e46d3cdb762d02d0bf37c9e592");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Padding boundaries: 55, 56, 63, 64, 65 bytes, fed in every split.
TEST(Sha256, IncrementalEqualsOneShot) {
  for (size_t len : {0u, 1u, 55u, 56u, 57u, 63u, 64u, 65u, 127u, 128u, 200u}) {
    std::string s;
    for (size_t i = 0; i < len; ++i) s.push_back(static_cast<char>(i * 37 + 11));
    const std::string want = Sha256Hex(s);
    for (size_t split = 0; split <= len; ++split) {
      Sha256 h;
      h.Update(s.data(), split);
      h.Update(s.data() + split, len - split);
      ASSERT_EQ(h.HexDigest(), want) << "len " << len << " split " << split;
    }
  }
  // 56 bytes: the length no longer fits after the 0x80 byte of the first block.
  EXPECT_EQ(Sha256Hex(std::string(56, 'a')), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
}

TEST(Sha256, FileMatchesBytesAndErrors) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/sha256_test.bin";
  std::string data(3 * (1 << 20) + 12345, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 2654435761u) >> 13);
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(data.data(), 1, data.size(), f), data.size());
  std::fclose(f);
  auto got = Sha256File(path);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, Sha256Hex(data));

  auto cancelled = Sha256File(path, [] { return true; });
  EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kCancelled);
  auto missing = Sha256File(path + ".missing");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("sha256_test.bin.missing"), std::string::npos);
}

TEST(Sha256, SharedModel) {
  const std::string dir = SharedDir();
  if (dir.empty()) GTEST_SKIP() << kSharedDirMissing;
  auto got = Sha256File(dir + "/models/stories260K.gguf");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d");
}

}  // namespace
}  // namespace herd
