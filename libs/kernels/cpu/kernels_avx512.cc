// AVX-512 kernels (F + BW + VL + DQ; VNNI used when the CPU has it).
// Compiled with -mavx512{f,bw,vl,dq,vnni} -mavx2 -mfma -mf16c (see BUILD); only
// reached through the run-time dispatch in kernels.cc. The non-VNNI variants
// never emit VNNI instructions (they use explicit maddubs/madd intrinsics).
//
// Lane structure (identical for every tile shape, and between the VNNI and
// non-VNNI variants, which produce the same int32 lanes):
//   F32/F16: 16 float lanes, lane l accumulates elements l, l+16, l+32, ...
//   BF16:    16 float lanes over 32-element steps: even element then odd one.
//   Q8_0/Q4_0: two blocks per step; each int32 lane is an exact 4-element dot
//            product, converted to float and accumulated as lane += sumi * (dx*dy).
// Every output is reduced with _mm512_reduce_add_ps at the end.
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "libs/kernels/cpu/internal.h"

namespace herd::cpu::internal {
namespace {

#include "libs/kernels/cpu/tile_driver.inc"

#define HERD_UNROLL _Pragma("GCC unroll 16")

inline uint16_t LoadU16(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// 16 lanes of float scales from two F16 scale bits, laid out by `idx`.
inline __m512 ScalesFromHalves(uint16_t d0, uint16_t d1, __m512i idx) {
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(d0 | (static_cast<uint32_t>(d1) << 16))));
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f));
}

// ---------------------------------------------------------------- F32 / F16 / BF16

struct LoadF32 {
  static constexpr int kStep = 16;
  static size_t RowBytes(int64_t k) { return static_cast<size_t>(k) * 4; }
  static __m512 Load(const char* p, int64_t kk) { return _mm512_loadu_ps(reinterpret_cast<const float*>(p) + kk); }
  static __m512 LoadTail(const char* p, int64_t kk, int64_t rem) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << rem) - 1), reinterpret_cast<const float*>(p) + kk);
  }
};

struct LoadF16 {
  static constexpr int kStep = 16;
  static size_t RowBytes(int64_t k) { return static_cast<size_t>(k) * 2; }
  static __m512 Load(const char* p, int64_t kk) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kk * 2)));
  }
  static __m512 LoadTail(const char* p, int64_t kk, int64_t rem) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << rem) - 1), p + kk * 2));
  }
};

template <class L>
struct KFloat {
  static constexpr int kNR = 4, kNC = 4;
  static constexpr bool kPackA = false;
  static size_t WRowBytes(int64_t k) { return L::RowBytes(k); }
  static size_t PackedBytes(int64_t) { return 0; }
  static void Pack(int64_t, const char*, char*) {}

  template <int NR, int NC>
  static void Micro(int64_t k, const char* w, size_t ws, const char* a, size_t as, float* d, size_t ds) {
    __m512 acc[NR][NC];
    HERD_UNROLL for (int r = 0; r < NR; ++r) HERD_UNROLL for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
    int64_t kk = 0;
    for (; kk + L::kStep <= k; kk += L::kStep) {
      __m512 av[NC];
      HERD_UNROLL for (int c = 0; c < NC; ++c) av[c] = L::Load(a + c * as, kk);
      HERD_UNROLL for (int r = 0; r < NR; ++r) {
        const __m512 wv = L::Load(w + r * ws, kk);
        HERD_UNROLL for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_fmadd_ps(wv, av[c], acc[r][c]);
      }
    }
    if (kk < k) {
      const int64_t rem = k - kk;
      __m512 av[NC];
      HERD_UNROLL for (int c = 0; c < NC; ++c) av[c] = L::LoadTail(a + c * as, kk, rem);
      HERD_UNROLL for (int r = 0; r < NR; ++r) {
        const __m512 wv = L::LoadTail(w + r * ws, kk, rem);
        HERD_UNROLL for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_fmadd_ps(wv, av[c], acc[r][c]);
      }
    }
    HERD_UNROLL for (int c = 0; c < NC; ++c) HERD_UNROLL for (int r = 0; r < NR; ++r) {
      d[c * ds + r] = _mm512_reduce_add_ps(acc[r][c]);
    }
  }
};

// BF16: a 32-bit lane holds elements (2l, 2l+1); as floats they are u << 16 and
// u & 0xffff0000, so no shuffles are needed. Products are exact in float.
struct KBf16 {
  static constexpr int kNR = 4, kNC = 4;
  static constexpr bool kPackA = false;
  static size_t WRowBytes(int64_t k) { return static_cast<size_t>(k) * 2; }
  static size_t PackedBytes(int64_t) { return 0; }
  static void Pack(int64_t, const char*, char*) {}

