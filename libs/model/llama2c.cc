#include "libs/model/llama2c.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "libs/base/mmap.h"
#include "libs/base/status_macros.h"
#include "libs/gguf/gguf.h"

namespace herd::model {
namespace {

using gguf::Value;
using ::herd::GgmlType;

constexpr int32_t kUnknownTokenId = 0;
constexpr int32_t kBosTokenId = 1;
constexpr int32_t kEosTokenId = 2;
constexpr uint32_t kRopeDimMax = 64;  // convert-llama2c-to-ggml's params.n_rotmax

// Sanity caps far above any llama2.c model; they also keep every size computation
// below 2^63.
constexpr int64_t kMaxDim = int64_t{1} << 20;
constexpr int64_t kMaxLayers = int64_t{1} << 16;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxSeqLen = int64_t{1} << 24;

// Byte counts of the checkpoint sections, in file order.
struct Layout {
  uint64_t token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, freq_cis, wcls;
};

Layout ComputeLayout(const Llama2cConfig& c) {
  const uint64_t f = sizeof(float);
  const uint64_t dim = c.dim, hid = c.hidden_dim, L = c.n_layers, V = c.vocab_size;
  const uint64_t kv = static_cast<uint64_t>(c.kv_dim());
  Layout l;
  l.token_embedding = V * dim * f;
  l.rms_att = L * dim * f;
  l.wq = L * dim * dim * f;
  l.wk = L * dim * kv * f;
  l.wv = L * dim * kv * f;
  l.wo = L * dim * dim * f;
  l.rms_ffn = L * dim * f;
  l.w1 = L * hid * dim * f;
  l.w2 = L * dim * hid * f;
  l.w3 = L * hid * dim * f;
  l.rms_final = dim * f;
  // freq_cis_real + freq_cis_imag: 2 * seq_len * head_size / 2 floats.
  l.freq_cis = static_cast<uint64_t>(c.seq_len) * static_cast<uint64_t>(c.head_size()) * f;
  l.wcls = c.shared_classifier ? 0 : V * dim * f;
  return l;
}

std::string HeaderString(const int32_t h[7]) {
  return absl::StrFormat("dim=%d hidden_dim=%d n_layers=%d n_heads=%d n_kv_heads=%d vocab_size=%d seq_len=%d", h[0],
                         h[1], h[2], h[3], h[4], h[5], h[6]);
}

absl::Status BadHeader(const std::string& name, const int32_t h[7], const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("llama2.c checkpoint ", name, ": ", what, " (header: ", HeaderString(h), ")"));
}

// llama_escape_whitespaces: ' ' -> U+2581.
std::string EscapeWhitespace(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == ' ') {
      out += "\xe2\x96\x81";
    } else {
      out += c;
    }
  }
  return out;
}

bool IsGgufImage(const uint8_t* data, size_t size) { return size >= 4 && std::memcmp(data, "GGUF", 4) == 0; }

absl::StatusOr<Llama2cVocab> LoadGgufVocab(const std::string& path, int32_t n_vocab) {
  HERD_ASSIGN_OR_RETURN(auto file_or, gguf::GgufFile::Open(path));
  const gguf::GgufFile& f = *file_or;
  HERD_ASSIGN_OR_RETURN(auto model, f.GetString("tokenizer.ggml.model"));
  if (model != "llama") {
    return absl::InvalidArgumentError(
        absl::StrCat("vocabulary ", path, ": tokenizer.ggml.model is \"", model, "\", expected \"llama\""));
  }
  Llama2cVocab v;
  HERD_ASSIGN_OR_RETURN(auto tokens, f.GetStringArray("tokenizer.ggml.tokens"));
  HERD_ASSIGN_OR_RETURN(auto scores, f.GetFloatArray("tokenizer.ggml.scores"));
  HERD_ASSIGN_OR_RETURN(auto types, f.GetIntArray("tokenizer.ggml.token_type"));
  if (tokens.size() != static_cast<size_t>(n_vocab) || scores.size() != tokens.size() ||
      types.size() != tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat("vocabulary ", path, ": vocab size mismatch: ", tokens.size(),
                                                   " tokens, ", scores.size(), " scores, ", types.size(),
                                                   " token types; the checkpoint has ", n_vocab));
  }
  v.tokens = std::move(tokens);
  v.scores = std::move(scores);
  v.token_types.reserve(types.size());
  for (int64_t t : types) v.token_types.push_back(static_cast<int32_t>(t));
  return v;
}

}  // namespace

uint64_t Llama2cConfig::ExpectedFileBytes() const {
  const Layout l = ComputeLayout(*this);
  return 7 * sizeof(int32_t) + l.token_embedding + l.rms_att + l.wq + l.wk + l.wv + l.wo + l.rms_ffn + l.w1 + l.w2 +
         l.w3 + l.rms_final + l.freq_cis + l.wcls;
}

