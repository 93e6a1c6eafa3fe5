#include "libs/kernels/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "libs/base/cpu_features.h"
#include "libs/base/fp16.h"
#include "libs/kernels/cpu/internal.h"
#include "libs/tensor/quants.h"

namespace herd::cpu {
namespace {

const GgmlType kWeightTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,
                                 GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q2_K,
                                 GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,   GgmlType::IQ4_XS};
const GgmlType kQuantWeightTypes[] = {GgmlType::Q8_0, GgmlType::Q4_0,   GgmlType::Q4_1, GgmlType::Q5_0,
                                      GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q2_K, GgmlType::Q3_K,
                                      GgmlType::Q4_K, GgmlType::Q5_K,   GgmlType::Q6_K, GgmlType::IQ4_XS};

std::vector<Isa> TestIsas() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (IsaSupported(isa)) {
      v.push_back(isa);
    } else {
      std::printf("[ NOTE ] %s not supported by this CPU: skipped\n", IsaName(isa));
    }
  }
  return v;
}

std::string Name(GgmlType t, Isa isa) { return GgmlTypeName(t) + "/" + IsaName(isa); }

std::vector<float> Random(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

int64_t BlockSize(GgmlType t) { return GetGgmlTypeTraits(t)->block_size; }

// k rounded up to the weight type's block size (k-quants and IQ4_XS need multiples of 256).
int64_t AdjustK(GgmlType t, int64_t k) {
  const int64_t b = BlockSize(t);
  return (k + b - 1) / b * b;
}

// Rows of type `t` packed with a padded stride (bytes), from floats.
struct Rows {
  GgmlType type;
  int64_t n_rows = 0, k = 0;
  size_t stride = 0;
  std::vector<uint8_t> bytes;
  const uint8_t* row(int64_t r) const { return bytes.data() + r * stride; }
};

// Weights: reference quantizer. Activations (as_activation): FromFloat (scalar).
Rows MakeRows(GgmlType t, const std::vector<float>& x, int64_t n_rows, int64_t k, bool as_activation, size_t pad = 16) {
  Rows r;
  r.type = t;
  r.n_rows = n_rows;
  r.k = k;
  r.stride = GgmlRowSize(t, k) + pad;
  r.bytes.assign(r.stride * n_rows + 64, 0xAB);
  for (int64_t i = 0; i < n_rows; ++i) {
    if (as_activation) {
      FromFloat(t, x.data() + i * k, r.bytes.data() + i * r.stride, k, Isa::kScalar);
    } else {
      QuantizeRow(t, x.data() + i * k, r.bytes.data() + i * r.stride, k);
    }
  }
  return r;
}

// Sum of |w_i * a_i| over the dequantized rows: the scale of the rounding error.
double AbsDot(GgmlType wt, const void* w, GgmlType at, const void* a, int64_t k) {
  std::vector<float> x(k), y(k);
  DequantizeRow(wt, w, x.data(), k);
  DequantizeRow(at, a, y.data(), k);
  double s = 0;
  for (int64_t i = 0; i < k; ++i) s += std::fabs(static_cast<double>(x[i]) * y[i]);
  return s;
}

// Float sums in a different order: |err| <= 1e-5 * sum|products| (k <= ~4k, float lanes).
void ExpectCloseToReference(float got, float ref, double abs_dot, const std::string& what) {
  EXPECT_LE(std::fabs(static_cast<double>(got) - ref), 1e-5 * abs_dot + 1e-30)
      << what << " got " << got << " ref " << ref;
}

// ------------------------------------------------------------------ types

TEST(KernelsTest, VecDotTypes) {
  EXPECT_EQ(VecDotType(GgmlType::F32), GgmlType::F32);
  EXPECT_EQ(VecDotType(GgmlType::F16), GgmlType::F16);
  EXPECT_EQ(VecDotType(GgmlType::BF16), GgmlType::BF16);
  EXPECT_EQ(VecDotType(GgmlType::Q8_0), GgmlType::Q8_0);
  EXPECT_EQ(VecDotType(GgmlType::Q4_0), GgmlType::Q8_0);
  EXPECT_EQ(VecDotType(GgmlType::Q4_K), GgmlType::Q8_K);
  EXPECT_EQ(VecDotType(GgmlType::Q4_1), GgmlType::Q8_1);
  EXPECT_EQ(VecDotType(GgmlType::Q5_1), GgmlType::Q8_1);
  EXPECT_EQ(VecDotType(GgmlType::Q5_0), GgmlType::Q8_0);
  EXPECT_EQ(VecDotType(GgmlType::IQ4_NL), GgmlType::Q8_0);
  EXPECT_EQ(VecDotType(GgmlType::IQ4_XS), GgmlType::Q8_K);
  EXPECT_EQ(VecDotType(GgmlType::Q6_K), GgmlType::Q8_K);
  EXPECT_EQ(VecDotType(GgmlType::I32), GgmlType::F32);
  for (GgmlType t : kWeightTypes) EXPECT_TRUE(SupportsMulMat(t)) << GgmlTypeName(t);
  EXPECT_FALSE(SupportsMulMat(GgmlType::IQ2_XXS));
  EXPECT_EQ(GetVecDot(GgmlType::IQ2_XXS, Isa::kScalar), nullptr);
  EXPECT_TRUE(IsaSupported(Isa::kScalar));
  EXPECT_TRUE(IsaSupported(BestIsa()));
  if (!IsaSupported(Isa::kAvx2)) {
    EXPECT_FALSE(IsaSupported(Isa::kAvx512));
  }
  std::printf("[ NOTE ] %s\n", CpuFeatureString().c_str());
}

// ------------------------------------------------------------------ FromFloat

std::vector<float> FromFloatInputs(int64_t n, uint32_t seed) {
  std::vector<float> x = Random(n, seed, 2.0f);
  // Specials: F16/BF16 ties, F16 overflow/underflow, denormals, zeros.
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f + 1.0f / 2048,
                            1.0f + 3.0f / 2048,
                            1.0f + 1.0f / 256,
                            65504.0f,
                            65520.0f,
                            1e6f,
                            -1e6f,
                            6e-8f,
                            3e-8f,
                            1e-40f,
                            -1e-39f,
                            std::numeric_limits<float>::infinity(),
                            2.5f,
                            -3.5f};
  for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]) && i < x.size(); ++i) x[i * 3 % n] = specials[i];
  return x;
}

TEST(KernelsTest, FromFloatF16Bf16BitExact) {
  for (Isa isa : TestIsas()) {
    for (int64_t n : {1, 3, 7, 8, 15, 16, 17, 31, 33, 100, 4128}) {
      const std::vector<float> x = FromFloatInputs(n, static_cast<uint32_t>(n));
      std::vector<uint16_t> got(n + 1, 0x5555), want(n);
      FromFloat(GgmlType::F16, x.data(), got.data(), n, isa);
      for (int64_t i = 0; i < n; ++i) want[i] = Fp32ToFp16(x[i]);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got[i], want[i]) << IsaName(isa) << " f16 n=" << n << " i=" << i << " x=" << x[i];
      EXPECT_EQ(got[n], 0x5555) << "wrote past the end";
      FromFloat(GgmlType::BF16, x.data(), got.data(), n, isa);
      for (int64_t i = 0; i < n; ++i) want[i] = Fp32ToBf16(x[i]);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[i]) << IsaName(isa) << " bf16 n=" << n << " i=" << i;
      EXPECT_EQ(got[n], 0x5555) << "wrote past the end";
    }
    // BF16 of NaN: quiet NaN, payload kept (ggml_compute_fp32_to_bf16).
    const float nan = BitsToFloat(0x7f800001u);
    uint16_t h;
    FromFloat(GgmlType::BF16, &nan, &h, 1, isa);
    EXPECT_EQ(h, Fp32ToBf16(nan));
  }
}

TEST(KernelsTest, FromFloatQ8_0BitExact) {
  for (Isa isa : TestIsas()) {
    for (int64_t n : {32, 64, 96, 4096, 4128}) {
      std::vector<float> x = Random(n, static_cast<uint32_t>(n) + 11, 0.7f);
      // A block with exact .5 ties after scaling (amax 127 -> multiplier 1), and a zero block.
      x[0] = 127.0f;
      x[1] = 2.5f;
      x[2] = -2.5f;
      x[3] = 0.5f;
      x[4] = -1.5f;
      if (n >= 64)
        for (int j = 32; j < 64; ++j) x[j] = 0.0f;
      std::vector<BlockQ8_0> got(n / 32 + 1), want(n / 32);
      std::memset(got.data(), 0x5A, got.size() * sizeof(BlockQ8_0));
      FromFloat(GgmlType::Q8_0, x.data(), got.data(), n, isa);
      QuantizeRowQ8_0X86(x.data(), want.data(), n);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(BlockQ8_0)), 0) << IsaName(isa) << " n=" << n;
      EXPECT_EQ(got[0].qs[1], 2);  // round half to even, as ggml's _mm256_round_ps
      EXPECT_EQ(got[0].qs[2], -2);
      EXPECT_EQ(got[0].qs[4], -2);
      const uint8_t* tail = reinterpret_cast<const uint8_t*>(&got[n / 32]);
      for (size_t b = 0; b < sizeof(BlockQ8_0); ++b) EXPECT_EQ(tail[b], 0x5A) << "wrote past the end";
    }
  }
}

// ------------------------------------------------------------------ vec_dot

TEST(KernelsTest, VecDotMatchesScalarReference) {
  for (GgmlType wt : kWeightTypes) {
    const GgmlType at = VecDotType(wt);
    const VecDotFn ref = GetVecDot(wt, Isa::kScalar);
    ASSERT_NE(ref, nullptr);
    std::vector<int64_t> ks = {32, 64, 96, 4096 + 32};
    if (BlockSize(wt) == 1) ks.insert(ks.end(), {1, 5, 15, 16, 17, 33, 63, 1000});
    if (BlockSize(wt) == 256) ks = {256, 512, 768, 4096 + 256};
    for (int64_t k : ks) {
      const std::vector<float> xw = Random(k, 100 + static_cast<uint32_t>(k));
      const std::vector<float> xa = Random(k, 200 + static_cast<uint32_t>(k), 3.0f);
      const Rows w = MakeRows(wt, xw, 1, k, false);
      const Rows a = MakeRows(at, xa, 1, k, true);
      float want = 0;
      ref(k, &want, w.row(0), a.row(0));
      const double abs_dot = AbsDot(wt, w.row(0), at, a.row(0), k);
      // Scalar reference vs a double-precision dot of the dequantized values.
      {
        std::vector<float> dx(k), dy(k);
        DequantizeRow(wt, w.row(0), dx.data(), k);
        DequantizeRow(at, a.row(0), dy.data(), k);
        double exact = 0;
        for (int64_t i = 0; i < k; ++i) exact += static_cast<double>(dx[i]) * dy[i];
        // Q8_1's s = fp16(d * sum q) (used for the Q4_1/Q5_1 minimum terms) is rounded to
        // F16: up to 2^-11 relative error per block on top of the float rounding.
        double s_err = 0;
        if (at == GgmlType::Q8_1) {
          const BlockQ8_1* y = reinterpret_cast<const BlockQ8_1*>(a.row(0));
          for (int64_t b = 0; b < k / 32; ++b) {
            const float m = Fp16ToFp32(wt == GgmlType::Q4_1 ? reinterpret_cast<const BlockQ4_1*>(w.row(0))[b].m
                                                            : reinterpret_cast<const BlockQ5_1*>(w.row(0))[b].m);
            s_err += std::fabs(static_cast<double>(m) * Fp16ToFp32(y[b].s)) / 2048.0;
          }
        }
        EXPECT_NEAR(want, exact, 1e-5 * abs_dot + s_err) << GgmlTypeName(wt) << " k=" << k;
      }
      for (Isa isa : TestIsas()) {
        const VecDotFn f = GetVecDot(wt, isa);
        ASSERT_NE(f, nullptr) << Name(wt, isa);
        float got = -1;
        f(k, &got, w.row(0), a.row(0));
        ExpectCloseToReference(got, want, abs_dot, Name(wt, isa) + " k=" + std::to_string(k));
      }
    }
  }
}

