// Graph-level tests of the CPU backend: each op computed through Graph +
// CpuBackend against a plain textbook reference written here.
#include "libs/backend/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

#include "libs/base/fp16.h"
#include "libs/kernels/cpu/kernels.h"
#include "libs/tensor/quants.h"

namespace herd {
namespace {

std::vector<float> Rand(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

float* F(Tensor* t) { return static_cast<float*>(t->data); }

class CpuBackendTest : public ::testing::TestWithParam<int> {
 protected:
  CpuBackend backend_{GetParam()};
};

TEST_P(CpuBackendTest, MulMatEveryWeightTypeMatchesDequantizedReference) {
  const int64_t k = 96, m = 37, n = 5;
  for (GgmlType wt : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0}) {
    std::vector<float> wf = Rand(static_cast<size_t>(k * m), 1);
    std::vector<float> xf = Rand(static_cast<size_t>(k * n), 2);
    std::vector<uint8_t> wq(GgmlRowSize(wt, k) * static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) QuantizeRow(wt, wf.data() + i * k, wq.data() + i * GgmlRowSize(wt, k), k);
    Graph g;
    Tensor* w = g.NewTensor(wt, {k, m}, "w");
    w->data = wq.data();
    Tensor* x = g.NewTensor(GgmlType::F32, {k, n}, "x");
    x->data = xf.data();
    Tensor* y = g.MulMat(w, x);
    g.SetOutput(y);
    ASSERT_TRUE(backend_.GraphCompute(g).ok());
    // Reference: dequantized weights times the activations rounded the way the
    // weight type's dot product sees them.
    std::vector<float> wd(static_cast<size_t>(k));
    std::vector<float> xr(static_cast<size_t>(k));
    const GgmlType vt = (wt == GgmlType::Q4_0) ? GgmlType::Q8_0 : wt;
    std::vector<uint8_t> xq(GgmlRowSize(vt, k));
    for (int64_t j = 0; j < n; ++j) {
      QuantizeRow(vt, xf.data() + j * k, xq.data(), k);
      DequantizeRow(vt, xq.data(), xr.data(), k);
      for (int64_t i = 0; i < m; ++i) {
        DequantizeRow(wt, wq.data() + i * GgmlRowSize(wt, k), wd.data(), k);
        double ref = 0;
        for (int64_t c = 0; c < k; ++c) ref += static_cast<double>(wd[c]) * xr[c];
        EXPECT_NEAR(F(y)[j * m + i], ref, 2e-3 * (1 + std::fabs(ref))) << GgmlTypeName(wt) << " " << i << "," << j;
      }
    }
  }
}

// PrepareWeights repacks the 32-block types and F16 (not embeddings, not F32) and matmuls
// then give the reference bit for bit at every batch size and thread count, however the
// rows are split among threads (the block types: the scalar vec_dot; F16 / BF16: the AVX2
// one);
// writing a
// weight through SetTensor drops its packed copy; a backend with repack off packs nothing.
TEST_P(CpuBackendTest, PreparedWeightsGiveTheScalarReference) {
  if (!cpu::SupportsPacked(GgmlType::Q4_0, backend_.isa())) GTEST_SKIP() << "no packed kernels on this CPU";
  const int64_t k = 128, m = 45;
  for (GgmlType wt : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL,
                      GgmlType::F16, GgmlType::BF16}) {
    std::vector<float> wf = Rand(static_cast<size_t>(k * m), 3);
    const size_t rs = GgmlRowSize(wt, k);
    std::vector<uint8_t> wq(rs * static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) QuantizeRow(wt, wf.data() + i * k, wq.data() + i * rs, k);
    std::vector<float> f32w(static_cast<size_t>(k * m), 0.5f);
    Graph weights;
    Tensor* w = weights.NewTensor(wt, {k, m}, "blk.0.ffn_up.weight");
    w->data = wq.data();
    Tensor* embd = weights.NewTensor(wt, {k, m}, "token_embd.weight");
    embd->data = wq.data();
    // An untied model (output.weight present): token_embd stays unpacked.
    Tensor* wf32 = weights.NewTensor(GgmlType::F32, {k, m}, "output.weight");
    wf32->data = f32w.data();
    CpuBackend off(GetParam(), backend_.isa(), /*repack=*/false);
    ASSERT_TRUE(off.PrepareWeights({w, embd, wf32}).ok());
    EXPECT_EQ(w->extra, nullptr);
    const size_t packed_before = backend_.packed_bytes();
    ASSERT_TRUE(backend_.PrepareWeights({w, embd, wf32}).ok());
    ASSERT_NE(w->extra, nullptr) << GgmlTypeName(wt);
    EXPECT_EQ(embd->extra, nullptr);
    EXPECT_EQ(wf32->extra, nullptr);
    // F16 on AVX-512: 16-row slabs (cpu::F16SlabLayout), each output one FMA sum in element order.
    const bool slab = wt == GgmlType::F16 && cpu::F16SlabLayout(backend_.isa());
    EXPECT_EQ(backend_.packed_bytes() - packed_before,
              static_cast<size_t>(slab ? (m + 15) / 16 * 16 : (m + 7) / 8 * 8) * rs);
    const GgmlType at = cpu::VecDotType(wt);
    const bool floats = wt == GgmlType::F16 || wt == GgmlType::BF16;
    const cpu::VecDotFn ref = cpu::GetVecDot(wt, floats ? Isa::kAvx2 : Isa::kScalar);
    for (int64_t n : {1, 3, 16, 33}) {
      std::vector<float> xf = Rand(static_cast<size_t>(k * n), 4 + static_cast<uint32_t>(n));
      Graph g;
      Tensor* x = g.NewTensor(GgmlType::F32, {k, n}, "x");
      x->data = xf.data();
      Tensor* y = g.MulMat(w, x);
      g.SetOutput(y);
      ASSERT_TRUE(backend_.GraphCompute(g).ok());
      std::vector<uint8_t> xq(GgmlRowSize(at, k));
      for (int64_t j = 0; j < n; ++j) {
        cpu::FromFloat(at, xf.data() + j * k, xq.data(), k, Isa::kScalar);
        for (int64_t i = 0; i < m; ++i) {
          float want = 0;
          if (slab) {
            const uint16_t* wr = reinterpret_cast<const uint16_t*>(wq.data() + i * rs);
            const uint16_t* xr = reinterpret_cast<const uint16_t*>(xq.data());
            for (int64_t e = 0; e < k; ++e) want = std::fma(Fp16ToFp32(wr[e]), Fp16ToFp32(xr[e]), want);
          } else {
            ref(k, &want, wq.data() + i * rs, xq.data());
          }
          ASSERT_EQ(F(y)[j * m + i], want) << GgmlTypeName(wt) << " n=" << n << " " << i << "," << j;
        }
      }
    }
    // New bytes through the backend: the stale packed copy is dropped, not used.
    std::vector<uint8_t> zero(rs * static_cast<size_t>(m), 0);
    ASSERT_TRUE(backend_.SetTensor(w, zero.data(), 0, zero.size()).ok());
    EXPECT_EQ(w->extra, nullptr);
  }
}

TEST_P(CpuBackendTest, TiedOutputMatrixIsPacked) {
  if (!cpu::SupportsPacked(GgmlType::Q8_0, backend_.isa())) GTEST_SKIP() << "no packed kernels on this CPU";
  const int64_t k = 128, m = 40;
  std::vector<float> wf = Rand(static_cast<size_t>(k * m), 5);
  const size_t rs = GgmlRowSize(GgmlType::Q8_0, k);
  std::vector<uint8_t> wq(rs * static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) QuantizeRow(GgmlType::Q8_0, wf.data() + i * k, wq.data() + i * rs, k);
  std::vector<float> xf = Rand(static_cast<size_t>(k * 3), 6);
  const auto logits = [&](CpuBackend& be, Tensor* embd) {
    Graph g;
    Tensor* x = g.NewTensor(GgmlType::F32, {k, 3}, "x");
    x->data = xf.data();
    Tensor* y = g.MulMat(embd, x);
    g.SetOutput(y);
    EXPECT_TRUE(be.GraphCompute(g).ok());
    return std::vector<float>(F(y), F(y) + m * 3);
  };
  // No output.weight: the logits read token_embd, which gets a packed copy.
  Graph tied;
  Tensor* embd = tied.NewTensor(GgmlType::Q8_0, {k, m}, "token_embd.weight");
  embd->data = wq.data();
  Tensor* up = tied.NewTensor(GgmlType::Q8_0, {k, m}, "blk.0.ffn_up.weight");
  up->data = wq.data();
  ASSERT_TRUE(backend_.PrepareWeights({embd, up}).ok());
  ASSERT_NE(embd->extra, nullptr);
  const std::vector<float> packed = logits(backend_, embd);
  // The same products as the unpacked kernels, within the SIMD bound (kernels.h).
  Graph plain;
  Tensor* embd2 = plain.NewTensor(GgmlType::Q8_0, {k, m}, "token_embd.weight");
  embd2->data = wq.data();
  CpuBackend off(GetParam(), backend_.isa(), /*repack=*/false);
  ASSERT_TRUE(off.PrepareWeights({embd2}).ok());
  EXPECT_EQ(embd2->extra, nullptr);
  const std::vector<float> want = logits(off, embd2);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(packed[i], want[i], 1e-4f * (std::fabs(want[i]) + 1)) << i;
  // With output.weight present token_embd is only gathered from: not packed.
  Graph untied;
  Tensor* embd3 = untied.NewTensor(GgmlType::Q8_0, {k, m}, "token_embd.weight");
  embd3->data = wq.data();
  Tensor* out = untied.NewTensor(GgmlType::Q8_0, {k, m}, "output.weight");
  out->data = wq.data();
  ASSERT_TRUE(backend_.PrepareWeights({embd3, out}).ok());
  EXPECT_EQ(embd3->extra, nullptr);
  EXPECT_NE(out->extra, nullptr);
}

TEST_P(CpuBackendTest, AddMulBroadcastScaleNorms) {
  const int64_t n = 64, rows = 3;
  std::vector<float> a = Rand(static_cast<size_t>(n * rows), 3), b = Rand(static_cast<size_t>(n), 4);
  Graph g;
  Tensor* ta = g.NewTensor(GgmlType::F32, {n, rows});
  ta->data = a.data();
  Tensor* tb = g.NewTensor(GgmlType::F32, {n});
  tb->data = b.data();
  Tensor* add = g.Add(ta, tb);
  Tensor* mul = g.Mul(ta, tb);
  Tensor* sc = g.Scale(ta, 0.25f);
  Tensor* rms = g.RmsNorm(ta, 1e-5f);
  Tensor* nrm = g.Norm(ta, 1e-5f);
  for (Tensor* t : {add, mul, sc, rms, nrm}) g.SetOutput(t);
  ASSERT_TRUE(backend_.GraphCompute(g).ok());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0, mean = 0;
    for (int64_t i = 0; i < n; ++i) mean += a[r * n + i];
    mean /= n;
    double var = 0;
    for (int64_t i = 0; i < n; ++i) {
      ss += static_cast<double>(a[r * n + i]) * a[r * n + i];
      var += (a[r * n + i] - mean) * (a[r * n + i] - mean);
    }
    var /= n;
    const double rs = 1.0 / std::sqrt(ss / n + 1e-5);
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(r * n + i);
      EXPECT_FLOAT_EQ(F(add)[k], a[k] + b[i]);
      EXPECT_FLOAT_EQ(F(mul)[k], a[k] * b[i]);
      EXPECT_FLOAT_EQ(F(sc)[k], a[k] * 0.25f);
      EXPECT_NEAR(F(rms)[k], a[k] * rs, 1e-5);
      EXPECT_NEAR(F(nrm)[k], (a[k] - mean) / std::sqrt(var + 1e-5), 1e-4);
    }
  }
}

