// Architectures without llama.cpp reference files (falcon, qwen2, qwen3): tiny synthetic
// GGUF models (random F32 weights, written with GgufWriter) checked against a plain
// double-precision forward pass written here from llama.cpp's llm_build_falcon /
// llm_build_qwen2 / llm_build_qwen3. The GELU follows ggml's CPU F16 table, as herd does.
// Also: registry and loader errors that need no shared data.
#include "libs/model/model.h"

#include <cmath>
#include <deque>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "libs/base/fp16.h"
#include "libs/gguf/gguf.h"
#include "libs/model/test_runner.h"
#include "tests/cpu_backend_for_tests.h"

namespace herd::model {
namespace {

using Vec = std::vector<double>;

constexpr int64_t kEmbd = 32, kHead = 4, kHd = 8, kFf = 48, kVocab = 50, kLayer = 2, kCtx = 64;

// A synthetic model: metadata plus named F32 tensors (kept here for the reference).
class Synth {
 public:
  explicit Synth(const std::string& arch) : arch_(arch) {
    w_.SetValue("general.architecture", gguf::Value::String(arch));
    Key("context_length", gguf::Value::U32(kCtx));
    Key("embedding_length", gguf::Value::U32(kEmbd));
    Key("block_count", gguf::Value::U32(kLayer));
    Key("feed_forward_length", gguf::Value::U32(kFf));
    Key("attention.head_count", gguf::Value::U32(kHead));
  }
  void Key(const std::string& suffix, gguf::Value v) { w_.SetValue(arch_ + "." + suffix, std::move(v)); }
  // Random tensor: `scale` * N(0,1) (+ `offset`), ggml shape ne.
  void Add(const std::string& name, std::vector<int64_t> ne, double scale, double offset = 0.0) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    std::normal_distribution<double> nd(0.0, 1.0);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = static_cast<float>(offset + scale * nd(rng_));
    store_.push_back(v);
    t_[name] = &store_.back();
    EXPECT_TRUE(w_.AddTensor(name, GgmlType::F32, ne, store_.back().data(), v.size() * sizeof(float)).ok()) << name;
  }
  bool Has(const std::string& name) const { return t_.count(name) > 0; }
  const std::vector<float>& T(const std::string& name) const { return *t_.at(name); }
  absl::StatusOr<std::unique_ptr<Model>> Load() {
    auto f = gguf::GgufFile::FromBytes(w_.WriteToString(), "synth-" + arch_);
    if (!f.ok()) return f.status();
    return Model::FromGguf(*std::move(f));
  }

 private:
  std::string arch_;
  gguf::GgufWriter w_;
  std::mt19937 rng_{7};
  std::deque<std::vector<float>> store_;
  std::map<std::string, std::vector<float>*> t_;
};

// --- plain reference ops (double) ---

Vec MatVec(const std::vector<float>& w, const Vec& x, int64_t out) {  // w: ggml [in, out]
  const int64_t in = static_cast<int64_t>(x.size());
  Vec y(static_cast<size_t>(out), 0.0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) y[o] += static_cast<double>(w[static_cast<size_t>(o * in + i)]) * x[i];
  return y;
}
void AddTo(Vec& y, const std::vector<float>& b) {
  for (size_t i = 0; i < y.size(); ++i) y[i] += b[i];
}
Vec LayerNorm(const Vec& x, const std::vector<float>& w, const std::vector<float>* b, double eps) {
  double mean = 0, var = 0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  for (double v : x) var += (v - mean) * (v - mean);
  var /= static_cast<double>(x.size());
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mean) / std::sqrt(var + eps) * w[i] + (b ? (*b)[i] : 0.0);
  return y;
}
Vec RmsNorm(const Vec& x, const float* w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * w[i];
  return y;
}
// NeoX RoPE on each head of `x` (heads of kHd): pairs (i, i + n_rot/2), i < n_rot/2.
void RopeNeox(Vec& x, int64_t heads, int64_t n_rot, int pos) {
  for (int64_t h = 0; h < heads; ++h) {
    double* v = x.data() + h * kHd;
    for (int64_t i = 0; i < n_rot / 2; ++i) {
      const double th = pos * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
      const double a = v[i], b = v[i + n_rot / 2];
      v[i] = a * std::cos(th) - b * std::sin(th);
      v[i + n_rot / 2] = a * std::sin(th) + b * std::cos(th);
    }
  }
}
// ggml's CPU GELU: the F16 table of the tanh form.
double GeluTable(double xd) {
  const float x = static_cast<float>(xd);
  if (x <= -10.0f) return 0.0;
  if (x >= 10.0f) return x;
  const float h = Fp16ToFp32(Fp32ToFp16(x));
  const float g = 0.5f * h * (1.0f + std::tanh(0.79788456080286535587989211986876f * h * (1.0f + 0.044715f * h * h)));
  return Fp16ToFp32(Fp32ToFp16(g));
}
double Silu(double x) { return x / (1.0 + std::exp(-x)); }