// With every scale 1.0 and small quants all float sums are exact integers, so every
// ISA must reproduce the integer block dot products bit-exactly.
TEST(KernelsTest, QuantVecDotIntegerExact) {
  std::mt19937 rng(5);
  for (int64_t k : {32, 64, 96, 4096 + 32}) {
    const int64_t nb = k / 32;
    std::vector<BlockQ8_0> w8(nb), a8(nb);
    std::vector<BlockQ4_0> w4(nb);
    std::uniform_int_distribution<int> q31(-31, 31), q127(-127, 127), nib(0, 255);
    for (int64_t b = 0; b < nb; ++b) {
      w8[b].d = a8[b].d = w4[b].d = 0x3C00;  // 1.0
      for (int j = 0; j < 32; ++j) {
        w8[b].qs[j] = static_cast<int8_t>(q31(rng));
        a8[b].qs[j] = static_cast<int8_t>(q127(rng));
      }
      for (int j = 0; j < 16; ++j) w4[b].qs[j] = static_cast<uint8_t>(nib(rng));
    }
    // Extremes in the first block: -127 * -127 and nibble 0 (-8) * -127.
    for (int j = 0; j < 8; ++j) {
      w8[0].qs[j] = -31;
      a8[0].qs[j] = -127;
      w4[0].qs[j] = 0;
    }
    int64_t exact8 = 0, exact4 = 0;
    for (int64_t b = 0; b < nb; ++b) {
      for (int j = 0; j < 32; ++j) exact8 += w8[b].qs[j] * a8[b].qs[j];
      for (int j = 0; j < 16; ++j) {
        exact4 += ((w4[b].qs[j] & 15) - 8) * a8[b].qs[j] + ((w4[b].qs[j] >> 4) - 8) * a8[b].qs[j + 16];
      }
    }
    ASSERT_LT(std::llabs(exact8), 1 << 24);
    for (Isa isa : TestIsas()) {
      float s8 = 0, s4 = 0;
      GetVecDot(GgmlType::Q8_0, isa)(k, &s8, w8.data(), a8.data());
      GetVecDot(GgmlType::Q4_0, isa)(k, &s4, w4.data(), a8.data());
      EXPECT_EQ(s8, static_cast<float>(exact8)) << IsaName(isa) << " k=" << k;
      EXPECT_EQ(s4, static_cast<float>(exact4)) << IsaName(isa) << " k=" << k;
    }
  }
}

// Random raw blocks of weight type `t` whose scales are exact small values (d = 1, m /
// dmin small integers), so that with small activation quants (|q| <= 3, d = 1) every
// partial sum is an integer below 2^24 and exact in float.
std::vector<uint8_t> RawExactWeights(GgmlType t, int64_t k, std::mt19937& rng) {
  const GgmlTypeTraits* tr = GetGgmlTypeTraits(t);
  const int64_t nb = k / tr->block_size;
  std::vector<uint8_t> v(static_cast<size_t>(nb) * tr->type_size);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : v) b = static_cast<uint8_t>(byte(rng));
  auto set_half = [&](int64_t block, size_t off, uint16_t h) { std::memcpy(&v[block * tr->type_size + off], &h, 2); };
  for (int64_t b = 0; b < nb; ++b) {
    switch (t) {
      case GgmlType::Q8_0:  // weights within +-31
        for (int j = 0; j < 32; ++j)
          v[b * 34 + 2 + j] = static_cast<uint8_t>(static_cast<int8_t>(v[b * 34 + 2 + j]) / 4);
        set_half(b, 0, 0x3C00);
        break;
      case GgmlType::Q4_0:
      case GgmlType::Q5_0:
      case GgmlType::IQ4_NL:
      case GgmlType::IQ4_XS:
        set_half(b, 0, 0x3C00);
        break;
      case GgmlType::Q4_1:
      case GgmlType::Q5_1:
        set_half(b, 0, 0x3C00);
        set_half(b, 2, b % 2 ? 0x4000 : 0xC200);  // m = 2 or -3
        break;
      case GgmlType::Q2_K:
        set_half(b, offsetof(BlockQ2_K, d), 0x3C00);
        set_half(b, offsetof(BlockQ2_K, dmin), 0x4000);
        break;
      case GgmlType::Q3_K:
        set_half(b, offsetof(BlockQ3_K, d), 0x3C00);
        break;
      case GgmlType::Q4_K:
      case GgmlType::Q5_K:
        set_half(b, 0, 0x3C00);
        set_half(b, 2, 0x4000);
        break;
      case GgmlType::Q6_K:
        set_half(b, offsetof(BlockQ6_K, d), 0x3C00);
        break;
      default:
        ADD_FAILURE() << "no raw generator for " << GgmlTypeName(t);
    }
  }
  return v;
}

std::vector<uint8_t> RawExactActivations(GgmlType t, int64_t k, std::mt19937& rng) {
  std::uniform_int_distribution<int> q(-3, 3);
  std::vector<uint8_t> v(GgmlRowSize(t, k));
  if (t == GgmlType::Q8_K) {
    BlockQ8_K* y = reinterpret_cast<BlockQ8_K*>(v.data());
    for (int64_t b = 0; b < k / 256; ++b) {
      y[b].d = 1.0f;
      for (int j = 0; j < 256; ++j) y[b].qs[j] = static_cast<int8_t>(q(rng));
      for (int g = 0; g < 16; ++g) {
        int s = 0;
        for (int j = 0; j < 16; ++j) s += y[b].qs[16 * g + j];
        y[b].bsums[g] = static_cast<int16_t>(s);
      }
    }
  } else if (t == GgmlType::Q8_1) {
    BlockQ8_1* y = reinterpret_cast<BlockQ8_1*>(v.data());
    for (int64_t b = 0; b < k / 32; ++b) {
      int s = 0;
      for (int j = 0; j < 32; ++j) s += y[b].qs[j] = static_cast<int8_t>(q(rng));
      y[b].d = 0x3C00;
      y[b].s = Fp32ToFp16(static_cast<float>(s));  // exact: |s| <= 96
    }
  } else {
    BlockQ8_0* y = reinterpret_cast<BlockQ8_0*>(v.data());
    for (int64_t b = 0; b < k / 32; ++b) {
      y[b].d = 0x3C00;
      for (int j = 0; j < 32; ++j) y[b].qs[j] = static_cast<int8_t>(q(rng));
    }
  }
  return v;
}

// Every ISA's integer block sums are exact: with exact scales the float results of all
// ISAs equal the scalar reference bit for bit, and the scalar reference equals the
// double-precision dot of the dequantized rows.
TEST(KernelsTest, AllQuantVecDotsIntegerExact) {
  std::mt19937 rng(77);
  for (GgmlType wt : kQuantWeightTypes) {
    const GgmlType at = VecDotType(wt);
    for (int64_t k : {256, 512, 768}) {
      const std::vector<uint8_t> w = RawExactWeights(wt, k, rng);
      const std::vector<uint8_t> a = RawExactActivations(at, k, rng);
      std::vector<float> dw(k), da(k);
      DequantizeRow(wt, w.data(), dw.data(), k);
      DequantizeRow(at, a.data(), da.data(), k);
      double exact = 0;
      for (int64_t i = 0; i < k; ++i) exact += static_cast<double>(dw[i]) * da[i];
      // (Q4_1/Q5_1: the m * s terms use s, which here is exactly d * sum(q).)
      ASSERT_LT(std::fabs(exact), 1 << 24) << GgmlTypeName(wt);
      float ref = 0;
      GetVecDot(wt, Isa::kScalar)(k, &ref, w.data(), a.data());
      EXPECT_EQ(static_cast<double>(ref), exact) << GgmlTypeName(wt) << " k=" << k;
      for (Isa isa : TestIsas()) {
        float got = 0;
        GetVecDot(wt, isa)(k, &got, w.data(), a.data());
        EXPECT_EQ(got, ref) << Name(wt, isa) << " k=" << k;
      }
    }
  }
}

// Q4_1 / Q5_1 follow ggml's x86 vec_dot arithmetic (8 float lanes of 4-element integer
// sums, hsum_float_8, fused m*s sum) on every path: the scalar reference, each ISA's
// vec_dot and MulMatTile, bit for bit, on random blocks (not only exact ones).
TEST(KernelsTest, Q4_1AndQ5_1EqualOnEveryIsaAndTile) {
  for (GgmlType wt : {GgmlType::Q4_1, GgmlType::Q5_1}) {
    for (int64_t k : {32, 64, 96, 4096}) {
      const int64_t m = 5, n = 7;
      const Rows w = MakeRows(wt, Random(m * k, 3 + static_cast<uint32_t>(k), 0.5f), m, k, false);
      const Rows a = MakeRows(GgmlType::Q8_1, Random(n * k, 9 + static_cast<uint32_t>(k), 2.0f), n, k, true);
      std::vector<float> want(static_cast<size_t>(m * n));
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < m; ++i) GetVecDot(wt, Isa::kScalar)(k, &want[j * m + i], w.row(i), a.row(j));
      for (Isa isa : TestIsas()) {
        std::vector<float> dst(static_cast<size_t>(m * n), -1.0f);
        MulMatTile(wt, isa, k, w.bytes.data(), w.stride, a.bytes.data(), a.stride, dst.data(), m, 0, m, 0, n);
        for (int64_t j = 0; j < n; ++j) {
          for (int64_t i = 0; i < m; ++i) {
            float got = 0;
            GetVecDot(wt, isa)(k, &got, w.row(i), a.row(j));
            EXPECT_EQ(got, want[j * m + i]) << Name(wt, isa) << " k=" << k << " vec_dot " << i << "," << j;
            EXPECT_EQ(dst[j * m + i], want[j * m + i]) << Name(wt, isa) << " k=" << k << " tile " << i << "," << j;
          }
        }
      }
    }
  }
}

// ggml_vec_dot_q8_0_q8_0 / _q5_0_q8_0 (ggml-cpu/arch/x86/quants.c, AVX2 branch; the same
// arithmetic as tinyBLAS_Q0_AVX's per-output loop) written out lane by lane: lane l of block
// b is the exact sum of elements 32b + 4l .. 32b + 4l + 3, acc[l] = fma(dx * dy, lane, acc[l]),
// then hsum_float_8. w: Q8_0 or Q5_0 row, a: Q8_0 row, k elements.
float GgmlDotQ8LanesModel(GgmlType wt, const uint8_t* w, const uint8_t* a, int64_t k) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const size_t wb = wt == GgmlType::Q8_0 ? 34 : 22;
  for (int64_t b = 0; b < k / 32; ++b) {
    const uint8_t* x = w + b * wb;
    const uint8_t* y = a + b * 34;
    uint16_t dxh, dyh;
    std::memcpy(&dxh, x, 2);
    std::memcpy(&dyh, y, 2);
    int q[32];
    if (wt == GgmlType::Q8_0) {
      for (int e = 0; e < 32; ++e) q[e] = static_cast<int8_t>(x[2 + e]);
    } else {
      uint32_t qh;
      std::memcpy(&qh, x + 2, 4);
      for (int e = 0; e < 16; ++e) {
        q[e] = ((x[6 + e] & 0x0F) | (((qh >> e) & 1) << 4)) - 16;
        q[e + 16] = ((x[6 + e] >> 4) | (((qh >> (e + 16)) & 1) << 4)) - 16;
      }
    }
    const float d = Fp16ToFp32(dxh) * Fp16ToFp32(dyh);
    for (int l = 0; l < 8; ++l) {
      int sum = 0;
      for (int e = 4 * l; e < 4 * l + 4; ++e) sum += q[e] * static_cast<int8_t>(y[2 + e]);
      acc[l] = std::fma(d, static_cast<float>(sum), acc[l]);
    }
  }
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

// Q8_0 / Q5_0 weights that are not repacked (BackendOptions::ggml_order, --norepack, a Q8_0
// KV cache) take ggml's 8-lane order on every SIMD Isa, vec_dot and tiles of any shape
// (kGemmMinRows+ activation rows included), bit for bit with the model above.
TEST(KernelsTest, UnpackedQ8_0AndQ5_0FollowGgmlLaneOrder) {
  for (GgmlType wt : {GgmlType::Q8_0, GgmlType::Q5_0}) {
    for (int64_t k : {32, 64, 96, 4096}) {
      const int64_t m = 9, n = 2 * kGemmMinRows + 1;
      const Rows w = MakeRows(wt, Random(m * k, 5 + static_cast<uint32_t>(k), 0.5f), m, k, false);
      const Rows a = MakeRows(GgmlType::Q8_0, Random(n * k, 11 + static_cast<uint32_t>(k), 2.0f), n, k, true);
      for (Isa isa : TestIsas()) {
        if (isa == Isa::kScalar) continue;  // ggml's generic reference: one sum per block
        std::vector<float> dst(static_cast<size_t>(m * n), -1.0f);
        MulMatTile(wt, isa, k, w.bytes.data(), w.stride, a.bytes.data(), a.stride, dst.data(), m, 0, m, 0, n);
        for (int64_t j = 0; j < n; ++j) {
          for (int64_t i = 0; i < m; ++i) {
            const float want = GgmlDotQ8LanesModel(wt, w.row(i), a.row(j), k);
            float got = 0;
            GetVecDot(wt, isa)(k, &got, w.row(i), a.row(j));
            EXPECT_EQ(got, want) << Name(wt, isa) << " k=" << k << " vec_dot " << i << "," << j;
            EXPECT_EQ(dst[j * m + i], want) << Name(wt, isa) << " k=" << k << " tile " << i << "," << j;
          }
        }
      }
    }
  }
}