TEST_P(CpuBackendTest, GetRowsAndSetRowsConvertTypes) {
  const int64_t n = 64;
  std::vector<float> src = Rand(static_cast<size_t>(n * 4), 5);
  std::vector<uint16_t> cache(static_cast<size_t>(n * 6), 0);
  std::vector<int32_t> idx = {5, 0, 3, 1};
  Graph g;
  Tensor* tc = g.NewTensor(GgmlType::F16, {n, 6}, "cache");
  tc->data = cache.data();
  Tensor* ts = g.NewTensor(GgmlType::F32, {n, 4});
  ts->data = src.data();
  Tensor* ti = g.NewTensor(GgmlType::I32, {4});
  ti->data = idx.data();
  Tensor* w = g.SetRows(tc, ts, ti);
  Tensor* back = g.GetRows(w, ti);
  g.SetOutput(back);
  ASSERT_TRUE(backend_.GraphCompute(g).ok());
  for (int r = 0; r < 4; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(cache[static_cast<size_t>(idx[r] * n + i)], Fp32ToFp16(src[static_cast<size_t>(r * n + i)]));
      EXPECT_EQ(F(back)[r * n + i], Fp16ToFp32(Fp32ToFp16(src[static_cast<size_t>(r * n + i)])));
    }
  }
  // Out-of-range row ids are an error, not a crash.
  std::vector<int32_t> bad = {6};
  Graph g2;
  Tensor* tc2 = g2.NewTensor(GgmlType::F16, {n, 6}, "cache");
  tc2->data = cache.data();
  Tensor* ti2 = g2.NewTensor(GgmlType::I32, {1});
  ti2->data = bad.data();
  g2.GetRows(tc2, ti2);
  EXPECT_EQ(backend_.GraphCompute(g2).code(), absl::StatusCode::kInvalidArgument);
}

