#include "bench/bench_models.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include "libs/base/status_macros.h"
#include "libs/base/thread_pool.h"
#include "libs/gguf/gguf.h"
#include "libs/tensor/quants.h"

namespace herd::bench {

namespace {

const Shape kShapes[] = {
    {"llama-110m", 768, 12, 12, 12, 2048, 32000, true},
    {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, false},
    {"7b", 4096, 32, 32, 32, 11008, 32000, false},
};

// One tensor of the file: [ne0] (ne1 == 1: a norm, all ones) or [ne0, ne1].
struct Planned {
  std::string name;
  int64_t ne0, ne1;
  GgmlType type;
};

// The tensors in file order.
std::vector<Planned> Plan(const Shape& s, GgmlType wtype) {
  const int64_t hd = s.n_embd / s.n_head;
  // llama-quantize's rule for the output tensor (token_embd when tied): Q6_K unless the
  // type is Q8_0 (F16/F32 models are converted, not quantized).
  const bool quantized = wtype != GgmlType::F16 && wtype != GgmlType::F32 && wtype != GgmlType::BF16;
  const GgmlType out_type = quantized && wtype != GgmlType::Q8_0 ? GgmlType::Q6_K : wtype;
  std::vector<Planned> p;
  p.push_back({"token_embd.weight", s.n_embd, s.n_vocab, s.tied ? out_type : wtype});
  p.push_back({"output_norm.weight", s.n_embd, 1, GgmlType::F32});
  if (!s.tied) p.push_back({"output.weight", s.n_embd, s.n_vocab, out_type});
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string b = absl::StrCat("blk.", il, ".");
    p.push_back({b + "attn_norm.weight", s.n_embd, 1, GgmlType::F32});
    p.push_back({b + "attn_q.weight", s.n_embd, s.n_embd, wtype});
    p.push_back({b + "attn_k.weight", s.n_embd, hd * s.n_head_kv, wtype});
    p.push_back({b + "attn_v.weight", s.n_embd, hd * s.n_head_kv, wtype});
    p.push_back({b + "attn_output.weight", s.n_embd, s.n_embd, wtype});
    p.push_back({b + "ffn_norm.weight", s.n_embd, 1, GgmlType::F32});
    p.push_back({b + "ffn_gate.weight", s.n_embd, s.n_ff, wtype});
    p.push_back({b + "ffn_up.weight", s.n_embd, s.n_ff, wtype});
    p.push_back({b + "ffn_down.weight", s.n_ff, s.n_embd, wtype});
  }
  return p;
}

size_t Bytes(const Planned& t) { return GgmlRowSize(t.type, t.ne0) * static_cast<size_t>(t.ne1); }

// Copies every tokenizer.* key of the GGUF at `vocab_path` into `w`.
absl::Status CopyVocab(const std::string& vocab_path, int64_t n_vocab, gguf::GgufWriter* w) {
  HERD_ASSIGN_OR_RETURN(auto vf, gguf::GgufFile::Open(vocab_path));
  const gguf::Value* tokens = vf->Find("tokenizer.ggml.tokens");
  if (tokens == nullptr || static_cast<int64_t>(tokens->array_size()) != n_vocab) {
    return absl::InvalidArgumentError(absl::StrCat(vocab_path, ": tokenizer.ggml.tokens has ",
                                                   tokens == nullptr ? 0 : tokens->array_size(),
                                                   " tokens, the model shape ", n_vocab));
  }
  for (const gguf::KeyValue& kv : vf->metadata()) {
    if (absl::StartsWith(kv.key, "tokenizer.")) w->SetValue(kv.key, kv.value);
  }
  return absl::OkStatus();
}

// splitmix64: the threaded writer's per-row generator.
uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
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

uint64_t ModelDataBytes(const Shape& s, GgmlType wtype) {
  uint64_t n = 0;
  for (const Planned& t : Plan(s, wtype)) n += (Bytes(t) + 31) / 32 * 32;  // GGUF's default alignment
  return n;
}

absl::Status WriteModel(const Shape& s, GgmlType wtype, const std::string& path, const std::string& vocab_path,
                        const std::string& extra_key, const std::string& extra_value) {
  WriteOptions o;
  o.vocab_path = vocab_path;
  o.extra_key = extra_key;
  o.extra_value = extra_value;
  return WriteModel(s, wtype, path, o);
}

absl::Status WriteModel(const Shape& s, GgmlType wtype, const std::string& path, const WriteOptions& opts) {
  gguf::GgufWriter w;
  w.SetValue("general.architecture", gguf::Value::String("llama"));
  w.SetValue("llama.context_length", gguf::Value::U32(2048));
  w.SetValue("llama.embedding_length", gguf::Value::U32(static_cast<uint32_t>(s.n_embd)));
  w.SetValue("llama.block_count", gguf::Value::U32(static_cast<uint32_t>(s.n_layer)));
  w.SetValue("llama.feed_forward_length", gguf::Value::U32(static_cast<uint32_t>(s.n_ff)));
  w.SetValue("llama.attention.head_count", gguf::Value::U32(static_cast<uint32_t>(s.n_head)));
  w.SetValue("llama.attention.head_count_kv", gguf::Value::U32(static_cast<uint32_t>(s.n_head_kv)));
  w.SetValue("llama.attention.layer_norm_rms_epsilon", gguf::Value::F32(1e-5f));
  if (!opts.vocab_path.empty()) {
    HERD_RETURN_IF_ERROR(CopyVocab(opts.vocab_path, s.n_vocab, &w));
  }
  if (!opts.extra_key.empty()) w.SetValue(opts.extra_key, gguf::Value::String(opts.extra_value));
  const std::vector<Planned> plan = Plan(s, wtype);
  static const uint8_t kUnread = 0;  // WriteFileStreaming does not read AddTensor's data
  for (const Planned& t : plan) {
    std::vector<int64_t> ne = {t.ne0};
    if (t.ne1 > 1) ne.push_back(t.ne1);
    HERD_RETURN_IF_ERROR(w.AddTensor(t.name, t.type, ne, &kUnread, Bytes(t)));
  }
  if (opts.threads <= 0) {
    // One generator in file order (the bytes this function has always written).
    std::mt19937 rng(1234);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    return w.WriteFileStreaming(path, [&](size_t i, uint8_t* dst) {
      const Planned& t = plan[i];
      std::vector<float> row(static_cast<size_t>(t.ne0));
      const size_t rs = GgmlRowSize(t.type, t.ne0);
      for (int64_t r = 0; r < t.ne1; ++r) {
        for (float& x : row) x = t.ne1 == 1 ? 1.0f : nd(rng);
        QuantizeRow(t.type, row.data(), dst + static_cast<size_t>(r) * rs, t.ne0);
      }
      return absl::OkStatus();
    });
  }
  ThreadPool pool(opts.threads);
  // Uniform on [-a, a] with a = sqrt(3) * 0.02: the serial writer's sigma.
  const float a = std::sqrt(3.0f) * 0.02f;
  return w.WriteFileStreaming(path, [&](size_t i, uint8_t* dst) {
    const Planned& t = plan[i];
    const size_t rs = GgmlRowSize(t.type, t.ne0);
    pool.Run([&](int ith, int nth) {
      int64_t r0, r1;
      SplitRange(t.ne1, ith, nth, &r0, &r1);
      std::vector<float> row(static_cast<size_t>(t.ne0));
      for (int64_t r = r0; r < r1; ++r) {
        uint64_t state = (static_cast<uint64_t>(i) << 32) ^ static_cast<uint64_t>(r) ^ 0x5EED0000000000ull;
        for (int64_t k = 0; k < t.ne0; k += 2) {
          const uint64_t u = SplitMix(&state);
          // Two 24-bit uniforms in [0, 1) per draw, mapped to [-a, a).
          row[static_cast<size_t>(k)] = t.ne1 == 1 ? 1.0f : (static_cast<float>(u >> 40) * 0x1p-23f - 1.0f) * a;
          if (k + 1 < t.ne0) {
            row[static_cast<size_t>(k + 1)] =
                t.ne1 == 1 ? 1.0f : (static_cast<float>((u >> 16) & 0xFFFFFF) * 0x1p-23f - 1.0f) * a;
          }
        }
        QuantizeRow(t.type, row.data(), dst + static_cast<size_t>(r) * rs, t.ne0);
      }
    });
    return absl::OkStatus();
  });
}

std::string DefaultCacheDir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && x[0] == '/') return absl::StrCat(x, "/herd-bench");
  if (const char* h = std::getenv("HOME"); h != nullptr && h[0] == '/') return absl::StrCat(h, "/.cache/herd-bench");
  return "/tmp/herd-bench";
}

