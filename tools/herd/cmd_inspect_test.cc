// herd inspect --tensor: raw block bytes and dequantized rows of one tensor, row ranges,
// and the errors of bad names, ranges and flags. The dequantized rows of llama-quantize's
// Q8_0 file are held to the F32 model they were made from (../shared).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

#include "libs/base/fp16.h"
#include "libs/gguf/gguf.h"
#include "libs/tensor/quants.h"
#include "tests/shared_data.h"
#include "tools/herd/commands.h"

namespace herd::cli {
namespace {

struct Result {
  int rc;
  std::string out, err;
};

Result Inspect(std::vector<std::string> args) {
  args.insert(args.begin(), {"herd", "inspect"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const int rc = CmdInspect(static_cast<int>(argv.size()), argv.data());
  std::fflush(stdout);
  std::fflush(stderr);
  Result r{rc, testing::internal::GetCapturedStdout(), ""};
  r.err = testing::internal::GetCapturedStderr();
  return r;
}

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out = absl::StrSplit(s, '\n');
  if (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

std::vector<float> Floats(const std::string& line) {
  std::vector<float> v;
  for (absl::string_view tok : absl::StrSplit(line, ' ')) {
    float x = 0;
    EXPECT_TRUE(absl::SimpleAtof(tok, &x)) << tok;
    v.push_back(x);
  }
  return v;
}

// Two Q8_0 rows of 64 (two blocks each): row r block b has d = 0.5 * (1 + r + b),
// qs[j] = j - 16 (block 0) or 15 - j (block 1).
std::string WriteQ8Model() {
  std::vector<BlockQ8_0> blocks(4);
  for (int r = 0; r < 2; ++r) {
    for (int b = 0; b < 2; ++b) {
      BlockQ8_0& blk = blocks[static_cast<size_t>(r * 2 + b)];
      blk.d = Fp32ToFp16(0.5f * static_cast<float>(1 + r + b));
      for (int j = 0; j < 32; ++j) blk.qs[j] = static_cast<int8_t>(b == 0 ? j - 16 : 15 - j);
    }
  }
  gguf::GgufWriter w;
  w.SetValue("general.architecture", gguf::Value::String("llama"));
  EXPECT_TRUE(w.AddTensor("t", GgmlType::Q8_0, {64, 2}, blocks.data(), blocks.size() * sizeof(BlockQ8_0)).ok());
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir ? dir : "/tmp") + "/inspect_q8.gguf";
  EXPECT_TRUE(w.WriteFile(path).ok());
  return path;
}

TEST(CmdInspect, RawRowsAreTheBlockBytesInHex) {
  const std::string path = WriteQ8Model();
  Result r = Inspect({path, "--tensor", "t", "--rows", "1:2"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 1u);
  const std::vector<std::string> blocks = absl::StrSplit(lines[0], ' ');
  ASSERT_EQ(blocks.size(), 2u);  // two 34-byte blocks: 68 hex digits each
  ASSERT_EQ(blocks[0].size(), 68u);
  // Row 1 block 0: d = 1.0 (F16 0x3c00, little-endian "003c"), qs[0] = -16 (0xf0).
  EXPECT_EQ(blocks[0].substr(0, 6), "003cf0");
  // Row 1 block 1: d = 1.5 (F16 0x3e00), qs[0] = 15 (0x0f).
  EXPECT_EQ(blocks[1].substr(0, 6), "003e0f");
  EXPECT_NE(r.err.find("tensor t: type Q8_0, ne 64 x 2, 68 bytes per row (blocks: 2 x 32 elements), rows 1:2 of 2"),
            std::string::npos)
      << r.err;
}

TEST(CmdInspect, DequantizedRowsAreGgmlsValues) {
  const std::string path = WriteQ8Model();
  Result r = Inspect({path, "--tensor", "t", "--dequant"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 2u);
  for (int row = 0; row < 2; ++row) {
    const std::vector<float> v = Floats(lines[static_cast<size_t>(row)]);
    ASSERT_EQ(v.size(), 64u);
    for (int i = 0; i < 64; ++i) {
      const int b = i / 32, j = i % 32;
      const float want = 0.5f * static_cast<float>(1 + row + b) * static_cast<float>(b == 0 ? j - 16 : 15 - j);
      EXPECT_EQ(v[static_cast<size_t>(i)], want) << "row " << row << " element " << i;
    }
  }
}

TEST(CmdInspect, ErrorsNameWhatIsWrong) {
  const std::string path = WriteQ8Model();
  Result r = Inspect({path, "--tensor", "nope"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("no tensor named 'nope'"), std::string::npos) << r.err;
  for (const char* rows : {"2:3", "1:1", "x:2", "5", "-1:1"}) {
    r = Inspect({path, "--tensor", "t", "--rows", rows});
    EXPECT_EQ(r.rc, 2) << rows;
    EXPECT_NE(r.err.find("--rows"), std::string::npos) << rows << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << rows;
  }
  r = Inspect({path, "--dequant"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("need --tensor"), std::string::npos) << r.err;
  r = Inspect({path, "--tensor", "t", "--rows", ":1"});  // open start: rows 0:1
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Lines(r.out).size(), 1u);
  // Without --tensor: the table, as before.
  r = Inspect({path});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("tensors: 1"), std::string::npos) << r.out;
}

// llama-quantize's Q8_0 file against the F32 model it was quantized from: each value
// within half a quantization step of the original (d/2, plus 127 * d * 2^-11 because
// q = round(x / d) uses the unrounded d while the file stores it as F16),
// and the printed floats are exactly DequantizeRow of the file's bytes.
TEST(CmdInspect, Q8_0ReferenceFileDequantizesToItsF32Source) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  const std::string q8 = shared + "/reference/quant/stories260K-Q8_0.gguf";
  const std::string f32 = shared + "/models/stories260K.gguf";
  auto fq = gguf::GgufFile::Open(q8);
  auto ff = gguf::GgufFile::Open(f32);
  ASSERT_TRUE(fq.ok()) << fq.status();
  ASSERT_TRUE(ff.ok()) << ff.status();
  const char* name = "blk.0.attn_q.weight";
  const gguf::TensorInfo *tq = nullptr, *tf = nullptr;
  for (const auto& t : (*fq)->tensors()) tq = t.name == name ? &t : tq;
  for (const auto& t : (*ff)->tensors()) tf = t.name == name ? &t : tf;
  ASSERT_NE(tq, nullptr);
  ASSERT_NE(tf, nullptr);
  ASSERT_EQ(tq->type, GgmlType::Q8_0);
  ASSERT_EQ(tf->type, GgmlType::F32);
  const int64_t ne0 = tq->ne[0];
  Result r = Inspect({q8, "--tensor", name, "--rows", "3:7", "--dequant"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 4u);
  const auto* blocks = reinterpret_cast<const BlockQ8_0*>(tq->data);
  const auto* src = reinterpret_cast<const float*>(tf->data);
  std::vector<float> want(static_cast<size_t>(ne0));
  for (int k = 0; k < 4; ++k) {
    const int64_t row = 3 + k;
    const std::vector<float> got = Floats(lines[static_cast<size_t>(k)]);
    ASSERT_EQ(static_cast<int64_t>(got.size()), ne0);
    DequantizeRow(GgmlType::Q8_0, blocks + row * ne0 / 32, want.data(), ne0);
    for (int64_t i = 0; i < ne0; ++i) {
      EXPECT_EQ(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)]) << "row " << row << " element " << i;
      const float d = Fp16ToFp32(blocks[(row * ne0 + i) / 32].d);
      EXPECT_LE(std::fabs(got[static_cast<size_t>(i)] - src[row * ne0 + i]), d * (0.5f + 127.0f / 2048.0f))
          << "row " << row << " element " << i;
    }
  }
}

}  // namespace
}  // namespace herd::cli