// K and V of a flash-attention test in type kt (F32 or F16): random values (seeds
// seed, seed + 1), their bytes, and the values those bytes hold.
struct TestKv {
  std::vector<uint8_t> kb, vb;  // bytes in type kt
  std::vector<float> kr, vr;    // kb, vb read back
  TestKv(GgmlType kt, size_t n, uint32_t seed) {
    std::vector<float> kf = Rand(n, seed);
    std::vector<float> vf = Rand(n, seed + 1);
    const size_t el = kt == GgmlType::F32 ? 4 : 2;
    kb.resize(kf.size() * el);
    vb.resize(vf.size() * el);
    QuantizeRow(kt, kf.data(), kb.data(), static_cast<int64_t>(kf.size()));
    QuantizeRow(kt, vf.data(), vb.data(), static_cast<int64_t>(vf.size()));
    kr.resize(kf.size());
    vr.resize(vf.size());
    DequantizeRow(kt, kb.data(), kr.data(), static_cast<int64_t>(kf.size()));
    DequantizeRow(kt, vb.data(), vr.data(), static_cast<int64_t>(vf.size()));
  }
};

// FLASH_ATTN_EXT of q [hd, n_head, n_tok] F32 over kv's K / V [hd, n_head_kv, n_kv] and
// mask [n_kv, n_tok] in g, scale 1/sqrt(hd); its output.
Tensor* TestFlashAttn(Graph& g, GgmlType kt, int64_t hd, int64_t n_head, int64_t n_head_kv, int64_t n_kv, int64_t n_tok,
                      std::vector<float>& q, TestKv& kv, std::vector<float>& mask, float max_bias) {
  Tensor* tq = g.NewTensor(GgmlType::F32, {hd, n_head, n_tok});
  tq->data = q.data();
  Tensor* tk = g.NewTensor(kt, {hd, n_head_kv, n_kv});
  tk->data = kv.kb.data();
  Tensor* tv = g.NewTensor(kt, {hd, n_head_kv, n_kv});
  tv->data = kv.vb.data();
  Tensor* tm = g.NewTensor(GgmlType::F32, {n_kv, n_tok});
  tm->data = mask.data();
  Tensor* out = g.FlashAttnExt(tq, tk, tv, tm, 1.0f / std::sqrt(static_cast<float>(hd)), max_bias);
  g.SetOutput(out);
  return out;
}

// Plain attention: softmax(scale * q.k + mask) v per head, GQA grouping.
TEST_P(CpuBackendTest, FlashAttnMatchesPlainAttentionWithMaskAndGqa) {
  const int64_t hd = 32, n_head = 4, n_head_kv = 2, n_kv = 7, n_tok = 3;
  for (GgmlType kt : {GgmlType::F32, GgmlType::F16}) {
    std::vector<float> q = Rand(static_cast<size_t>(hd * n_head * n_tok), 6);
    TestKv kv(kt, static_cast<size_t>(hd * n_head_kv * n_kv), 7);
    const std::vector<float>& kr = kv.kr;
    const std::vector<float>& vr = kv.vr;
    std::vector<float> mask(static_cast<size_t>(n_kv * n_tok));
    const float ninf = -std::numeric_limits<float>::infinity();
    for (int64_t t = 0; t < n_tok; ++t)
      for (int64_t c = 0; c < n_kv; ++c) mask[static_cast<size_t>(t * n_kv + c)] = (c <= 4 + t && c != 1) ? 0.0f : ninf;
    Graph g;
    Tensor* out = TestFlashAttn(g, kt, hd, n_head, n_head_kv, n_kv, n_tok, q, kv, mask, 0.0f);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    ASSERT_TRUE(backend_.GraphCompute(g).ok());
    for (int64_t t = 0; t < n_tok; ++t) {
      for (int64_t h = 0; h < n_head; ++h) {
        const int64_t hk = h / (n_head / n_head_kv);
        std::vector<double> s(static_cast<size_t>(n_kv));
        double mx = -1e300;
        for (int64_t c = 0; c < n_kv; ++c) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) {
            // The F16 path rounds q to F16 like ggml's flash attention.
            float qv = q[static_cast<size_t>((t * n_head + h) * hd + i)];
            if (kt == GgmlType::F16) qv = Fp16ToFp32(Fp32ToFp16(qv));
            d += static_cast<double>(qv) * kr[static_cast<size_t>((c * n_head_kv + hk) * hd + i)];
          }
          s[c] = d * scale + mask[static_cast<size_t>(t * n_kv + c)];
          mx = std::max(mx, s[c]);
        }
        double sum = 0;
        for (auto& x : s) sum += (x = std::exp(x - mx));
        for (int64_t i = 0; i < hd; ++i) {
          double ref = 0;
          for (int64_t c = 0; c < n_kv; ++c) ref += s[c] / sum * vr[static_cast<size_t>((c * n_head_kv + hk) * hd + i)];
          // F16 V: the accumulator is F16 as in ggml's flash attention (llama.cpp parity),
          // so allow F16 rounding of the running sums.
          const double tol = kt == GgmlType::F32 ? 1e-5 : 4e-3 * (1 + std::fabs(ref));
          EXPECT_NEAR(F(out)[(t * n_head + h) * hd + i], ref, tol) << t << " " << h << " " << i;
        }
      }
    }
  }
}