// Causal attention over all positions: q [T][n_head*hd], k/v [T][n_kv*hd].
std::vector<Vec> Attend(const std::vector<Vec>& q, const std::vector<Vec>& k, const std::vector<Vec>& v, int64_t n_head,
                        int64_t n_kv, double scale) {
  const size_t T = q.size();
  std::vector<Vec> out(T, Vec(static_cast<size_t>(n_head * kHd), 0.0));
  for (size_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < n_head; ++h) {
      const int64_t hk = h / (n_head / n_kv);
      Vec s(t + 1);
      double mx = -1e300, sum = 0;
      for (size_t c = 0; c <= t; ++c) {
        double d = 0;
        for (int64_t i = 0; i < kHd; ++i) d += q[t][h * kHd + i] * k[c][hk * kHd + i];
        s[c] = d * scale;
        mx = std::max(mx, s[c]);
      }
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (size_t c = 0; c <= t; ++c)
        for (int64_t i = 0; i < kHd; ++i) out[t][h * kHd + i] += s[c] / sum * v[c][hk * kHd + i];
    }
  }
  return out;
}

std::string L(int64_t il, const std::string& n) { return "blk." + std::to_string(il) + "." + n; }

// --- per-architecture reference forward passes ---

// hidden: return the output-normed hidden states (llama.cpp t_embd) instead of logits.
std::vector<Vec> RefFalcon(const Synth& s, const std::vector<int32_t>& toks, int64_t n_kv, double eps,
                           bool hidden = false) {
  const size_t T = toks.size();
  const int64_t n_q = kEmbd, n_k = n_kv * kHd;
  std::vector<Vec> x(T);
  for (size_t t = 0; t < T; ++t) {
    const auto& e = s.T("token_embd.weight");
    x[t].assign(e.begin() + toks[t] * kEmbd, e.begin() + (toks[t] + 1) * kEmbd);
  }
  for (int64_t il = 0; il < kLayer; ++il) {
    std::vector<Vec> an(T), q(T), k(T), v(T);
    for (size_t t = 0; t < T; ++t) {
      an[t] = LayerNorm(x[t], s.T(L(il, "attn_norm.weight")), &s.T(L(il, "attn_norm.bias")), eps);
      const Vec ain = s.Has(L(il, "attn_norm_2.weight"))
                          ? LayerNorm(x[t], s.T(L(il, "attn_norm_2.weight")), &s.T(L(il, "attn_norm_2.bias")), eps)
                          : an[t];
      const Vec qkv = MatVec(s.T(L(il, "attn_qkv.weight")), ain, n_q + 2 * n_k);
      q[t].assign(qkv.begin(), qkv.begin() + n_q);
      k[t].assign(qkv.begin() + n_q, qkv.begin() + n_q + n_k);
      v[t].assign(qkv.begin() + n_q + n_k, qkv.end());
      RopeNeox(q[t], kHead, kHd, static_cast<int>(t));
      RopeNeox(k[t], n_kv, kHd, static_cast<int>(t));
    }
    const auto att = Attend(q, k, v, kHead, n_kv, 1.0 / std::sqrt(static_cast<double>(kHd)));
    for (size_t t = 0; t < T; ++t) {
      const Vec ao = MatVec(s.T(L(il, "attn_output.weight")), att[t], kEmbd);
      Vec u = MatVec(s.T(L(il, "ffn_up.weight")), an[t], kFf);
      for (double& z : u) z = GeluTable(z);
      const Vec f = MatVec(s.T(L(il, "ffn_down.weight")), u, kEmbd);
      for (int64_t i = 0; i < kEmbd; ++i) x[t][i] += ao[i] + f[i];
    }
  }
  std::vector<Vec> logits(T);
  for (size_t t = 0; t < T; ++t) {
    const Vec h = LayerNorm(x[t], s.T("output_norm.weight"), &s.T("output_norm.bias"), eps);
    if (hidden) {
      logits[t] = h;
      continue;
    }
    logits[t] = MatVec(s.Has("output.weight") ? s.T("output.weight") : s.T("token_embd.weight"), h, kVocab);
  }
  return logits;
}

