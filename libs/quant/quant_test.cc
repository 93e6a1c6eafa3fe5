// Type rules and QuantizeModel on small synthetic llama models written with
// GgufWriter (no shared data needed). The reference conformance (byte-identical
// files vs llama-quantize) is tests/conformance/quant_model_test.
#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "libs/base/fp16.h"
#include "libs/gguf/gguf.h"
#include "libs/quant/quantize.h"
#include "libs/quant/type_rules.h"
#include "libs/tensor/quants.h"

namespace herd::quant {
namespace {

struct Shape {
  int n_layer = 4;
  int64_t n_embd = 256;
  int64_t n_ff = 512;
  int64_t n_vocab = 256;
  int n_head = 8;
  int n_head_kv = 8;
  int n_expert = 0;
  bool tied = false;              // no output.weight
  GgmlType type = GgmlType::F32;  // type of the 2-D weights
  int64_t ffn_down_cols = 0;      // 0: n_ff
};

std::string TmpPath(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  return std::string(base != nullptr ? base : "/tmp") + "/" + name;
}

// Writes a synthetic llama GGUF (random weights, norms 1.0) and returns its path.
std::string WriteModel(const std::string& name, const Shape& s) {
  gguf::GgufWriter w;
  w.SetValue("general.architecture", gguf::Value::String("llama"));
  w.SetValue("general.name", gguf::Value::String(name));
  w.SetValue("llama.block_count", gguf::Value::U32(static_cast<uint32_t>(s.n_layer)));
  w.SetValue("llama.embedding_length", gguf::Value::U32(static_cast<uint32_t>(s.n_embd)));
  w.SetValue("llama.feed_forward_length", gguf::Value::U32(static_cast<uint32_t>(s.n_ff)));
  w.SetValue("llama.attention.head_count", gguf::Value::U32(static_cast<uint32_t>(s.n_head)));
  w.SetValue("llama.attention.head_count_kv", gguf::Value::U32(static_cast<uint32_t>(s.n_head_kv)));
  if (s.n_expert > 0) w.SetValue("llama.expert_count", gguf::Value::U32(static_cast<uint32_t>(s.n_expert)));
  w.SetValue("general.file_type", gguf::Value::U32(0));
  static std::vector<std::unique_ptr<std::vector<uint8_t>>> keep;  // data must outlive WriteFile
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  auto add = [&](const std::string& tname, std::vector<int64_t> ne, bool norm) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    const GgmlType t = norm || ne.size() == 1 ? GgmlType::F32 : s.type;
    auto buf = std::make_unique<std::vector<uint8_t>>(GgmlRowSize(t, ne[0]) * static_cast<size_t>(n / ne[0]));
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = norm ? 1.0f : dist(rng);
    for (int64_t r = 0; r < n / ne[0]; ++r) {
      QuantizeRow(t, x.data() + r * ne[0], buf->data() + r * GgmlRowSize(t, ne[0]), ne[0]);
    }
    EXPECT_TRUE(w.AddTensor(tname, t, ne, buf->data(), buf->size()).ok()) << tname;
    keep.push_back(std::move(buf));
  };
  const int64_t head_dim = s.n_embd / s.n_head;
  add("token_embd.weight", {s.n_embd, s.n_vocab}, false);
  add("output_norm.weight", {s.n_embd}, true);
  if (!s.tied) add("output.weight", {s.n_embd, s.n_vocab}, false);
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {s.n_embd}, true);
    add(p + "attn_q.weight", {s.n_embd, s.n_embd}, false);
    add(p + "attn_k.weight", {s.n_embd, head_dim * s.n_head_kv}, false);
    add(p + "attn_v.weight", {s.n_embd, head_dim * s.n_head_kv}, false);
    add(p + "attn_output.weight", {s.n_embd, s.n_embd}, false);
    add(p + "ffn_norm.weight", {s.n_embd}, true);
    add(p + "ffn_gate.weight", {s.n_embd, s.n_ff}, false);
    add(p + "ffn_up.weight", {s.n_embd, s.n_ff}, false);
    add(p + "ffn_down.weight", {s.ffn_down_cols > 0 ? s.ffn_down_cols : s.n_ff, s.n_embd}, false);
  }
  const std::string path = TmpPath(name + ".gguf");
  EXPECT_TRUE(w.WriteFile(path).ok());
  return path;
}