// Prompt-sized batches (>= 64 query tokens, head size a multiple of 16) take the tiled
// flash attention (F32 Q and accumulators, 64-cell KV tiles): it matches plain attention
// in double to F32 rounding (an F16 accumulator, as on the one-chunk path, could not), over
// a partial last query tile, a partial last KV tile, GQA, ALiBi, KV tiles some rows skip,
// and a token that sees no cell at all (output 0).
void CheckFlashAttnAgainstPlain(CpuBackend& backend, int64_t n_kv, int64_t n_tok,
                                const std::function<bool(int64_t t, int64_t c)>& seen, float mdist, double tol_f16) {
  const int64_t hd = 64, n_head = 4, n_head_kv = 2;
  const float ninf = -std::numeric_limits<float>::infinity();
  for (GgmlType kt : {GgmlType::F32, GgmlType::F16}) {
    for (float max_bias : {0.0f, 8.0f}) {
      std::vector<float> q = Rand(static_cast<size_t>(hd * n_head * n_tok), 16);
      TestKv kv(kt, static_cast<size_t>(hd * n_head_kv * n_kv), 17);
      const std::vector<float>& kr = kv.kr;
      const std::vector<float>& vr = kv.vr;
      std::vector<float> mask(static_cast<size_t>(n_kv * n_tok));
      for (int64_t t = 0; t < n_tok; ++t) {
        for (int64_t c = 0; c < n_kv; ++c) {
          mask[static_cast<size_t>(t * n_kv + c)] = seen(t, c) ? -std::fabs(static_cast<float>(c - t)) / mdist : ninf;
        }
      }
      Graph g;
      Tensor* out = TestFlashAttn(g, kt, hd, n_head, n_head_kv, n_kv, n_tok, q, kv, mask, max_bias);
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      ASSERT_TRUE(backend.GraphCompute(g).ok());
      for (int64_t t = 0; t < n_tok; ++t) {
        for (int64_t h = 0; h < n_head; ++h) {
          const int64_t hk = h / (n_head / n_head_kv);
          const double slope = AlibiSlope(static_cast<int>(h), static_cast<int>(n_head), max_bias);
          std::vector<double> sc(static_cast<size_t>(n_kv));
          double mx = -1e300;
          for (int64_t c = 0; c < n_kv; ++c) {
            double d = 0;
            for (int64_t i = 0; i < hd; ++i) {
              d += static_cast<double>(q[static_cast<size_t>((t * n_head + h) * hd + i)]) *
                   kr[static_cast<size_t>((c * n_head_kv + hk) * hd + i)];
            }
            const float m = mask[static_cast<size_t>(t * n_kv + c)];
            sc[static_cast<size_t>(c)] = m == ninf ? -1e300 : d * scale + slope * m;
            mx = std::max(mx, sc[static_cast<size_t>(c)]);
          }
          double sum = 0;
          for (auto& x : sc) sum += (x = x <= -1e300 ? 0.0 : std::exp(x - mx));
          for (int64_t i = 0; i < hd; ++i) {
            double ref = 0;
            for (int64_t c = 0; c < n_kv; ++c) {
              ref += sc[static_cast<size_t>(c)] * vr[static_cast<size_t>((c * n_head_kv + hk) * hd + i)];
            }
            ref = sum == 0 ? 0 : ref / sum;
            const double tol = kt == GgmlType::F16 ? tol_f16 : 2e-5;
            ASSERT_NEAR(F(out)[(t * n_head + h) * hd + i], ref, tol * (1 + std::fabs(ref)))
                << GgmlTypeName(kt) << " max_bias " << max_bias << " t=" << t << " h=" << h << " i=" << i;
          }
        }
      }
    }
  }
}

TEST_P(CpuBackendTest, TiledFlashAttnMatchesPlainAttention) {
  // One prompt: causal over cells [0, 80 + t) with holes; token 5 sees nothing.
  CheckFlashAttnAgainstPlain(
      backend_, 150, 70, [](int64_t t, int64_t c) { return t != 5 && c < 80 + t && c % 7 != 3; }, 16.0f, 2e-5);
}

// A batch of 8 sequences, tokens interleaved (as decode steps and prompt chunks of many
// streams are): each query tile's union of cells is many times what its tokens see, so its
// tokens take the one-chunk path (F16 accumulator: F16 tolerance), each computed once.
TEST_P(CpuBackendTest, FlashAttnOfManySequencesInOneBatch) {
  CheckFlashAttnAgainstPlain(
      backend_, 600, 100, [](int64_t t, int64_t c) { return c / 75 == t % 8 && c % 75 <= 40 + t / 8; }, 32.0f, 4e-3);
}

