#include "libs/tensor/quants.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

#include "libs/base/fp16.h"

namespace herd {
namespace {

std::vector<float> RandomRow(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(QuantsTest, BlockLayout) {
  EXPECT_EQ(sizeof(BlockQ8_0), 34u);
  EXPECT_EQ(sizeof(BlockQ4_0), 18u);
  EXPECT_EQ(GgmlRowSize(GgmlType::Q8_0, 64), 2 * sizeof(BlockQ8_0));
  EXPECT_EQ(GgmlRowSize(GgmlType::Q4_0, 64), 2 * sizeof(BlockQ4_0));
}

TEST(QuantsTest, Q8_0KnownPattern) {
  // x = j - 16: amax 16, d = 16/127 -> F16 0x3008, 1/d = 7.9375.
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  BlockQ8_0 b;
  QuantizeRowQ8_0Ref(x, &b, 32);
  EXPECT_EQ(b.d, 0x3008);
  const int expect[32] = {-127, -119, -111, -103, -95, -87, -79, -71, -64, -56, -48, -40, -32, -24, -16, -8,
                          0,    8,    16,   24,   32,  40,  48,  56,  64,  71,  79,  87,  95,  103, 111, 119};
  for (int j = 0; j < 32; ++j) EXPECT_EQ(b.qs[j], expect[j]) << j;
  BlockQ8_0 bx;
  QuantizeRowQ8_0X86(x, &bx, 32);
  EXPECT_EQ(std::memcmp(&b, &bx, sizeof b), 0);  // no ties here: both agree

  float y[32];
  DequantizeRowQ8_0(&b, y, 32);
  const float d = Fp16ToFp32(0x3008);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], expect[j] * d);
}

TEST(QuantsTest, Q8_0Ties) {
  // amax 127 -> d = 1 exactly, so x * id lands exactly on .5 ties.
  float x[32] = {127.0f, 2.5f, -2.5f, 0.5f, 1.5f, -0.5f, -1.5f, 3.5f};
  BlockQ8_0 ref, x86;
  QuantizeRowQ8_0Ref(x, &ref, 32);
  QuantizeRowQ8_0X86(x, &x86, 32);
  EXPECT_EQ(ref.d, 0x3C00);
  EXPECT_EQ(x86.d, 0x3C00);
  const int expect_ref[8] = {127, 3, -3, 1, 2, -1, -2, 4};  // roundf: away from zero
  const int expect_x86[8] = {127, 2, -2, 0, 2, 0, -2, 4};   // nearest even
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(ref.qs[j], expect_ref[j]) << j;
    EXPECT_EQ(x86.qs[j], expect_x86[j]) << j;
  }
  // amax 254 -> d = 2, id = 0.5 (both variants): 5 -> 2.5.
  float z[32] = {-254.0f, 5.0f, -7.0f};
  QuantizeRowQ8_0Ref(z, &ref, 32);
  QuantizeRowQ8_0X86(z, &x86, 32);
  EXPECT_EQ(ref.d, 0x4000);
  EXPECT_EQ(ref.qs[0], -127);
  EXPECT_EQ(ref.qs[1], 3);
  EXPECT_EQ(ref.qs[2], -4);
  EXPECT_EQ(x86.qs[1], 2);
  EXPECT_EQ(x86.qs[2], -4);
}

TEST(QuantsTest, Q8_0ZeroBlock) {
  float x[64] = {};
  x[40] = 1.0f;  // second block non-zero
  BlockQ8_0 b[2];
  QuantizeRowQ8_0Ref(x, b, 64);
  EXPECT_EQ(b[0].d, 0);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(b[0].qs[j], 0);
  EXPECT_EQ(b[1].qs[8], 127);
}