// ggml_vec_dot_f16's arithmetic written out lane by lane (ggml-cpu/vec.cpp,
// simd-mappings.h): `epr` lanes x 4 accumulators over 4 * epr-element steps, the
// accumulators added (0+2, 1+3, then 0+1), the lanes reduced as GCC's
// _mm512_reduce_add_ps (epr 16) or GGML_F32x8_REDUCE's hadds (epr 8), into a double; the
// rest of the elements' float products added in double.
float GgmlDotF16Model(const std::vector<uint16_t>& x, const std::vector<uint16_t>& y, int epr) {
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t np = n / (4 * epr) * (4 * epr);
  std::vector<float> acc(static_cast<size_t>(4 * epr), 0.0f);
  for (int64_t i = 0; i < np; i += 4 * epr)
    for (int j = 0; j < 4 * epr; ++j) acc[j] = std::fma(Fp16ToFp32(x[i + j]), Fp16ToFp32(y[i + j]), acc[j]);
  std::vector<float> v(static_cast<size_t>(epr));
  for (int l = 0; l < epr; ++l) {
    v[l] = (acc[l] + acc[2 * epr + l]) + (acc[epr + l] + acc[3 * epr + l]);
  }
  float r;
  if (epr == 16) {
    float t3[8], t6[4];
    for (int i = 0; i < 8; ++i) t3[i] = v[8 + i] + v[i];
    for (int i = 0; i < 4; ++i) t6[i] = t3[4 + i] + t3[i];
    r = (t6[0] + t6[2]) + (t6[1] + t6[3]);
  } else {
    float t0[4];
    for (int i = 0; i < 4; ++i) t0[i] = v[i] + v[4 + i];
    r = (t0[0] + t0[1]) + (t0[2] + t0[3]);
  }
  double sumf = r;
  for (int64_t i = np; i < n; ++i) sumf += static_cast<double>(Fp16ToFp32(x[i]) * Fp16ToFp32(y[i]));
  return static_cast<float>(sumf);
}

// F16 weights whose rows llamafile's tinyBLAS refuses (k % 16 on AVX-512, k % 8 on AVX2)
// take ggml_vec_dot_f16's order in MulMatTile, bit for bit with the model above.
TEST(KernelsTest, F16RowsTinyBlasRefusesFollowGgmlVecDot) {
  EXPECT_FALSE(F16UsesGgmlVecDot(172, Isa::kScalar));
  EXPECT_TRUE(F16UsesGgmlVecDot(172, Isa::kAvx2));
  EXPECT_FALSE(F16UsesGgmlVecDot(176, Isa::kAvx2));
  EXPECT_TRUE(F16UsesGgmlVecDot(40, Isa::kAvx512) || !IsaSupported(Isa::kAvx512));
  EXPECT_FALSE(F16UsesGgmlVecDot(4096, Isa::kAvx512));
  for (Isa isa : TestIsas()) {
    if (isa == Isa::kScalar) continue;
    const int epr = isa == Isa::kAvx512 ? 16 : 8;
    for (int64_t k : {4, 12, 40, 172, 300, 1000}) {
      if (!F16UsesGgmlVecDot(k, isa)) continue;
      const int64_t m = 3, n = 2;
      const Rows w = MakeRows(GgmlType::F16, Random(m * k, 21 + static_cast<uint32_t>(k)), m, k, false);
      const Rows a = MakeRows(GgmlType::F16, Random(n * k, 23 + static_cast<uint32_t>(k), 4.0f), n, k, true);
      std::vector<float> dst(static_cast<size_t>(m * n), -1.0f);
      MulMatTile(GgmlType::F16, isa, k, w.bytes.data(), w.stride, a.bytes.data(), a.stride, dst.data(), m, 0, m, 0, n);
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < m; ++i) {
          const auto* wr = reinterpret_cast<const uint16_t*>(w.row(i));
          const auto* ar = reinterpret_cast<const uint16_t*>(a.row(j));
          const float want = GgmlDotF16Model(std::vector<uint16_t>(wr, wr + k), std::vector<uint16_t>(ar, ar + k), epr);
          EXPECT_EQ(VecDotF16Ggml(k, wr, ar, isa), want) << IsaName(isa) << " k=" << k;
          EXPECT_EQ(dst[j * m + i], want) << IsaName(isa) << " k=" << k << " tile " << i << "," << j;
        }
      }
    }
  }
}

TEST(KernelsTest, FromFloatQ8_1AndQ8_KBitExact) {
  for (Isa isa : TestIsas()) {
    for (int64_t n : {256, 512, 4096}) {
      std::vector<float> x = Random(n, static_cast<uint32_t>(n) + 31, 0.7f);
      x[0] = 127.0f;
      x[1] = 2.5f;
      x[2] = -2.5f;
      x[3] = 0.5f;
      x[4] = -1.5f;                               // ties
      for (int j = 32; j < 64; ++j) x[j] = 0.0f;  // a zero Q8_1 block
      if (n >= 512)
        for (int j = 256; j < 512; ++j) x[j] = 0.0f;  // a zero Q8_K block
      std::vector<BlockQ8_1> got1(n / 32 + 1), want1(n / 32);
      std::memset(got1.data(), 0x5A, got1.size() * sizeof(BlockQ8_1));
      FromFloat(GgmlType::Q8_1, x.data(), got1.data(), n, isa);
      QuantizeRowQ8_1X86(x.data(), want1.data(), n);
      ASSERT_EQ(std::memcmp(got1.data(), want1.data(), want1.size() * sizeof(BlockQ8_1)), 0)
          << IsaName(isa) << " n=" << n;
      EXPECT_EQ(got1[0].qs[1], 2);  // round half to even
      const uint8_t* tail = reinterpret_cast<const uint8_t*>(&got1[n / 32]);
      for (size_t b = 0; b < sizeof(BlockQ8_1); ++b) EXPECT_EQ(tail[b], 0x5A) << "wrote past the end";
      std::vector<BlockQ8_K> gotk(n / 256), wantk(n / 256);
      FromFloat(GgmlType::Q8_K, x.data(), gotk.data(), n, isa);
      QuantizeRowQ8_K(x.data(), wantk.data(), n);
      ASSERT_EQ(std::memcmp(gotk.data(), wantk.data(), wantk.size() * sizeof(BlockQ8_K)), 0) << IsaName(isa);
    }
  }
}

// ------------------------------------------------------------------ MulMatTile

TEST(KernelsTest, MulMatTileMatchesVecDot) {
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{1, 1, 32},     {3, 1, 64},    {5, 2, 32},   {17, 3, 64},   {33, 7, 96},  {8, 16, 64},
                          {13, 13, 4128}, {40, 1, 4128}, {6, 5, 1024}, {19, 9, 2080}, {9, 41, 4128}};
  for (GgmlType wt : kWeightTypes) {
    const GgmlType at = VecDotType(wt);
    for (Shape s : shapes) {
      s.k = AdjustK(wt, s.k);
      const Rows w = MakeRows(wt, Random(s.m * s.k, 7 + static_cast<uint32_t>(s.m)), s.m, s.k, false);
      const Rows a = MakeRows(at, Random(s.n * s.k, 9 + static_cast<uint32_t>(s.n), 2.0f), s.n, s.k, true);
      const size_t ds = static_cast<size_t>(s.m) + 3;
      const VecDotFn ref = GetVecDot(wt, Isa::kScalar);
      for (Isa isa : TestIsas()) {
        const VecDotFn dot = GetVecDot(wt, isa);
        // Full tile and an interior sub-tile with odd bounds.
        const int64_t ranges[2][4] = {{0, s.m, 0, s.n},
                                      {s.m > 2 ? 1 : 0, s.m > 3 ? s.m - 1 : s.m, s.n > 2 ? 1 : 0, s.n}};
        for (const auto& r : ranges) {
          const float sentinel = -12345.0f;
          std::vector<float> dst(ds * s.n, sentinel);
          MulMatTile(wt, isa, s.k, w.bytes.data(), w.stride, a.bytes.data(), a.stride, dst.data(), ds, r[0], r[1], r[2],
                     r[3]);
          for (int64_t j = 0; j < s.n; ++j) {
            for (size_t i = 0; i < ds; ++i) {
              const float got = dst[j * ds + i];
              const bool inside =
                  static_cast<int64_t>(i) >= r[0] && static_cast<int64_t>(i) < r[1] && j >= r[2] && j < r[3];
              if (!inside) {
                ASSERT_EQ(got, sentinel) << Name(wt, isa) << " wrote outside the tile at i=" << i << " j=" << j;
                continue;
              }
              float same_isa = 0, want = 0;
              dot(s.k, &same_isa, w.row(i), a.row(j));
              ref(s.k, &want, w.row(i), a.row(j));
              // Bit-exact with this ISA's vec_dot, whatever the tile shape; AVX2's batched
              // Q4_0 kernel (kGemmMinRows+ activation rows) follows the scalar reference.
              const bool scalar_order = isa == Isa::kAvx2 && r[3] - r[2] >= kGemmMinRows && wt == GgmlType::Q4_0;
              if (scalar_order) same_isa = want;
              ASSERT_EQ(got, same_isa) << Name(wt, isa) << " m=" << s.m << " n=" << s.n << " k=" << s.k << " i=" << i
                                       << " j=" << j;
              ExpectCloseToReference(got, want, AbsDot(wt, w.row(i), at, a.row(j), s.k), Name(wt, isa) + " tile");
            }
          }
        }
      }
    }
  }
}

// Weights packed at load (PackWeights + MulMatPacked): every output equals the scalar
// reference on the original row bit for bit (F16: the AVX2 vec_dot, and the scalar
// reference within the SIMD bound), for any number of activation rows, any split of the
// panels, a partial last panel, and raw quants of every value (-128 too).
// ggml's get_scale_min_k4: scale and min of 32-element group j of a Q4_K block.
void ScaleMinK4(int j, const uint8_t* q, int* sc, int* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// MulMatPacked's Q4_K / Q5_K numerics (kernels.h), from the block_q4_K / block_q5_K and block_q8_K bytes.
float PackedQ45_KReference(const uint8_t* w, const uint8_t* a, int64_t k, bool q5) {
  float sumf = 0;
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* x = w + b * (q5 ? 176 : 144);
    const uint8_t* y = a + b * 292;
    uint16_t dh, dmh;
    std::memcpy(&dh, x, 2);
    std::memcpy(&dmh, x + 2, 2);
    float dy;
    std::memcpy(&dy, y, 4);
    int64_t sumi = 0, msum = 0;
    for (int g = 0; g < 8; ++g) {
      int sc, mn;
      ScaleMinK4(g, x + 4, &sc, &mn);
      int64_t gs = 0;
      for (int e = 0; e < 32; ++e) {
        const uint8_t byte = x[(q5 ? 48 : 16) + 32 * (g / 2) + e];
        const int q = (g % 2 == 0 ? byte & 0xF : byte >> 4) + (q5 ? ((x[16 + e] >> g) & 1) << 4 : 0);
        gs += q * static_cast<int8_t>(y[4 + 32 * g + e]);
      }
      sumi += sc * gs;
      int16_t bs[2];
      std::memcpy(bs, y + 260 + 4 * g, 4);
      msum += mn * (bs[0] + bs[1]);
    }
    const float d = Fp16ToFp32(dh) * dy, dmin = Fp16ToFp32(dmh) * dy;
    sumf = sumf + static_cast<float>(sumi) * d;
    sumf = sumf - static_cast<float>(msum) * dmin;
  }
  return sumf;
}
float PackedQ4_KReference(const uint8_t* w, const uint8_t* a, int64_t k) {
  return PackedQ45_KReference(w, a, k, false);
}
float PackedQ5_KReference(const uint8_t* w, const uint8_t* a, int64_t k) { return PackedQ45_KReference(w, a, k, true); }