  template <int NR, int NC>
  static void Step(const char* w, size_t ws, const char* a, size_t as, int64_t kk, int64_t rem,
                   __m512 (&acc)[NR][NC]) {
    const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    __m512 ae[NC], ao[NC];
    HERD_UNROLL for (int c = 0; c < NC; ++c) {
      const char* p = a + c * as + kk * 2;
      const __m512i u = rem >= 32 ? _mm512_loadu_si512(p)
                                  : _mm512_maskz_loadu_epi16(static_cast<__mmask32>((1ull << rem) - 1), p);
      ae[c] = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
      ao[c] = _mm512_castsi512_ps(_mm512_and_si512(u, hi_mask));
    }
    HERD_UNROLL for (int r = 0; r < NR; ++r) {
      const char* p = w + r * ws + kk * 2;
      const __m512i u = rem >= 32 ? _mm512_loadu_si512(p)
                                  : _mm512_maskz_loadu_epi16(static_cast<__mmask32>((1ull << rem) - 1), p);
      const __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
      const __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(u, hi_mask));
      HERD_UNROLL for (int c = 0; c < NC; ++c) {
        acc[r][c] = _mm512_fmadd_ps(we, ae[c], acc[r][c]);
        acc[r][c] = _mm512_fmadd_ps(wo, ao[c], acc[r][c]);
      }
    }
  }

  template <int NR, int NC>
  static void Micro(int64_t k, const char* w, size_t ws, const char* a, size_t as, float* d, size_t ds) {
    __m512 acc[NR][NC];
    HERD_UNROLL for (int r = 0; r < NR; ++r) HERD_UNROLL for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
    int64_t kk = 0;
    for (; kk + 32 <= k; kk += 32) Step<NR, NC>(w, ws, a, as, kk, 32, acc);
    if (kk < k) Step<NR, NC>(w, ws, a, as, kk, k - kk, acc);
    HERD_UNROLL for (int c = 0; c < NC; ++c) HERD_UNROLL for (int r = 0; r < NR; ++r) {
      d[c * ds + r] = _mm512_reduce_add_ps(acc[r][c]);
    }
  }
};

// ---------------------------------------------------------------- Q8_0 x Q8_0, Q4_0 x Q8_0
//
// Activations are repacked once per tile into "pairs" of two Q8_0 blocks (192 bytes):
//   int8  q[64]      the quants, in the lane order the weight unpacking produces
//   int32 ncorr[16]  -(bias * sum of the 4 quants of the lane), bias 128 (Q8_0) or 8 (Q4_0)
//   float d[16]      the activation scale of the block each lane belongs to
// With VNNI the weight quants are made unsigned (q + bias) and
//   dpbusd(ncorr, q + bias, y) = sum (q + bias) y - bias sum y = sum q y   (exact).
constexpr size_t kPairBytes = 192;
constexpr int kQ8BlockBytes = 34;
constexpr int kQ4BlockBytes = 18;

inline int64_t NumPairs(int64_t k) { return (k / 32 + 1) / 2; }

// -(bias * 4-element sums) of `q` (int8), without VNNI so Pack is variant-independent.
inline __m512i NegBiasSums(__m512i q, int bias) {
  const __m512i s16 = _mm512_maddubs_epi16(_mm512_set1_epi8(static_cast<char>(bias)), q);
  const __m512i s32 = _mm512_madd_epi16(s16, _mm512_set1_epi16(1));
  return _mm512_sub_epi32(_mm512_setzero_si512(), s32);
}

// Q8_0 lane order: bytes 0..31 block 0, 32..63 block 1 (8 int32 lanes per block).
inline __m512i Q8Idx() { return _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0); }
// Q4_0 lane order (128-bit lanes): [b0 elems 0-15, b1 elems 0-15, b0 16-31, b1 16-31].
inline __m512i Q4Idx() { return _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0); }

// Packs one Q8_0 activation row; kQ4Order selects the Q4_0 lane order.
template <bool kQ4Order>
void PackQ8Row(int64_t k, const char* a, char* out) {
  const int64_t nb = k / 32;
  const int64_t np = NumPairs(k);
  const __m512i idx = kQ4Order ? Q4Idx() : Q8Idx();
  for (int64_t p = 0; p < np; ++p) {
    const char* b0 = a + 2 * p * kQ8BlockBytes;
    const bool has1 = 2 * p + 1 < nb;
    const char* b1 = b0 + kQ8BlockBytes;
    const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2));
    const __m256i y1 = has1 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2)) : _mm256_setzero_si256();
    __m512i q;
    if (kQ4Order) {
      const __m256i lo = _mm256_permute2x128_si256(y0, y1, 0x20);  // [b0 0-15, b1 0-15]
      const __m256i hi = _mm256_permute2x128_si256(y0, y1, 0x31);  // [b0 16-31, b1 16-31]
      q = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    } else {
      q = _mm512_inserti64x4(_mm512_castsi256_si512(y0), y1, 1);
    }
    char* o = out + p * kPairBytes;
    _mm512_store_si512(o, q);
    _mm512_store_si512(o + 64, NegBiasSums(q, kQ4Order ? 8 : 128));
    _mm512_store_ps(o + 128, ScalesFromHalves(LoadU16(b0), has1 ? LoadU16(b1) : 0, idx));
  }
}