absl::StatusOr<Llama2cConfig> ParseLlama2cHeader(const void* data, uint64_t file_size, const std::string& name) {
  if (file_size < 7 * sizeof(int32_t)) {
    return absl::InvalidArgumentError(
        absl::StrCat("llama2.c checkpoint ", name, ": file is ", file_size,
                     " bytes, too short for the 28-byte header (dim, hidden_dim, n_layers, n_heads, "
                     "n_kv_heads, vocab_size, seq_len)"));
  }
  if (IsGgufImage(static_cast<const uint8_t*>(data), file_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("llama2.c checkpoint ", name, ": this is a GGUF file, not a llama2.c checkpoint"));
  }
  int32_t h[7];
  std::memcpy(h, data, sizeof(h));
  const char* kNames[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  const int64_t kMax[7] = {kMaxDim, kMaxDim, kMaxLayers, kMaxDim, kMaxDim, kMaxVocab, kMaxSeqLen};
  for (int i = 0; i < 7; ++i) {
    const int64_t v = i == 5 ? std::abs(static_cast<int64_t>(h[i])) : h[i];
    if (v <= 0 || v > kMax[i]) {
      return BadHeader(name, h,
                       absl::StrCat(kNames[i], " = ", h[i], " is out of range (", i == 5 ? "|vocab_size| " : "",
                                    "must be in [1, ", kMax[i], "])"));
    }
  }
  Llama2cConfig c;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.shared_classifier = h[5] > 0;
  c.vocab_size = std::abs(h[5]);
  c.seq_len = h[6];
  if (c.dim % c.n_heads != 0) {
    return BadHeader(name, h, absl::StrCat("dim ", c.dim, " is not a multiple of n_heads ", c.n_heads));
  }
  if (c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads != 0) {
    return BadHeader(name, h, absl::StrCat("n_heads ", c.n_heads, " is not a multiple of n_kv_heads ", c.n_kv_heads));
  }
  const uint64_t want = c.ExpectedFileBytes();
  if (file_size != want) {
    return BadHeader(name, h,
                     absl::StrCat("file is ", file_size, " bytes but the header implies ", want, " bytes (",
                                  file_size < want ? "truncated file" : "unexpected trailing data",
                                  c.shared_classifier ? ", shared classifier" : ", unshared classifier", ")"));
  }
  return c;
}

absl::StatusOr<Llama2cVocab> LoadLlama2cVocab(const std::string& path, int32_t n_vocab) {
  if (n_vocab <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("vocabulary ", path, ": n_vocab ", n_vocab));
  }
  HERD_ASSIGN_OR_RETURN(const MappedFile& map, MappedFile::Open(path));
  const uint8_t* data = map.data();
  const size_t size = map.size();
  if (IsGgufImage(data, size)) return LoadGgufVocab(path, n_vocab);

  auto truncated = [&](int32_t id, const char* what) {
    return absl::InvalidArgumentError(absl::StrCat("llama2.c tokenizer ", path, ": truncated at token ", id, " of ",
                                                   n_vocab, " (", what, "; file is ", size, " bytes)"));
  };
  if (size < 4) return truncated(0, "max_token_length header");
  size_t pos = 4;  // u32 max_token_length, unused (as in llama.cpp)

  Llama2cVocab v;
  v.tokens.reserve(n_vocab);
  v.scores.reserve(n_vocab);
  v.token_types.reserve(n_vocab);
  for (int32_t id = 0; id < n_vocab; ++id) {
    if (size - pos < 8) return truncated(id, "score and length");
    float score;
    uint32_t len;
    std::memcpy(&score, data + pos, 4);
    std::memcpy(&len, data + pos + 4, 4);
    pos += 8;
    if (size - pos < len) {
      return truncated(id, absl::StrCat("text of ", len, " bytes").c_str());
    }
    std::string text(reinterpret_cast<const char*>(data + pos), len);
    pos += len;

    TokenType type = TokenType::kNormal;
    unsigned char byte_val;
    if (id == kUnknownTokenId) {
      text = "<unk>";
      type = TokenType::kUnknown;
    } else if (id == kBosTokenId) {
      text = "<s>";
      type = TokenType::kControl;
    } else if (id == kEosTokenId) {
      text = "</s>";
      type = TokenType::kControl;
    } else if (text.empty()) {
      type = TokenType::kControl;
    } else if (std::sscanf(text.c_str(), "<0x%02hhX>", &byte_val) == 1) {
      // Text of byte tokens is already in the expected format.
      type = TokenType::kByte;
    }
    v.tokens.push_back(EscapeWhitespace(text));
    v.scores.push_back(score);
    v.token_types.push_back(static_cast<int32_t>(type));
  }
  return v;
}

absl::Status ConvertLlama2c(const std::string& model_bin, const std::string& tokenizer_bin,
                            const std::string& out_gguf) {
  return ConvertLlama2c(model_bin, tokenizer_bin, out_gguf, Llama2cConvertOptions());
}

