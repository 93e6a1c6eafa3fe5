// Whole-model quantization vs llama-quantize: for every C-/D- reference JSON in
// ../shared/reference, QuantizeModel runs with the options of the recorded
// llama-quantize command (quantization.command) and must produce
//  - the per-tensor types llama.cpp chose (quantization.tensor_types),
//  - general.file_type / general.quantization_version,
//  - byte-identical tensor data, and in fact a byte-identical file,
// and must leave nothing behind for a corrupt or truncated source or a cancel.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "libs/gguf/gguf.h"
#include "libs/quant/quantize.h"
#include "tests/shared_data.h"

namespace herd {
namespace {

using json = nlohmann::json;

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> QuantCases(const std::string& ref_dir) {
  std::vector<std::string> out;
  for (const std::string& n : ListDir(ref_dir)) {
    if ((n.rfind("C-", 0) == 0 || n.rfind("D-", 0) == 0) && n.size() > 5 && n.substr(n.size() - 5) == ".json" &&
        n != "D-synth256-F32.json") {
      out.push_back(ref_dir + "/" + n);
    }
  }
  return out;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh empty directory under TEST_TMPDIR.
std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(base != nullptr ? base : "/tmp") + "/" + name;
  std::string cmd = "rm -rf '" + dir + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_EQ(::mkdir(dir.c_str(), 0755), 0);
  return dir;
}

// The llama-quantize command line -> (source path relative to shared, options).
struct Command {
  std::string src;
  quant::QuantizeOptions opts;
};
Command ParseCommand(const std::string& cmd) {
  std::istringstream in(cmd);
  std::vector<std::string> tok;
  for (std::string t; in >> t;) tok.push_back(t);
  size_t i = 0;
  while (i < tok.size() && tok[i].find("llama-quantize") == std::string::npos) ++i;
  ++i;
  Command c;
  for (; i < tok.size() && tok[i].rfind("--", 0) == 0; ++i) {
    if (tok[i] == "--pure")
      c.opts.pure = true;
    else if (tok[i] == "--tensor-type")
      c.opts.tensor_type_overrides.push_back(tok[++i]);
    else if (tok[i] == "--output-tensor-type")
      c.opts.output_tensor_type = tok[++i];
    else if (tok[i] == "--token-embedding-type")
      c.opts.token_embedding_type = tok[++i];
    else
      ADD_FAILURE() << "unknown llama-quantize flag " << tok[i];
  }
  EXPECT_LE(i + 3, tok.size()) << cmd;
  c.src = tok[i].substr(std::string("shared/").size());
  c.opts.type = tok[i + 2];
  return c;
}

TEST(QuantModel, EveryReferenceFileReproduced) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  const std::vector<std::string> cases = QuantCases(shared + "/reference");
  ASSERT_GE(cases.size(), 30u);
  const std::string dir = TempDir("quant_model");
  int identical_files = 0;
  for (const std::string& path : cases) {
    SCOPED_TRACE(path);
    const json ref = json::parse(ReadAll(path));
    const json& q = ref["quantization"];
    Command c = ParseCommand(q["command"].get<std::string>());
    c.opts.n_threads = 2;
    const std::string out = dir + "/out.gguf";
    int progress_calls = 0;
    quant::QuantizeProgress last{};
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = quant::QuantizeModel(
        shared + "/" + c.src, out, c.opts,
        [&](const quant::QuantizeProgress& p) {
          ++progress_calls;
          EXPECT_LE(p.bytes_done, p.bytes_total);
          last = p;
        },
        nullptr);
    ASSERT_TRUE(s.ok()) << s;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GT(progress_calls, 1);
    EXPECT_EQ(last.tensors_done, last.tensors_total);
    EXPECT_EQ(last.bytes_done, last.bytes_total);

    auto got = gguf::GgufFile::Open(out);
    ASSERT_TRUE(got.ok()) << got.status();
    auto want = gguf::GgufFile::Open(shared + "/" + q["file"].get<std::string>());
    ASSERT_TRUE(want.ok()) << want.status();
    // Types as llama.cpp chose them, in llama.cpp's order.
    const json& types = q["tensor_types"];
    ASSERT_EQ((*got)->tensors().size(), types.size());
    for (const gguf::TensorInfo& t : (*got)->tensors()) {
      ASSERT_TRUE(types.contains(t.name)) << t.name;
      EXPECT_EQ(GgmlTypeName(t.type), types[t.name].get<std::string>()) << t.name;
    }
    ASSERT_EQ((*got)->tensors().size(), (*want)->tensors().size());
    for (size_t i = 0; i < (*got)->tensors().size(); ++i) {
      const gguf::TensorInfo& a = (*got)->tensors()[i];
      const gguf::TensorInfo& b = (*want)->tensors()[i];
      EXPECT_EQ(a.name, b.name) << "tensor order at " << i;
      ASSERT_EQ(a.nbytes, b.nbytes) << a.name;
      EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0) << a.name << " bytes differ";
    }
    EXPECT_EQ(*(*got)->GetUint32("general.file_type"), q["general_file_type"].get<uint32_t>());
    EXPECT_EQ(*(*got)->GetUint32("general.quantization_version"), 2u);
    const bool same_file = ReadAll(out) == ReadAll(shared + "/" + q["file"].get<std::string>());
    EXPECT_TRUE(same_file) << "file bytes differ from llama.cpp's";
    identical_files += same_file;
    std::printf("%-28s %-8s %s %.2fs, %d progress calls\n", path.substr(path.rfind('/') + 1).c_str(),
                c.opts.type.c_str(), same_file ? "byte-identical file" : "DIFFERENT", secs, progress_calls);
  }
  std::printf("%d of %zu files byte-identical\n", identical_files, cases.size());
  // Only out.gguf remains.
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"out.gguf"});
}