// name -> planned type.
std::map<std::string, GgmlType> Plan(const std::string& path, const std::string& type, bool pure = false,
                                     std::vector<std::string> overrides = {}, const std::string& output_type = "",
                                     const std::string& embd_type = "", absl::Status* status = nullptr) {
  auto f = gguf::GgufFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status();
  auto info = ReadModelInfo(**f);
  EXPECT_TRUE(info.ok()) << info.status();
  TypeOptions o;
  o.file_type = *ParseFileType(type);
  o.pure = pure;
  for (size_t i = 0; i < overrides.size(); ++i) o.overrides.push_back(*ParseTensorTypeOverride(overrides[i], "x"));
  if (!output_type.empty()) {
    o.has_output_tensor_type = true;
    o.output_tensor_type = *ParseQuantType(output_type, "x");
  }
  if (!embd_type.empty()) {
    o.has_token_embedding_type = true;
    o.token_embedding_type = *ParseQuantType(embd_type, "x");
  }
  auto plans = PlanTensorTypes(**f, *info, o);
  if (status != nullptr) *status = plans.status();
  std::map<std::string, GgmlType> m;
  if (!plans.ok()) return m;
  for (const TensorPlan& p : *plans) m[p.src->name] = p.type;
  return m;
}

TEST(FileTypes, ParseNamesAliasesAndNumbers) {
  EXPECT_EQ(ParseFileType("q4_k_m")->ftype, 15u);
  EXPECT_EQ(ParseFileType("Q4_K")->name, "Q4_K_M");
  EXPECT_EQ(ParseFileType("Q3_K")->ftype, 12u);
  EXPECT_EQ(ParseFileType("Q5_K")->default_type, GgmlType::Q5_K);
  EXPECT_EQ(ParseFileType("7")->name, "Q8_0");
  EXPECT_EQ(ParseFileType("IQ4_XS")->ftype, 30u);
  EXPECT_EQ(ParseFileType("F32")->ftype, 0u);
  EXPECT_EQ(ParseFileType("BF16")->ftype, 32u);
  EXPECT_EQ(ParseFileType("Q2_K_S").status().code(), absl::StatusCode::kInvalidArgument);  // needs an imatrix
  EXPECT_EQ(ParseFileType("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseFileType("99").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SupportedFileTypes().size(), 22u);
  EXPECT_EQ(*ParseQuantType("Q6_k", "f"), GgmlType::Q6_K);
  EXPECT_FALSE(ParseQuantType("q8_K", "f").ok());  // activation-only
  EXPECT_FALSE(ParseQuantType("iq2_xxs", "f").ok());
  auto o = ParseTensorTypeOverride("ATTN_V=q8_0", "f");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->pattern, "attn_v");  // lowercased, as llama-quantize does
  EXPECT_FALSE(ParseTensorTypeOverride("=q8_0", "f").ok());
  EXPECT_FALSE(ParseTensorTypeOverride("attn_v=", "f").ok());
  EXPECT_FALSE(ParseTensorTypeOverride("[=q8_0", "f").ok());
}

TEST(TypeRules, OrderIsLayerThenName) {
  const std::string path = WriteModel("order", Shape{});
  auto f = gguf::GgufFile::Open(path);
  ASSERT_TRUE(f.ok());
  const auto order = OrderTensors(**f);
  EXPECT_EQ(order[0]->name, "output.weight");
  EXPECT_EQ(order[1]->name, "output_norm.weight");
  EXPECT_EQ(order[2]->name, "token_embd.weight");
  EXPECT_EQ(order[3]->name, "blk.0.attn_k.weight");
  EXPECT_EQ(order.back()->name, "blk.3.ffn_up.weight");
}

TEST(TypeRules, Q4_K_MUsesMoreBitsOnSomeLayers) {
  Shape s;
  s.n_layer = 8;
  const auto m = Plan(WriteModel("q4km", s), "Q4_K_M");
  // use_more_bits(i, 8): i < 1, i >= 7, (i - 1) % 3 == 2 -> layers 0, 3, 6, 7.
  for (int l = 0; l < 8; ++l) {
    const bool more = l == 0 || l == 3 || l == 6 || l == 7;
    const std::string p = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(m.at(p + "attn_v.weight"), more ? GgmlType::Q6_K : GgmlType::Q4_K) << l;
    EXPECT_EQ(m.at(p + "ffn_down.weight"), more ? GgmlType::Q6_K : GgmlType::Q4_K) << l;
    EXPECT_EQ(m.at(p + "attn_q.weight"), GgmlType::Q4_K);
    EXPECT_EQ(m.at(p + "attn_norm.weight"), GgmlType::F32);
  }
  EXPECT_EQ(m.at("output.weight"), GgmlType::Q6_K);
  EXPECT_EQ(m.at("token_embd.weight"), GgmlType::Q4_K);
  EXPECT_EQ(m.at("output_norm.weight"), GgmlType::F32);
}

TEST(TypeRules, GqaTiedEmbeddingsAndMixtures) {
  Shape s;
  s.n_head_kv = 2;  // n_gqa = 4
  s.tied = true;
  const std::string path = WriteModel("gqa", s);
  auto m = Plan(path, "Q2_K");
  EXPECT_EQ(m.at("blk.0.attn_v.weight"), GgmlType::Q4_K);  // n_gqa >= 4
  EXPECT_EQ(m.at("blk.0.ffn_down.weight"), GgmlType::Q3_K);
  EXPECT_EQ(m.at("blk.0.attn_output.weight"), GgmlType::Q3_K);
  EXPECT_EQ(m.at("token_embd.weight"), GgmlType::Q6_K);  // tied: treated as the output tensor
  m = Plan(path, "IQ4_NL");
  EXPECT_EQ(m.at("blk.1.attn_v.weight"), GgmlType::Q5_K);  // IQ4 with n_gqa >= 4
  m = Plan(path, "Q8_0");
  EXPECT_EQ(m.at("token_embd.weight"), GgmlType::Q8_0);  // output rule keeps Q8_0
  m = Plan(path, "Q3_K_L");
  EXPECT_EQ(m.at("blk.2.attn_output.weight"), GgmlType::Q5_K);
  EXPECT_EQ(m.at("blk.2.ffn_down.weight"), GgmlType::Q5_K);
  m = Plan(path, "Q4_K_S");
  EXPECT_EQ(m.at("blk.3.attn_v.weight"), GgmlType::Q5_K);  // i_attention_wv < 4
}

TEST(TypeRules, FallbacksForRowLengths) {
  Shape s;
  s.n_embd = 64;          // 64-wide rows: no 256 blocks
  s.ffn_down_cols = 100;  // not even 32
  s.n_ff = 100;
  s.n_head = 4;
  s.n_head_kv = 4;
  const std::string path = WriteModel("fallback", s);
  auto m = Plan(path, "Q4_K_M");
  EXPECT_EQ(m.at("blk.0.attn_q.weight"), GgmlType::Q5_0);   // Q4_K -> Q5_0
  EXPECT_EQ(m.at("blk.0.ffn_down.weight"), GgmlType::F16);  // Q4_K/Q6_K -> F16 (100 % 32 != 0)
  EXPECT_EQ(m.at("output.weight"), GgmlType::Q8_0);         // nx % 256 != 0
  m = Plan(path, "Q6_K");
  EXPECT_EQ(m.at("blk.1.attn_k.weight"), GgmlType::Q8_0);
  m = Plan(path, "Q5_K_S");
  EXPECT_EQ(m.at("blk.1.attn_k.weight"), GgmlType::Q5_1);
  m = Plan(path, "IQ4_XS");
  EXPECT_EQ(m.at("blk.1.attn_k.weight"), GgmlType::IQ4_NL);
  m = Plan(path, "Q2_K", /*pure=*/true);
  EXPECT_EQ(m.at("output.weight"), GgmlType::Q4_0);  // pure: Q2_K everywhere, then the fallback
  absl::Status st;
  Plan(path, "Q5_1", false, {}, "", "", &st);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("no tensor type fallback is defined for type q5_1"), std::string::npos) << st;
  m = Plan(path, "Q5_1", false, {"ffn_down=f16"});
  EXPECT_EQ(m.at("blk.3.ffn_down.weight"), GgmlType::F16);
  Plan(path, "Q4_K_M", false, {}, "q6_K", "", &st);  // explicit output type that cannot hold 64-wide rows
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
}