std::vector<Vec> RefQwen(const Synth& s, const std::vector<int32_t>& toks, int64_t n_kv, double eps, bool qk_norm,
                         bool hidden = false) {
  const size_t T = toks.size();
  const int64_t n_q = kHead * kHd, n_k = n_kv * kHd;
  std::vector<Vec> x(T);
  for (size_t t = 0; t < T; ++t) {
    const auto& e = s.T("token_embd.weight");
    x[t].assign(e.begin() + toks[t] * kEmbd, e.begin() + (toks[t] + 1) * kEmbd);
  }
  for (int64_t il = 0; il < kLayer; ++il) {
    std::vector<Vec> q(T), k(T), v(T);
    for (size_t t = 0; t < T; ++t) {
      const Vec h = RmsNorm(x[t], s.T(L(il, "attn_norm.weight")).data(), eps);
      q[t] = MatVec(s.T(L(il, "attn_q.weight")), h, n_q);
      k[t] = MatVec(s.T(L(il, "attn_k.weight")), h, n_k);
      v[t] = MatVec(s.T(L(il, "attn_v.weight")), h, n_k);
      if (!qk_norm) {
        AddTo(q[t], s.T(L(il, "attn_q.bias")));
        AddTo(k[t], s.T(L(il, "attn_k.bias")));
        AddTo(v[t], s.T(L(il, "attn_v.bias")));
      } else {
        for (int64_t hh = 0; hh < kHead; ++hh) {
          Vec head(q[t].begin() + hh * kHd, q[t].begin() + (hh + 1) * kHd);
          head = RmsNorm(head, s.T(L(il, "attn_q_norm.weight")).data(), eps);
          std::copy(head.begin(), head.end(), q[t].begin() + hh * kHd);
        }
        for (int64_t hh = 0; hh < n_kv; ++hh) {
          Vec head(k[t].begin() + hh * kHd, k[t].begin() + (hh + 1) * kHd);
          head = RmsNorm(head, s.T(L(il, "attn_k_norm.weight")).data(), eps);
          std::copy(head.begin(), head.end(), k[t].begin() + hh * kHd);
        }
      }
      RopeNeox(q[t], kHead, kHd, static_cast<int>(t));
      RopeNeox(k[t], n_kv, kHd, static_cast<int>(t));
    }
    const auto att = Attend(q, k, v, kHead, n_kv, 1.0 / std::sqrt(static_cast<double>(kHd)));
    for (size_t t = 0; t < T; ++t) {
      const Vec ao = MatVec(s.T(L(il, "attn_output.weight")), att[t], kEmbd);
      for (int64_t i = 0; i < kEmbd; ++i) x[t][i] += ao[i];
      const Vec h = RmsNorm(x[t], s.T(L(il, "ffn_norm.weight")).data(), eps);
      const Vec g = MatVec(s.T(L(il, "ffn_gate.weight")), h, kFf);
      Vec u = MatVec(s.T(L(il, "ffn_up.weight")), h, kFf);
      for (int64_t i = 0; i < kFf; ++i) u[i] *= Silu(g[i]);
      const Vec f = MatVec(s.T(L(il, "ffn_down.weight")), u, kEmbd);
      for (int64_t i = 0; i < kEmbd; ++i) x[t][i] += f[i];
    }
  }
  std::vector<Vec> logits(T);
  for (size_t t = 0; t < T; ++t) {
    const Vec h = RmsNorm(x[t], s.T("output_norm.weight").data(), eps);
    if (hidden) {
      logits[t] = h;
      continue;
    }
    logits[t] = MatVec(s.Has("output.weight") ? s.T("output.weight") : s.T("token_embd.weight"), h, kVocab);
  }
  return logits;
}