// MulMatPacked's Q6_K numerics (kernels.h), from the block_q6_K and block_q8_K bytes; the
// quants in dequantize_row_q6_K's order.
float PackedQ6_KReference(const uint8_t* w, const uint8_t* a, int64_t k) {
  float sumf = 0;
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* x = w + b * 210;
    const uint8_t* yb = a + b * 292;
    int q[256];
    const uint8_t* ql = x;
    const uint8_t* qh = x + 128;
    for (int n = 0; n < 256; n += 128) {
      for (int l = 0; l < 32; ++l) {
        q[n + l] = (ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4);
        q[n + l + 32] = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
        q[n + l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
        q[n + l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
      }
      ql += 64;
      qh += 32;
    }
    float dy;
    std::memcpy(&dy, yb, 4);
    int64_t sumi = 0;
    for (int j = 0; j < 16; ++j) {
      const int sc = static_cast<int8_t>(x[192 + j]);
      int64_t qs = 0;
      for (int e = 16 * j; e < 16 * j + 16; ++e) qs += q[e] * static_cast<int8_t>(yb[4 + e]);
      int16_t bs;
      std::memcpy(&bs, yb + 260 + 2 * j, 2);
      sumi += sc * qs - 32 * sc * bs;
    }
    uint16_t dh;
    std::memcpy(&dh, x + 208, 2);
    sumf = sumf + static_cast<float>(sumi) * (Fp16ToFp32(dh) * dy);
  }
  return sumf;
}

// MulMatPacked's Q2_K rounding (kernels.h): sumi = sum_j sc_j * sum(q * y) and msum = sum_j
// m_j * bsums[j] exact per super-block, sumf = sumf + float(sumi) * (d*dy), then sumf = sumf -
// float(msum) * (dmin*dy). Quants as dequantize_row_q2_K reads them.
float PackedQ2_KReference(const uint8_t* w, const uint8_t* a, int64_t k) {
  float sumf = 0;
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* x = w + b * 84;
    const uint8_t* yb = a + b * 292;
    int q[256];
    for (int n = 0; n < 2; ++n) {
      for (int j = 0; j < 4; ++j) {
        for (int l = 0; l < 32; ++l) q[128 * n + 32 * j + l] = (x[16 + 32 * n + l] >> (2 * j)) & 3;
      }
    }
    float dy;
    std::memcpy(&dy, yb, 4);
    int64_t sumi = 0, msum = 0;
    for (int j = 0; j < 16; ++j) {
      int64_t qs = 0;
      for (int e = 16 * j; e < 16 * j + 16; ++e) qs += q[e] * static_cast<int8_t>(yb[4 + e]);
      int16_t bs;
      std::memcpy(&bs, yb + 260 + 2 * j, 2);
      sumi += (x[j] & 0xF) * qs;
      msum += (x[j] >> 4) * bs;
    }
    uint16_t dh, mh;
    std::memcpy(&dh, x + 80, 2);
    std::memcpy(&mh, x + 82, 2);
    sumf = sumf + static_cast<float>(sumi) * (Fp16ToFp32(dh) * dy);
    sumf = sumf - static_cast<float>(msum) * (Fp16ToFp32(mh) * dy);
  }
  return sumf;
}

// MulMatPacked's Q3_K rounding (kernels.h): sumi = sum_j sc_j * sum(q * y) - 4 * sum_j sc_j *
// bsums[j] exact per super-block (q = 0..7, sc_j = 6-bit scale - 32), sumf = sumf +
// float(sumi) * (d*dy). Quants and scales decoded as dequantize_row_q3_K does.
float PackedQ3_KReference(const uint8_t* w, const uint8_t* a, int64_t k) {
  float sumf = 0;
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* x = w + b * 110;
    const uint8_t* yb = a + b * 292;
    int q[256];
    for (int n = 0; n < 2; ++n) {
      for (int j = 0; j < 4; ++j) {
        for (int l = 0; l < 32; ++l) {
          q[128 * n + 32 * j + l] = ((x[32 + 32 * n + l] >> (2 * j)) & 3) | (((x[l] >> (4 * n + j)) & 1) << 2);
        }
      }
    }
    int sc[16];
    for (int j = 0; j < 16; ++j) {
      const int lo = j < 8 ? x[96 + j] & 0xF : x[96 + j - 8] >> 4;
      const int hi = (x[104 + j % 4] >> (2 * (j / 4))) & 3;
      sc[j] = (lo | (hi << 4)) - 32;
    }
    float dy;
    std::memcpy(&dy, yb, 4);
    int64_t sumi = 0;
    for (int j = 0; j < 16; ++j) {
      int64_t qs = 0;
      for (int e = 16 * j; e < 16 * j + 16; ++e) qs += q[e] * static_cast<int8_t>(yb[4 + e]);
      int16_t bs;
      std::memcpy(&bs, yb + 260 + 2 * j, 2);
      sumi += sc[j] * qs - 4 * sc[j] * bs;
    }
    uint16_t dh;
    std::memcpy(&dh, x + 108, 2);
    sumf = sumf + static_cast<float>(sumi) * (Fp16ToFp32(dh) * dy);
  }
  return sumf;
}

// MulMatPacked's IQ4_XS rounding (kernels.h): sumi = sum_g (ls_g - 32) * sum(kvalues_iq4nl[q] *
// y) exact per super-block, sumf = sumf + float(sumi) * (d*dy).
float PackedIQ4_XSReference(const uint8_t* w, const uint8_t* a, int64_t k) {
  float sumf = 0;
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* x = w + b * 136;
    const uint8_t* yb = a + b * 292;
    uint16_t dh, scales_h;
    std::memcpy(&dh, x, 2);
    std::memcpy(&scales_h, x + 2, 2);
    int64_t sumi = 0;
    for (int g = 0; g < 8; ++g) {
      const int ls = ((x[4 + g / 2] >> (4 * (g % 2))) & 0xF) | (((scales_h >> (2 * g)) & 3) << 4);
      int64_t qs = 0;
      for (int j = 0; j < 16; ++j) {
        const uint8_t q = x[8 + 16 * g + j];
        qs += kIq4nlValues[q & 0xF] * static_cast<int8_t>(yb[4 + 32 * g + j]);
        qs += kIq4nlValues[q >> 4] * static_cast<int8_t>(yb[4 + 32 * g + 16 + j]);
      }
      sumi += (ls - 32) * qs;
    }
    float dy;
    std::memcpy(&dy, yb, 4);
    sumf = sumf + static_cast<float>(sumi) * (Fp16ToFp32(dh) * dy);
  }
  return sumf;
}

// Packed Q4_K (8-row panels, super-block integer sums) equals its reference bit for bit for
// every tile shape and split, and stays within the SIMD bound of ggml's scalar dot product.
TEST(KernelsTest, PackedKQuantsMatchReference) {
  for (GgmlType wt :
       {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS, GgmlType::Q3_K, GgmlType::Q2_K}) {
    const bool q2 = wt == GgmlType::Q2_K;
    const bool q6 = wt == GgmlType::Q6_K;
    const bool q5 = wt == GgmlType::Q5_K;
    const bool xs = wt == GgmlType::IQ4_XS;
    const bool q3 = wt == GgmlType::Q3_K;
    const auto reference = q2   ? PackedQ2_KReference
                           : q3 ? PackedQ3_KReference
                           : xs ? PackedIQ4_XSReference
                           : q6 ? PackedQ6_KReference
                           : q5 ? PackedQ5_KReference
                                : PackedQ4_KReference;
    EXPECT_FALSE(SupportsPacked(wt, Isa::kScalar));
    if (!SupportsPacked(wt, Isa::kAvx2)) GTEST_SKIP() << "needs AVX2";
    for (int64_t m : {8, 27, 64}) {
      for (int64_t k : {256, 768, 2048}) {
        std::mt19937 rng(static_cast<uint32_t>(m * 131 + k));
        const size_t ws = GgmlRowSize(wt, k) + 6;  // a padded row stride
        std::vector<uint8_t> w(ws * m);
        for (int64_t r = 0; r < m; ++r) {
          const std::vector<uint8_t> row =
              r % 3 == 0 ? RawExactWeights(wt, k, rng) : MakeRows(wt, Random(k, 5 + r), 1, k, false).bytes;
          std::memcpy(w.data() + r * ws, row.data(), GgmlRowSize(wt, k));
          if (r % 7 == 6) {  // the largest quants and scales (Q6_K: -128)
            for (int64_t b = 0; b < k / 256; ++b) {
              uint8_t* blk = w.data() + r * ws + b * GgmlRowSize(wt, 256);
              if (q2) {  // quants 3, scales and mins 15 (d, dmin as they are)
                std::memset(blk, 0xFF, 80);
              } else if (q3) {  // quants 3 (7) and scales 31, or quants -4 (0) and scales -32
                std::memset(blk, r % 2 ? 0xFF : 0x00, 110 - 2);
              } else if (xs) {  // scales 31 and levels 113, or scales -32 and levels -127
                std::memset(blk + 2, r % 2 ? 0xFF : 0x00, 134);
              } else if (q6) {
                std::memset(blk, 0xFF, 192);
                std::memset(blk + 192, 0x80, 16);
              } else {
                std::memset(blk + 4, 0xFF, GgmlRowSize(wt, 256) - 4);  // scales, (qh,) quants
              }
            }
          }
        }
        const size_t bytes = PackedWeightBytes(wt, k, m, Isa::kAvx2);
        ASSERT_EQ(bytes, static_cast<size_t>((m + 7) / 8) * static_cast<size_t>(k / 256) *
                             (q2   ? 672
                              : q3 ? 912
                              : xs ? 1104
                              : q6 ? 1680
                              : q5 ? 1440
                                   : 1184));
        std::vector<uint8_t> packed(bytes + 1, 0xCD);
        uint8_t* pk = packed.data() + 1;  // any alignment
        const int64_t panels = (m + kPackRows - 1) / kPackRows;
        // One layout for every ISA (the K types).
        PackWeights(wt, k, m, w.data(), ws, pk, 0, panels / 2, Isa::kAvx2);
        PackWeights(wt, k, m, w.data(), ws, pk, panels / 2, panels, Isa::kAvx2);
        const int64_t n = 19;
        Rows a = MakeRows(GgmlType::Q8_K, Random(n * k, 11 + static_cast<uint32_t>(k), 3.0f), n, k, true);
        // An activation row at the quant extremes (-128 .. 127; IQ4_XS's signed levels take
        // -127, as ggml's sign-trick dot does: quantize_row_q8_K never writes -128).
        for (int64_t b = 0; b < k / 256; ++b) {
          uint8_t* blk = a.bytes.data() + 3 * a.stride + b * 292;
          int16_t bs[16] = {};
          for (int e = 0; e < 256; ++e) {
            const int8_t q = e % 2 ? (xs ? -127 : -128) : 127;
            blk[4 + e] = static_cast<uint8_t>(q);
            bs[e / 16] = static_cast<int16_t>(bs[e / 16] + q);
          }
          std::memcpy(blk + 260, bs, sizeof(bs));
        }
        const VecDotFn scalar = GetVecDot(wt, Isa::kScalar);
        for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
          if (!IsaSupported(isa)) continue;
          for (int64_t nj : {1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 19}) {
            const size_t ds = static_cast<size_t>(m) + 1;
            std::vector<float> dst(ds * n, -7.0f);
            const int64_t mid = m > 8 ? 8 : m;
            MulMatPacked(wt, isa, k, pk, a.bytes.data(), a.stride, dst.data(), ds, 0, mid, n - nj, n);
            MulMatPacked(wt, isa, k, pk, a.bytes.data(), a.stride, dst.data(), ds, mid, m, n - nj, n);
            for (int64_t j = 0; j < n; ++j) {
              for (int64_t i = 0; i < static_cast<int64_t>(ds); ++i) {
                const float got = dst[j * ds + i];
                if (j < n - nj || i >= m) {
                  ASSERT_EQ(got, -7.0f) << "wrote outside the tile at i=" << i << " j=" << j;
                  continue;
                }
                ASSERT_EQ(got, reference(w.data() + i * ws, a.row(j), k))
                    << Name(wt, isa) << " m=" << m << " k=" << k << " nj=" << nj << " i=" << i << " j=" << j;
                float want_scalar = 0;
                scalar(k, &want_scalar, w.data() + i * ws, a.row(j));
                ASSERT_NEAR(got, want_scalar, 1e-5 * AbsDot(wt, w.data() + i * ws, GgmlType::Q8_K, a.row(j), k) + 1e-30)
                    << Name(wt, isa) << " m=" << m << " k=" << k << " i=" << i << " j=" << j;
              }
            }
          }
        }
      }
    }
  }
}