template <bool kVnni>
struct KQ8_0 {
  static constexpr int kNR = 4, kNC = 4;
  static constexpr bool kPackA = true;
  static size_t WRowBytes(int64_t k) { return static_cast<size_t>(k / 32) * kQ8BlockBytes; }
  static size_t PackedBytes(int64_t k) { return static_cast<size_t>(NumPairs(k)) * kPairBytes; }
  static void Pack(int64_t k, const char* a, char* out) { PackQ8Row<false>(k, a, out); }

  template <int NR, int NC, bool kHalf>
  static void Step(const char* w, size_t ws, const char* a, size_t as, __m512 (&acc)[NR][NC]) {
    const __m512i idx = Q8Idx();
    __m512i wq[NR];
    __mmask64 wneg[NR];
    __m512 wd[NR];
    HERD_UNROLL for (int r = 0; r < NR; ++r) {
      const char* b0 = w + r * ws;
      const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2));
      const __m256i q1 = kHalf ? _mm256_setzero_si256()
                               : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + kQ8BlockBytes + 2));
      const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
      if (kVnni) {
        wq[r] = _mm512_xor_si512(q, _mm512_set1_epi8(static_cast<char>(0x80)));  // q + 128 as u8
        wneg[r] = 0;
      } else {
        wq[r] = _mm512_abs_epi8(q);
        wneg[r] = _mm512_movepi8_mask(q);
      }
      wd[r] = ScalesFromHalves(LoadU16(b0), kHalf ? 0 : LoadU16(b0 + kQ8BlockBytes), idx);
    }
    HERD_UNROLL for (int c = 0; c < NC; ++c) {
      const char* pa = a + c * as;
      const __m512i aq = _mm512_load_si512(pa);
      const __m512i nc = _mm512_load_si512(pa + 64);
      const __m512 ad = _mm512_load_ps(pa + 128);
      HERD_UNROLL for (int r = 0; r < NR; ++r) {
        __m512i dot;
        if (kVnni) {
          dot = _mm512_dpbusd_epi32(nc, wq[r], aq);
        } else {
          const __m512i sy = _mm512_mask_sub_epi8(aq, wneg[r], _mm512_setzero_si512(), aq);
          dot = _mm512_madd_epi16(_mm512_maddubs_epi16(wq[r], sy), _mm512_set1_epi16(1));
        }
        acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(wd[r], ad), acc[r][c]);
      }
    }
  }

  template <int NR, int NC>
  static void Micro(int64_t k, const char* w, size_t ws, const char* a, size_t as, float* d, size_t ds) {
    __m512 acc[NR][NC];
    HERD_UNROLL for (int r = 0; r < NR; ++r) HERD_UNROLL for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
    const int64_t nb = k / 32;
    const int64_t full = nb / 2;
    for (int64_t p = 0; p < full; ++p) {
      Step<NR, NC, false>(w + p * 2 * kQ8BlockBytes, ws, a + p * kPairBytes, as, acc);
    }
    if (nb & 1) Step<NR, NC, true>(w + full * 2 * kQ8BlockBytes, ws, a + full * kPairBytes, as, acc);
    HERD_UNROLL for (int c = 0; c < NC; ++c) HERD_UNROLL for (int r = 0; r < NR; ++r) {
      d[c * ds + r] = _mm512_reduce_add_ps(acc[r][c]);
    }
  }
};

template <bool kVnni>
struct KQ4_0 {
  static constexpr int kNR = 4, kNC = 4;
  static constexpr bool kPackA = true;
  static size_t WRowBytes(int64_t k) { return static_cast<size_t>(k / 32) * kQ4BlockBytes; }
  static size_t PackedBytes(int64_t k) { return static_cast<size_t>(NumPairs(k)) * kPairBytes; }
  static void Pack(int64_t k, const char* a, char* out) { PackQ8Row<true>(k, a, out); }

