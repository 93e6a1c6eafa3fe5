// Writer tests: every .gguf under ../shared (models/ and reference/, recursively) is read
// and written again byte-identically; atomic WriteFile; writer edits and validation.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "libs/base/mmap.h"
#include "libs/gguf/gguf.h"
#include "tests/shared_data.h"

namespace herd::gguf {
namespace {

namespace fs = std::filesystem;

#define REQUIRE_SHARED(var)            \
  const std::string var = SharedDir(); \
  if (var.empty()) GTEST_SKIP() << kSharedDirMissing

bool Contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

std::vector<std::string> AllGgufFiles(const std::string& shared) {
  std::vector<std::string> out;
  for (const char* sub : {"models", "reference"}) {
    const fs::path root = fs::path(shared) / sub;
    std::error_code ec;
    if (!fs::is_directory(root, ec)) continue;
    for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->is_regular_file(ec) && it->path().extension() == ".gguf") {
        out.push_back(it->path().string());
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr && t[0] != '\0' ? t : "/tmp";
}

// Files in `dir` whose name starts with `prefix`.
std::vector<std::string> ListPrefix(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  return out;
}

TEST(GgufRoundTrip, EverySharedFileIsByteIdentical) {
  REQUIRE_SHARED(shared);
  const std::vector<std::string> files = AllGgufFiles(shared);
  // models/ (2 + 12 vocab) and reference/ (arch + quant): fail loudly if the tree moved.
  ASSERT_GE(files.size(), 50u) << "expected the .gguf files of " << shared;
  bool saw_vocab = false, saw_quant = false, saw_arch = false;
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    saw_vocab |= Contains(path, "/vocab/");
    saw_quant |= Contains(path, "/quant/");
    saw_arch |= Contains(path, "/arch/");
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
    ASSERT_TRUE(f.ok()) << f.status();
    absl::StatusOr<std::string> orig = ReadFileToString(path);
    ASSERT_TRUE(orig.ok()) << orig.status();
    const std::string out = GgufWriter::FromFile(**f).WriteToString();
    if (out != *orig) {
      size_t i = 0;
      while (i < out.size() && i < orig->size() && out[i] == (*orig)[i]) ++i;
      ADD_FAILURE() << "differs at byte " << i << " (written " << out.size() << " bytes, original " << orig->size()
                    << ", data section at " << (*f)->data_offset() << ")";
    }
  }
  EXPECT_TRUE(saw_vocab);
  EXPECT_TRUE(saw_quant);
  EXPECT_TRUE(saw_arch);
}

TEST(GgufRoundTrip, WriteFileIsAtomicAndIdentical) {
  REQUIRE_SHARED(shared);
  const std::string src = shared + "/reference/quant/stories260K-Q4_K_M.gguf";
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(src);
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string dir = TempDir();
  const std::string dst = dir + "/roundtrip_q4km.gguf";
  ASSERT_TRUE(GgufWriter::FromFile(**f).WriteFile(dst).ok());
  absl::StatusOr<std::string> a = ReadFileToString(src);
  absl::StatusOr<std::string> b = ReadFileToString(dst);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(*a == *b);
  EXPECT_EQ(ListPrefix(dir, "roundtrip_q4km.gguf.tmp").size(), 0u);

  // Overwriting an existing file works too.
  ASSERT_TRUE(GgufWriter::FromFile(**f).WriteFile(dst).ok());
  EXPECT_EQ(ListPrefix(dir, "roundtrip_q4km.gguf").size(), 1u);
}

TEST(GgufRoundTrip, EditedFileKeepsTensorBytes) {
  REQUIRE_SHARED(shared);
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(shared + "/models/stories260K.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  GgufWriter w = GgufWriter::FromFile(**f);
  w.SetValue("general.name", Value::String("a much longer name than before"));
  w.SetValue("herd.test", Value::U64(42));
  w.RemoveKey("tokenizer.ggml.padding_token_id");
  w.SetValue("general.alignment", Value::U32(64));
  absl::StatusOr<std::unique_ptr<GgufFile>> g = GgufFile::FromBytes(w.WriteToString(), "edited");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->alignment(), 64u);
  EXPECT_EQ((*g)->data_offset() % 64, 0u);
  EXPECT_EQ(*(*g)->GetString("general.name"), "a much longer name than before");
  EXPECT_EQ(*(*g)->GetInt("herd.test"), 42);
  EXPECT_EQ((*g)->Find("tokenizer.ggml.padding_token_id"), nullptr);
  // SetValue on an existing key keeps its position.
  EXPECT_EQ((*g)->metadata()[5].key, "general.name");
  EXPECT_EQ((*g)->metadata().back().key, "general.alignment");
  ASSERT_EQ((*g)->tensors().size(), (*f)->tensors().size());
  for (size_t i = 0; i < (*f)->tensors().size(); ++i) {
    const TensorInfo& a = (*f)->tensors()[i];
    const TensorInfo& b = (*g)->tensors()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(b.offset % 64, 0u);
    ASSERT_EQ(a.nbytes, b.nbytes);
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0) << a.name;
  }
}

TEST(GgufWriter, LayoutPaddingAndVersion) {
  const float a[3] = {1, 2, 3};
  const uint16_t h[5] = {1, 2, 3, 4, 5};
  GgufWriter w(2);
  w.SetValue("general.architecture", Value::String("x"));
  ASSERT_TRUE(w.AddTensor("a", GgmlType::F32, {3}, a, sizeof(a)).ok());
  ASSERT_TRUE(w.AddTensor("h", GgmlType::F16, {5, 1}, h, sizeof(h)).ok());
  const std::string img = w.WriteToString();
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(img);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->version(), 2u);
  EXPECT_EQ((*f)->data_offset() % 32, 0u);
  ASSERT_EQ((*f)->tensors().size(), 2u);
  EXPECT_EQ((*f)->tensors()[0].offset, 0u);
  EXPECT_EQ((*f)->tensors()[1].offset, 32u);
  EXPECT_EQ((*f)->tensors()[1].n_dims, 2u);
  EXPECT_EQ(img.size(), (*f)->data_offset() + 64);  // last tensor padded too
  EXPECT_EQ(std::memcmp((*f)->tensors()[1].data, h, sizeof(h)), 0);
  for (size_t i = (*f)->data_offset() + 12; i < (*f)->data_offset() + 32; ++i) {
    EXPECT_EQ(img[i], '\0') << i;  // zero padding
  }