TEST(TypeRules, OverridesPureAndExplicitTypes) {
  const std::string path = WriteModel("overrides", Shape{});
  // First matching override wins; an overridden tensor skips the mixture rules (and
  // does not advance their layer counters, as in llama.cpp).
  auto m = Plan(path, "Q4_K_M", false, {"blk\\.0\\.ffn_down=q8_0", "ffn_down=q5_0", "attn_v=Q8_0"});
  EXPECT_EQ(m.at("blk.0.ffn_down.weight"), GgmlType::Q8_0);
  EXPECT_EQ(m.at("blk.1.ffn_down.weight"), GgmlType::Q5_0);
  EXPECT_EQ(m.at("blk.3.attn_v.weight"), GgmlType::Q8_0);
  EXPECT_EQ(m.at("blk.3.attn_q.weight"), GgmlType::Q4_K);
  m = Plan(path, "Q4_K_M", false, {}, "q8_0", "q4_0");
  EXPECT_EQ(m.at("output.weight"), GgmlType::Q8_0);
  EXPECT_EQ(m.at("token_embd.weight"), GgmlType::Q4_0);
  m = Plan(path, "Q5_K_M", /*pure=*/true, {});
  for (const auto& [name, t] : m) {
    EXPECT_EQ(t, name.find("norm") != std::string::npos ? GgmlType::F32 : GgmlType::Q5_K) << name;
  }
  m = Plan(path, "F16", false, {"attn_v=q8_0"});  // overrides only apply to quantized file types
  EXPECT_EQ(m.at("blk.0.attn_v.weight"), GgmlType::F16);
  EXPECT_EQ(m.at("output.weight"), GgmlType::F16);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(QuantizeModel, F16SourceThreadsAndMetadata) {
  Shape s;
  s.type = GgmlType::F16;
  const std::string src = WriteModel("f16src", s);
  QuantizeOptions o;
  o.type = "q4_k_m";
  o.n_threads = 1;
  ASSERT_TRUE(QuantizeModel(src, TmpPath("a.gguf"), o, nullptr, nullptr).ok());
  o.n_threads = 3;
  ASSERT_TRUE(QuantizeModel(src, TmpPath("b.gguf"), o, nullptr, nullptr).ok());
  EXPECT_EQ(ReadAll(TmpPath("a.gguf")), ReadAll(TmpPath("b.gguf")));  // thread count never changes bytes
  auto f = gguf::GgufFile::Open(TmpPath("a.gguf"));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*(*f)->GetUint32("general.file_type"), 15u);
  EXPECT_EQ(*(*f)->GetUint32("general.quantization_version"), 2u);
  EXPECT_EQ((*f)->metadata().back().key, "general.file_type");  // re-set keys move to the end
  // Tensors equal a direct quantization of the dequantized F16 weights.
  auto sf = gguf::GgufFile::Open(src);
  const gguf::TensorInfo* st = (*sf)->FindTensor("blk.1.attn_q.weight");
  const gguf::TensorInfo* qt = (*f)->FindTensor("blk.1.attn_q.weight");
  ASSERT_EQ(qt->type, GgmlType::Q4_K);
  std::vector<float> row(static_cast<size_t>(st->ne[0]));
  std::vector<uint8_t> q(GgmlRowSize(GgmlType::Q4_K, st->ne[0]));
  DequantizeRow(GgmlType::F16, st->data, row.data(), st->ne[0]);
  QuantizeRow(GgmlType::Q4_K, row.data(), q.data(), st->ne[0]);
  EXPECT_EQ(std::memcmp(q.data(), qt->data, q.size()), 0);
  // Unchanged tensors are copied byte for byte.
  EXPECT_EQ(std::memcmp((*sf)->FindTensor("output_norm.weight")->data, (*f)->FindTensor("output_norm.weight")->data,
                        s.n_embd * 4),
            0);
}