TEST(QuantsTest, Q4_0KnownPattern) {
  // x = (j - 16) / 2: signed max -8 -> d = 1, id = 1; +7.5 -> 16 clamps to 15.
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = (j - 16) * 0.5f;
  BlockQ4_0 b;
  QuantizeRowQ4_0Ref(x, &b, 32);
  EXPECT_EQ(b.d, 0x3C00);
  const uint8_t expect[16] = {0x80, 0x91, 0x91, 0xa2, 0xa2, 0xb3, 0xb3, 0xc4,
                              0xc4, 0xd5, 0xd5, 0xe6, 0xe6, 0xf7, 0xf7, 0xf8};
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], expect[j]) << j;
  float y[32];
  DequantizeRowQ4_0(&b, y, 32);
  EXPECT_EQ(y[0], -8.0f);
  EXPECT_EQ(y[1], -7.0f);  // -7.5 + 8.5 = 1.0 -> 1
  EXPECT_EQ(y[16], 0.0f);
  EXPECT_EQ(y[31], 7.0f);  // clamped
}

TEST(QuantsTest, Q4_0PositiveMaxGivesNegativeScale) {
  float x[32] = {};
  x[3] = 4.0f;
  x[7] = -2.0f;
  BlockQ4_0 b;
  QuantizeRowQ4_0Ref(x, &b, 32);
  EXPECT_EQ(b.d, Fp32ToFp16(-0.5f));
  float y[32];
  DequantizeRowQ4_0(&b, y, 32);
  EXPECT_EQ(y[3], 4.0f);
  EXPECT_EQ(y[7], -2.0f);
  EXPECT_EQ(y[0], 0.0f);
}

TEST(QuantsTest, RoundTripErrorBounds) {
  const int64_t n = 4096;
  const std::vector<float> x = RandomRow(n, 1, 3.0f);
  std::vector<BlockQ8_0> q8(n / 32);
  std::vector<BlockQ4_0> q4(n / 32);
  std::vector<float> y(n);
  for (int variant = 0; variant < 2; ++variant) {
    if (variant == 0)
      QuantizeRowQ8_0Ref(x.data(), q8.data(), n);
    else
      QuantizeRowQ8_0X86(x.data(), q8.data(), n);
    DequantizeRowQ8_0(q8.data(), y.data(), n);
    for (int64_t b = 0; b < n / 32; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[b * 32 + j]));
      const float d = amax / 127.0f;
      for (int j = 0; j < 32; ++j) {
        // half a step, plus the F16 rounding of d (<= 2^-11 relative) times |q| <= 127
        EXPECT_LE(std::fabs(x[b * 32 + j] - y[b * 32 + j]), 0.5f * d + 127.0f * d / 2048.0f + 1e-7f);
      }
    }
  }
  QuantizeRowQ4_0Ref(x.data(), q4.data(), n);
  DequantizeRowQ4_0(q4.data(), y.data(), n);
  double err2 = 0, sig2 = 0;
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 8.0f;
    for (int j = 0; j < 32; ++j) {
      const float e = std::fabs(x[b * 32 + j] - y[b * 32 + j]);
      // one step at the clamped end (+8 -> 7), else half a step; plus F16 error of d
      EXPECT_LE(e, d + 8.0f * d / 2048.0f + 1e-7f);
      err2 += e * e;
      sig2 += x[b * 32 + j] * x[b * 32 + j];
    }
  }
  EXPECT_LT(std::sqrt(err2 / sig2), 0.12);  // ~4-bit SNR
}

