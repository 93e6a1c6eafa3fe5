// AVX2 + FMA + F16C kernels. Compiled with -mavx2 -mfma -mf16c (see BUILD); only
// reached through the run-time dispatch in kernels.cc.
//
// Lane structure (identical for every tile shape):
//   F32/F16: 8 float lanes, lane l accumulates elements l, l+8, ...
//   BF16:    8 float lanes over 16-element steps: even element then odd one.
//   Q4_0: one block per step; each int32 lane is an exact 4-element dot product
//         (maddubs + madd), accumulated as lane += float(sumi) * (dx*dy).
//   Q8_0, Q5_0, Q4_1, Q5_1, IQ4_NL: ggml's 8-lane order (quant_block32.inc).
// --config=bench (-march=native) turns on the AVX-512 blocks of gemm_avx2.inc here, whose
// GCC 12 header lines trip -Wuninitialized (GCC PR 105593; see kernels_avx512.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <math.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "libs/kernels/cpu/internal.h"

namespace herd::cpu::internal {
namespace {

#include "libs/kernels/cpu/tile_driver.inc"

#define HERD_UNROLL _Pragma("GCC unroll 16")

inline float Hsum8(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

inline float HalfToFloat(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return _cvtsh_ss(v);
}

// See kernels_avx512.cc: prefetch the next micro-tile's weight rows into L2.
struct NextRowsPrefetcher {
  const char* base;
  size_t per_step;
  NextRowsPrefetcher(const char* w, size_t ws, int nr, int64_t steps) {
    base = w + nr * ws;
    const size_t total = static_cast<size_t>(nr) * ws;
    per_step = steps > 0 ? (total / static_cast<size_t>(steps) + 64) & ~size_t{63} : 0;
  }
  void Step(int64_t s) const {
    const char* p = base + static_cast<size_t>(s) * per_step;
    for (size_t b = 0; b < per_step; b += 64) _mm_prefetch(p + b, _MM_HINT_T1);
  }
};

// ---------------------------------------------------------------- F32 / F16 / BF16

struct LoadF32 {
  static constexpr int kStep = 8;
  static size_t RowBytes(int64_t k) { return static_cast<size_t>(k) * 4; }
  static __m256 Load(const char* p, int64_t kk) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p) + kk); }
  static __m256 LoadTail(const char* p, int64_t kk, int64_t rem) {
    float tmp[8] = {};
    std::memcpy(tmp, reinterpret_cast<const float*>(p) + kk, static_cast<size_t>(rem) * 4);
    return _mm256_loadu_ps(tmp);
  }
};

struct LoadF16 {
  static constexpr int kStep = 8;
  static size_t RowBytes(int64_t k) { return static_cast<size_t>(k) * 2; }
  static __m256 Load(const char* p, int64_t kk) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kk * 2)));
  }
  static __m256 LoadTail(const char* p, int64_t kk, int64_t rem) {
    uint16_t tmp[8] = {};
    std::memcpy(tmp, p + kk * 2, static_cast<size_t>(rem) * 2);
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tmp)));
  }
};

template <class L>
struct KFloat {
  static constexpr int kNR = 4, kNC = 2;
  static constexpr bool kPackA = false;
  static size_t WRowBytes(int64_t k) { return L::RowBytes(k); }
  static size_t PackedBytes(int64_t) { return 0; }
  static void Pack(int64_t, const char*, char*) {}