TEST(KernelsTest, PackedMulMatMatchesScalarReference) {
  for (GgmlType wt : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::IQ4_NL, GgmlType::Q4_1, GgmlType::Q5_1,
                      GgmlType::F16, GgmlType::BF16}) {
    EXPECT_FALSE(SupportsPacked(wt, Isa::kScalar));
    if (!SupportsPacked(wt, Isa::kAvx2)) GTEST_SKIP() << "needs AVX2";
    // F16 / BF16: held to their AVX2 dot product (the packed kernels keep its lanes).
    const bool f16 = wt == GgmlType::F16 || wt == GgmlType::BF16;
    const GgmlType at = VecDotType(wt);
    // 131: decode stripes of several panels, then the rest; 264 (F16): several slabs per
    // stripe, tiles of two slabs and of one.
    for (int64_t m : {8, 27, 64, 131, 264}) {
      for (int64_t k : {32, 40, 96, 2048}) {
        if (!f16 && k % 32 != 0) continue;
        if (m == 264 && wt != GgmlType::F16) continue;
        if (wt == GgmlType::BF16 && k % 16 != 0) continue;
        std::mt19937 rng(static_cast<uint32_t>(m * 131 + k));
        const size_t ws = GgmlRowSize(wt, k) + 6;  // a padded row stride
        std::vector<uint8_t> w(ws * m);
        for (int64_t r = 0; r < m; ++r) {
          const std::vector<uint8_t> row =
              !f16 && r % 3 == 0 ? RawExactWeights(wt, k, rng) : MakeRows(wt, Random(k, 5 + r), 1, k, false).bytes;
          std::memcpy(w.data() + r * ws, row.data(), GgmlRowSize(wt, k));
          if (wt == GgmlType::Q8_0 && r % 5 == 4) {  // the extreme quant a file may hold
            for (int64_t b = 0; b < k / 32; ++b) std::memset(w.data() + r * ws + b * 34 + 2, 0x80, 32);
          }
          // Every quant at one end (Q5_0: -16 and 15; kvalues_iq4nl's -127 and 113; Q4_1 /
          // Q5_1: 0 and 15 / 31, after the min).
          if (wt != GgmlType::Q4_0 && wt != GgmlType::Q8_0 && !f16 && r % 5 >= 3) {
            const size_t bs = GgmlRowSize(wt, 32);
            const size_t head = wt == GgmlType::Q4_1 || wt == GgmlType::Q5_1 ? 4 : 2;
            for (int64_t b = 0; b < k / 32; ++b)
              std::memset(w.data() + r * ws + b * bs + head, r % 5 == 3 ? 0 : 0xFF, bs - head);
          }
        }
        const int64_t n = 19;
        const Rows a = MakeRows(at, Random(n * k, 11 + static_cast<uint32_t>(k), 3.0f), n, k, true);
        const VecDotFn scalar = GetVecDot(wt, Isa::kScalar);
        for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
          if (!IsaSupported(isa)) continue;
          const bool slab = wt == GgmlType::F16 && F16SlabLayout(isa);
          const size_t bytes = PackedWeightBytes(wt, k, m, isa);
          ASSERT_EQ(bytes, static_cast<size_t>(slab ? (m + 15) / 16 * 16 : (m + 7) / 8 * 8) * GgmlRowSize(wt, k));
          std::vector<uint8_t> packed(bytes + 1, 0xCD);
          uint8_t* pk = packed.data() + 1;  // any alignment
          const int64_t panels = (m + kPackRows - 1) / kPackRows;
          // Two pieces, as two threads would write them.
          PackWeights(wt, k, m, w.data(), ws, pk, 0, panels / 2, isa);
          PackWeights(wt, k, m, w.data(), ws, pk, panels / 2, panels, isa);
          // F16 in the slab layout: one FMA sum in element order over the F16-rounded
          // activations (kernels.h); else the AVX2 (F16 / BF16) or scalar dot product.
          const VecDotFn ref = GetVecDot(wt, f16 ? Isa::kAvx2 : Isa::kScalar);
          const auto want_of = [&](int64_t i, int64_t j) {
            float want = 0;
            if (slab) {
              const uint16_t* wr = reinterpret_cast<const uint16_t*>(w.data() + i * ws);
              const uint16_t* ar = reinterpret_cast<const uint16_t*>(a.row(j));
              for (int64_t e = 0; e < k; ++e) want = std::fma(Fp16ToFp32(wr[e]), Fp16ToFp32(ar[e]), want);
            } else {
              ref(k, &want, w.data() + i * ws, a.row(j));
            }
            return want;
          };
          // The kernel's own activation rows: F16 packed on AVX-512 takes the same values in F32.
          Rows pa = a;
          if (PackedActType(wt, isa) != at) {
            ASSERT_EQ(PackedActType(wt, isa), GgmlType::F32);
            ASSERT_EQ(at, GgmlType::F16);
            pa.stride = static_cast<size_t>(k) * 4 + 12;
            pa.bytes.assign(pa.stride * n, 0xAB);
            for (int64_t j = 0; j < n; ++j) {
              F16ToF32(reinterpret_cast<const uint16_t*>(a.row(j)), reinterpret_cast<float*>(&pa.bytes[j * pa.stride]),
                       k);
            }
          }
          for (int64_t nj : {1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 19}) {
            const size_t ds = static_cast<size_t>(m) + 1;
            std::vector<float> dst(ds * n, -7.0f);
            // Panels split at 8 (when there are two) and activation rows [n - nj, n).
            const int64_t mid = m > 8 ? 8 : m;
            MulMatPacked(wt, isa, k, pk, pa.bytes.data(), pa.stride, dst.data(), ds, 0, mid, n - nj, n);
            MulMatPacked(wt, isa, k, pk, pa.bytes.data(), pa.stride, dst.data(), ds, mid, m, n - nj, n);
            for (int64_t j = 0; j < n; ++j) {
              for (int64_t i = 0; i < static_cast<int64_t>(ds); ++i) {
                const float got = dst[j * ds + i];
                if (j < n - nj || i >= m) {
                  ASSERT_EQ(got, -7.0f) << "wrote outside the tile at i=" << i << " j=" << j;
                  continue;
                }
                float want_scalar = 0;
                const float want = want_of(i, j);
                ASSERT_EQ(got, want) << Name(wt, isa) << " m=" << m << " k=" << k << " nj=" << nj << " i=" << i
                                     << " j=" << j;
                scalar(k, &want_scalar, w.data() + i * ws, a.row(j));
                ASSERT_NEAR(got, want_scalar, 1e-5 * AbsDot(wt, w.data() + i * ws, at, a.row(j), k) + 1e-30)
                    << Name(wt, isa) << " m=" << m << " k=" << k << " i=" << i << " j=" << j;
              }
            }
          }
        }
      }
    }
  }
}

// A long row and many activation rows: the AVX-512 F16 GEMM takes the activations in
// several blocks (each streaming the weights again), every output still one FMA sum in
// element order; rows split between two calls as two threads would.
TEST(KernelsTest, PackedF16ManyBlocksMatchesSlabReference) {
  if (!IsaSupported(Isa::kAvx512) || !F16SlabLayout(Isa::kAvx512)) GTEST_SKIP() << "needs the AVX-512 slab layout";
  const int64_t k = 5632, m = 40, n = 100;
  const Rows w = MakeRows(GgmlType::F16, Random(m * k, 31), m, k, false);
  const Rows a16 = MakeRows(GgmlType::F16, Random(n * k, 32, 2.0f), n, k, true);
  std::vector<float> a(static_cast<size_t>(n * k));
  for (int64_t j = 0; j < n; ++j) F16ToF32(reinterpret_cast<const uint16_t*>(a16.row(j)), &a[j * k], k);
  std::vector<uint8_t> packed(PackedWeightBytes(GgmlType::F16, k, m, Isa::kAvx512));
  const int64_t panels = (m + kPackRows - 1) / kPackRows;
  PackWeights(GgmlType::F16, k, m, w.bytes.data(), w.stride, packed.data(), 0, panels, Isa::kAvx512);
  const size_t ds = static_cast<size_t>(m) + 3;
  std::vector<float> dst(ds * n, -7.0f);
  MulMatPacked(GgmlType::F16, Isa::kAvx512, k, packed.data(), a.data(), static_cast<size_t>(k) * 4, dst.data(), ds, 0,
               16, 0, n);
  MulMatPacked(GgmlType::F16, Isa::kAvx512, k, packed.data(), a.data(), static_cast<size_t>(k) * 4, dst.data(), ds, 16,
               m, 0, n);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < static_cast<int64_t>(ds); ++i) {
      if (i >= m) {
        ASSERT_EQ(dst[j * ds + i], -7.0f) << "wrote outside the rows at i=" << i << " j=" << j;
        continue;
      }
      const uint16_t* wr = reinterpret_cast<const uint16_t*>(w.row(i));
      float want = 0;
      for (int64_t e = 0; e < k; ++e) want = std::fma(Fp16ToFp32(wr[e]), a[j * k + e], want);
      ASSERT_EQ(dst[j * ds + i], want) << "i=" << i << " j=" << j;
    }
  }
}

TEST(KernelsTest, Avx512NonVnniMatchesVnni) {
  if (!IsaSupported(Isa::kAvx512) || !GetCpuFeatures().avx512vnni) GTEST_SKIP() << "needs AVX512-VNNI";
  const internal::IsaKernels& vnni = internal::Avx512Kernels(true);
  const internal::IsaKernels& plain = internal::Avx512Kernels(false);
  for (GgmlType wt : {GgmlType::Q8_0, GgmlType::Q4_0}) {
    const int t = wt == GgmlType::Q8_0 ? internal::kWQ8_0 : internal::kWQ4_0;
    for (int64_t k : {32, 64, 96, 4128}) {
      const int64_t m = 7, n = 5;
      const Rows w = MakeRows(wt, Random(m * k, 21), m, k, false);
      const Rows a = MakeRows(GgmlType::Q8_0, Random(n * k, 22), n, k, true);
      std::vector<float> d1(m * n), d2(m * n);
      vnni.tile[t](k, w.bytes.data(), w.stride, a.bytes.data(), a.stride, d1.data(), m, 0, m, 0, n);
      plain.tile[t](k, w.bytes.data(), w.stride, a.bytes.data(), a.stride, d2.data(), m, 0, m, 0, n);
      EXPECT_EQ(d1, d2) << GgmlTypeName(wt) << " k=" << k;
      float s1 = 0, s2 = 1;
      vnni.vec_dot[t](k, &s1, w.row(3), a.row(2));
      plain.vec_dot[t](k, &s2, w.row(3), a.row(2));
      EXPECT_EQ(s1, s2);
      EXPECT_EQ(s1, d1[2 * m + 3]);
    }
  }
}

TEST(KernelsTest, MulMatTileFallsBackForUnsupportedIsa) {
  // Asking for an ISA the CPU lacks must still compute (with the best one below it).
  const int64_t k = 64;
  const Rows w = MakeRows(GgmlType::F32, Random(2 * k, 1), 2, k, false);
  const Rows a = MakeRows(GgmlType::F32, Random(k, 2), 1, k, true);
  float d[2];
  MulMatTile(GgmlType::F32, Isa::kAvx512, k, w.bytes.data(), w.stride, a.bytes.data(), a.stride, d, 2, 0, 2, 0, 1);
  float ref;
  GetVecDot(GgmlType::F32, Isa::kScalar)(k, &ref, w.row(1), a.row(0));
  EXPECT_NEAR(d[1], ref, 1e-4);
}

// ------------------------------------------------------------------ ops

TEST(OpsTest, RmsNorm) {
  for (int64_t n : {1, 7, 4096}) {
    const std::vector<float> x = Random(n, 3, 2.0f);
    std::vector<float> y(n);
    const float eps = 1e-6f;
    RmsNorm(x.data(), y.data(), n, eps);
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double scale = 1.0 / std::sqrt(ss / n + eps);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], x[i] * scale, 1e-6 * std::fabs(x[i] * scale) + 1e-7);
    std::vector<float> z = x;
    RmsNorm(z.data(), z.data(), n, eps);  // in place
    EXPECT_EQ(z, y);
  }
}

TEST(OpsTest, Norm) {
  for (int64_t n : {2, 9, 4096}) {
    std::vector<float> x = Random(n, 4, 2.0f);
    for (auto& v : x) v += 5.0f;  // non-zero mean
    std::vector<float> y(n);
    const float eps = 1e-5f;
    Norm(x.data(), y.data(), n, eps);
    double mean = 0;
    for (float v : x) mean += v;
    mean /= n;
    double var = 0;
    for (float v : x) var += (v - mean) * (v - mean);
    var /= n;
    for (int64_t i = 0; i < n; ++i) {
      const double want = (x[i] - mean) / std::sqrt(var + eps);
      EXPECT_NEAR(y[i], want, 2e-5 * std::fabs(want) + 2e-5) << i;
    }
    std::vector<float> z = x;
    Norm(z.data(), z.data(), n, eps);
    EXPECT_EQ(z, y);
  }
}

std::vector<double> TextbookSoftMax(const std::vector<float>& x, float scale, const float* mask, float slope) {
  std::vector<double> w(x.size());
  double mx = -INFINITY;
  for (size_t i = 0; i < x.size(); ++i) {
    w[i] = static_cast<double>(x[i]) * scale + (mask ? static_cast<double>(slope) * mask[i] : 0.0);
    mx = std::max(mx, w[i]);
  }
  double sum = 0;
  for (double& v : w) {
    v = std::exp(v - mx);
    sum += v;
  }
  for (double& v : w) v /= sum;
  return w;
}

TEST(OpsTest, SoftMaxScale) {
  for (int64_t n : {1, 5, 32, 1000}) {
    const std::vector<float> x = Random(n, 5, 4.0f);
    std::vector<float> y(n);
    SoftMax(x.data(), y.data(), n, 0.125f, nullptr, 1.0f);
    const std::vector<double> want = TextbookSoftMax(x, 0.125f, nullptr, 1.0f);
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(y[i], want[i], 1e-6 * want[i] + 1e-9);
      total += y[i];
    }
    EXPECT_NEAR(total, 1.0, 1e-5);
    std::vector<float> z = x;
    SoftMax(z.data(), z.data(), n, 0.125f, nullptr, 1.0f);
    EXPECT_EQ(z, y);
  }
}