TEST(QuantsTest, RowDispatch) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0}) {
    EXPECT_TRUE(CanQuantize(t));
    EXPECT_TRUE(CanDequantize(t));
  }
  EXPECT_FALSE(CanDequantize(GgmlType::IQ2_XXS));
  EXPECT_FALSE(CanQuantize(GgmlType::I32));

  const int64_t n = 96;
  const std::vector<float> x = RandomRow(n, 7);
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0}) {
    std::vector<uint8_t> buf(GgmlRowSize(t, n));
    QuantizeRow(t, x.data(), buf.data(), n);
    std::vector<float> y(n);
    DequantizeRow(t, buf.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      switch (t) {
        case GgmlType::F32:
          EXPECT_EQ(y[i], x[i]);
          break;
        case GgmlType::F16:
          EXPECT_EQ(y[i], Fp16ToFp32(Fp32ToFp16(x[i])));
          break;
        case GgmlType::BF16:
          EXPECT_EQ(y[i], Bf16ToFp32(Fp32ToBf16(x[i])));
          break;
        default:
          EXPECT_NEAR(y[i], x[i], t == GgmlType::Q8_0 ? 0.03 : 0.5);
          break;
      }
    }
  }
  // Q8_0 / Q4_0 dispatch is the Ref quantizer.
  std::vector<BlockQ8_0> a(3), b(3);
  QuantizeRow(GgmlType::Q8_0, x.data(), a.data(), n);
  QuantizeRowQ8_0Ref(x.data(), b.data(), n);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), 3 * sizeof(BlockQ8_0)), 0);
}

// ------------------------------------------------------------------ every block type

const GgmlType kBlockTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,   GgmlType::Q5_1,  GgmlType::Q8_0,
                                GgmlType::Q8_1, GgmlType::Q2_K, GgmlType::Q3_K,   GgmlType::Q4_K,  GgmlType::Q5_K,
                                GgmlType::Q6_K, GgmlType::Q8_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS};

TEST(QuantsTest, AllBlockLayoutsMatchTheGgmlTypeTable) {
  const size_t sizes[] = {sizeof(BlockQ4_0),   sizeof(BlockQ4_1),  sizeof(BlockQ5_0), sizeof(BlockQ5_1),
                          sizeof(BlockQ8_0),   sizeof(BlockQ8_1),  sizeof(BlockQ2_K), sizeof(BlockQ3_K),
                          sizeof(BlockQ4_K),   sizeof(BlockQ5_K),  sizeof(BlockQ6_K), sizeof(BlockQ8_K),
                          sizeof(BlockIQ4_NL), sizeof(BlockIQ4_XS)};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
    EXPECT_EQ(GetGgmlTypeTraits(kBlockTypes[i])->type_size, sizes[i]) << GgmlTypeName(kBlockTypes[i]);
    EXPECT_TRUE(CanQuantize(kBlockTypes[i]));
    EXPECT_TRUE(CanDequantize(kBlockTypes[i]));
  }
}

// Relative RMS error of a quantize/dequantize round trip of Gaussian data: each format
// must reach its expected precision (bounds ~1.3x what llama.cpp's quantizers achieve).
TEST(QuantsTest, AllTypesRoundTripPrecision) {
  struct Bound {
    GgmlType t;
    double rel_rms;
  };
  const Bound bounds[] = {{GgmlType::Q4_0, 0.12},   {GgmlType::Q4_1, 0.10},  {GgmlType::Q5_0, 0.06},
                          {GgmlType::Q5_1, 0.05},   {GgmlType::Q8_0, 0.008}, {GgmlType::Q8_1, 0.008},
                          {GgmlType::Q2_K, 0.40},   {GgmlType::Q3_K, 0.20},  {GgmlType::Q4_K, 0.10},
                          {GgmlType::Q5_K, 0.05},   {GgmlType::Q6_K, 0.025}, {GgmlType::Q8_K, 0.009},
                          {GgmlType::IQ4_NL, 0.10}, {GgmlType::IQ4_XS, 0.10}};
  const int64_t n = 4096;
  const std::vector<float> x = RandomRow(n, 11, 0.5f);
  for (const Bound& b : bounds) {
    std::vector<uint8_t> q(GgmlRowSize(b.t, n));
    QuantizeRow(b.t, x.data(), q.data(), n);
    std::vector<float> y(n);
    DequantizeRow(b.t, q.data(), y.data(), n);
    double err2 = 0, sig2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      err2 += (x[i] - y[i]) * (x[i] - y[i]);
      sig2 += x[i] * x[i];
    }
    const double rel = std::sqrt(err2 / sig2);
    EXPECT_LT(rel, b.rel_rms) << GgmlTypeName(b.t);
    std::printf("%-7s relative RMS error %.4f\n", GgmlTypeName(b.t).c_str(), rel);
  }
}