  template <int NR, int NC>
  static void Micro(int64_t k, const char* w, size_t ws, const char* a, size_t as, float* d, size_t ds) {
    __m256 acc[NR][NC];
    HERD_UNROLL for (int r = 0; r < NR; ++r) HERD_UNROLL for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_setzero_ps();
    const NextRowsPrefetcher pf(w, ws, NR, k / L::kStep);
    int64_t kk = 0;
    for (int64_t s = 0; kk + L::kStep <= k; kk += L::kStep, ++s) {
      pf.Step(s);
      __m256 av[NC];
      HERD_UNROLL for (int c = 0; c < NC; ++c) av[c] = L::Load(a + c * as, kk);
      HERD_UNROLL for (int r = 0; r < NR; ++r) {
        const __m256 wv = L::Load(w + r * ws, kk);
        HERD_UNROLL for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_fmadd_ps(wv, av[c], acc[r][c]);
      }
    }
    if (kk < k) {
      const int64_t rem = k - kk;
      __m256 av[NC];
      HERD_UNROLL for (int c = 0; c < NC; ++c) av[c] = L::LoadTail(a + c * as, kk, rem);
      HERD_UNROLL for (int r = 0; r < NR; ++r) {
        const __m256 wv = L::LoadTail(w + r * ws, kk, rem);
        HERD_UNROLL for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_fmadd_ps(wv, av[c], acc[r][c]);
      }
    }
    HERD_UNROLL for (int c = 0; c < NC; ++c) HERD_UNROLL for (int r = 0; r < NR; ++r) d[c * ds + r] = Hsum8(acc[r][c]);
  }
};

struct KBf16 {
  static constexpr int kNR = 4, kNC = 2;
  static constexpr bool kPackA = false;
  static size_t WRowBytes(int64_t k) { return static_cast<size_t>(k) * 2; }
  static size_t PackedBytes(int64_t) { return 0; }
  static void Pack(int64_t, const char*, char*) {}

  static __m256i Load(const char* p, int64_t rem) {
    if (rem >= 16) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    uint16_t tmp[16] = {};
    std::memcpy(tmp, p, static_cast<size_t>(rem) * 2);
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tmp));
  }

  template <int NR, int NC>
  static void Step(const char* w, size_t ws, const char* a, size_t as, int64_t kk, int64_t rem, __m256 (&acc)[NR][NC]) {
    const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    __m256 ae[NC], ao[NC];
    HERD_UNROLL for (int c = 0; c < NC; ++c) {
      const __m256i u = Load(a + c * as + kk * 2, rem);
      ae[c] = _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
      ao[c] = _mm256_castsi256_ps(_mm256_and_si256(u, hi_mask));
    }
    HERD_UNROLL for (int r = 0; r < NR; ++r) {
      const __m256i u = Load(w + r * ws + kk * 2, rem);
      const __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
      const __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(u, hi_mask));
      HERD_UNROLL for (int c = 0; c < NC; ++c) {
        acc[r][c] = _mm256_fmadd_ps(we, ae[c], acc[r][c]);
        acc[r][c] = _mm256_fmadd_ps(wo, ao[c], acc[r][c]);
      }
    }
  }

  template <int NR, int NC>
  static void Micro(int64_t k, const char* w, size_t ws, const char* a, size_t as, float* d, size_t ds) {
    __m256 acc[NR][NC];
    HERD_UNROLL for (int r = 0; r < NR; ++r) HERD_UNROLL for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_setzero_ps();
    const NextRowsPrefetcher pf(w, ws, NR, k / 16);
    int64_t kk = 0;
    for (int64_t s = 0; kk + 16 <= k; kk += 16, ++s) {
      pf.Step(s);
      Step<NR, NC>(w, ws, a, as, kk, 16, acc);
    }
    if (kk < k) Step<NR, NC>(w, ws, a, as, kk, k - kk, acc);
    HERD_UNROLL for (int c = 0; c < NC; ++c) HERD_UNROLL for (int r = 0; r < NR; ++r) d[c * ds + r] = Hsum8(acc[r][c]);
  }
};

// ---------------------------------------------------------------- Q8_0 x Q8_0, Q4_0 x Q8_0

constexpr int kQ8BlockBytes = 34;
constexpr int kQ4BlockBytes = 18;