  // No tensors: the header is still padded to the alignment by default.
  GgufWriter empty;
  empty.SetValue("k", Value::U8(1));
  EXPECT_EQ(empty.WriteToString().size() % 32, 0u);
}

TEST(GgufWriter, AddTensorValidation) {
  const float d[8] = {};
  GgufWriter w;
  ASSERT_TRUE(w.AddTensor("t", GgmlType::F32, {4, 2}, d, sizeof(d)).ok());
  auto msg = [](const absl::Status& s) { return std::string(s.message()); };
  absl::Status s = w.AddTensor("t", GgmlType::F32, {4, 2}, d, sizeof(d));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(msg(s), "duplicate")) << s;
  s = w.AddTensor("u", GgmlType::F32, {4, 2}, d, 12);
  EXPECT_TRUE(Contains(msg(s), "nbytes 12 does not match the 32 bytes")) << s;
  s = w.AddTensor("u", GgmlType::F32, {}, d, 4);
  EXPECT_TRUE(Contains(msg(s), "n_dims 0")) << s;
  s = w.AddTensor("u", GgmlType::F32, {1, 1, 1, 1, 1}, d, 4);
  EXPECT_TRUE(Contains(msg(s), "n_dims 5")) << s;
  s = w.AddTensor("u", GgmlType::F32, {4, 0}, d, 0);
  EXPECT_TRUE(Contains(msg(s), "dim 1 is 0")) << s;
  s = w.AddTensor("u", GgmlType::F32, {-4}, d, 16);
  EXPECT_TRUE(Contains(msg(s), "dim 0 is -4")) << s;
  s = w.AddTensor("u", static_cast<GgmlType>(4), {4}, d, 16);
  EXPECT_TRUE(Contains(msg(s), "unknown ggml type id 4")) << s;
  s = w.AddTensor("u", GgmlType::Q4_0, {16}, d, 9);
  EXPECT_TRUE(Contains(msg(s), "not a multiple of the q4_0 block size 32")) << s;
  s = w.AddTensor("u", GgmlType::F32, {int64_t{1} << 40, int64_t{1} << 40}, d, 4);
  EXPECT_TRUE(Contains(msg(s), "overflows")) << s;
  s = w.AddTensor("u", GgmlType::F32, {4}, nullptr, 16);
  EXPECT_TRUE(Contains(msg(s), "null")) << s;

  const uint16_t h[8] = {};
  EXPECT_TRUE(w.ReplaceTensor("t", GgmlType::F16, h, sizeof(h)).ok());
  EXPECT_FALSE(w.ReplaceTensor("t", GgmlType::F16, h, 4).ok());
  EXPECT_EQ(w.ReplaceTensor("nope", GgmlType::F16, h, sizeof(h)).code(), absl::StatusCode::kNotFound);
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(w.WriteToString());
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)->tensors().size(), 1u);
  EXPECT_EQ((*f)->tensors()[0].type, GgmlType::F16);
  EXPECT_EQ((*f)->tensors()[0].nbytes, 16u);
}

