#include <atomic>
#include <cmath>
#include <cstdio>
#include <string>

#include "gtest/gtest.h"

#include "libs/base/fp16.h"
#include "libs/base/mmap.h"
#include "libs/base/thread_pool.h"

namespace herd {
namespace {

TEST(Fp16, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = Fp16ToFp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(Fp32ToFp16(f), h) << h;
  }
}

TEST(Fp16, KnownValuesAndRounding) {
  EXPECT_EQ(Fp32ToFp16(1.0f), 0x3C00);
  EXPECT_EQ(Fp32ToFp16(-2.0f), 0xC000);
  EXPECT_EQ(Fp32ToFp16(65504.0f), 0x7BFF);
  EXPECT_EQ(Fp32ToFp16(1e6f), 0x7C00);  // overflow -> inf
  // 1 + 2^-11 is halfway between 1 and 1+2^-10: ties to even -> 1.0
  EXPECT_EQ(Fp32ToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(Fp32ToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_FLOAT_EQ(Fp16ToFp32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
}

TEST(Bf16, Rounding) {
  EXPECT_EQ(Fp32ToBf16(1.0f), 0x3F80);
  EXPECT_EQ(Bf16ToFp32(0x3F80), 1.0f);
  EXPECT_EQ(Fp32ToBf16(BitsToFloat(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(Fp32ToBf16(BitsToFloat(0x3F818000u)), 0x3F82);  // tie -> even (up)
}

TEST(ThreadPool, RunsEveryIndexOnce) {
  for (int n : {1, 2, 4}) {
    ThreadPool pool(n);
    for (int rep = 0; rep < 200; ++rep) {
      std::atomic<int> sum{0};
      pool.Run([&](int ith, int nth) {
        EXPECT_EQ(nth, n);
        sum.fetch_add(1 << ith);
      });
      EXPECT_EQ(sum.load(), (1 << n) - 1);
    }
  }
}

TEST(SplitRange, CoversAll) {
  int64_t covered = 0;
  for (int i = 0; i < 3; ++i) {
    int64_t b, e;
    SplitRange(10, i, 3, &b, &e);
    covered += e - b;
  }
  EXPECT_EQ(covered, 10);
}

TEST(MappedFile, MapsAndReportsMissing) {
  std::string path = std::string(::testing::TempDir()) + "/mf.bin";
  ASSERT_TRUE(WriteFileAtomic(path, "hello", 5).ok());
  auto mf = MappedFile::Open(path);
  ASSERT_TRUE(mf.ok()) << mf.status();
  ASSERT_EQ(mf->size(), 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(mf->data()), 5), "hello");
  auto missing = MappedFile::Open(path + ".nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("mf.bin.nope"), std::string::npos);
}

}  // namespace
}  // namespace herd