template <bool kQ4>
struct KQuant {
  static constexpr int kNR = 4, kNC = 2;
  static constexpr bool kPackA = false;
  static constexpr int kBlockBytes = kQ4 ? kQ4BlockBytes : kQ8BlockBytes;
  static size_t WRowBytes(int64_t k) { return static_cast<size_t>(k / 32) * kBlockBytes; }
  static size_t PackedBytes(int64_t) { return 0; }
  static void Pack(int64_t, const char*, char*) {}

  template <int NR, int NC>
  static void Micro(int64_t k, const char* w, size_t ws, const char* a, size_t as, float* d, size_t ds) {
    __m256 acc[NR][NC];
    HERD_UNROLL for (int r = 0; r < NR; ++r) HERD_UNROLL for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_setzero_ps();
    const int64_t nb = k / 32;
    const NextRowsPrefetcher pf(w, ws, NR, nb);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; ++b) {
      pf.Step(b);
      __m256i y[NC];
      __m256i corr[NC];
      float dy[NC];
      HERD_UNROLL for (int c = 0; c < NC; ++c) {
        const char* blk = a + c * as + b * kQ8BlockBytes;
        y[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
        dy[c] = HalfToFloat(blk);
        if (kQ4) corr[c] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(8), y[c]), ones);
      }
      HERD_UNROLL for (int r = 0; r < NR; ++r) {
        const char* blk = w + r * ws + b * kBlockBytes;
        const float dx = HalfToFloat(blk);
        __m256i x, ax;
        if (kQ4) {
          const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
          const __m128i m = _mm_set1_epi8(0x0F);
          ax = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));  // nibbles 0..15
          x = ax;
        } else {
          x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
          ax = _mm256_sign_epi8(x, x);
        }
        HERD_UNROLL for (int c = 0; c < NC; ++c) {
          __m256i dot;
          if (kQ4) {
            dot = _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(ax, y[c]), ones), corr[c]);
          } else {
            dot = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(y[c], x)), ones);
          }
          acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dx * dy[c]), acc[r][c]);
        }
      }
    }
    HERD_UNROLL for (int c = 0; c < NC; ++c) HERD_UNROLL for (int r = 0; r < NR; ++r) d[c * ds + r] = Hsum8(acc[r][c]);
  }
};

#include "libs/kernels/cpu/quant_avx2.inc"
// (in this order: the GEMM micro-kernels use the quant helpers)
#include "libs/kernels/cpu/gemm_avx2.inc"

// ---------------------------------------------------------------- from_float

void ToF16(const float* x, void* vy, int64_t n) {
  uint16_t* y = static_cast<uint16_t*>(vy);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

// ggml_compute_fp32_to_bf16: NaN -> (u >> 16) | 64, else round to nearest even.
void ToBf16(const float* x, void* vy, int64_t n) {
  uint16_t* y = static_cast<uint16_t*>(vy);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));  // abs < 2^31: signed ok
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
    // 8 x u32 (< 2^16) -> 8 x u16
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), packed);
  }
  for (; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    y[i] = (u & 0x7fffffffu) > 0x7f800000u ? static_cast<uint16_t>((u >> 16) | 64)
                                           : static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
  }
}