// Blocks are independent: a row quantized in one call equals its halves quantized
// separately (ggml_quantize_chunk quantizes many rows in one call), and an all-zero
// row gives finite zero scales that decode to exact zeros.
TEST(QuantsTest, AllTypesBlockwiseAndZeroRows) {
  const int64_t n = 512;
  const std::vector<float> x = RandomRow(n, 3);
  const std::vector<float> zeros(n, 0.0f);
  for (GgmlType t : kBlockTypes) {
    const size_t half = GgmlRowSize(t, n / 2);
    std::vector<uint8_t> whole(2 * half), parts(2 * half);
    QuantizeRow(t, x.data(), whole.data(), n);
    QuantizeRow(t, x.data(), parts.data(), n / 2);
    QuantizeRow(t, x.data() + n / 2, parts.data() + half, n / 2);
    EXPECT_EQ(whole, parts) << GgmlTypeName(t);
    QuantizeRow(t, zeros.data(), whole.data(), n);
    EXPECT_TRUE(ValidateRowData(t, whole.data(), whole.size())) << GgmlTypeName(t);
    std::vector<float> y(n, 1.0f);
    DequantizeRow(t, whole.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], 0.0f) << GgmlTypeName(t) << " i=" << i;
  }
}

TEST(QuantsTest, Q8_1AndQ8_KActivationFormats) {
  // Q8_1: s = d * sum(q). x = j - 16: amax 16, d = 16/127; sum of q = -127 + ... (ties none).
  float x[256];
  for (int j = 0; j < 256; ++j) x[j] = static_cast<float>((j % 32) - 16);
  BlockQ8_1 b1[8], b1x[8];
  QuantizeRowQ8_1Ref(x, b1, 256);
  QuantizeRowQ8_1X86(x, b1x, 256);
  int sum = 0;
  for (int j = 0; j < 32; ++j) sum += b1[0].qs[j];
  EXPECT_EQ(b1[0].d, 0x3008);
  EXPECT_EQ(b1[0].s, Fp32ToFp16(static_cast<float>(sum) * (16.0f / 127.0f)));
  EXPECT_EQ(std::memcmp(b1, b1x, sizeof b1), 0);  // no ties: both variants agree
  // Q8_K: iscale = -127 / max (the first element of largest magnitude, here -16),
  // q = nearest_int(iscale * x) (ties to even), d = 1/iscale, bsums of 16.
  BlockQ8_K k;
  QuantizeRowQ8_K(x, &k, 256);
  EXPECT_EQ(k.d, 1.0f / (-127.0f / -16.0f));
  EXPECT_EQ(k.qs[0], -127);
  EXPECT_EQ(k.qs[16], 0);
  EXPECT_EQ(k.qs[31], 119);  // 15 * 7.9375 = 119.06
  for (int g = 0; g < 16; ++g) {
    int s = 0;
    for (int j = 0; j < 16; ++j) s += k.qs[16 * g + j];
    EXPECT_EQ(k.bsums[g], s) << g;
  }
  // A positive maximum flips the sign convention: q(max) = -127, d < 0.
  float y[256] = {};
  y[5] = 2.0f;
  y[6] = -1.0f;
  QuantizeRowQ8_K(y, &k, 256);
  EXPECT_EQ(k.qs[5], -127);
  EXPECT_EQ(k.qs[6], 64);  // 63.5 -> 64 (even)
  EXPECT_LT(k.d, 0.0f);
  float z[256] = {};
  QuantizeRowQ8_K(z, &k, 256);
  EXPECT_EQ(k.d, 0.0f);
  for (int g = 0; g < 16; ++g) EXPECT_EQ(k.bsums[g], 0);
}

