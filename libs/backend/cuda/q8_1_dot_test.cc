// The quantized mat-vec's math (q8_1_dot.h) on the host: the same functions the CUDA /
// HIP kernels call, with the host dp4a emulation. No GPU needed.
//
// For every weight type of the mat-vec (Q4_0, Q8_0, Q4_K, Q6_K), random rows quantized by
// libs/tensor's quantizers are dotted with random activations three ways:
//   1. q8_1_dot.h: activations to q8_1 (QuantizeQ8_1), per-unit integer dots (Dot*);
//   2. an independent recomputation of the same formula: each weight's integer level
//      unpacked element by element from the block layout (quants.h), plain int sums, the
//      same float scaling; must be bit-identical to 1;
//   3. the CPU reference: weight dequantized to F32 (DequantizeRow) . F32 activations, in
//      double; 1 must be within the q8_1 activation rounding of it (tolerances below).
#include "libs/backend/cuda/q8_1_dot.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

#include "libs/base/fp16.h"
#include "libs/tensor/quants.h"

namespace herd {
namespace {

using q8dot::Q8_1Block;

std::vector<float> RandomRow(int64_t n, std::mt19937* rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(*rng);
  return v;
}

TEST(Q8_1DotTest, Dp4aEmulation) {
  std::mt19937 rng(1);
  for (int t = 0; t < 10000; ++t) {
    const int a = static_cast<int>(rng()), b = static_cast<int>(rng()), c = static_cast<int>(rng() % 100000) - 50000;
    int want = c;
    for (int i = 0; i < 4; ++i) {
      want += static_cast<int8_t>((static_cast<uint32_t>(a) >> (8 * i)) & 0xFF) *
              static_cast<int8_t>((static_cast<uint32_t>(b) >> (8 * i)) & 0xFF);
    }
    ASSERT_EQ(q8dot::Dp4a(a, b, c), want);
  }
  EXPECT_EQ(q8dot::Dp4a(static_cast<int>(0x80808080u), static_cast<int>(0x80808080u), 0), 4 * 128 * 128);
  EXPECT_EQ(q8dot::Dp4a(0x7F7F7F7F, static_cast<int>(0x81818181u), 5), 5 - 4 * 127 * 127);
}

TEST(Q8_1DotTest, HalfConversionMatchesBase) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t hh = static_cast<uint16_t>(h);
    const float f = q8dot::F16ToF32(hh);
    if (std::isnan(f)) continue;
    const float g = Fp16ToFp32(hh);
    ASSERT_EQ(std::memcmp(&f, &g, 4), 0) << h;
  }
  std::mt19937 rng(2);
  std::uniform_int_distribution<uint32_t> bits;
  for (int t = 0; t < 200000; ++t) {
    uint32_t x = bits(rng);
    // Concentrate on the F16 range (exponents 100..145) half of the time.
    if (t % 2 == 0) x = (x & 0x807FFFFFu) | ((100u + (x >> 23) % 46u) << 23);
    float f;
    std::memcpy(&f, &x, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(q8dot::F32ToF16(f), Fp32ToFp16(f)) << std::hex << x;
  }
}

// The header's quantization is quantize_row_q8_1_ref bit for bit.
TEST(Q8_1DotTest, QuantizeMatchesReference) {
  std::mt19937 rng(3);
  for (float scale : {1e-3f, 1.0f, 30.0f}) {
    std::vector<float> x = RandomRow(4096, &rng, scale);
    for (int j = 0; j < 32; ++j) x[64 + j] = 0.0f;  // an all-zero block
    x[200] = 127.5f * scale;                        // ties and extremes
    std::vector<BlockQ8_1> ref(4096 / 32);
    QuantizeRowQ8_1Ref(x.data(), ref.data(), 4096);
    for (size_t b = 0; b < ref.size(); ++b) {
      Q8_1Block y;
      q8dot::QuantizeQ8_1(x.data() + 32 * b, &y);
      ASSERT_EQ(y.d, ref[b].d) << b;
      ASSERT_EQ(y.s, ref[b].s) << b;
      ASSERT_EQ(std::memcmp(y.qs, ref[b].qs, 32), 0) << b;
    }
  }
}

// Integer level of weight e (0..31) of unit u of a row, unpacked element by element from
// quants.h's layouts, and the float scaling of the unit's sums, written independently of
// q8_1_dot.h's word-wise code.
float Recompute(GgmlType t, const uint8_t* row, int64_t u, const Q8_1Block& y) {
  const float d8 = Fp16ToFp32(y.d), s8 = Fp16ToFp32(y.s);
  switch (t) {
    case GgmlType::Q4_0: {
      const auto* b = reinterpret_cast<const BlockQ4_0*>(row) + u;
      int sumi = 0;
      for (int e = 0; e < 32; ++e) sumi += (e < 16 ? b->qs[e] & 0xF : b->qs[e - 16] >> 4) * y.qs[e];
      return Fp16ToFp32(b->d) * (d8 * static_cast<float>(sumi) - 8.0f * s8);
    }
    case GgmlType::Q8_0: {
      const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + u;
      int sumi = 0;
      for (int e = 0; e < 32; ++e) sumi += b->qs[e] * y.qs[e];
      return Fp16ToFp32(b->d) * d8 * static_cast<float>(sumi);
    }
    case GgmlType::Q4_K: {
      const auto* b = reinterpret_cast<const BlockQ4_K*>(row) + u / 8;
      const int j = static_cast<int>(u % 8);
      int sc, m;
      if (j < 4) {
        sc = b->scales[j] & 63;
        m = b->scales[j + 4] & 63;
      } else {
        sc = (b->scales[j + 4] & 0xF) | ((b->scales[j - 4] >> 6) << 4);
        m = (b->scales[j + 4] >> 4) | ((b->scales[j] >> 6) << 4);
      }
      int sumi = 0;
      for (int e = 0; e < 32; ++e) {
        const uint8_t byte = b->qs[(j / 2) * 32 + e];
        sumi += ((j % 2 == 0) ? byte & 0xF : byte >> 4) * y.qs[e];
      }
      return Fp16ToFp32(b->d) * static_cast<float>(sc) * d8 * static_cast<float>(sumi) -
             Fp16ToFp32(b->dmin) * static_cast<float>(m) * s8;
    }
    case GgmlType::Q6_K: {
      // dequantize_row_q6_K: in half h (128 elements), position l < 32 holds elements
      // l (ql[l] low, qh[l] bits 0-1), l+32 (ql[l+32] low, bits 2-3), l+64 (ql[l] high,
      // bits 4-5), l+96 (ql[l+32] high, bits 6-7); scale index l/16 + 0, 2, 4, 6.
      const auto* b = reinterpret_cast<const BlockQ6_K*>(row) + u / 8;
      const int64_t first = (u % 8) * 32;  // element index within the super-block
      int grp[2] = {0, 0};
      int scs[2] = {0, 0};
      for (int e = 0; e < 32; ++e) {
        const int64_t idx = first + e;
        const int h = static_cast<int>(idx / 128), r = static_cast<int>(idx % 128);
        const int quarter = r / 32, l = r % 32;
        const uint8_t qlb = b->ql[h * 64 + l + (quarter % 2) * 32];
        const int low = quarter < 2 ? qlb & 0xF : qlb >> 4;
        const int high = (b->qh[h * 32 + l] >> (2 * quarter)) & 3;
        grp[e / 16] += ((low | (high << 4)) - 32) * y.qs[e];
        scs[e / 16] = b->scales[h * 8 + l / 16 + 2 * quarter];
      }
      return Fp16ToFp32(b->d) * d8 * static_cast<float>(scs[0] * grp[0] + scs[1] * grp[1]);
    }
    default:
      return NAN;
  }
}

float HeaderDot(GgmlType t, const uint8_t* row, int64_t u, const Q8_1Block& y) {
  switch (t) {
    case GgmlType::Q4_0:
      return q8dot::DotQ4_0(row + u * 18, y);
    case GgmlType::Q8_0:
      return q8dot::DotQ8_0(row + u * 34, y);
    case GgmlType::Q4_K:
      return q8dot::DotQ4_K(row + (u / 8) * 144, static_cast<int>(u % 8), y);
    case GgmlType::Q6_K:
      return q8dot::DotQ6_K(row + (u / 8) * 210, static_cast<int>(u % 8), y);
    default:
      return NAN;
  }
}

class Q8_1DotTypeTest : public ::testing::TestWithParam<GgmlType> {};

// Tolerances: per row |q8 - ref| <= 0.01 * |w| |x| (the activation rounding is at most
// d8 / 2 = amax / 254 per element; a random-sign sum of K such errors stays far below
// that), and over all rows NMSE = sum (q8 - ref)^2 / sum ref^2 <= 1e-4 (backend_ops
// allows 5e-4 for quantized products).
TEST_P(Q8_1DotTypeTest, MatchesReferenceAndRecomputation) {
  const GgmlType t = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(t) + 10);
  double err2 = 0, ref2 = 0;
  for (int64_t K : {256, 4096, 11008}) {
    for (int r = 0; r < 8; ++r) {
      const std::vector<float> wf = RandomRow(K, &rng, 0.02f);
      std::vector<float> x = RandomRow(K, &rng, r % 2 == 0 ? 1.0f : 40.0f);
      if (r == 3) {
        for (int64_t k = 0; k < K; k += 7) x[static_cast<size_t>(k)] = 0.0f;  // sparse-ish activations
      }
      std::vector<uint8_t> w(GgmlRowSize(t, K));
      QuantizeRow(t, wf.data(), w.data(), K);
      std::vector<float> wd(static_cast<size_t>(K));
      DequantizeRow(t, w.data(), wd.data(), K);
      double ref = 0, wn = 0, xn = 0;
      for (int64_t k = 0; k < K; ++k) {
        ref += static_cast<double>(wd[k]) * x[k];
        wn += static_cast<double>(wd[k]) * wd[k];
        xn += static_cast<double>(x[k]) * x[k];
      }
      std::vector<Q8_1Block> xq(static_cast<size_t>(K / 32));
      for (int64_t u = 0; u < K / 32; ++u) q8dot::QuantizeQ8_1(x.data() + 32 * u, &xq[static_cast<size_t>(u)]);
      float dot = 0.0f, again = 0.0f;
      for (int64_t u = 0; u < K / 32; ++u) {
        const float a = HeaderDot(t, w.data(), u, xq[static_cast<size_t>(u)]);
        const float b = Recompute(t, w.data(), u, xq[static_cast<size_t>(u)]);
        ASSERT_EQ(a, b) << GgmlTypeName(t) << " K=" << K << " row " << r << " unit " << u;
        dot += a;
        again += b;
      }
      EXPECT_EQ(dot, again);
      EXPECT_LE(std::fabs(dot - ref), 0.01 * std::sqrt(wn * xn))
          << GgmlTypeName(t) << " K=" << K << " row " << r << ": " << dot << " vs " << ref;
      err2 += (dot - ref) * (dot - ref);
      ref2 += ref * ref;
    }
  }
  EXPECT_LE(err2 / ref2, 1e-4) << GgmlTypeName(t);
}

INSTANTIATE_TEST_SUITE_P(MatVecTypes, Q8_1DotTypeTest,
                         ::testing::Values(GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K),
                         [](const ::testing::TestParamInfo<GgmlType>& i) { return GgmlTypeName(i.param); });

}  // namespace
}  // namespace herd