// ggml arch/x86 quantize_row_q8_0 (AVX2 branch), verbatim in effect.
void ToQ8_0(const float* x, void* vy, int64_t n) {
  char* y = static_cast<char*>(vy);
  const int64_t nb = n / 32;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    __m256 v0 = _mm256_loadu_ps(x + b * 32);
    __m256 v1 = _mm256_loadu_ps(x + b * 32 + 8);
    __m256 v2 = _mm256_loadu_ps(x + b * 32 + 16);
    __m256 v3 = _mm256_loadu_ps(x + b * 32 + 24);
    __m256 m = _mm256_andnot_ps(sign, v0);
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v1));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v2));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v3));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.0f;
    const uint16_t dh = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m256 mul = _mm256_set1_ps(id);
    v0 = _mm256_round_ps(_mm256_mul_ps(v0, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v1 = _mm256_round_ps(_mm256_mul_ps(v1, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v2 = _mm256_round_ps(_mm256_mul_ps(v2, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v3 = _mm256_round_ps(_mm256_mul_ps(v3, mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256i i0 = _mm256_packs_epi32(_mm256_cvtps_epi32(v0), _mm256_cvtps_epi32(v1));
    __m256i i2 = _mm256_packs_epi32(_mm256_cvtps_epi32(v2), _mm256_cvtps_epi32(v3));
    i0 = _mm256_packs_epi16(i0, i2);
    i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    char* o = y + b * kQ8BlockBytes;
    std::memcpy(o, &dh, 2);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 2), i0);
  }
}

// ggml_v_expf, AVX2+FMA branch (vec.h): max error 1.45358 + 0.5 ulp.
inline __m256 VExpf(__m256 x) {
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 b =
      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
  const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1))));
  const __m256i c =
      _mm256_castps_si256(_mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(126), _CMP_GT_OQ));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                      _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
  if (!_mm256_movemask_ps(_mm256_castsi256_ps(c))) return _mm256_fmadd_ps(j, k, k);
  const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                     _mm256_set1_epi32(static_cast<int>(0x82000000u)));
  const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
  const __m256i d =
      _mm256_castps_si256(_mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(192), _CMP_GT_OQ));
  return _mm256_or_ps(
      _mm256_and_ps(_mm256_castsi256_ps(d), _mm256_mul_ps(s1, s1)),
      _mm256_andnot_ps(
          _mm256_castsi256_ps(d),
          _mm256_or_ps(_mm256_and_ps(_mm256_castsi256_ps(c), _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
                       _mm256_andnot_ps(_mm256_castsi256_ps(c), _mm256_fmadd_ps(k, j, k)))));
}

// ggml_v_silu: x / (1 + exp(0 - x)).
inline __m256 VSilu(__m256 x) {
  const __m256 e = VExpf(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

constexpr int64_t W = 8;
inline __m256 Load(const float* p) { return _mm256_loadu_ps(p); }
inline void Store(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
inline __m256 Set1(float v) { return _mm256_set1_ps(v); }
inline __m256 Sub(__m256 a, __m256 b) { return _mm256_sub_ps(a, b); }
inline __m256 Mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
inline float HAdd(__m256 v) { return Hsum8(v); }
inline __m256 Add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
inline __m256 Max(__m256 a, __m256 b) { return _mm256_max_ps(a, b); }
inline float HMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

inline __m256 Fmadd(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
inline __m256 LoadHalf(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline void StoreHalf(uint16_t* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

#include "libs/kernels/cpu/row_ops.inc"

using KQ4_1 = KBlock32<DecQ4_1, true>;
using KQ8_0 = KBlock32<DecQ8_0, false>;
using KQ5_0 = KBlock32<DecQ5_0, false>;
using KQ5_1 = KBlock32<DecQ5_1, true>;
using KIQ4_NL = KBlock32<DecIQ4_NL, false>;
using KQ2_K = KSuper<DecQ2_K>;
using KQ3_K = KSuper<DecQ3_K>;
using KQ4_K = KSuper<DecQ45_K<false>>;
using KQ5_K = KSuper<DecQ45_K<true>>;
using KQ6_K = KSuper<DecQ6_K>;
using KIQ4_XS = KSuper<DecIQ4_XS>;

// ggml_vec_dot_f16 (ggml-cpu/vec.cpp) as ggml's AVX2 build runs it: GGML_F16_STEP 32, four
// accumulators of 8 lanes, GGML_F32x8_REDUCE into a double, the leftovers' float products
// added in double.
float DotF16Ggml(int64_t n, const uint16_t* x, const uint16_t* y) {
  const int64_t np = n & ~int64_t{31};
  __m256 sum[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t i = 0; i < np; i += 32) {
    HERD_UNROLL for (int j = 0; j < 4; ++j) {
      sum[j] =
          _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i + 8 * j))),
                          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i + 8 * j))), sum[j]);
    }
  }
  sum[0] = _mm256_add_ps(sum[0], sum[2]);
  sum[1] = _mm256_add_ps(sum[1], sum[3]);
  sum[0] = _mm256_add_ps(sum[0], sum[1]);
  const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(sum[0]), _mm256_extractf128_ps(sum[0], 1));
  const __m128 t1 = _mm_hadd_ps(t0, t0);
  double sumf = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
  for (int64_t i = np; i < n; ++i) sumf += static_cast<double>(_cvtsh_ss(x[i]) * _cvtsh_ss(y[i]));
  return static_cast<float>(sumf);
}

