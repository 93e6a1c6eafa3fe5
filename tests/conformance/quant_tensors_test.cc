// Tensor-level conformance of the row quantizers against llama-quantize: for every
// file in ../shared/reference/quant, each tensor is re-quantized from the
// unquantized source (synth256-F32.gguf or models/stories260K.gguf) to the type
// llama.cpp chose for it, with herd::QuantizeRow, and must be byte-identical.
// (The whole-model path, including type selection, is quant_model_test.)
#include <dirent.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "libs/gguf/gguf.h"
#include "libs/tensor/quants.h"
#include "tests/shared_data.h"

namespace herd {
namespace {

std::vector<std::string> QuantFiles(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() > 5 && n.substr(n.size() - 5) == ".gguf" && n != "synth256-F32.gguf") out.push_back(n);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(QuantTensors, EveryReferenceTensorByteIdentical) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  const std::string qdir = shared + "/reference/quant";
  const std::vector<std::string> files = QuantFiles(qdir);
  ASSERT_GE(files.size(), 20u) << "expected the reference quantizations in " << qdir;
  auto synth = gguf::GgufFile::Open(qdir + "/synth256-F32.gguf");
  ASSERT_TRUE(synth.ok()) << synth.status();
  auto stories = gguf::GgufFile::Open(shared + "/models/stories260K.gguf");
  ASSERT_TRUE(stories.ok()) << stories.status();
  int n_quantized = 0;
  for (const std::string& name : files) {
    SCOPED_TRACE(name);
    auto ref = gguf::GgufFile::Open(qdir + "/" + name);
    ASSERT_TRUE(ref.ok()) << ref.status();
    const gguf::GgufFile& src = name.rfind("synth256", 0) == 0 ? **synth : **stories;
    int mismatched = 0;
    for (const gguf::TensorInfo& rt : (*ref)->tensors()) {
      const gguf::TensorInfo* st = src.FindTensor(rt.name);
      ASSERT_NE(st, nullptr) << rt.name;
      ASSERT_EQ(st->type, GgmlType::F32) << rt.name;
      ASSERT_TRUE(CanQuantize(rt.type)) << rt.name << " " << GgmlTypeName(rt.type);
      const int64_t ne0 = rt.ne[0];
      const int64_t rows = rt.nelements() / ne0;
      const size_t row_bytes = GgmlRowSize(rt.type, ne0);
      ASSERT_EQ(row_bytes * static_cast<size_t>(rows), rt.nbytes) << rt.name;
      std::vector<uint8_t> out(rt.nbytes);
      const float* x = reinterpret_cast<const float*>(st->data);
      for (int64_t r = 0; r < rows; ++r) QuantizeRow(rt.type, x + r * ne0, out.data() + r * row_bytes, ne0);
      if (std::memcmp(out.data(), rt.data, rt.nbytes) != 0) {
        size_t first = 0;
        while (out[first] == rt.data[first]) ++first;
        ADD_FAILURE() << rt.name << " (" << GgmlTypeName(rt.type) << "): first differing byte " << first << " of "
                      << rt.nbytes << " (row " << first / row_bytes << ")";
        ++mismatched;
      }
      if (rt.type != GgmlType::F32) ++n_quantized;
    }
    std::printf("%-32s %zu tensors, %d differ\n", name.c_str(), (*ref)->tensors().size(), mismatched);
  }
  std::printf("%d quantized tensors compared\n", n_quantized);
}

}  // namespace
}  // namespace herd