TEST(QuantsTest, Iq4NlReferenceAndChunkVariants) {
  // ggml's from_float for IQ4_NL (ntry = -1) and quantize_chunk (ntry = 7) differ only
  // in the scale search; both decode close to the input, the search is never worse.
  const int64_t n = 1024;
  const std::vector<float> x = RandomRow(n, 5);
  std::vector<BlockIQ4_NL> a(n / 32), b(n / 32);
  QuantizeIQ4_NL(x.data(), a.data(), n);
  QuantizeRowIQ4_NLRef(x.data(), b.data(), n);
  std::vector<float> ya(n), yb(n);
  DequantizeRowIQ4_NL(a.data(), ya.data(), n);
  DequantizeRowIQ4_NL(b.data(), yb.data(), n);
  double ea = 0, eb = 0;
  for (int64_t i = 0; i < n; ++i) {
    ea += (x[i] - ya[i]) * (x[i] - ya[i]);
    eb += (x[i] - yb[i]) * (x[i] - yb[i]);
  }
  EXPECT_LE(ea, eb * 1.0001);
  EXPECT_NE(std::memcmp(a.data(), b.data(), a.size() * sizeof(BlockIQ4_NL)), 0);
}

TEST(QuantsTest, ValidateRowData) {
  float f[4] = {1.0f, -2.0f, 0.0f, 3.0f};
  EXPECT_TRUE(ValidateRowData(GgmlType::F32, f, sizeof f));
  f[2] = std::nanf("");
  int64_t bad = -1;
  EXPECT_FALSE(ValidateRowData(GgmlType::F32, f, sizeof f, &bad));
  EXPECT_EQ(bad, 2);
  f[2] = INFINITY;
  EXPECT_FALSE(ValidateRowData(GgmlType::F32, f, sizeof f));
  uint16_t h[3] = {0x3C00, 0x7C00, 0};
  EXPECT_FALSE(ValidateRowData(GgmlType::F16, h, sizeof h, &bad));
  EXPECT_EQ(bad, 1);
  uint16_t bf[2] = {0x3F80, 0x7FC0};
  EXPECT_FALSE(ValidateRowData(GgmlType::BF16, bf, sizeof bf));
  std::vector<float> x = RandomRow(512, 9);
  for (GgmlType t : kBlockTypes) {
    std::vector<uint8_t> q(GgmlRowSize(t, 512));
    QuantizeRow(t, x.data(), q.data(), 512);
    EXPECT_TRUE(ValidateRowData(t, q.data(), q.size())) << GgmlTypeName(t);
    EXPECT_FALSE(ValidateRowData(t, q.data(), q.size() - 1)) << GgmlTypeName(t);  // partial block
  }
  std::vector<BlockQ4_K> k(2);
  QuantizeRow(GgmlType::Q4_K, x.data(), k.data(), 512);
  k[1].dmin = 0x7E00;  // NaN min scale in block 1
  EXPECT_FALSE(ValidateRowData(GgmlType::Q4_K, k.data(), 2 * sizeof(BlockQ4_K), &bad));
  EXPECT_EQ(bad, 1);
  std::vector<BlockQ6_K> q6(2);
  QuantizeRow(GgmlType::Q6_K, x.data(), q6.data(), 512);
  q6[0].d = 0xFC00;  // -Inf
  EXPECT_FALSE(ValidateRowData(GgmlType::Q6_K, q6.data(), 2 * sizeof(BlockQ6_K)));
}

TEST(QuantsTest, HalfAndBf16Rounding) {
  float x[4] = {1.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -2.0f};
  uint16_t h[4];
  QuantizeRow(GgmlType::BF16, x, h, 4);
  EXPECT_EQ(h[0], 0x3F80);
  EXPECT_EQ(h[1], 0x3F80);  // tie -> even
  EXPECT_EQ(h[2], 0x3F82);  // tie -> even (up)
  EXPECT_EQ(h[3], 0xC000);
  float y[2] = {1.0f, 1.0f + 1.0f / 2048};  // F16 half-ulp tie at 1.0 -> even
  QuantizeRow(GgmlType::F16, y, h, 2);
  EXPECT_EQ(h[0], 0x3C00);
  EXPECT_EQ(h[1], 0x3C00);
}

}  // namespace
}  // namespace herd