// A decode step of 16 streams (one query token each) whose prompts share a system prompt
// (all 16, with freed holes), four tenant prefixes (four tokens each) and their own cells,
// interleaved in the pool as the KV allocator leaves them. With F16 K/V the shared-prefix
// path takes it: each shared block attended once for its tokens (F32), each token's own
// cells by the per-token kernel (F16 V accumulator), the parts merged by log-sum-exp; it
// matches plain attention in double within F16 rounding, as the per-token path does with
// the shared path off. F32 K/V never take it.
TEST_P(CpuBackendTest, SharedPrefixAttentionMatchesPlainAttention) {
  const auto seen = [](int64_t t, int64_t c) {
    if (c < 200) return c % 9 != 4;                            // the system prompt
    if (c < 600) return (c - 200) / 100 == t % 4;              // tenant t % 4's prefix
    return c >= 600 + t * 24 && c < 600 + t * 24 + 5 + t % 7;  // the token's own cells
  };
  EXPECT_FALSE(backend_.shared_prefix_attention());  // off by default
  backend_.set_shared_prefix_attention(true);
  const uint64_t runs = backend_.shared_prefix_attention_runs();
  CheckFlashAttnAgainstPlain(backend_, 600 + 16 * 24, 16, seen, 32.0f, 4e-3);
  EXPECT_EQ(backend_.shared_prefix_attention_runs() - runs, 2u);  // F16 K/V, two max_bias values
  backend_.set_shared_prefix_attention(false);
  CheckFlashAttnAgainstPlain(backend_, 600 + 16 * 24, 16, seen, 32.0f, 4e-3);
  EXPECT_EQ(backend_.shared_prefix_attention_runs() - runs, 2u);
  backend_.set_shared_prefix_attention(true);
  // Little sharing (blocks under 32 cells): the per-token path.
  CheckFlashAttnAgainstPlain(
      backend_, 400, 8, [](int64_t t, int64_t c) { return c < 20 || (c >= 20 + t * 40 && c < 50 + t * 40); }, 32.0f,
      4e-3);
  EXPECT_EQ(backend_.shared_prefix_attention_runs() - runs, 2u);
  // Mask 0 at every visible cell (no ALiBi distance; mdist infinite): the shared blocks
  // take the tile step for all their rows at once (cpu::SharedAttnTileStep).
  CheckFlashAttnAgainstPlain(backend_, 600 + 16 * 24, 16, seen, INFINITY, 4e-3);
  EXPECT_EQ(backend_.shared_prefix_attention_runs() - runs, 4u);
  backend_.set_shared_prefix_attention(false);
}

// 16 streams starting at once over a shared 200-cell header (prompt chunks of 9 tokens,
// causal over their own cells) next to 20 decoding streams: 164 query tokens, taken in
// 64-token chunks by the shared-prefix path (each chunk's tokens attend the header once),
// where the path is off the tiled one. Both match plain attention.
TEST_P(CpuBackendTest, SharedPrefixAttentionOfPromptChunks) {
  const auto seen = [](int64_t t, int64_t c) {
    if (c < 200) return true;  // the header
    if (t < 144) {             // stream t / 9, its token t % 9: own cells from 200 + 16 * (t / 9)
      const int64_t s = t / 9, first = 200 + s * 16;
      return c >= first && c <= first + 6 + t % 9;
    }
    const int64_t first = 200 + 16 * 16 + (t - 144) * 12;  // decoding stream t - 144
    return c >= first && c < first + 5 + t % 6;
  };
  const int64_t n_kv = 200 + 16 * 16 + 20 * 12;
  backend_.set_shared_prefix_attention(true);
  const uint64_t runs = backend_.shared_prefix_attention_runs();
  for (float mdist : {32.0f, INFINITY}) CheckFlashAttnAgainstPlain(backend_, n_kv, 164, seen, mdist, 4e-3);
  EXPECT_EQ(backend_.shared_prefix_attention_runs() - runs, 4u);  // 2 masks x 2 max_bias values, F16 K/V
  backend_.set_shared_prefix_attention(false);
  for (float mdist : {32.0f, INFINITY}) CheckFlashAttnAgainstPlain(backend_, n_kv, 164, seen, mdist, 4e-3);
  EXPECT_EQ(backend_.shared_prefix_attention_runs() - runs, 4u);
}

TEST_P(CpuBackendTest, SoftMaxWithMaskScaleAndAlibi) {
  const int64_t n = 8, rows = 2, heads = 3;
  std::vector<float> a = Rand(static_cast<size_t>(n * rows * heads), 9);
  std::vector<float> mask(static_cast<size_t>(n * rows));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i)
      mask[static_cast<size_t>(r * n + i)] = i <= r + 4 ? -static_cast<float>(r + 4 - i) : -INFINITY;
  Graph g;
  Tensor* ta = g.NewTensor(GgmlType::F32, {n, rows, heads});
  ta->data = a.data();
  Tensor* tm = g.NewTensor(GgmlType::F32, {n, rows});
  tm->data = mask.data();
  Tensor* y = g.SoftMax(ta, tm, 0.5f, 8.0f);
  g.SetOutput(y);
  ASSERT_TRUE(backend_.GraphCompute(g).ok());
  for (int64_t h = 0; h < heads; ++h) {
    // ALiBi slopes for 3 heads (n_head_log2 = 2): m0^1, m0^2, then m1^1.
    const double m0 = std::pow(2.0, -8.0 / 2), m1 = std::pow(2.0, -4.0 / 2);
    const double slope = h == 0 ? m0 : h == 1 ? m0 * m0 : m1;
    EXPECT_NEAR(AlibiSlope(static_cast<int>(h), 3, 8.0f), slope, 1e-7);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> s(static_cast<size_t>(n));
      double mx = -1e300, sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        s[i] = 0.5 * a[static_cast<size_t>((h * rows + r) * n + i)] + slope * mask[static_cast<size_t>(r * n + i)];
        mx = std::max(mx, s[i]);
      }
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(F(y)[(h * rows + r) * n + i], s[i] / sum, 1e-6);
    }
  }
}