// --- model makers ---

const double kW = 1.0 / std::sqrt(static_cast<double>(kEmbd));  // matrix weight scale

Synth MakeFalcon(int64_t n_kv, bool norm_2) {
  Synth s("falcon");
  s.Key("attention.head_count_kv", gguf::Value::U32(static_cast<uint32_t>(n_kv)));
  s.Key("attention.layer_norm_epsilon", gguf::Value::F32(1e-5f));
  s.Add("token_embd.weight", {kEmbd, kVocab}, 1.0);
  s.Add("output_norm.weight", {kEmbd}, 0.1, 1.0);
  s.Add("output_norm.bias", {kEmbd}, 0.1);
  for (int64_t il = 0; il < kLayer; ++il) {
    s.Add(L(il, "attn_norm.weight"), {kEmbd}, 0.1, 1.0);
    s.Add(L(il, "attn_norm.bias"), {kEmbd}, 0.1);
    if (norm_2) {
      s.Add(L(il, "attn_norm_2.weight"), {kEmbd}, 0.1, 1.0);
      s.Add(L(il, "attn_norm_2.bias"), {kEmbd}, 0.1);
    }
    s.Add(L(il, "attn_qkv.weight"), {kEmbd, kEmbd + 2 * n_kv * kHd}, kW);
    s.Add(L(il, "attn_output.weight"), {kEmbd, kEmbd}, kW);
    s.Add(L(il, "ffn_up.weight"), {kEmbd, kFf}, kW);
    s.Add(L(il, "ffn_down.weight"), {kFf, kEmbd}, 1.0 / std::sqrt(static_cast<double>(kFf)));
  }
  return s;
}

Synth MakeQwen(bool qwen3, int64_t n_kv) {
  Synth s(qwen3 ? "qwen3" : "qwen2");
  s.Key("attention.head_count_kv", gguf::Value::U32(static_cast<uint32_t>(n_kv)));
  s.Key("attention.layer_norm_rms_epsilon", gguf::Value::F32(1e-6f));
  s.Key("rope.freq_base", gguf::Value::F32(10000.0f));
  s.Add("token_embd.weight", {kEmbd, kVocab}, 1.0);
  s.Add("output_norm.weight", {kEmbd}, 0.1, 1.0);
  if (!qwen3) s.Add("output.weight", {kEmbd, kVocab}, kW);  // qwen3 tied
  for (int64_t il = 0; il < kLayer; ++il) {
    s.Add(L(il, "attn_norm.weight"), {kEmbd}, 0.1, 1.0);
    s.Add(L(il, "attn_q.weight"), {kEmbd, kHead * kHd}, kW);
    s.Add(L(il, "attn_k.weight"), {kEmbd, n_kv * kHd}, kW);
    s.Add(L(il, "attn_v.weight"), {kEmbd, n_kv * kHd}, kW);
    if (qwen3) {
      s.Add(L(il, "attn_q_norm.weight"), {kHd}, 0.1, 1.0);
      s.Add(L(il, "attn_k_norm.weight"), {kHd}, 0.1, 1.0);
    } else {
      s.Add(L(il, "attn_q.bias"), {kHead * kHd}, 0.1);
      s.Add(L(il, "attn_k.bias"), {n_kv * kHd}, 0.1);
      s.Add(L(il, "attn_v.bias"), {n_kv * kHd}, 0.1);
    }
    s.Add(L(il, "attn_output.weight"), {kHead * kHd, kEmbd}, kW);
    s.Add(L(il, "ffn_norm.weight"), {kEmbd}, 0.1, 1.0);
    s.Add(L(il, "ffn_gate.weight"), {kEmbd, kFf}, kW);
    s.Add(L(il, "ffn_up.weight"), {kEmbd, kFf}, kW);
    s.Add(L(il, "ffn_down.weight"), {kFf, kEmbd}, 1.0 / std::sqrt(static_cast<double>(kFf)));
  }
  return s;
}

