#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

#include "libs/base/fp16.h"
#include "libs/base/mmap.h"
#include "libs/base/status_macros.h"
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

// The CPUs the calling thread may run on.
std::vector<int> ThreadCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

TEST(ThreadPool, PinningOrderListsEachAllowedCpuOnce) {
  const std::vector<int> order = PinningOrder();
  const std::vector<int> allowed = ThreadCpus();
  ASSERT_FALSE(order.empty());
  EXPECT_EQ(std::set<int>(order.begin(), order.end()).size(), order.size());
  EXPECT_EQ(std::set<int>(order.begin(), order.end()), std::set<int>(allowed.begin(), allowed.end()));
}

TEST(ThreadPool, PinnedThreadsRunEachOnItsCpu) {
  const std::vector<int> order = PinningOrder();
  const std::vector<int> allowed = ThreadCpus();
  // On a thread of its own, so that binding the caller leaves the test's thread alone.
  std::thread([&] {
    for (bool pin : {false, true}) {
      ThreadPool pool(3, pin);
      EXPECT_EQ(pool.pinned(), pin);
      std::vector<std::vector<int>> seen(3);
      pool.Run([&](int ith, int) { seen[static_cast<size_t>(ith)] = ThreadCpus(); });
      // A pool made by a bound thread still spreads over all the CPUs.
      if (pin) {
        ThreadPool inner(2, true);
        std::vector<std::vector<int>> in(2);
        std::thread([&] { inner.Run([&](int ith, int) { in[static_cast<size_t>(ith)] = ThreadCpus(); }); }).join();
        EXPECT_EQ(in[1], std::vector<int>{order[1 % order.size()]});
      }
      for (size_t i = 0; i < 3; ++i) {
        if (pin) {
          EXPECT_EQ(seen[i], std::vector<int>{order[i % order.size()]}) << "thread " << i;
        } else {
          EXPECT_EQ(seen[i], allowed) << "thread " << i;
        }
      }
    }
    // The pinned pool's caller got its CPUs back when the pool went.
    EXPECT_EQ(ThreadCpus(), allowed);
  }).join();
  EXPECT_EQ(ThreadCpus(), allowed);
}

TEST(GuidedChunks, CoversAllInShrinkingAlignedChunks) {
  for (int64_t n : {0, 1, 16, 17, 256, 768, 2048, 5632, 32000, 32001}) {
    for (int nth : {1, 2, 3, 8}) {
      const std::vector<int64_t> s = GuidedChunks(n, nth, 16, 32);
      ASSERT_GE(s.size(), 1u);
      EXPECT_EQ(s.front(), 0) << n;
      EXPECT_EQ(s.back(), n) << n;
      for (size_t c = 0; c + 1 < s.size(); ++c) {
        const int64_t len = s[c + 1] - s[c];
        ASSERT_GT(len, 0) << "n=" << n << " chunk " << c;
        // Every chunk but the last starts and ends on a unit; none is below min_chunk
        // unless it is the remainder.
        if (c + 2 < s.size()) {
          EXPECT_EQ(len % 16, 0) << "n=" << n << " chunk " << c;
          EXPECT_GE(len, 32) << "n=" << n << " chunk " << c;
        }
        // Non-increasing: the first chunks are the large ones.
        if (c > 0) {
          EXPECT_LE(len, s[c] - s[c - 1]) << "n=" << n << " chunk " << c;
        }
        // A share of the rest: at most 1/(2 nth) of it, rounded up to the unit (or min_chunk).
        EXPECT_LE(len, std::max<int64_t>(32, ((n - s[c] + 2 * nth - 1) / (2 * nth) + 15) / 16 * 16));
      }
    }
  }
  // 5632 rows on 2 threads (tinyllama's ffn_up): 1408 rows first, then smaller.
  const std::vector<int64_t> s = GuidedChunks(5632, 2, 16, 32);
  EXPECT_EQ(s[1], 1408);
  EXPECT_EQ(s[s.size() - 1] - s[s.size() - 2], 32);
  EXPECT_LT(s.size(), 24u);
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

absl::Status FailIf(bool fail) { return fail ? absl::InvalidArgumentError("boom") : absl::OkStatus(); }

absl::StatusOr<std::unique_ptr<int>> MakeInt(int v) {
  if (v < 0) return absl::OutOfRangeError("negative");
  return std::make_unique<int>(v);
}

absl::Status ReturnIfError(bool fail, int* steps) {
  HERD_RETURN_IF_ERROR(FailIf(fail));
  ++*steps;
  return absl::OkStatus();
}

// Declares a move-only value, assigns into an existing variable, converts to another StatusOr.
absl::StatusOr<int> SumOf(int a, int b) {
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<int> pa, MakeInt(a));
  int sum = 0;
  HERD_ASSIGN_OR_RETURN(auto pb, MakeInt(b));
  HERD_ASSIGN_OR_RETURN(sum, absl::StatusOr<int>(*pa + *pb));
  return sum;
}

TEST(StatusMacros, ReturnIfErrorPropagatesErrorsAndContinuesOnOk) {
  int steps = 0;
  EXPECT_TRUE(ReturnIfError(false, &steps).ok());
  EXPECT_EQ(steps, 1);
  absl::Status s = ReturnIfError(true, &steps);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "boom");
  EXPECT_EQ(steps, 1);
  // Works as the unbraced body of an if.
  auto in_if = [](bool fail) -> absl::StatusOr<int> {
    if (fail) HERD_RETURN_IF_ERROR(FailIf(true));
    return 7;
  };
  EXPECT_EQ(*in_if(false), 7);
  EXPECT_EQ(in_if(true).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StatusMacros, AssignOrReturnPropagatesErrorsAndMovesValues) {
  absl::StatusOr<int> ok = SumOf(2, 3);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 5);
  EXPECT_EQ(SumOf(-1, 3).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(SumOf(1, -3).status().message(), "negative");
}

}  // namespace
}  // namespace herd