TEST_P(CpuBackendTest, RopeNormalAndNeox) {
  const int64_t hd = 16, heads = 2, n_tok = 3;
  std::vector<float> x = Rand(static_cast<size_t>(hd * heads * n_tok), 10);
  std::vector<int32_t> pos = {0, 7, 100};
  for (int mode : {0, 2}) {
    for (int n_dims : {16, 8}) {
      Graph g;
      Tensor* tx = g.NewTensor(GgmlType::F32, {hd, heads, n_tok});
      tx->data = x.data();
      Tensor* tp = g.NewTensor(GgmlType::I32, {n_tok});
      tp->data = pos.data();
      Tensor* y = g.Rope(tx, tp, nullptr, n_dims, mode, 2048, 10000.0f, 0.5f, 0.0f, 1.0f, 32.0f, 1.0f);
      g.SetOutput(y);
      ASSERT_TRUE(backend_.GraphCompute(g).ok());
      for (int64_t t = 0; t < n_tok; ++t) {
        for (int64_t h = 0; h < heads; ++h) {
          const float* in = x.data() + (t * heads + h) * hd;
          const float* out = F(y) + (t * heads + h) * hd;
          for (int64_t i = 0; i < n_dims / 2; ++i) {
            const double theta = 0.5 * pos[t] * std::pow(10000.0, -2.0 * i / n_dims);
            const int64_t a = mode == 2 ? i : 2 * i, b = mode == 2 ? i + n_dims / 2 : 2 * i + 1;
            EXPECT_NEAR(out[a], in[a] * std::cos(theta) - in[b] * std::sin(theta), 2e-4) << mode << " " << i;
            EXPECT_NEAR(out[b], in[a] * std::sin(theta) + in[b] * std::cos(theta), 2e-4) << mode << " " << i;
          }
          for (int64_t i = n_dims; i < hd; ++i) EXPECT_EQ(out[i], in[i]);
        }
      }
    }
  }
}

TEST_P(CpuBackendTest, ActivationsAndSwiglu) {
  const int64_t n = 50;
  std::vector<float> a = Rand(static_cast<size_t>(n), 11, 3.0f), b = Rand(static_cast<size_t>(n), 12);
  Graph g;
  Tensor* ta = g.NewTensor(GgmlType::F32, {n});
  ta->data = a.data();
  Tensor* tb = g.NewTensor(GgmlType::F32, {n});
  tb->data = b.data();
  Tensor* s = g.Silu(ta);
  Tensor* ge = g.Gelu(ta);
  Tensor* sw = g.Swiglu(ta, tb);
  for (Tensor* t : {s, ge, sw}) g.SetOutput(t);
  ASSERT_TRUE(backend_.GraphCompute(g).ok());
  for (int64_t i = 0; i < n; ++i) {
    const double x = a[i];
    const double silu = x / (1 + std::exp(-x));
    const double gelu = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    EXPECT_NEAR(F(s)[i], silu, 1e-5);
    // GELU goes through ggml's F16 lookup table (llama.cpp parity): the input is rounded
    // to F16 first, so allow that rounding (2^-11 relative) times the slope.
    EXPECT_NEAR(F(ge)[i], gelu, 2e-3 * (1 + std::fabs(x)));
    EXPECT_NEAR(F(sw)[i], silu * b[i], 1e-5);
  }
}

// ggml_clamp: min(max(x, lo), hi) elementwise, here over a strided view (a fused-QKV
// slice) so the row strides are honoured.
TEST_P(CpuBackendTest, ClampMatchesPlainReferenceOnStridedView) {
  const int64_t row = 12, rows = 5;
  std::vector<float> a = Rand(static_cast<size_t>(row * rows), 13, 10.0f);
  a[3] = std::numeric_limits<float>::quiet_NaN();  // ggml's MIN/MAX macros turn NaN into hi
  Graph g;
  Tensor* ta = g.NewTensor(GgmlType::F32, {row, rows});
  ta->data = a.data();
  Tensor* whole = g.Clamp(ta, -2.5f, 4.0f);
  Tensor* view = g.View(ta, {4, rows}, {ta->nb[1]}, 4 * sizeof(float));  // columns 4..7
  Tensor* part = g.Clamp(view, -1.0f, 1.0f);
  g.SetOutput(whole);
  g.SetOutput(part);
  ASSERT_TRUE(backend_.GraphCompute(g).ok());
  auto ref = [](float x, float lo, float hi) { return std::isnan(x) ? hi : std::min(std::max(x, lo), hi); };
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < row; ++i) EXPECT_EQ(F(whole)[r * row + i], ref(a[r * row + i], -2.5f, 4.0f));
    for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(F(part)[r * 4 + i], ref(a[r * row + 4 + i], -1.0f, 1.0f));
  }
}

TEST_P(CpuBackendTest, GeluErfMatchesExactGelu) {
  const int64_t n = 300;
  std::vector<float> a = Rand(static_cast<size_t>(n), 14, 4.0f);
  Graph g;
  Tensor* ta = g.NewTensor(GgmlType::F32, {n});
  ta->data = a.data();
  Tensor* y = g.GeluErf(ta);
  g.SetOutput(y);
  ASSERT_TRUE(backend_.GraphCompute(g).ok());
  for (int64_t i = 0; i < n; ++i) {
    const double x = a[i];
    EXPECT_NEAR(F(y)[i], 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))), 1e-6 * (1 + std::fabs(x)));
  }
}

// ggml_cont: a contiguous copy of a 3-D strided view (K of a fused QKV: [hd, heads, tokens]).
TEST_P(CpuBackendTest, ContCopiesStridedView) {
  const int64_t hd = 4, n_q = 8, n_kv = 4, n_tok = 3, row = n_q + 2 * n_kv;
  std::vector<float> qkv = Rand(static_cast<size_t>(row * n_tok), 15);
  Graph g;
  Tensor* t = g.NewTensor(GgmlType::F32, {row, n_tok});
  t->data = qkv.data();
  Tensor* k = g.View(t, {hd, n_kv / hd, n_tok}, {hd * sizeof(float), t->nb[1]}, n_q * sizeof(float));
  Tensor* c = g.Cont(k);
  g.SetOutput(c);
  ASSERT_TRUE(backend_.GraphCompute(g).ok());
  EXPECT_TRUE(c->is_contiguous());
  for (int64_t tok = 0; tok < n_tok; ++tok)
    for (int64_t i = 0; i < n_kv; ++i) EXPECT_EQ(F(c)[tok * n_kv + i], qkv[static_cast<size_t>(tok * row + n_q + i)]);
}