TEST(OpsTest, SoftMaxMask) {
  const int64_t n = 16;
  const std::vector<float> x = Random(n, 6, 3.0f);
  // Causal mask for query position 9: keys > 9 are -inf.
  std::vector<float> mask(n, 0.0f);
  for (int64_t i = 10; i < n; ++i) mask[i] = -INFINITY;
  std::vector<float> y(n);
  SoftMax(x.data(), y.data(), n, 0.5f, mask.data(), 1.0f);
  const std::vector<double> want = TextbookSoftMax(x, 0.5f, mask.data(), 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    if (i >= 10)
      EXPECT_EQ(y[i], 0.0f);
    else
      EXPECT_NEAR(y[i], want[i], 1e-6 * want[i] + 1e-9);
  }
  // Everything masked but one: exactly one-hot.
  std::vector<float> only(n, -INFINITY);
  only[3] = 0.0f;
  SoftMax(x.data(), y.data(), n, 1.0f, only.data(), 1.0f);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], i == 3 ? 1.0f : 0.0f);
}

TEST(OpsTest, SoftMaxAlibiSlope) {
  const int64_t n = 24;
  const std::vector<float> x = Random(n, 8, 2.0f);
  std::vector<float> mask(n);
  for (int64_t i = 0; i < n; ++i) mask[i] = -static_cast<float>(n - 1 - i);  // ALiBi distance bias
  mask[n - 1] = 0.0f;
  const float slope = 0.0625f;
  std::vector<float> y(n);
  SoftMax(x.data(), y.data(), n, 0.7f, mask.data(), slope);
  const std::vector<double> want = TextbookSoftMax(x, 0.7f, mask.data(), slope);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], want[i], 1e-6 * want[i] + 1e-9);
}

RopeParams Rope(int n_dims, bool neox) {
  RopeParams p{};
  p.n_dims = n_dims;
  p.neox = neox;
  p.n_ctx_orig = 4096;
  p.freq_base = 10000.0f;
  p.freq_scale = 1.0f;
  p.ext_factor = 0.0f;
  p.attn_factor = 1.0f;
  p.beta_fast = 32.0f;
  p.beta_slow = 1.0f;
  return p;
}

// Plain RoPE: pair (a, b) of pair index i rotated by pos * freq_scale * base^(-2i/n_dims) / ff[i].
std::vector<double> TextbookRope(const RopeParams& p, double pos, const float* ff, const std::vector<float>& x) {
  std::vector<double> y(x.begin(), x.end());
  for (int i = 0; i < p.n_dims / 2; ++i) {
    const double theta =
        pos * p.freq_scale * std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_dims) / (ff ? ff[i] : 1.0);
    const int a = p.neox ? i : 2 * i;
    const int b = p.neox ? i + p.n_dims / 2 : 2 * i + 1;
    y[a] = x[a] * std::cos(theta) - x[b] * std::sin(theta);
    y[b] = x[a] * std::sin(theta) + x[b] * std::cos(theta);
  }
  for (double& v : y) v *= 1.0;
  return y;
}

void CheckRope(const RopeParams& p, float pos, const float* ff, int64_t head_dim, uint32_t seed) {
  const std::vector<float> x = Random(head_dim, seed);
  std::vector<float> cs(p.n_dims), y(head_dim);
  RopeCache(p, pos, ff, cs.data());
  RopeApply(p, cs.data(), x.data(), y.data(), head_dim);
  const std::vector<double> want = TextbookRope(p, pos, ff, x);
  // ggml advances theta by repeated float multiplication: angle error ~ i * 2^-24 * theta.
  const double tol = 2e-6 * (1.0 + pos);
  for (int64_t i = 0; i < head_dim; ++i) {
    if (i >= p.n_dims) {
      EXPECT_EQ(y[i], x[i]) << "dim " << i << " past n_dims must be copied";
    } else {
      EXPECT_NEAR(y[i], want[i], tol) << (p.neox ? "neox" : "normal") << " pos " << pos << " i " << i;
    }
  }
  std::vector<float> z = x;
  RopeApply(p, cs.data(), z.data(), z.data(), head_dim);  // in place
  EXPECT_EQ(z, y);
}

TEST(OpsTest, RopeNormalAndNeox) {
  for (bool neox : {false, true}) {
    CheckRope(Rope(64, neox), 0.0f, nullptr, 64, 1);
    CheckRope(Rope(64, neox), 1.0f, nullptr, 64, 2);
    CheckRope(Rope(128, neox), 17.0f, nullptr, 128, 3);
    CheckRope(Rope(128, neox), 250.0f, nullptr, 128, 4);
  }
}

TEST(OpsTest, RopePartialDimsFreqScaleAndFactors) {
  for (bool neox : {false, true}) {
    CheckRope(Rope(32, neox), 9.0f, nullptr, 128, 5);  // partial rotation: 96 dims copied
    RopeParams p = Rope(64, neox);
    p.freq_scale = 0.25f;
    CheckRope(p, 40.0f, nullptr, 80, 6);
    std::vector<float> ff(32);
    for (int i = 0; i < 32; ++i) ff[i] = 1.0f + 0.5f * i;
    CheckRope(Rope(64, neox), 30.0f, ff.data(), 64, 7);
  }
  // Position 0 is the identity.
  const RopeParams p = Rope(64, false);
  std::vector<float> cs(64);
  RopeCache(p, 0.0f, nullptr, cs.data());
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(cs[2 * i], 1.0f);
    EXPECT_EQ(cs[2 * i + 1], 0.0f);
  }
}

TEST(OpsTest, RopeYarn) {
  RopeParams p = Rope(128, true);
  p.n_ctx_orig = 4096;
  p.freq_scale = 0.25f;
  p.ext_factor = 1.0f;
  p.attn_factor = 1.0f;
  const float pos = 100.0f;
  // Textbook YaRN (double): corr dims, linear ramp over pair index, mscale.
  auto corr = [&](double beta) {
    return p.n_dims * std::log(p.n_ctx_orig / (beta * 2 * M_PI)) / (2 * std::log(static_cast<double>(p.freq_base)));
  };
  const double low = std::max(0.0, std::floor(corr(p.beta_fast)));
  const double high = std::min(p.n_dims - 1.0, std::ceil(corr(p.beta_slow)));
  float dims[2];
  RopeYarnCorrDims(p.n_dims, p.n_ctx_orig, p.freq_base, p.beta_fast, p.beta_slow, dims);
  EXPECT_EQ(dims[0], low);
  EXPECT_EQ(dims[1], high);
  std::vector<float> cs(p.n_dims);
  RopeCache(p, pos, nullptr, cs.data());
  const double mscale = p.attn_factor * (1.0 + 0.1 * std::log(1.0 / p.freq_scale));
  for (int i = 0; i < p.n_dims / 2; ++i) {
    const double extrap = pos * std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_dims);
    const double interp = p.freq_scale * extrap;
    const double ramp = 1.0 - std::min(1.0, std::max(0.0, (i - low) / std::max(0.001, high - low)));
    const double mix = ramp * p.ext_factor;
    const double theta = interp * (1 - mix) + extrap * mix;
    EXPECT_NEAR(cs[2 * i], std::cos(theta) * mscale, 2e-6 * (1 + pos)) << i;
    EXPECT_NEAR(cs[2 * i + 1], std::sin(theta) * mscale, 2e-6 * (1 + pos)) << i;
  }
}

TEST(OpsTest, Activations) {
  const int64_t n = 257;
  std::vector<float> x = Random(n, 10, 4.0f);
  x[0] = -12.0f;
  x[1] = 12.0f;
  x[2] = 0.0f;
  x[3] = 1.0f;
  x[4] = -80.0f;
  x[5] = 80.0f;
  const std::vector<float> b = Random(n, 11);
  std::vector<float> y(n);
  Silu(x.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double want = x[i] / (1.0 + std::exp(-static_cast<double>(x[i])));
    EXPECT_NEAR(y[i], want, 1e-6 * std::fabs(want) + 1e-30) << "silu " << x[i];
  }
  Gelu(x.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double want = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * v * (1.0 + 0.044715 * v * v)));
    EXPECT_NEAR(y[i], want, 2e-6 * std::fabs(want) + 1e-7) << "gelu " << v;
  }
  std::vector<float> g(n);
  GeluGgmlTable(x.data(), g.data(), n);
  EXPECT_EQ(g[0], 0.0f);   // x <= -10
  EXPECT_EQ(g[1], 12.0f);  // x >= 10
  EXPECT_EQ(g[2], 0.0f);
  float gelu1;
  Gelu(&x[3], &gelu1, 1);
  EXPECT_EQ(g[3], Fp16ToFp32(Fp32ToFp16(gelu1)));  // 1.0 is exact in F16
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(g[i], y[i], 2e-3 * std::fabs(y[i]) + 2e-3) << "gelu table " << x[i];
  GeluErf(x.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    EXPECT_NEAR(y[i], want, 2e-6 * std::fabs(want) + 1e-7) << "gelu_erf " << v;
  }
  Swiglu(x.data(), b.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double want = x[i] / (1.0 + std::exp(-static_cast<double>(x[i]))) * b[i];
    EXPECT_NEAR(y[i], want, 2e-6 * std::fabs(want) + 1e-30) << "swiglu " << x[i];
  }
  // In place.
  std::vector<float> z = x;
  Silu(z.data(), z.data(), n);
  std::vector<float> s(n);
  Silu(x.data(), s.data(), n);
  EXPECT_EQ(z, s);
  z = x;
  Swiglu(z.data(), b.data(), z.data(), n);
  Swiglu(x.data(), b.data(), s.data(), n);
  EXPECT_EQ(z, s);
}

// The SIMD row ops (ggml_v_expf paths) stay within a few ulp of the libm versions.
TEST(OpsTest, SimdRowOpsCloseToScalar) {
  std::vector<const internal::IsaKernels*> tables;
  if (IsaSupported(Isa::kAvx2)) tables.push_back(&internal::Avx2Kernels());
  if (IsaSupported(Isa::kAvx512)) tables.push_back(&internal::Avx512Kernels(GetCpuFeatures().avx512vnni));
  const int64_t n = 1000 + 7;  // vector body + scalar tail
  std::vector<float> x = Random(n, 31, 6.0f);
  const float specials[] = {0.0f,  -0.0f,  1e-30f, -1e-30f, 20.0f,  -20.0f,  88.0f,  -87.0f,
                            89.0f, -89.0f, 100.0f, -100.0f, 150.0f, -150.0f, 300.0f, -300.0f};
  for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); ++i) x[i] = specials[i];
  const std::vector<float> g = Random(n, 32);
  auto close = [](float got, float want) {
    if (std::isinf(want) || want == 0.0f) return got == want;
    return std::fabs(got - want) <= 4e-7f * std::fabs(want) + 1e-37f;
  };
  for (const internal::IsaKernels* k : tables) {
    ASSERT_NE(k->silu, nullptr);
    std::vector<float> y(n), z(n);
    k->silu(x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_TRUE(close(y[i], x[i] / (1.0f + std::exp(-x[i])))) << "silu " << x[i] << " " << y[i];
    k->swiglu(x.data(), g.data(), z.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(z[i], y[i] * g[i]) << "swiglu " << x[i];
    // exp(x - max) with max = 0 covers over/underflow of the polynomial path.
    const double sum = k->softmax_exp(x.data(), y.data(), n, 0.0f);
    double want_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float e = std::exp(x[i]);
      EXPECT_TRUE(close(y[i], e)) << "exp " << x[i] << " got " << y[i] << " want " << e;
      want_sum += e;
    }
    if (!std::isinf(want_sum)) {
      EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum);
    }
    const std::vector<float> xs = Random(n, 33, 2.0f);
    const double var = k->cvar(xs.data(), y.data(), n, 0.25f);
    double want_var = 0;
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(y[i], xs[i] - 0.25f);
      want_var += static_cast<double>(y[i]) * y[i];
    }
    EXPECT_NEAR(var, want_var / n, 1e-6 * want_var / n);
  }
}

TEST(OpsTest, MadScaleF16MatchGgmlOnEveryIsa) {
  std::vector<const internal::IsaKernels*> tables;
  if (IsaSupported(Isa::kAvx2)) tables.push_back(&internal::Avx2Kernels());
  if (IsaSupported(Isa::kAvx512)) tables.push_back(&internal::Avx512Kernels(GetCpuFeatures().avx512vnni));
  for (int64_t n : {1, 7, 64, 128, 131}) {
    const std::vector<float> xf = Random(n, 40), yf = Random(n, 41, 3.0f);
    std::vector<uint16_t> x(n), y0(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = Fp32ToFp16(xf[i]);
      y0[i] = Fp32ToFp16(yf[i]);
    }
    const float v = 0.3719f;
    std::vector<uint16_t> want = y0;
    for (int64_t i = 0; i < n; ++i) want[i] = Fp32ToFp16(std::fma(Fp16ToFp32(x[i]), v, Fp16ToFp32(want[i])));
    std::vector<uint16_t> got = y0;
    MadF16(x.data(), v, got.data(), n);
    EXPECT_EQ(got, want) << "n=" << n;
    for (const internal::IsaKernels* k : tables) {
      got = y0;
      k->mad_f16(x.data(), v, got.data(), n);
      EXPECT_EQ(got, want) << "n=" << n;
    }
    for (int64_t i = 0; i < n; ++i) want[i] = Fp32ToFp16(Fp16ToFp32(y0[i]) * v);
    got = y0;
    ScaleF16(got.data(), v, n);
    EXPECT_EQ(got, want);
    for (const internal::IsaKernels* k : tables) {
      got = y0;
      k->scale_f16(got.data(), v, n);
      EXPECT_EQ(got, want);
    }
  }
}

