#include "libs/tensor/quants.h"

#include <cmath>
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
  const int expect[32] = {-127, -119, -111, -103, -95, -87, -79, -71, -64, -56, -48,
                          -40,  -32,  -24,  -16,  -8,  0,   8,   16,  24,  32,  40,
                          48,   56,   64,   71,   79,  87,  95,  103, 111, 119};
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
  EXPECT_EQ(y[1], -7.0f);   // -7.5 + 8.5 = 1.0 -> 1
  EXPECT_EQ(y[16], 0.0f);
  EXPECT_EQ(y[31], 7.0f);   // clamped
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
    if (variant == 0) QuantizeRowQ8_0Ref(x.data(), q8.data(), n);
    else QuantizeRowQ8_0X86(x.data(), q8.data(), n);
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
  EXPECT_FALSE(CanDequantize(GgmlType::Q4_K));
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
        case GgmlType::F32: EXPECT_EQ(y[i], x[i]); break;
        case GgmlType::F16: EXPECT_EQ(y[i], Fp16ToFp32(Fp32ToFp16(x[i]))); break;
        case GgmlType::BF16: EXPECT_EQ(y[i], Bf16ToFp32(Fp32ToBf16(x[i]))); break;
        default: EXPECT_NEAR(y[i], x[i], t == GgmlType::Q8_0 ? 0.03 : 0.5); break;
      }
    }
  }
  // Q8_0 / Q4_0 dispatch is the Ref quantizer.
  std::vector<BlockQ8_0> a(3), b(3);
  QuantizeRow(GgmlType::Q8_0, x.data(), a.data(), n);
  QuantizeRowQ8_0Ref(x.data(), b.data(), n);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), 3 * sizeof(BlockQ8_0)), 0);
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