// stories260K's ffn_down rows are 172 wide: a 32-block type has no fallback, exactly as
// llama-quantize refuses ("no tensor type fallback is defined for type q8_0").
TEST(QuantModel, NoFallbackIsAnErrorAndLeavesNothing) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  const std::string dir = TempDir("quant_nofallback");
  quant::QuantizeOptions o;
  o.type = "Q8_0";
  absl::Status s = quant::QuantizeModel(shared + "/models/stories260K.gguf", dir + "/out.gguf", o, nullptr, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("no tensor type fallback is defined for type q8_0"), std::string::npos) << s;
  EXPECT_NE(s.message().find("blk.0.ffn_down.weight"), std::string::npos) << s;
  EXPECT_TRUE(ListDir(dir).empty());
}

void ExpectFailsLeavingNothing(const std::string& src, const std::string& dir, absl::StatusCode code,
                               const std::string& what) {
  quant::QuantizeOptions o;
  o.type = "Q4_K_M";
  absl::Status s = quant::QuantizeModel(src, dir + "/out.gguf", o, nullptr, nullptr);
  EXPECT_EQ(s.code(), code) << what << ": " << s;
  std::printf("%s: %s\n", what.c_str(), s.ToString().c_str());
  EXPECT_TRUE(ListDir(dir).empty()) << what << ": left " << ListDir(dir).size() << " files";
}

