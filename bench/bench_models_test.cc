// bench_models: the random-weight GGUFs load as llama models of their shape, the serial
// writer's bytes never change (serve_bench's cached files stay valid; the digests are of
// the files written before WriteModel streamed), the threaded writer's bytes do not
// depend on the thread count, and ModelDataBytes is the data section's size.
#include "bench/bench_models.h"

#include <cstdlib>
#include <memory>
#include <string>

#include "gtest/gtest.h"

#include "libs/base/sha256.h"
#include "libs/gguf/gguf.h"

namespace herd::bench {
namespace {

std::string TempPath(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return std::string(t != nullptr && t[0] != '\0' ? t : "/tmp") + "/" + name;
}

// Small shapes in the layout of llama-110m (tied) and tinyllama / 7b (untied, GQA).
const Shape kTied = {"tiny-tied", 256, 2, 4, 4, 512, 320, true};
const Shape kUntied = {"tiny", 256, 2, 4, 2, 512, 320, false};

std::string Digest(const std::string& path) {
  absl::StatusOr<std::string> d = Sha256File(path);
  return d.ok() ? *d : d.status().ToString();
}

TEST(BenchModels, SerialBytesAreFixed) {
  struct Case {
    const Shape* shape;
    GgmlType type;
    const char* sha256;
  };
  const Case cases[] = {
      {&kTied, GgmlType::Q4_0, "60466c005c4c9fac02378ea7468ef04da29d118fba15622b01cbbd48b96ed593"},
      {&kTied, GgmlType::F16, "2926e1ac4d774135e5364ac02d0afef50027fa0b01f6fddd4a0427b173739bf8"},
      {&kUntied, GgmlType::Q4_0, "deecf473dd0f578372be4ad90ccf4e5672b179e927e6c164ba177db7f9953a66"},
      {&kUntied, GgmlType::F16, "928a50fddf3f58c830bf3ac905653a7e0b2372b76a7d347ae09559a435a40c7c"},
  };
  for (const Case& c : cases) {
    const std::string path = TempPath(c.shape->name + "-" + GgmlTypeName(c.type) + ".gguf");
    SCOPED_TRACE(path);
    ASSERT_TRUE(WriteModel(*c.shape, c.type, path).ok());
    EXPECT_EQ(Digest(path), c.sha256);
  }
}

TEST(BenchModels, ThreadedBytesDoNotDependOnThreads) {
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::F16}) {
    WriteOptions o;
    o.threads = 1;
    const std::string one = TempPath(std::string("threads1-") + GgmlTypeName(t) + ".gguf");
    ASSERT_TRUE(WriteModel(kUntied, t, one, o).ok());
    o.threads = 3;
    const std::string three = TempPath(std::string("threads3-") + GgmlTypeName(t) + ".gguf");
    ASSERT_TRUE(WriteModel(kUntied, t, three, o).ok());
    EXPECT_EQ(Digest(one), Digest(three));
    EXPECT_NE(Digest(one), Digest(TempPath(std::string("tiny-") + GgmlTypeName(t) + ".gguf")));
  }
}

TEST(BenchModels, ShapesAndSizes) {
  for (const Shape* s : {&kTied, &kUntied}) {
    for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::F16}) {
      WriteOptions o;
      o.threads = 2;
      const std::string path = TempPath(s->name + "-sizes.gguf");
      ASSERT_TRUE(WriteModel(*s, t, path, o).ok());
      auto f = gguf::GgufFile::Open(path);
      ASSERT_TRUE(f.ok()) << f.status();
      EXPECT_EQ((*f)->file_size() - (*f)->data_offset(), ModelDataBytes(*s, t));
      EXPECT_EQ((*f)->tensors().size(), static_cast<size_t>(2 + !s->tied + 9 * s->n_layer));
      const gguf::TensorInfo* out = (*f)->FindTensor(s->tied ? "token_embd.weight" : "output.weight");
      ASSERT_NE(out, nullptr);
      EXPECT_EQ(out->type, t == GgmlType::Q4_0 ? GgmlType::Q6_K : t);
      const gguf::TensorInfo* k = (*f)->FindTensor("blk.1.attn_k.weight");
      ASSERT_NE(k, nullptr);
      EXPECT_EQ(k->ne[1], s->n_embd / s->n_head * s->n_head_kv);
      EXPECT_EQ(k->type, t);
    }
  }
}

TEST(BenchModels, SevenB) {
  const Shape* s = FindShape("7b");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->n_embd, 4096);
  EXPECT_EQ(s->n_layer, 32);
  EXPECT_EQ(s->n_head_kv, 32);
  EXPECT_EQ(s->n_ff, 11008);
  EXPECT_FALSE(s->tied);
  // 6.74e9 weights: ~12.6 GiB in F16, ~3.6 GiB in Q4_0 (output in Q6_K).
  EXPECT_NEAR(ModelDataBytes(*s, GgmlType::F16) / 1073741824.0, 12.55, 0.05);
  EXPECT_NEAR(ModelDataBytes(*s, GgmlType::Q4_0) / 1073741824.0, 3.56, 0.05);
  EXPECT_NE(ShapeNames().find("7b"), std::string::npos);
}

}  // namespace
}  // namespace herd::bench