// Runs the model on `toks` twice (one batch; then 3 tokens and one at a time through the
// KV cache) and compares every logit with the reference.
void ExpectMatches(const Model& m, const std::vector<Vec>& ref, const std::vector<int32_t>& toks, double tol) {
  std::unique_ptr<Backend> backend_owner = CpuBackendForTests(2);
  Backend& backend = *backend_owner;
  SequenceRunner batch(m, &backend, kCtx);
  auto all = batch.Eval(toks, 0);
  ASSERT_TRUE(all.ok()) << all.status();
  SequenceRunner inc(m, &backend, kCtx, GgmlType::F32);
  auto first = inc.Eval({toks.begin(), toks.begin() + 3}, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  std::vector<std::vector<float>> stepped = *first;
  for (size_t t = 3; t < toks.size(); ++t) {
    auto l = inc.Eval({toks[t]}, static_cast<int32_t>(t));
    ASSERT_TRUE(l.ok()) << l.status();
    stepped.push_back((*l)[0]);
  }
  double d = 0, mag = 0;
  for (size_t t = 0; t < toks.size(); ++t) {
    for (int64_t i = 0; i < kVocab; ++i) {
      d = std::max(d, std::fabs((*all)[t][i] - ref[t][i]));
      d = std::max(d, std::fabs(stepped[t][i] - ref[t][i]));
      mag = std::max(mag, std::fabs(ref[t][i]));
    }
  }
  EXPECT_LE(d, tol) << m.hparams().arch << ": max |logit| " << mag;
  std::printf("%s: max |dlogit| %.2g (max |logit| %.2g)\n", m.hparams().arch.c_str(), d, mag);
}

const std::vector<int32_t> kToks = {3, 17, 42, 5, 5, 29, 11, 48, 0, 33};

TEST(ModelArch, Falcon7bStyleMatchesReference) {
  Synth s = MakeFalcon(/*n_kv=*/1, /*norm_2=*/false);
  auto m = s.Load();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->hparams().rope_type, kRopeNeox);
  EXPECT_EQ((*m)->weights().output, (*m)->weights().tok_embd);  // tied
  ExpectMatches(**m, RefFalcon(s, kToks, 1, 1e-5), kToks, 1e-3);
}

TEST(ModelArch, Falcon40bStyleWithAttnNorm2MatchesReference) {
  Synth s = MakeFalcon(/*n_kv=*/2, /*norm_2=*/true);
  s.Add("output.weight", {kEmbd, kVocab}, kW);
  auto m = s.Load();
  ASSERT_TRUE(m.ok()) << m.status();
  ExpectMatches(**m, RefFalcon(s, kToks, 2, 1e-5), kToks, 1e-3);
}

TEST(ModelArch, Qwen2WithBiasesAndGqaMatchesReference) {
  Synth s = MakeQwen(/*qwen3=*/false, /*n_kv=*/2);
  auto m = s.Load();
  ASSERT_TRUE(m.ok()) << m.status();
  ExpectMatches(**m, RefQwen(s, kToks, 2, 1e-6, false), kToks, 1e-4);
}

TEST(ModelArch, Qwen3QkNormMatchesReference) {
  Synth s = MakeQwen(/*qwen3=*/true, /*n_kv=*/1);
  auto m = s.Load();
  ASSERT_TRUE(m.ok()) << m.status();
  ExpectMatches(**m, RefQwen(s, kToks, 1, 1e-6, true), kToks, 1e-4);
}