absl::StatusOr<std::string> CachedModel(const Shape& s, GgmlType wtype, const std::string& cache_dir,
                                        const std::string& vocab_path, bool* reused) {
  *reused = false;
  struct stat vs;
  if (::stat(vocab_path.c_str(), &vs) != 0) {
    return absl::NotFoundError(absl::StrCat("vocab ", vocab_path, ": ", std::strerror(errno)));
  }
  const std::string dir = cache_dir + "/models";
  std::string cur;
  for (absl::string_view part : absl::StrSplit(dir, '/', absl::SkipEmpty())) {
    absl::StrAppend(&cur, "/", part);
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InternalError(absl::StrCat("mkdir ", cur, ": ", std::strerror(errno)));
    }
  }
  const std::string path = absl::StrCat(dir, "/", s.name, "-", absl::AsciiStrToLower(GgmlTypeName(wtype)), ".gguf");
  constexpr char kStampKey[] = "herd.bench.recipe";
  // What the bytes depend on: this file's recipe (v1), the shape, the type, the vocab.
  const std::string stamp = absl::StrCat("v1 ", s.name, " ", GgmlTypeName(wtype), " vocab ",
                                         vocab_path.substr(vocab_path.rfind('/') + 1), " ", vs.st_size);
  if (auto f = gguf::GgufFile::Open(path); f.ok()) {
    auto got = (*f)->GetString(kStampKey);
    if (got.ok() && *got == stamp) {
      *reused = true;
      return path;
    }
  }
  HERD_RETURN_IF_ERROR(WriteModel(s, wtype, path, vocab_path, kStampKey, stamp));
  return path;
}

}  // namespace herd::bench