constexpr IsaKernels kKernels = {
    {VecDot<KFloat<LoadF32>>, VecDot<KFloat<LoadF16>>, VecDot<KBf16>, VecDot<KQ8_0>, VecDot<KQuant<true>>,
     VecDot<KQ4_1>, VecDot<KQ5_0>, VecDot<KQ5_1>, VecDot<KIQ4_NL>, VecDot<KQ2_K>, VecDot<KQ3_K>, VecDot<KQ4_K>,
     VecDot<KQ5_K>, VecDot<KQ6_K>, VecDot<KIQ4_XS>},
    {Tile<KFloat<LoadF32>>, GemmF16, Tile<KBf16>, Tile<KQ8_0>, GemmQ<true>, Tile<KQ4_1>, Tile<KQ5_0>, Tile<KQ5_1>,
     Tile<KIQ4_NL>, Tile<KQ2_K>, Tile<KQ3_K>, Tile<KQ4_K>, Tile<KQ5_K>, Tile<KQ6_K>, Tile<KIQ4_XS>},
    ToF16,
    ToBf16,
    ToQ8_0,
    ToQ8_1,
    SiluRow,
    SwigluRow,
    SoftMaxExpRow,
    CvarRow,
    MadF16Row,
    ScaleF16Row,
    GemmF32,
    F16ToF32Row,
    ScaleMaskMaxRow,
    RoundF16Row,
    DotF16Ggml};

}  // namespace

const IsaKernels& Avx2Kernels() { return kKernels; }

PackedTileFn Avx2PackedTile(PackedKind w) {
  switch (w) {
    case PackedKind::kQ4_0:
      return PackedGemmQ<QKind::kQ4_0>;
    case PackedKind::kQ8_0:
      return PackedGemmQ<QKind::kQ8_0>;
    case PackedKind::kQ5_0:
      return PackedGemmQ<QKind::kQ5_0>;
    case PackedKind::kIQ4_NL:
      return PackedGemmQ<QKind::kIQ4_NL>;
    case PackedKind::kQ4_1:
      return PackedGemmQ<QKind::kQ4_1>;
    case PackedKind::kQ5_1:
      return PackedGemmQ<QKind::kQ5_1>;
    case PackedKind::kQ4_K:
      return PackedGemmQ4_K;
    case PackedKind::kQ5_K:
      return PackedGemmQ5_K;
    case PackedKind::kQ6_K:
      return PackedGemmQ6_K;
    case PackedKind::kBF16:
      return PackedGemmBF16;
    case PackedKind::kIQ4_XS:
      return PackedGemmIQ4_XS;
    case PackedKind::kQ3_K:
      return PackedGemmQ3_K;
    case PackedKind::kQ2_K:
      return PackedGemmQ2_K;
    case PackedKind::kF16:
      break;
  }
  return PackedGemmF16;
}

// ---------------------------------------------------------------- F16 flash attention, one token

namespace {

inline __m256 RoundHalf(__m256 x) { return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)); }

#include "libs/kernels/cpu/flash_attn_token.inc"
#include "libs/kernels/cpu/shared_attn_tile.inc"

}  // namespace

void FlashAttnF16HeadsAvx2(const FlashAttnF16Token& a) { FlashAttnF16HeadsSimd(a); }
void SharedAttnTileAvx2(const SharedAttnTile& t) { SharedAttnTileSimd(t); }

}  // namespace herd::cpu::internal