TEST(GgufWriter, WriteFileErrorsLeaveNothing) {
  const std::string dir = TempDir();
  GgufWriter w;
  w.SetValue("k", Value::U8(1));
  // Missing directory.
  absl::Status s = w.WriteFile(dir + "/no/such/dir/out.gguf");
  EXPECT_FALSE(s.ok());
  // Invalid alignment value: rejected before anything is created.
  GgufWriter bad;
  bad.SetValue("general.alignment", Value::U32(3));
  s = bad.WriteFile(dir + "/bad_align.gguf");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(std::string(s.message()), "general.alignment")) << s;
  EXPECT_TRUE(ListPrefix(dir, "bad_align.gguf").empty());
  // Unsupported version.
  GgufWriter v1(1);
  EXPECT_EQ(v1.WriteFile(dir + "/v1.gguf").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ListPrefix(dir, "v1.gguf").empty());
  // A good write leaves exactly the file.
  ASSERT_TRUE(w.WriteFile(dir + "/good.gguf").ok());
  EXPECT_EQ(ListPrefix(dir, "good.gguf").size(), 1u);
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(dir + "/good.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*(*f)->GetUint32("k"), 1u);
}

TEST(GgufWriter, WriteFileStreamingMatchesWriteFile) {
  const std::string dir = TempDir();
  // Two tensors of different sizes (the second smaller: the fill buffer is reused) and
  // odd sizes (padding after each).
  std::vector<float> a(37), b(5);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = -static_cast<float>(i);
  GgufWriter w;
  w.SetValue("general.name", Value::String("streamed"));
  ASSERT_TRUE(w.AddTensor("a", GgmlType::F32, {37}, a.data(), a.size() * 4).ok());
  ASSERT_TRUE(w.AddTensor("b", GgmlType::F32, {5}, b.data(), b.size() * 4).ok());
  ASSERT_TRUE(w.WriteFile(dir + "/whole.gguf").ok());
  static const uint8_t kUnread = 0;  // WriteFileStreaming never reads AddTensor's pointers
  GgufWriter s;
  s.SetValue("general.name", Value::String("streamed"));
  ASSERT_TRUE(s.AddTensor("a", GgmlType::F32, {37}, &kUnread, a.size() * 4).ok());
  ASSERT_TRUE(s.AddTensor("b", GgmlType::F32, {5}, &kUnread, b.size() * 4).ok());
  std::vector<size_t> calls;
  ASSERT_TRUE(s.WriteFileStreaming(dir + "/streamed.gguf", [&](size_t i, uint8_t* dst) {
                 calls.push_back(i);
                 const std::vector<float>& src = i == 0 ? a : b;
                 std::memcpy(dst, src.data(), src.size() * 4);
                 return absl::OkStatus();
               }).ok());
  EXPECT_EQ(calls, (std::vector<size_t>{0, 1}));
  absl::StatusOr<std::string> x = ReadFileToString(dir + "/whole.gguf");
  absl::StatusOr<std::string> y = ReadFileToString(dir + "/streamed.gguf");
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_TRUE(*x == *y);
  // A failing filler: its status, and no file (nor temp file) left.
  absl::Status st = s.WriteFileStreaming(dir + "/failed.gguf", [](size_t i, uint8_t*) {
    return i == 1 ? absl::CancelledError("stop") : absl::OkStatus();
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(ListPrefix(dir, "failed.gguf").empty());
  EXPECT_EQ(s.WriteFileStreaming(dir + "/nofill.gguf", nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ListPrefix(dir, "nofill.gguf").empty());
}

}  // namespace
}  // namespace herd::gguf
