#include "bench/bench_models.h"

#include <memory>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "libs/gguf/gguf.h"
#include "libs/tensor/quants.h"

namespace herd::bench {

namespace {

const Shape kShapes[] = {
    {"llama-110m", 768, 12, 12, 12, 2048, 32000, true},
    {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, false},
};

// Copies every tokenizer.* key of the GGUF at `vocab_path` into `w`.
absl::Status CopyVocab(const std::string& vocab_path, int64_t n_vocab, gguf::GgufWriter* w) {
  auto vf = gguf::GgufFile::Open(vocab_path);
  if (!vf.ok()) return vf.status();
  const gguf::Value* tokens = (*vf)->Find("tokenizer.ggml.tokens");
  if (tokens == nullptr || static_cast<int64_t>(tokens->array_size()) != n_vocab) {
    return absl::InvalidArgumentError(absl::StrCat(vocab_path, ": tokenizer.ggml.tokens has ",
                                                   tokens == nullptr ? 0 : tokens->array_size(),
                                                   " tokens, the model shape ", n_vocab));
  }
  for (const gguf::KeyValue& kv : (*vf)->metadata()) {
    if (absl::StartsWith(kv.key, "tokenizer.")) w->SetValue(kv.key, kv.value);
  }
  return absl::OkStatus();
}

}  // namespace

const Shape* FindShape(const std::string& name) {
  for (const Shape& s : kShapes) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::string ShapeNames() {
  std::string out;
  for (const Shape& s : kShapes) absl::StrAppend(&out, out.empty() ? "" : ", ", s.name);
  return out;
}

absl::Status WriteModel(const Shape& s, GgmlType wtype, const std::string& path, const std::string& vocab_path,
                        const std::string& extra_key, const std::string& extra_value) {
  gguf::GgufWriter w;
  w.SetValue("general.architecture", gguf::Value::String("llama"));
  w.SetValue("llama.context_length", gguf::Value::U32(2048));
  w.SetValue("llama.embedding_length", gguf::Value::U32(static_cast<uint32_t>(s.n_embd)));
  w.SetValue("llama.block_count", gguf::Value::U32(static_cast<uint32_t>(s.n_layer)));
  w.SetValue("llama.feed_forward_length", gguf::Value::U32(static_cast<uint32_t>(s.n_ff)));
  w.SetValue("llama.attention.head_count", gguf::Value::U32(static_cast<uint32_t>(s.n_head)));
  w.SetValue("llama.attention.head_count_kv", gguf::Value::U32(static_cast<uint32_t>(s.n_head_kv)));
  w.SetValue("llama.attention.layer_norm_rms_epsilon", gguf::Value::F32(1e-5f));
  if (!vocab_path.empty()) {
    if (absl::Status st = CopyVocab(vocab_path, s.n_vocab, &w); !st.ok()) return st;
  }
  if (!extra_key.empty()) w.SetValue(extra_key, gguf::Value::String(extra_value));
  std::vector<std::unique_ptr<std::vector<uint8_t>>> store;
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  auto add = [&](const std::string& name, int64_t ne0, int64_t ne1, GgmlType t) -> absl::Status {
    std::vector<float> row(static_cast<size_t>(ne0));
    auto buf = std::make_unique<std::vector<uint8_t>>(GgmlRowSize(t, ne0) * static_cast<size_t>(ne1));
    for (int64_t r = 0; r < ne1; ++r) {
      for (float& x : row) x = ne1 == 1 ? 1.0f : nd(rng);
      QuantizeRow(t, row.data(), buf->data() + static_cast<size_t>(r) * GgmlRowSize(t, ne0), ne0);
    }
    std::vector<int64_t> ne = {ne0};
    if (ne1 > 1) ne.push_back(ne1);
    absl::Status st = w.AddTensor(name, t, ne, buf->data(), buf->size());
    store.push_back(std::move(buf));
    return st;
  };
  const int64_t hd = s.n_embd / s.n_head;
  // llama-quantize's rule for the output tensor (token_embd when tied): Q6_K unless the
  // type is Q8_0 (F16/F32 models are converted, not quantized).
  const bool quantized = wtype != GgmlType::F16 && wtype != GgmlType::F32 && wtype != GgmlType::BF16;
  const GgmlType out_type = quantized && wtype != GgmlType::Q8_0 ? GgmlType::Q6_K : wtype;
  absl::Status st = add("token_embd.weight", s.n_embd, s.n_vocab, s.tied ? out_type : wtype);
  if (st.ok()) st = add("output_norm.weight", s.n_embd, 1, GgmlType::F32);
  if (st.ok() && !s.tied) st = add("output.weight", s.n_embd, s.n_vocab, out_type);
  for (int64_t il = 0; il < s.n_layer && st.ok(); ++il) {
    const std::string p = absl::StrCat("blk.", il, ".");
    st = add(p + "attn_norm.weight", s.n_embd, 1, GgmlType::F32);
    if (st.ok()) st = add(p + "attn_q.weight", s.n_embd, s.n_embd, wtype);
    if (st.ok()) st = add(p + "attn_k.weight", s.n_embd, hd * s.n_head_kv, wtype);
    if (st.ok()) st = add(p + "attn_v.weight", s.n_embd, hd * s.n_head_kv, wtype);
    if (st.ok()) st = add(p + "attn_output.weight", s.n_embd, s.n_embd, wtype);
    if (st.ok()) st = add(p + "ffn_norm.weight", s.n_embd, 1, GgmlType::F32);
    if (st.ok()) st = add(p + "ffn_gate.weight", s.n_embd, s.n_ff, wtype);
    if (st.ok()) st = add(p + "ffn_up.weight", s.n_embd, s.n_ff, wtype);
    if (st.ok()) st = add(p + "ffn_down.weight", s.n_ff, s.n_embd, wtype);
  }
  if (!st.ok()) return st;
  return w.WriteFile(path);
}

}  // namespace herd::bench