absl::Status ConvertLlama2c(const std::string& model_bin, const std::string& tokenizer_bin, const std::string& out_gguf,
                            const Llama2cConvertOptions& options) {
  HERD_ASSIGN_OR_RETURN(const MappedFile& map, MappedFile::Open(model_bin));
  HERD_ASSIGN_OR_RETURN(const Llama2cConfig& c, ParseLlama2cHeader(map.data(), map.size(), model_bin));

  HERD_ASSIGN_OR_RETURN(auto vocab_or, LoadLlama2cVocab(tokenizer_bin, c.vocab_size));
  Llama2cVocab& vocab = vocab_or;

  // Section pointers into the mapping.
  const Layout l = ComputeLayout(c);
  const uint8_t* p = map.data() + 7 * sizeof(int32_t);
  auto take = [&p](uint64_t bytes) {
    const uint8_t* at = p;
    p += bytes;
    return at;
  };
  const uint8_t* token_embedding = take(l.token_embedding);
  const uint8_t* rms_att = take(l.rms_att);
  const uint8_t* wq = take(l.wq);
  const uint8_t* wk = take(l.wk);
  const uint8_t* wv = take(l.wv);
  const uint8_t* wo = take(l.wo);
  const uint8_t* rms_ffn = take(l.rms_ffn);
  const uint8_t* w1 = take(l.w1);
  const uint8_t* w2 = take(l.w2);
  const uint8_t* w3 = take(l.w3);
  const uint8_t* rms_final = take(l.rms_final);
  take(l.freq_cis);  // freq_cis_real / freq_cis_imag: unused by llama.cpp
  const uint8_t* wcls = c.shared_classifier ? token_embedding : take(l.wcls);

  gguf::GgufWriter w(3);
  // Metadata in the order save_as_llama_model() sets it.
  w.SetValue("tokenizer.ggml.tokens", Value::StringArray(std::move(vocab.tokens)));
  w.SetValue("tokenizer.ggml.scores", Value::F32Array(vocab.scores));
  w.SetValue("tokenizer.ggml.token_type", Value::I32Array(vocab.token_types));
  w.SetValue("tokenizer.ggml.model", Value::String("llama"));
  w.SetValue("general.architecture", Value::String("llama"));
  w.SetValue("general.name", Value::String(options.name));
  w.SetValue("tokenizer.ggml.unknown_token_id", Value::U32(kUnknownTokenId));
  w.SetValue("tokenizer.ggml.bos_token_id", Value::U32(kBosTokenId));
  w.SetValue("tokenizer.ggml.eos_token_id", Value::U32(kEosTokenId));
  w.SetValue("tokenizer.ggml.seperator_token_id", Value::U32(0xFFFFFFFFu));
  w.SetValue("tokenizer.ggml.padding_token_id", Value::U32(0xFFFFFFFFu));
  const uint32_t n_ctx = options.context_length != 0 ? options.context_length : static_cast<uint32_t>(c.seq_len);
  w.SetValue("llama.context_length", Value::U32(n_ctx));
  w.SetValue("llama.embedding_length", Value::U32(c.dim));
  w.SetValue("llama.feed_forward_length", Value::U32(c.hidden_dim));
  w.SetValue("llama.attention.head_count", Value::U32(c.n_heads));
  w.SetValue("llama.attention.head_count_kv", Value::U32(c.n_kv_heads));
  w.SetValue("llama.block_count", Value::U32(c.n_layers));
  w.SetValue("llama.rope.dimension_count",
             Value::U32(std::min<uint32_t>(kRopeDimMax, static_cast<uint32_t>(c.head_size()))));
  w.SetValue("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5f));

  const int64_t dim = c.dim, hid = c.hidden_dim, kv = c.kv_dim(), V = c.vocab_size;
  auto add = [&w](const std::string& name, std::vector<int64_t> ne, const uint8_t* data) -> absl::Status {
    size_t n = sizeof(float);
    for (int64_t d : ne) n *= static_cast<size_t>(d);
    return w.AddTensor(name, GgmlType::F32, ne, data, n);
  };
  absl::Status st;
  st.Update(add("token_embd.weight", {dim, V}, token_embedding));
  st.Update(add("output_norm.weight", {dim}, rms_final));
  st.Update(add("output.weight", {dim, V}, wcls));
  const uint64_t f = sizeof(float);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string b = absl::StrCat("blk.", i, ".");
    st.Update(add(b + "attn_q.weight", {dim, dim}, wq + i * dim * dim * f));
    st.Update(add(b + "attn_k.weight", {dim, kv}, wk + i * dim * kv * f));
    st.Update(add(b + "attn_v.weight", {dim, kv}, wv + i * dim * kv * f));
    st.Update(add(b + "attn_output.weight", {dim, dim}, wo + i * dim * dim * f));
    st.Update(add(b + "attn_norm.weight", {dim}, rms_att + i * dim * f));
    st.Update(add(b + "ffn_gate.weight", {dim, hid}, w1 + i * dim * hid * f));
    st.Update(add(b + "ffn_down.weight", {hid, dim}, w2 + i * hid * dim * f));
    st.Update(add(b + "ffn_up.weight", {dim, hid}, w3 + i * dim * hid * f));
    st.Update(add(b + "ffn_norm.weight", {dim}, rms_ffn + i * dim * f));
  }
  if (!st.ok()) return st;
  return w.WriteFile(out_gguf);
}

}  // namespace herd::model