TEST(QuantModel, CorruptAndTruncatedSourcesLeaveNothing) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  const std::string src_bytes = ReadAll(shared + "/reference/quant/synth256-F32.gguf");
  const std::string in_dir = TempDir("quant_corrupt_in");
  const std::string out_dir = TempDir("quant_corrupt_out");
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(in_dir + "/" + name, std::ios::binary) << bytes;
    return in_dir + "/" + name;
  };
  // Truncated in the tensor data, in the header, and empty.
  ExpectFailsLeavingNothing(write("trunc_data.gguf", src_bytes.substr(0, src_bytes.size() - 1000)), out_dir,
                            absl::StatusCode::kInvalidArgument, "truncated data");
  ExpectFailsLeavingNothing(write("trunc_header.gguf", src_bytes.substr(0, 100)), out_dir,
                            absl::StatusCode::kInvalidArgument, "truncated header");
  ExpectFailsLeavingNothing(write("empty.gguf", ""), out_dir, absl::StatusCode::kInvalidArgument, "empty file");
  // Bad magic.
  std::string bad = src_bytes;
  bad[0] = 'X';
  ExpectFailsLeavingNothing(write("magic.gguf", bad), out_dir, absl::StatusCode::kInvalidArgument, "bad magic");
  // A NaN in the weights of the last tensor: detected mid-way, after other tensors were converted.
  auto f = gguf::GgufFile::Open(shared + "/reference/quant/synth256-F32.gguf");
  ASSERT_TRUE(f.ok());
  const gguf::TensorInfo* last = (*f)->FindTensor("blk.3.ffn_up.weight");  // converted last
  ASSERT_NE(last, nullptr);
  std::string nan = src_bytes;
  const uint32_t nan_bits = 0x7fc00000u;
  std::memcpy(&nan[(*f)->data_offset() + last->offset + 4 * 7], &nan_bits, 4);
  ExpectFailsLeavingNothing(write("nan.gguf", nan), out_dir, absl::StatusCode::kInvalidArgument, "NaN weight");
  ExpectFailsLeavingNothing(in_dir + "/missing.gguf", out_dir, absl::StatusCode::kNotFound, "missing file");
}

TEST(QuantModel, CancelHalfwayLeavesNothing) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  const std::string dir = TempDir("quant_cancel");
  // An existing destination must survive a cancelled run untouched.
  std::ofstream(dir + "/out.gguf") << "previous";
  std::atomic<bool> cancel{false};
  quant::QuantizeOptions o;
  o.type = "Q4_K_M";
  int calls = 0;
  absl::Status s = quant::QuantizeModel(
      shared + "/reference/quant/synth256-F32.gguf", dir + "/out.gguf", o,
      [&](const quant::QuantizeProgress& p) {
        ++calls;
        if (p.tensors_done * 2 >= p.tensors_total) cancel = true;
      },
      &cancel);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_GT(calls, 5);
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"out.gguf"});
  EXPECT_EQ(ReadAll(dir + "/out.gguf"), "previous");
}

TEST(QuantModel, BadOptionsNameTheField) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  const std::string src = shared + "/reference/quant/synth256-F32.gguf";
  const std::string dir = TempDir("quant_badopts");
  struct Case {
    quant::QuantizeOptions o;
    std::string field;
  };
  std::vector<Case> cases(6);
  cases[0].o.type = "Q9_K";
  cases[0].field = "type:";
  cases[1].o.type = "Q4_K_M";
  cases[1].o.output_tensor_type = "q7_0";
  cases[1].field = "output_tensor_type:";
  cases[2].o.type = "Q4_K_M";
  cases[2].o.token_embedding_type = "iq2_xxs";
  cases[2].field = "token_embedding_type:";
  cases[3].o.type = "Q4_K_M";
  cases[3].o.tensor_type_overrides = {"attn_v=q8_0", "ffn_down"};
  cases[3].field = "tensor_type_overrides[1]:";
  cases[4].o.type = "Q4_K_M";
  cases[4].o.tensor_type_overrides = {"attn_v(=q8_0"};
  cases[4].field = "tensor_type_overrides[0]:";
  cases[5].o.type = "Q4_K_M";
  cases[5].o.n_threads = 0;
  cases[5].field = "n_threads:";
  for (const Case& c : cases) {
    absl::Status s = quant::QuantizeModel(src, dir + "/out.gguf", c.o, nullptr, nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(std::string(s.message()).rfind(c.field, 0), 0u) << s;
  }
  EXPECT_TRUE(ListDir(dir).empty());
  const std::vector<std::string> types = quant::SupportedFileTypes();
  for (const char* t : {"Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0",
                        "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "IQ4_XS"}) {
    EXPECT_NE(std::find(types.begin(), types.end(), t), types.end()) << t;
  }
}

}  // namespace
}  // namespace herd