// ALiBi slopes (ggml soft_max / flash_attn_ext), including head counts that are not powers
// of two: n2 = largest power of two <= n_head, m0 = 2^(-max_bias/n2), m1 = 2^(-max_bias/2/n2),
// slope(h) = m0^(h+1) for h < n2, else m1^(2(h-n2)+1).
TEST(AlibiSlopeTest, MatchesLlamaCppFormulaForAnyHeadCount) {
  for (int n_head : {1, 3, 4, 5, 6, 12, 20, 32, 40, 71}) {
    for (float max_bias : {8.0f, 4.0f}) {
      int n2 = 1;
      while (n2 * 2 <= n_head) n2 *= 2;
      const double m0 = std::pow(2.0, -max_bias / n2), m1 = std::pow(2.0, -max_bias / 2.0 / n2);
      for (int h = 0; h < n_head; ++h) {
        const double want = h < n2 ? std::pow(m0, h + 1) : std::pow(m1, 2 * (h - n2) + 1);
        EXPECT_NEAR(AlibiSlope(h, n_head, max_bias), want, 1e-6 * want) << n_head << " heads, h " << h;
      }
    }
  }
  // 4 heads, max bias 8: 1/4, 1/16, 1/64, 1/256 (the README's example).
  EXPECT_FLOAT_EQ(AlibiSlope(0, 4, 8.0f), 0.25f);
  EXPECT_FLOAT_EQ(AlibiSlope(3, 4, 8.0f), 1.0f / 256);
  EXPECT_EQ(AlibiSlope(2, 4, 0.0f), 1.0f);  // no ALiBi
}

// Attention with ALiBi the way llama.cpp feeds it: the mask holds -|pos_q - pos_k| for
// visible cells and -inf elsewhere; score = scale*q.k + slope(h)*mask. Q is a strided view
// of a fused QKV row (as MPT/BLOOM build it), MQA, 6 heads (not a power of two).
TEST_P(CpuBackendTest, FlashAttnAlibiWithStridedQueryMatchesPlainReference) {
  const int64_t hd = 8, n_head = 6, n_head_kv = 1, n_kv = 5, n_tok = 3;
  const int64_t row = hd * n_head + 2 * hd * n_head_kv;
  const float max_bias = 8.0f;
  std::vector<float> qkv = Rand(static_cast<size_t>(row * n_tok), 16);
  std::vector<float> kf = Rand(static_cast<size_t>(hd * n_head_kv * n_kv), 17);
  std::vector<float> vf = Rand(static_cast<size_t>(hd * n_head_kv * n_kv), 18);
  std::vector<float> mask(static_cast<size_t>(n_kv * n_tok));
  const int32_t pos[n_tok] = {2, 3, 4};  // cells hold positions 0..4
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t c = 0; c < n_kv; ++c)
      mask[static_cast<size_t>(t * n_kv + c)] = c <= pos[t] ? -static_cast<float>(pos[t] - c) : -INFINITY;
  Graph g;
  Tensor* tqkv = g.NewTensor(GgmlType::F32, {row, n_tok});
  tqkv->data = qkv.data();
  Tensor* q = g.View(tqkv, {hd, n_head, n_tok}, {hd * sizeof(float), tqkv->nb[1]}, 0);
  Tensor* tk = g.NewTensor(GgmlType::F32, {hd, n_head_kv, n_kv});
  tk->data = kf.data();
  Tensor* tv = g.NewTensor(GgmlType::F32, {hd, n_head_kv, n_kv});
  tv->data = vf.data();
  Tensor* tm = g.NewTensor(GgmlType::F32, {n_kv, n_tok});
  tm->data = mask.data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  Tensor* out = g.FlashAttnExt(q, tk, tv, tm, scale, max_bias);
  g.SetOutput(out);
  ASSERT_TRUE(backend_.GraphCompute(g).ok());
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t h = 0; h < n_head; ++h) {
      int n2 = 1;
      while (n2 * 2 <= n_head) n2 *= 2;
      const double slope =
          h < n2 ? std::pow(std::pow(2.0, -8.0 / n2), h + 1) : std::pow(std::pow(2.0, -4.0 / n2), 2 * (h - n2) + 1);
      std::vector<double> s(static_cast<size_t>(n_kv));
      double mx = -1e300;
      for (int64_t c = 0; c < n_kv; ++c) {
        double d = 0;
        for (int64_t i = 0; i < hd; ++i) {
          const double qi = qkv[static_cast<size_t>(t * row + h * hd + i)];
          d += qi * kf[static_cast<size_t>(c * hd + i)];
        }
        s[c] = c <= pos[t] ? d * scale - slope * (pos[t] - c) : -INFINITY;
        mx = std::max(mx, s[c]);
      }
      double sum = 0;
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int64_t i = 0; i < hd; ++i) {
        double ref = 0;
        for (int64_t c = 0; c < n_kv; ++c) ref += s[c] / sum * vf[static_cast<size_t>(c * hd + i)];
        EXPECT_NEAR(F(out)[(t * n_head + h) * hd + i], ref, 1e-5) << t << " " << h << " " << i;
      }
    }
  }
}