// ggml's one_chunk flash attention with an F16 V, written out with plain scalar F16
// conversions: the kernel must match it bit for bit, and be close to exact attention.
TEST(OpsTest, FlashAttnF16VRowMatchesGgmlOneChunk) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t hd : {8, 32, 64, 80, 128}) {
    const int64_t n_kv = 77;
    std::vector<float> scores(n_kv);
    for (auto& x : scores) x = 2.0f * dist(rng);
    for (int64_t c = 5; c < n_kv; c += 9) scores[c] = -INFINITY;  // masked cells
    const size_t stride = static_cast<size_t>(hd) * 2 + 6;        // padded rows
    std::vector<uint8_t> v(stride * n_kv);
    for (int64_t c = 0; c < n_kv; ++c) {
      for (int64_t d = 0; d < hd; ++d) {
        const uint16_t h = Fp32ToFp16(dist(rng));
        std::memcpy(&v[c * stride + 2 * d], &h, 2);
      }
    }
    std::vector<uint16_t> scratch(hd);
    std::vector<float> got(hd);
    FlashAttnF16VRow(scores.data(), n_kv, v.data(), stride, hd, scratch.data(), got.data());
    // Reference: the C of ggml_compute_forward_flash_attn_ext_f16_one_chunk.
    std::vector<uint16_t> acc(hd, 0);
    float S = 0.0f, M = -INFINITY;
    for (int64_t c = 0; c < n_kv; ++c) {
      const float s = scores[c];
      if (s == -INFINITY) continue;
      const float Mold = M;
      float ms = 1.0f, vs = 1.0f;
      if (s > M) {
        M = s;
        ms = std::exp(Mold - M);
        for (int64_t d = 0; d < hd; ++d) acc[d] = Fp32ToFp16(Fp16ToFp32(acc[d]) * ms);
      } else {
        vs = std::exp(s - M);
      }
      for (int64_t d = 0; d < hd; ++d) {
        uint16_t x;
        std::memcpy(&x, &v[c * stride + 2 * d], 2);
        acc[d] = Fp32ToFp16(std::fma(Fp16ToFp32(x), vs, Fp16ToFp32(acc[d])));
      }
      S = std::fma(S, ms, vs);
    }
    for (int64_t d = 0; d < hd; ++d) {
      ASSERT_EQ(got[d], Fp16ToFp32(acc[d]) * (1.0f / S)) << "hd=" << hd << " d=" << d;
    }
    // The same over the visible cells only (an index list) is the same, bit for bit.
    std::vector<int32_t> idx;
    std::vector<float> compact;
    for (int64_t c = 0; c < n_kv; ++c) {
      if (scores[c] == -INFINITY) continue;
      idx.push_back(static_cast<int32_t>(c));
      compact.push_back(scores[c]);
    }
    std::vector<float> got_idx(hd);
    FlashAttnF16VRowIdx(compact.data(), idx.data(), static_cast<int64_t>(idx.size()), v.data(), stride, hd,
                        scratch.data(), got_idx.data());
    ASSERT_EQ(got_idx, got) << "hd=" << hd;
    // Close to exact softmax attention (F16 accumulation: ~1e-3 relative).
    double mx = -INFINITY, sum = 0;
    for (float s : scores) mx = std::max(mx, static_cast<double>(s));
    std::vector<double> exact(hd, 0.0);
    for (int64_t c = 0; c < n_kv; ++c) {
      if (scores[c] == -INFINITY) continue;
      const double p = std::exp(scores[c] - mx);
      sum += p;
      for (int64_t d = 0; d < hd; ++d) {
        uint16_t x;
        std::memcpy(&x, &v[c * stride + 2 * d], 2);
        exact[d] += p * Fp16ToFp32(x);
      }
    }
    for (int64_t d = 0; d < hd; ++d) EXPECT_NEAR(got[d], exact[d] / sum, 5e-3) << "hd=" << hd;
  }
  // All cells masked: zeros (S == 0).
  const float masked[3] = {-INFINITY, -INFINITY, -INFINITY};
  uint16_t scratch[8];
  float out[8];
  std::vector<uint8_t> v(3 * 16, 0x3C);
  FlashAttnF16VRow(masked, 3, v.data(), 16, 8, scratch, out);
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

TEST(OpsTest, AddMulScale) {
  const int64_t n = 100;
  const std::vector<float> a = Random(n, 12), b = Random(n, 13);
  std::vector<float> y(n);
  Add(a.data(), b.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], a[i] + b[i]);
  Mul(a.data(), b.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], a[i] * b[i]);
  Scale(a.data(), 0.3f, y.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i], a[i] * 0.3f);
  std::vector<float> z = a;
  Add(z.data(), b.data(), z.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(z[i], a[i] + b[i]);
  z = a;
  Mul(b.data(), z.data(), z.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(z[i], b[i] * a[i]);
  z = a;
  Scale(z.data(), -2.0f, z.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(z[i], -2.0f * a[i]);
}

}  // namespace
}  // namespace herd::cpu

namespace herd::cpu {
namespace {

// GemmF32 (the tiled flash attention's products): the SIMD kernels equal the scalar
// reference bit for bit (one fmaf chain per element) for every tile shape and tail, and
// the reference matches a double-precision product; C is accumulated into, and nothing
// outside the m x n block (row stride ldc) is written.
TEST(KernelsTest, GemmF32MatchesScalarReference) {
  for (int64_t m : {1, 5, 6, 7, 13, 64}) {
    for (int64_t k : {1, 8, 64, 100}) {
      for (int64_t n : {3, 8, 16, 24, 64, 67}) {
        const int64_t lda = k + 3, ldb = n + 5, ldc = n + 2;
        const std::vector<float> a = Random(m * lda, 1 + static_cast<uint32_t>(m));
        const std::vector<float> b = Random(k * ldb, 2 + static_cast<uint32_t>(k));
        const std::vector<float> c0 = Random(m * ldc, 3 + static_cast<uint32_t>(n));
        std::vector<float> want = c0, got = c0;
        GemmF32(a.data(), lda, b.data(), ldb, want.data(), ldc, m, k, n, Isa::kScalar);
        GemmF32(a.data(), lda, b.data(), ldb, got.data(), ldc, m, k, n, Isa::kAvx512);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < ldc; ++j) {
            const size_t at = static_cast<size_t>(i * ldc + j);
            if (j >= n) {
              ASSERT_EQ(got[at], c0[at]) << "wrote outside the block at " << i << "," << j;
              ASSERT_EQ(want[at], c0[at]);
              continue;
            }
            ASSERT_EQ(got[at], want[at]) << "m=" << m << " k=" << k << " n=" << n << " at " << i << "," << j;
            double ref = c0[at], mag = std::fabs(c0[at]);
            for (int64_t l = 0; l < k; ++l) {
              ref += static_cast<double>(a[i * lda + l]) * b[l * ldb + j];
              mag += std::fabs(static_cast<double>(a[i * lda + l]) * b[l * ldb + j]);
            }
            ASSERT_NEAR(want[at], ref, 1e-6 * mag) << "m=" << m << " k=" << k << " n=" << n;
          }
        }
      }
    }
  }
}

// RoundF16 (F16 weights' activations kept in F32): every ISA equals the scalar reference
// and ToF16 then F16ToF32 bit for bit, ties and overflow included, for every tail.
TEST(KernelsTest, RoundF16MatchesTwoPassConversion) {
  for (int64_t n : {1, 7, 8, 16, 17, 100}) {
    std::vector<float> x = Random(n, 21 + static_cast<uint32_t>(n));
    for (int64_t i = 0; i < n; i += 3) x[static_cast<size_t>(i)] *= 70000.0f * static_cast<float>(i % 2);  // inf, 0
    if (n > 4) x[4] = 1.0f + 1.0f / 2048.0f;  // a tie: rounds to even (1.0)
    std::vector<uint16_t> h(static_cast<size_t>(n));
    std::vector<float> want(static_cast<size_t>(n)), ref(static_cast<size_t>(n)), got = x;
    FromFloat(GgmlType::F16, x.data(), h.data(), n, Isa::kScalar);
    F16ToF32(h.data(), want.data(), n);
    RoundF16(x.data(), ref.data(), n, Isa::kScalar);
    RoundF16(got.data(), got.data(), n, Isa::kAvx512);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(ref[i], want[i]) << "n=" << n << " i=" << i << " x=" << x[i];
      ASSERT_EQ(got[i], want[i]) << "n=" << n << " i=" << i << " x=" << x[i];
    }
    if (n > 4) {
      EXPECT_EQ(got[4], 1.0f);
    }
  }
}

// ScaleMaskMax (the tiled flash attention's score step): the SIMD kernel equals the scalar
// reference bit for bit, with and without a mask (0 / -inf cells and ALiBi-style
// distances, a slope != 1), for every tail, in place; the max is that of the outputs and
// each output is x * scale + slope * mask rounded per operation.
TEST(KernelsTest, ScaleMaskMaxMatchesScalarReference) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t n : {1, 7, 8, 15, 16, 17, 64, 100}) {
    const std::vector<float> x = Random(n, 11 + static_cast<uint32_t>(n));
    std::vector<float> mask(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) mask[i] = i % 3 == 1 ? ninf : -0.1f * static_cast<float>(i % 7);
    for (bool with_mask : {false, true}) {
      for (float slope : {1.0f, 0.375f}) {
        const float* m = with_mask ? mask.data() : nullptr;
        std::vector<float> want(static_cast<size_t>(n)), got = x;
        const float mw = ScaleMaskMax(x.data(), m, 0.125f, slope, want.data(), n, Isa::kScalar);
        const float mg = ScaleMaskMax(got.data(), m, 0.125f, slope, got.data(), n, Isa::kAvx512);
        float mx = ninf;
        for (int64_t i = 0; i < n; ++i) {
          float v = x[i] * 0.125f;
          if (with_mask) v += slope * mask[i];
          ASSERT_EQ(want[i], v) << "n=" << n << " i=" << i;
          ASSERT_EQ(got[i], want[i]) << "n=" << n << " i=" << i << " mask=" << with_mask;
          mx = std::max(mx, v);
        }
        EXPECT_EQ(mw, mx) << "n=" << n;
        EXPECT_EQ(mg, mx) << "n=" << n << " mask=" << with_mask;
      }
    }
  }
  std::vector<float> all_masked(20, ninf), y(20);
  const std::vector<float> x = Random(20, 5);
  EXPECT_EQ(ScaleMaskMax(x.data(), all_masked.data(), 1.0f, 1.0f, y.data(), 20, Isa::kAvx512), ninf);
}

// ExpSubMax: y = exp(x - max) within ggml_v_expf's error of expf, sum returned.
TEST(KernelsTest, ExpSubMaxMatchesExpf) {
  const std::vector<float> x = Random(77, 9, 8.0f);
  std::vector<float> y(x.size());
  const float mx = *std::max_element(x.begin(), x.end());
  const double sum = ExpSubMax(x.data(), y.data(), static_cast<int64_t>(x.size()), mx);
  double want_sum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = std::exp(x[i] - mx);
    want_sum += want;
    ASSERT_NEAR(y[i], want, 2e-6 * want + 1e-30) << i;
  }
  EXPECT_NEAR(sum, want_sum, 1e-5 * want_sum);
}