// ForwardInputs::embeddings: the graph's output is the output-normed hidden state of
// every token (llama.cpp's t_embd, what embeddings pool), equal to the reference's.
TEST(ModelArch, EmbeddingsOutputIsTheNormedHiddenState) {
  struct Case {
    Synth s;
    std::vector<Vec> ref;
  };
  Synth q = MakeQwen(/*qwen3=*/false, /*n_kv=*/2);
  Synth f = MakeFalcon(/*n_kv=*/1, /*norm_2=*/false);
  const std::vector<Vec> ref_q = RefQwen(q, kToks, 2, 1e-6, false, /*hidden=*/true);
  const std::vector<Vec> ref_f = RefFalcon(f, kToks, 1, 1e-5, /*hidden=*/true);
  for (auto [synth, ref] : {std::pair<Synth*, const std::vector<Vec>*>{&q, &ref_q}, {&f, &ref_f}}) {
    auto m = synth->Load();
    ASSERT_TRUE(m.ok()) << m.status();
    std::unique_ptr<Backend> backend_owner = CpuBackendForTests(2);
    Backend& backend = *backend_owner;
    SequenceRunner run(**m, &backend, kCtx);
    auto h = run.Eval(kToks, 0, /*all_logits=*/true, /*embeddings=*/true);
    ASSERT_TRUE(h.ok()) << h.status();
    ASSERT_EQ(h->size(), kToks.size());
    double d = 0;
    for (size_t t = 0; t < kToks.size(); ++t) {
      ASSERT_EQ(static_cast<int64_t>((*h)[t].size()), kEmbd);
      for (int64_t i = 0; i < kEmbd; ++i) d = std::max(d, std::fabs((*h)[t][i] - (*ref)[t][i]));
    }
    EXPECT_LE(d, 1e-4) << (*m)->hparams().arch;
    // Only the last row when out_ids selects it.
    SequenceRunner last(**m, &backend, kCtx);
    auto hl = last.Eval(kToks, 0, /*all_logits=*/false, /*embeddings=*/true);
    ASSERT_TRUE(hl.ok());
    ASSERT_EQ(hl->size(), 1u);
    for (int64_t i = 0; i < kEmbd; ++i) EXPECT_NEAR((*hl)[0][i], ref->back()[i], 1e-4);
  }
}

TEST(ModelArch, FalconRopeMustCoverTheHead) {
  Synth s = MakeFalcon(1, false);
  s.Key("rope.dimension_count", gguf::Value::U32(4));
  auto m = s.Load();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("'falcon.rope.dimension_count'"), std::string::npos) << m.status();
}

TEST(ModelArch, MissingTensorAndBadShapeAreNamed) {
  Synth bad("qwen3");
  bad.Key("attention.layer_norm_rms_epsilon", gguf::Value::F32(1e-6f));
  bad.Add("token_embd.weight", {kEmbd, kVocab}, 1.0);
  bad.Add("output_norm.weight", {kEmbd}, 1.0);
  auto m = bad.Load();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("'blk.0.attn_norm.weight'"), std::string::npos) << m.status();

  Synth shape("qwen3");
  shape.Key("attention.layer_norm_rms_epsilon", gguf::Value::F32(1e-6f));
  shape.Add("token_embd.weight", {kEmbd, kVocab}, 1.0);
  shape.Add("output_norm.weight", {kEmbd + 1}, 1.0);
  m = shape.Load();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("'output_norm.weight' has shape [33], expected [32]"), std::string::npos)
      << m.status();
}

TEST(ModelArch, UnsupportedArchitectureListsTheSupportedOnes) {
  Synth s("rwkv6");
  s.Add("token_embd.weight", {kEmbd, kVocab}, 1.0);
  auto m = s.Load();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("unsupported architecture 'rwkv6' (supported: baichuan, bloom, falcon"),
            std::string::npos)
      << m.status();
}

}  // namespace
}  // namespace herd::model