// Partial NeoX RoPE (n_dims < head_dim, as gptneox / phi2 / stablelm use) applied to a
// strided view of a fused QKV product: dims >= n_dims pass through, rows honour strides.
TEST_P(CpuBackendTest, PartialNeoxRopeOnStridedView) {
  const int64_t hd = 16, heads = 2, n_tok = 3, row = hd * heads * 3, n_dims = 6;
  std::vector<float> qkv = Rand(static_cast<size_t>(row * n_tok), 19);
  std::vector<int32_t> pos = {0, 5, 77};
  Graph g;
  Tensor* t = g.NewTensor(GgmlType::F32, {row, n_tok});
  t->data = qkv.data();
  Tensor* k = g.View(t, {hd, heads, n_tok}, {hd * sizeof(float), t->nb[1]}, hd * heads * sizeof(float));
  Tensor* tp = g.NewTensor(GgmlType::I32, {n_tok});
  tp->data = pos.data();
  Tensor* y = g.Rope(k, tp, nullptr, n_dims, 2, 256, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
  g.SetOutput(y);
  ASSERT_TRUE(backend_.GraphCompute(g).ok());
  for (int64_t tok = 0; tok < n_tok; ++tok) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* in = qkv.data() + tok * row + hd * heads + h * hd;
      const float* out = F(y) + (tok * heads + h) * hd;
      for (int64_t i = 0; i < n_dims / 2; ++i) {
        const double theta = pos[tok] * std::pow(10000.0, -2.0 * i / n_dims);
        const int64_t a = i, b = i + n_dims / 2;
        EXPECT_NEAR(out[a], in[a] * std::cos(theta) - in[b] * std::sin(theta), 2e-4);
        EXPECT_NEAR(out[b], in[a] * std::sin(theta) + in[b] * std::cos(theta), 2e-4);
      }
      for (int64_t i = n_dims; i < hd; ++i) EXPECT_EQ(out[i], in[i]);
    }
  }
}

// LayerNorm with weight and bias (build_norm LLM_NORM: norm, mul, add) and a per-head
// qk-norm (norm over ne[0] of [hd, heads, tokens], weight [hd, heads] broadcast over tokens).
TEST_P(CpuBackendTest, LayerNormWithBiasAndPerHeadNorm) {
  const int64_t n = 32, rows = 4, hd = 8, heads = 4;
  std::vector<float> x = Rand(static_cast<size_t>(n * rows), 20, 2.0f);
  std::vector<float> w = Rand(static_cast<size_t>(n), 21), b = Rand(static_cast<size_t>(n), 22);
  Graph g;
  Tensor* tx = g.NewTensor(GgmlType::F32, {n, rows});
  tx->data = x.data();
  Tensor* tw = g.NewTensor(GgmlType::F32, {n});
  tw->data = w.data();
  Tensor* tb = g.NewTensor(GgmlType::F32, {n});
  tb->data = b.data();
  Tensor* ln = g.Add(g.Mul(g.Norm(tx, 1e-5f), tw), tb);
  Tensor* x3 = g.Reshape(tx, {hd, heads, rows});
  Tensor* w2 = g.Reshape(tw, {hd, heads});
  Tensor* qk = g.Mul(g.Norm(x3, 1e-5f), w2);
  g.SetOutput(ln);
  g.SetOutput(qk);
  ASSERT_TRUE(backend_.GraphCompute(g).ok());
  auto layer_norm = [](const float* v, int64_t len, std::vector<double>* out) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < len; ++i) mean += v[i];
    mean /= len;
    for (int64_t i = 0; i < len; ++i) var += (v[i] - mean) * (v[i] - mean);
    var /= len;
    out->resize(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) (*out)[i] = (v[i] - mean) / std::sqrt(var + 1e-5);
  };
  std::vector<double> ref;
  for (int64_t r = 0; r < rows; ++r) {
    layer_norm(x.data() + r * n, n, &ref);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(F(ln)[r * n + i], ref[i] * w[i] + b[i], 1e-4);
    for (int64_t h = 0; h < heads; ++h) {
      layer_norm(x.data() + r * n + h * hd, hd, &ref);
      for (int64_t i = 0; i < hd; ++i) EXPECT_NEAR(F(qk)[r * n + h * hd + i], ref[i] * w[h * hd + i], 1e-4);
    }
  }
}

// Phi-3's fused gate+up: SwiGLU over the two halves of one product row (views), and GeGLU
// (Gemma) as gelu(gate) * up.
TEST_P(CpuBackendTest, GluOverHalvesOfFusedRow) {
  const int64_t n_ff = 20, n_tok = 3;
  std::vector<float> up = Rand(static_cast<size_t>(2 * n_ff * n_tok), 23, 2.0f);
  Graph g;
  Tensor* t = g.NewTensor(GgmlType::F32, {2 * n_ff, n_tok});
  t->data = up.data();
  Tensor* gate = g.View(t, {n_ff, n_tok}, {t->nb[1]}, 0);
  Tensor* u = g.View(t, {n_ff, n_tok}, {t->nb[1]}, n_ff * sizeof(float));
  Tensor* sw = g.Swiglu(gate, u);
  Tensor* ge = g.Mul(g.Gelu(gate), u);
  g.SetOutput(sw);
  g.SetOutput(ge);
  ASSERT_TRUE(backend_.GraphCompute(g).ok());
  for (int64_t tok = 0; tok < n_tok; ++tok) {
    for (int64_t i = 0; i < n_ff; ++i) {
      const double a = up[static_cast<size_t>(tok * 2 * n_ff + i)];
      const double b = up[static_cast<size_t>(tok * 2 * n_ff + n_ff + i)];
      EXPECT_NEAR(F(sw)[tok * n_ff + i], a / (1 + std::exp(-a)) * b, 1e-5);
      const double gelu = 0.5 * a * (1 + std::tanh(std::sqrt(2 / M_PI) * (a + 0.044715 * a * a * a)));
      EXPECT_NEAR(F(ge)[tok * n_ff + i], gelu * b, 2e-3 * (1 + std::fabs(a)) * (1 + std::fabs(b)));
    }
  }
}

TEST_P(CpuBackendTest, UnsupportedOpIsAnErrorNotACrash) {
  // Integer activations: a product no backend type combination supports (the weight
  // types themselves keep gaining kernels, so they make no stable example).
  Graph g;
  Tensor* w = g.NewTensor(GgmlType::F32, {256, 2});
  std::vector<float> wd(256 * 2);
  w->data = wd.data();
  Tensor* x = g.NewTensor(GgmlType::I32, {256, 1});
  std::vector<int32_t> xd(256);
  x->data = xd.data();
  g.MulMat(w, x);
  absl::Status s = backend_.GraphCompute(g);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("MUL_MAT"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuBackendTest, ::testing::Values(1, 2, 3));

}  // namespace
}  // namespace herd