// The fused one-token F16 flash attention of `isa` (flash_attn_token.inc; hd a multiple of
// `lanes`) equals the reference loop (GetVecDot(F16, isa) dots, MadF16 / ScaleF16
// accumulation) bit for bit: head sizes with and without a
// register-resident accumulator, one to many heads in a cell, masked cells, ALiBi slopes,
// a running max that rises and falls, blocks of 64 cells and ragged ends; and what
// FlashAttnF16Heads dispatches to gives the same.
void CheckFusedFlashAttnF16(Isa isa, void (*fused)(const FlashAttnF16Token&), int64_t lanes) {
  std::mt19937 g(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const VecDotFn dot = GetVecDot(GgmlType::F16, isa);
  struct Case {
    int64_t hd, nh, n_cells, n_vis;
    bool mask, alibi;
  };
  const Case cases[] = {{64, 1, 1, 1, false, false},    {64, 12, 100, 63, true, false}, {64, 4, 300, 150, true, true},
                        {128, 8, 80, 80, false, false}, {128, 3, 200, 130, true, true}, {80, 5, 70, 66, true, false},
                        {64, 2, 10, 0, true, false},    {32, 6, 40, 17, true, true}};
  for (const Case& cs : cases) {
    const size_t row = static_cast<size_t>(cs.hd) * 2;
    // Each cell: nh head rows (some heads share a row, as under GQA) plus padding.
    const int64_t n_rows = (cs.nh + 1) / 2;
    const size_t stride = static_cast<size_t>(n_rows) * row + 32;
    std::vector<uint8_t> k(static_cast<size_t>(cs.n_cells) * stride), v(k.size());
    for (size_t i = 0; i + 1 < k.size(); i += 2) {
      const uint16_t a = Fp32ToFp16(nd(g) * 2.0f), b = Fp32ToFp16(nd(g));
      std::memcpy(&k[i], &a, 2);
      std::memcpy(&v[i], &b, 2);
    }
    std::vector<uint16_t> q(static_cast<size_t>(cs.nh * cs.hd));
    for (auto& x : q) x = Fp32ToFp16(nd(g));
    std::vector<size_t> head_off(static_cast<size_t>(cs.nh));
    std::vector<float> slope(static_cast<size_t>(cs.nh));
    for (int64_t j = 0; j < cs.nh; ++j) {
      head_off[static_cast<size_t>(j)] = static_cast<size_t>(j / 2) * row;
      slope[static_cast<size_t>(j)] = cs.alibi ? 1.0f / static_cast<float>(1 << (j % 4)) : 1.0f;
    }
    std::vector<int32_t> idx;
    std::vector<float> mask(static_cast<size_t>(cs.n_cells), -INFINITY);
    std::uniform_int_distribution<int64_t> pick(0, cs.n_cells - 1);
    std::vector<uint8_t> seen(static_cast<size_t>(cs.n_cells), 0);
    for (int64_t i = 0; i < cs.n_vis; ++i) seen[static_cast<size_t>(cs.mask ? pick(g) : i)] = 1;
    for (int64_t c = 0; c < cs.n_cells; ++c) {
      if (!seen[static_cast<size_t>(c)]) continue;
      idx.push_back(static_cast<int32_t>(c));
      mask[static_cast<size_t>(c)] = cs.alibi ? -static_cast<float>(cs.n_cells - c) : 0.0f;
    }
    // A few visible cells with a -inf score contribution (skipped by both).
    if (cs.mask && idx.size() > 3) mask[static_cast<size_t>(idx[2])] = -INFINITY;
    FlashAttnF16Token a;
    a.hd = cs.hd;
    a.nh = cs.nh;
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.k_stride = a.v_stride = stride;
    a.head_off = head_off.data();
    a.idx = idx.data();
    a.n = static_cast<int64_t>(idx.size());
    a.mask = cs.mask ? mask.data() : nullptr;
    a.slope = slope.data();
    a.scale = 0.0883883f;  // not a power of two: the rounding of the product counts
    a.out_stride = static_cast<size_t>(cs.hd) + 3;
    std::vector<float> want(static_cast<size_t>(cs.nh) * a.out_stride, 7.0f), got(want), got_dispatch(want);
    std::vector<float> scores(static_cast<size_t>(cs.nh * std::max<int64_t>(1, a.n)));
    std::vector<uint16_t> vkq(static_cast<size_t>(cs.nh * cs.hd));
    a.scores = scores.data();
    a.vkq16 = vkq.data();
    a.out = want.data();
    // Each head's running max and weight sum (shared-prefix attention merges with them).
    std::vector<float> m_ref(static_cast<size_t>(cs.nh), 5.0f), s_ref(m_ref), m_got(m_ref), s_got(m_ref);
    a.m_out = m_ref.data();
    a.s_out = s_ref.data();
    internal::FlashAttnF16HeadsGeneric(a, dot);
    const std::vector<float> scores_ref = scores;
    for (int64_t j = 0; j < cs.nh; ++j) {
      float mx = -INFINITY;
      for (int64_t i = 0; i < a.n; ++i) mx = std::max(mx, scores_ref[static_cast<size_t>(j * a.n + i)]);
      double sum = 0.0;
      for (int64_t i = 0; i < a.n && mx != -INFINITY; ++i) {
        sum += std::exp(static_cast<double>(scores_ref[static_cast<size_t>(j * a.n + i)]) - mx);
      }
      ASSERT_EQ(m_ref[static_cast<size_t>(j)], mx) << "hd=" << cs.hd << " head " << j;
      ASSERT_NEAR(s_ref[static_cast<size_t>(j)], sum, 1e-5 * sum) << "hd=" << cs.hd << " head " << j;
    }
    a.m_out = m_got.data();
    a.s_out = s_got.data();
    a.out = got_dispatch.data();
    FlashAttnF16Heads(a, dot);
    ASSERT_EQ(got_dispatch, want) << "hd=" << cs.hd << " nh=" << cs.nh;
    if (cs.hd % lanes != 0) continue;
    a.out = got.data();
    fused(a);
    // The scaled, masked scores too (the outputs alone can hide a last-bit score change).
    ASSERT_EQ(scores, scores_ref) << "hd=" << cs.hd << " nh=" << cs.nh;
    ASSERT_EQ(m_got, m_ref) << "hd=" << cs.hd << " nh=" << cs.nh;
    ASSERT_EQ(s_got, s_ref) << "hd=" << cs.hd << " nh=" << cs.nh;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << "hd=" << cs.hd << " nh=" << cs.nh << " n=" << a.n << " at " << i;
    }
    // Non-trivial: some output differs from 0 and from the untouched padding.
    if (a.n > 0) {
      EXPECT_NE(want[0], 0.0f);
    }
    EXPECT_EQ(want[static_cast<size_t>(cs.hd)], 7.0f);
  }
}

TEST(OpsTest, FlashAttnF16HeadsAvx2MatchesReference) {
  if (!IsaSupported(Isa::kAvx2)) GTEST_SKIP() << "needs AVX2";
  CheckFusedFlashAttnF16(Isa::kAvx2, internal::FlashAttnF16HeadsAvx2, 8);
}

// The same unit built for AVX-512 (16-lane dots, as GetVecDot(F16, kAvx512)), which
// FlashAttnF16Heads takes on AVX-512 machines.
TEST(OpsTest, FlashAttnF16HeadsAvx512MatchesReference) {
  if (!IsaSupported(Isa::kAvx512)) GTEST_SKIP() << "needs AVX-512";
  CheckFusedFlashAttnF16(Isa::kAvx512, internal::FlashAttnF16HeadsAvx512, 16);
}

// The shared-prefix tile step (flash_attn_token.h SharedAttnTile): three tiles of 64, 64
// and 23 cells (a partial last tile) for 1..31 rows, K and V rows strided as in a tile of
// several heads; the running (M, L, O) after the last tile, normalized, equal softmax
// attention computed in double, and each SIMD kernel equals the scalar reference within
// F32 rounding.
void CheckSharedAttnTile(void (*fused)(const SharedAttnTile&), int64_t lanes) {
  std::mt19937 rng(41);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t hd : {64, 128, 80}) {
    if (fused != nullptr && hd % lanes != 0) continue;
    for (int64_t rows : {1, 5, 16, 31}) {
      const int64_t rp = (rows + 15) / 16 * 16, ld = hd * 3;
      const std::vector<int64_t> tiles = {64, 64, 23};
      std::vector<std::vector<float>> k(tiles.size()), v(tiles.size());
      for (size_t i = 0; i < tiles.size(); ++i) {
        k[i].resize(static_cast<size_t>(tiles[i] * ld));
        v[i].resize(static_cast<size_t>(tiles[i] * ld));
        for (auto& x : k[i]) x = nd(rng);
        for (auto& x : v[i]) x = Fp16ToFp32(Fp32ToFp16(nd(rng)));  // exact in F16 too
      }
      // V also as F16 rows in a cache of 100 cells, the tile's cells scattered over it.
      std::vector<std::vector<uint16_t>> v16(tiles.size());
      std::vector<std::vector<int32_t>> cells(tiles.size());
      for (size_t i = 0; i < tiles.size(); ++i) {
        v16[i].assign(static_cast<size_t>(100 * ld), 0);
        for (int64_t j = 0; j < tiles[i]; ++j) {
          const int32_t c = static_cast<int32_t>((j * 37 + 11) % 100);
          cells[i].push_back(c);
          for (int64_t e = 0; e < ld; ++e) {
            v16[i][static_cast<size_t>(c * ld + e)] = Fp32ToFp16(v[i][static_cast<size_t>(j * ld + e)]);
          }
        }
      }
      std::vector<float> qt(static_cast<size_t>(hd * rp), 0.0f);
      for (int64_t d = 0; d < hd; ++d)
        for (int64_t r = 0; r < rows; ++r) qt[static_cast<size_t>(d * rp + r)] = nd(rng);
      const float scale = 0.3f;
      struct State {
        std::vector<float> m, l, o, st;
      };
      auto run = [&](void (*fn)(const SharedAttnTile&), State* st, bool f16_v) {
        st->m.assign(static_cast<size_t>(rp), -INFINITY);
        st->l.assign(static_cast<size_t>(rp), 0.0f);
        st->o.assign(static_cast<size_t>(rows * hd), 0.0f);
        st->st.assign(static_cast<size_t>(64 * rp + rp), 0.0f);
        for (size_t i = 0; i < tiles.size(); ++i) {
          SharedAttnTile t;
          t.hd = hd;
          t.nc = tiles[i];
          t.rows = rows;
          t.rp = rp;
          t.k = k[i].data() + hd;  // the second head of three
          t.v = v[i].data() + hd;
          t.ldk = t.ldv = ld;
          if (f16_v) {
            t.v16 = reinterpret_cast<const uint8_t*>(v16[i].data() + hd);
            t.cells = cells[i].data();
            t.v16_stride = static_cast<size_t>(ld) * 2;
          }
          t.qt = qt.data();
          t.scale = scale;
          t.m = st->m.data();
          t.l = st->l.data();
          t.o = st->o.data();
          t.st = st->st.data();
          fn(t);
        }
      };
      State ref, got;
      run(internal::SharedAttnTileRef, &ref, false);
      for (int64_t r = 0; r < rows; ++r) {  // the reference against softmax attention in double
        std::vector<double> sc;
        for (size_t i = 0; i < tiles.size(); ++i) {
          for (int64_t j = 0; j < tiles[i]; ++j) {
            double d = 0;
            for (int64_t e = 0; e < hd; ++e) {
              d +=
                  static_cast<double>(k[i][static_cast<size_t>(j * ld + hd + e)]) * qt[static_cast<size_t>(e * rp + r)];
            }
            sc.push_back(d * scale);
          }
        }
        const double mx = *std::max_element(sc.begin(), sc.end());
        double sum = 0;
        for (double& x : sc) sum += (x = std::exp(x - mx));
        ASSERT_NEAR(ref.m[static_cast<size_t>(r)], mx, 1e-4 * (1 + std::fabs(mx))) << "hd=" << hd << " r=" << r;
        ASSERT_NEAR(ref.l[static_cast<size_t>(r)], sum, 1e-4 * sum) << "hd=" << hd << " r=" << r;
        for (int64_t e = 0; e < hd; ++e) {
          double want = 0;
          size_t c = 0;
          for (size_t i = 0; i < tiles.size(); ++i) {
            for (int64_t j = 0; j < tiles[i]; ++j) want += sc[c++] * v[i][static_cast<size_t>(j * ld + hd + e)];
          }
          want /= sum;
          const double out = ref.o[static_cast<size_t>(r * hd + e)] / ref.l[static_cast<size_t>(r)];
          ASSERT_NEAR(out, want, 1e-4 * (1 + std::fabs(want))) << "hd=" << hd << " r=" << r << " e=" << e;
        }
      }
      for (bool f16_v : {false, true}) {
        run(fused != nullptr ? fused : internal::SharedAttnTileRef, &got, f16_v);
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_NEAR(got.m[static_cast<size_t>(r)], ref.m[static_cast<size_t>(r)], 1e-5f * (1 + std::fabs(ref.m[r])));
          ASSERT_NEAR(got.l[static_cast<size_t>(r)], ref.l[static_cast<size_t>(r)], 1e-5f * ref.l[r]);
          for (int64_t e = 0; e < hd; ++e) {
            const float want = ref.o[static_cast<size_t>(r * hd + e)];
            ASSERT_NEAR(got.o[static_cast<size_t>(r * hd + e)], want, 1e-5f * (ref.l[r] + std::fabs(want)))
                << "hd=" << hd << " rows=" << rows << " r=" << r << " e=" << e << " f16_v=" << f16_v;
          }
        }
      }
    }
  }
}

TEST(OpsTest, SharedAttnTileReferenceMatchesSoftmaxAttention) { CheckSharedAttnTile(nullptr, 1); }

TEST(OpsTest, SharedAttnTileAvx2MatchesReference) {
  if (!IsaSupported(Isa::kAvx2)) GTEST_SKIP() << "needs AVX2";
  CheckSharedAttnTile(internal::SharedAttnTileAvx2, 8);
}

TEST(OpsTest, SharedAttnTileAvx512MatchesReference) {
  if (!IsaSupported(Isa::kAvx512)) GTEST_SKIP() << "needs AVX-512";
  CheckSharedAttnTile(internal::SharedAttnTileAvx512, 16);
}

}  // namespace
}  // namespace herd::cpu