TEST(QuantizeModel, RequantizingIsRefused) {
  Shape s;
  s.type = GgmlType::Q8_0;
  const std::string src = WriteModel("q8src", s);
  QuantizeOptions o;
  o.type = "Q4_0";
  const std::string dst = TmpPath("requant.gguf");
  absl::Status st = QuantizeModel(src, dst, o, nullptr, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  struct stat sb;
  EXPECT_NE(::stat(dst.c_str(), &sb), 0);
  o.type = "Q8_0";  // same type everywhere except output -> Q8_0 too: a plain copy works
  EXPECT_TRUE(QuantizeModel(src, dst, o, nullptr, nullptr).ok());
  // The destination may not be the source itself.
  EXPECT_EQ(QuantizeModel(src, src, o, nullptr, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

TEST(QuantizeModel, OutOfRangeValuesFailValidation) {
  Shape s;
  const std::string src = WriteModel("huge", s);
  // Scale one weight far beyond F16 range: the Q4_0 scale overflows to Inf.
  std::string bytes = ReadAll(src);
  auto f = gguf::GgufFile::Open(src);
  const gguf::TensorInfo* t = (*f)->FindTensor("blk.2.ffn_up.weight");
  const float big = 1e9f;
  std::memcpy(&bytes[(*f)->data_offset() + t->offset], &big, 4);
  const std::string bad = TmpPath("huge_bad.gguf");
  std::ofstream(bad, std::ios::binary) << bytes;
  QuantizeOptions o;
  o.type = "Q4_0";
  const std::string dst = TmpPath("huge_out.gguf");
  absl::Status st = QuantizeModel(bad, dst, o, nullptr, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("validation failed"), std::string::npos) << st;
  struct stat sb;
  EXPECT_NE(::stat(dst.c_str(), &sb), 0);
}

TEST(QuantizeModel, NotAModel) {
  gguf::GgufWriter w;
  w.SetValue("general.name", gguf::Value::String("vocab only"));
  const std::string src = TmpPath("notmodel.gguf");
  ASSERT_TRUE(w.WriteFile(src).ok());
  QuantizeOptions o;
  o.type = "Q4_0";
  absl::Status st = QuantizeModel(src, TmpPath("notmodel_out.gguf"), o, nullptr, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("general.architecture"), std::string::npos) << st;
}

}  // namespace
}  // namespace herd::quant
