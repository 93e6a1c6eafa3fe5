#include "tools/herd/load_progress.h"

#include <vector>

#include "gtest/gtest.h"

#include "tests/shared_data.h"

namespace herd::cli {
namespace {

TEST(LoadProgress, TouchesEveryTensorByteRangeAndReportsMonotoneProgress) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  auto f = gguf::GgufFile::Open(shared + "/models/stories260K.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  uint64_t want = 0;
  for (const gguf::TensorInfo& t : (*f)->tensors()) want += t.nbytes;
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  const uint64_t total = PageInTensors(**f, [&](uint64_t d, uint64_t a) { calls.emplace_back(d, a); });
  EXPECT_EQ(total, want);
  ASSERT_FALSE(calls.empty());
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_GE(calls[i].first, calls[i - 1].first);
  EXPECT_EQ(calls.back().first, want);
  EXPECT_EQ(calls.back().second, want);
}

}  // namespace
}  // namespace herd::cli