  template <int NR, int NC, bool kHalf>
  static void Step(const char* w, size_t ws, const char* a, size_t as, __m512 (&acc)[NR][NC]) {
    const __m512i idx = Q4Idx();
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __m512i wq[NR];
    __m512 wd[NR];
    HERD_UNROLL for (int r = 0; r < NR; ++r) {
      const char* b0 = w + r * ws;
      const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 2));
      const __m128i q1 = kHalf ? _mm_setzero_si128()
                               : _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + kQ4BlockBytes + 2));
      const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
      const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
      wq[r] = _mm512_and_si512(z, low4);  // nibbles 0..15: [b0 lo, b1 lo, b0 hi, b1 hi]
      wd[r] = ScalesFromHalves(LoadU16(b0), kHalf ? 0 : LoadU16(b0 + kQ4BlockBytes), idx);
    }
    HERD_UNROLL for (int c = 0; c < NC; ++c) {
      const char* pa = a + c * as;
      const __m512i aq = _mm512_load_si512(pa);
      const __m512i nc = _mm512_load_si512(pa + 64);
      const __m512 ad = _mm512_load_ps(pa + 128);
      HERD_UNROLL for (int r = 0; r < NR; ++r) {
        __m512i dot;
        if (kVnni) {
          dot = _mm512_dpbusd_epi32(nc, wq[r], aq);  // sum nib*y - 8 sum y
        } else {
          dot = _mm512_add_epi32(_mm512_madd_epi16(_mm512_maddubs_epi16(wq[r], aq), _mm512_set1_epi16(1)), nc);
        }
        acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(wd[r], ad), acc[r][c]);
      }
    }
  }

  template <int NR, int NC>
  static void Micro(int64_t k, const char* w, size_t ws, const char* a, size_t as, float* d, size_t ds) {
    __m512 acc[NR][NC];
    HERD_UNROLL for (int r = 0; r < NR; ++r) HERD_UNROLL for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
    const int64_t nb = k / 32;
    const int64_t full = nb / 2;
    for (int64_t p = 0; p < full; ++p) {
      Step<NR, NC, false>(w + p * 2 * kQ4BlockBytes, ws, a + p * kPairBytes, as, acc);
    }
    if (nb & 1) Step<NR, NC, true>(w + full * 2 * kQ4BlockBytes, ws, a + full * kPairBytes, as, acc);
    HERD_UNROLL for (int c = 0; c < NC; ++c) HERD_UNROLL for (int r = 0; r < NR; ++r) {
      d[c * ds + r] = _mm512_reduce_add_ps(acc[r][c]);
    }
  }
};

// ---------------------------------------------------------------- from_float

void ToF16(const float* x, void* vy, int64_t n) {
  uint16_t* y = static_cast<uint16_t*>(vy);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(y + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT));
  }
}

// ggml_compute_fp32_to_bf16: NaN -> (u >> 16) | 64, else round to nearest even.
inline __m256i Bf16Round(__m512i u) {
  const __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(64));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

void ToBf16(const float* x, void* vy, int64_t n) {
  uint16_t* y = static_cast<uint16_t*>(vy);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), Bf16Round(_mm512_loadu_si512(x + i)));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(y + i, m, Bf16Round(_mm512_maskz_loadu_epi32(m, x + i)));
  }
}

// ggml arch/x86 quantize_row_q8_0: d = amax/127 (F16), q = round_half_even(x * 127/amax).
void ToQ8_0(const float* x, void* vy, int64_t n) {
  char* y = static_cast<char*>(vy);
  const int64_t nb = n / 32;
  for (int64_t b = 0; b < nb; ++b) {
    __m512 v0 = _mm512_loadu_ps(x + b * 32);
    __m512 v1 = _mm512_loadu_ps(x + b * 32 + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127.0f;
    const uint16_t dh = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m512 mul = _mm512_set1_ps(id);
    v0 = _mm512_roundscale_ps(_mm512_mul_ps(v0, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v1 = _mm512_roundscale_ps(_mm512_mul_ps(v1, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    char* o = y + b * kQ8BlockBytes;
    std::memcpy(o, &dh, 2);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 2), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v0)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 18), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v1)));
  }
}

template <bool kVnni>
constexpr IsaKernels kKernels = {
    {VecDot<KFloat<LoadF32>>, VecDot<KFloat<LoadF16>>, VecDot<KBf16>, VecDot<KQ8_0<kVnni>>, VecDot<KQ4_0<kVnni>>},
    {Tile<KFloat<LoadF32>>, Tile<KFloat<LoadF16>>, Tile<KBf16>, Tile<KQ8_0<kVnni>>, Tile<KQ4_0<kVnni>>},
    ToF16,
    ToBf16,
    ToQ8_0};

}  // namespace

const IsaKernels& Avx512Kernels(bool vnni) { return vnni ? kKernels<true> : kKernels<false>; }

}  // namespace herd::cpu::internal
