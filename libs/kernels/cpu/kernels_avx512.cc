// AVX-512 kernels (F + BW + VL + DQ; VNNI used when the CPU has it).
// Compiled with -mavx512{f,bw,vl,dq,vnni} -mavx2 -mfma -mf16c (see BUILD); only
// reached through the run-time dispatch in kernels.cc. The non-VNNI variants
// never emit VNNI instructions (they use explicit maddubs/madd intrinsics).
//
// Lane structure (identical for every tile shape, and between the VNNI and
// non-VNNI variants, which produce the same int32 lanes):
//   F32/F16: 16 float lanes, lane l accumulates elements l, l+16, l+32, ...
//   BF16:    16 float lanes over 32-element steps: even element then odd one.
//   Q8_0, Q5_0, Q4_1, Q5_1: ggml's x86 8-lane order (quant_block32.inc), as llama.cpp
//         runs them on AVX-512 machines too (tinyBLAS_Q0_AVX / ggml_vec_dot_*).
//   Q4_0: four blocks per step; each int32 lane an exact 8-element dot product.
// Every output is reduced with _mm512_reduce_add_ps at the end.
// GCC 12's AVX-512 headers initialize the "undefined" vectors of _mm512_undefined_*()
// from themselves (`__m512 __Y = __Y;`), which -Wuninitialized / -Wmaybe-uninitialized
// report at every inlined intrinsic (GCC PR 105593, fixed in GCC 13's headers by this
// same pragma). Silence them for the header's lines only; our code stays checked.
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

inline uint16_t LoadU16(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Weight rows stream from DRAM in short runs (a micro-tile reads NR rows in parallel),
// which the hardware prefetcher tracks poorly. While computing one micro-tile, touch
// the next NR rows (the bytes right after this tile's rows, spread evenly over the
// `steps` iterations of the k loop).
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

// ---------------------------------------------------------------- decode (one activation row)
//
// A mat-vec is bound by DRAM bandwidth, and rows of k = 768 .. 5632 elements are too
// short for the hardware prefetcher (which also stops at every 4 KiB page). Gemv splits
// the caller's rows into K::kGR contiguous stripes and walks them in lockstep, one row of
// each stripe at a time (one accumulator per row, so each row sees exactly Micro's
// operations in Micro's order): that reads kGR long sequential streams, and each stream
// is prefetched into L2 kGemvPrefetchBytes ahead of where it is read.
// GemvGroup(k, w, ss, pfd, a, d, ds): rows w + r*ss for r < kGR -> d[r*ds], prefetching
// each row's bytes at +pfd.
constexpr size_t kGemvPrefetchBytes = 4096;

template <class K>
void GemvRows(int64_t k, const char* w, size_t ws, const char* a, float* d, int64_t i0, int64_t i1) {
  constexpr int G = K::kGR;
  const int64_t per = (i1 - i0) / G;
  const size_t ss = static_cast<size_t>(per) * ws;
  for (int64_t j = 0; j < per; ++j) {
    K::GemvGroup(k, w + (i0 + j) * ws, ss, kGemvPrefetchBytes, a, d + i0 + j, static_cast<size_t>(per));
  }
  static const MicroTable<K> table;
  for (int64_t i = i0 + G * per; i < i1;) {
    const int n = static_cast<int>(i1 - i < K::kNR ? i1 - i : K::kNR);
    table.fn[n - 1][0](k, w + i * ws, ws, a, 0, d + i, 0);
    i += n;
  }
}

// d[r] = _mm512_reduce_add_ps(v[r]) for r < 8, bit for bit: the same pairwise sums
// (upper + lower 256 bits, then 128-bit halves, then 64-bit halves, then the two
// floats; float addition commutes exactly), done for 8 rows at once.
inline void Reduce8(const __m512 (&v)[8], float* d, size_t ds) {
  __m512 c[4];
  HERD_UNROLL for (int p = 0; p < 4; ++p) {
    c[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0xEE));
  }
  // e[q], 128-bit lane j: the four level-2 sums of row 4q + j.
  const __m512 e0 = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88), _mm512_shuffle_f32x4(c[0], c[1], 0xDD));
  const __m512 e1 = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], 0x88), _mm512_shuffle_f32x4(c[2], c[3], 0xDD));
  // f, 128-bit lane j: [row j: 2 sums, row 4 + j: 2 sums].
  const __m512d e0d = _mm512_castps_pd(e0), e1d = _mm512_castps_pd(e1);
  const __m512 f =
      _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(e0d, e1d)), _mm512_castpd_ps(_mm512_unpackhi_pd(e0d, e1d)));
  // g: row j in lane 4j, row 4 + j in lane 4j + 2.
  const __m512 g = _mm512_add_ps(f, _mm512_shuffle_ps(f, f, _MM_SHUFFLE(2, 3, 0, 1)));
  alignas(64) float out[16];
  _mm512_store_ps(out, g);
  HERD_UNROLL for (int j = 0; j < 4; ++j) {
    d[j * ds] = out[4 * j];
    d[(4 + j) * ds] = out[4 * j + 2];
  }
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

// F16 activations are widened to F32 once per tile (exact), so the micro-kernel
// converts only the weight rows. (vec_dot converts both on the fly instead; the
// results are bit-identical since the widening is exact and the lane order the same.)
void PackF16RowToF32(int64_t k, const char* a, char* out) {
  const uint16_t* x = reinterpret_cast<const uint16_t*>(a);
  float* y = reinterpret_cast<float*>(out);
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    _mm512_store_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))));
  }
  if (i < k) {
    const __mmask16 m = static_cast<__mmask16>((1u << (k - i)) - 1);
    _mm512_store_ps(y + i, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)));
  }
}

template <class L, bool kWidenA>
struct KFloat {
  static constexpr int kNR = 4, kNC = 4;
  static constexpr bool kPackA = kWidenA;
  static size_t WRowBytes(int64_t k) { return L::RowBytes(k); }
  static size_t PackedBytes(int64_t k) { return static_cast<size_t>((k + 15) / 16) * 64; }
  static void Pack(int64_t k, const char* a, char* out) { PackF16RowToF32(k, a, out); }
  static __m512 LoadA(const char* p, int64_t kk) {
    return kWidenA ? _mm512_load_ps(reinterpret_cast<const float*>(p) + kk) : L::Load(p, kk);
  }
  static __m512 LoadATail(const char* p, int64_t kk, int64_t rem) {
    return kWidenA ? _mm512_load_ps(reinterpret_cast<const float*>(p) + kk) : L::LoadTail(p, kk, rem);
  }

  // The 8 streams without software prefetch (pfd unused): the hardware prefetcher alone
  // streamed faster (llama-110m F16, whose tied output matrix takes this path, tg64 on
  // Zen 5 in 4 interleaved pairs of runs: 122-124 -> 129-140 t/s at 1 thread, 203-214 ->
  // 222-229 at 2).
  static constexpr int kGR = 8;
  static void GemvGroup(int64_t k, const char* w, size_t ws, size_t /*pfd*/, const char* a, float* d, size_t ds) {
    __m512 acc[kGR];
    HERD_UNROLL for (int r = 0; r < kGR; ++r) acc[r] = _mm512_setzero_ps();
    int64_t kk = 0;
    constexpr int64_t kS = L::kStep;
    for (; kk + 2 * kS <= k; kk += 2 * kS) {
      const __m512 a0 = LoadA(a, kk), a1 = LoadA(a, kk + kS);
      HERD_UNROLL for (int r = 0; r < kGR; ++r) acc[r] = _mm512_fmadd_ps(L::Load(w + r * ws, kk), a0, acc[r]);
      HERD_UNROLL for (int r = 0; r < kGR; ++r) acc[r] = _mm512_fmadd_ps(L::Load(w + r * ws, kk + kS), a1, acc[r]);
    }
    if (kk + kS <= k) {
      const __m512 a0 = LoadA(a, kk);
      HERD_UNROLL for (int r = 0; r < kGR; ++r) acc[r] = _mm512_fmadd_ps(L::Load(w + r * ws, kk), a0, acc[r]);
      kk += kS;
    }
    if (kk < k) {
      const int64_t rem = k - kk;
      const __m512 a0 = LoadATail(a, kk, rem);
      HERD_UNROLL for (int r = 0; r < kGR; ++r) acc[r] = _mm512_fmadd_ps(L::LoadTail(w + r * ws, kk, rem), a0, acc[r]);
    }
    Reduce8(acc, d, ds);
  }
  static void Gemv(int64_t k, const char* w, size_t ws, const char* a, float* d, int64_t i0, int64_t i1) {
    GemvRows<KFloat>(k, w, ws, a, d, i0, i1);
  }

  template <int NR, int NC>
  static void Micro(int64_t k, const char* w, size_t ws, const char* a, size_t as, float* d, size_t ds) {
    __m512 acc[NR][NC];
    HERD_UNROLL for (int r = 0; r < NR; ++r) HERD_UNROLL for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
    const NextRowsPrefetcher pf(w, ws, NR, k / L::kStep);
    int64_t kk = 0;
    for (int64_t s = 0; kk + L::kStep <= k; kk += L::kStep, ++s) {
      pf.Step(s);
      __m512 av[NC];
      HERD_UNROLL for (int c = 0; c < NC; ++c) av[c] = LoadA(a + c * as, kk);
      HERD_UNROLL for (int r = 0; r < NR; ++r) {
        const __m512 wv = L::Load(w + r * ws, kk);
        HERD_UNROLL for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_fmadd_ps(wv, av[c], acc[r][c]);
      }
    }
    if (kk < k) {
      const int64_t rem = k - kk;
      __m512 av[NC];
      HERD_UNROLL for (int c = 0; c < NC; ++c) av[c] = LoadATail(a + c * as, kk, rem);
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
  static void Step(const char* w, size_t ws, const char* a, size_t as, int64_t kk, int64_t rem, __m512 (&acc)[NR][NC]) {
    const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    __m512 ae[NC], ao[NC];
    HERD_UNROLL for (int c = 0; c < NC; ++c) {
      const char* p = a + c * as + kk * 2;
      const __m512i u =
          rem >= 32 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(static_cast<__mmask32>((1ull << rem) - 1), p);
      ae[c] = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
      ao[c] = _mm512_castsi512_ps(_mm512_and_si512(u, hi_mask));
    }
    HERD_UNROLL for (int r = 0; r < NR; ++r) {
      const char* p = w + r * ws + kk * 2;
      const __m512i u =
          rem >= 32 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(static_cast<__mmask32>((1ull << rem) - 1), p);
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
    const NextRowsPrefetcher pf(w, ws, NR, k / 32);
    int64_t kk = 0;
    for (int64_t s = 0; kk + 32 <= k; kk += 32, ++s) {
      pf.Step(s);
      Step<NR, NC>(w, ws, a, as, kk, 32, acc);
    }
    if (kk < k) Step<NR, NC>(w, ws, a, as, kk, k - kk, acc);
    HERD_UNROLL for (int c = 0; c < NC; ++c) HERD_UNROLL for (int r = 0; r < NR; ++r) {
      d[c * ds + r] = _mm512_reduce_add_ps(acc[r][c]);
    }
  }
};

// ---------------------------------------------------------------- Q4_0 x Q8_0
//
// (Q8_0 and Q5_0 weights not repacked at load run quant_block32.inc: ggml's 8-lane order.)
constexpr int kQ8BlockBytes = 34;
constexpr int kQ4BlockBytes = 18;

// Q4_0 works on quads of 4 blocks: the 16-byte quants of 4 weight blocks fill one
// zmm, whose low nibbles are elements 0-15 and high nibbles 16-31 of each block.
// Activations are packed to match (256 bytes per quad):
//   int8 lo[64] = [y0[0:16], y1[0:16], y2[0:16], y3[0:16]], int8 hi[64] = [.. 16:32 ..],
//   int32 ncorr[16] = -8 * (sum of the lane's 4 lo + 4 hi quants), float d[16] = block scale.
// Each int32 lane is the exact dot product of 8 elements of one block.
constexpr size_t kQuadBytes = 256;

inline int64_t NumQuads(int64_t k) { return (k / 32 + 3) / 4; }

inline __m512i QuadIdx() { return _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0); }

// 16 lanes of scales [d0 x4, d1 x4, d2 x4, d3 x4] from the F16 scales of `nblk` blocks.
inline __m512 QuadScales(const char* b0, int block_bytes, int nblk) {
  uint64_t h = 0;
  for (int i = 0; i < nblk; ++i) h |= static_cast<uint64_t>(LoadU16(b0 + i * block_bytes)) << (16 * i);
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(h)));
  return _mm512_permutexvar_ps(QuadIdx(), _mm512_castps128_ps512(f));
}

void PackQ8RowQuads(int64_t k, const char* a, char* out) {
  const int64_t nb = k / 32;
  const int64_t nq = NumQuads(k);
  const __m512i ones = _mm512_set1_epi16(1);
  const __m512i eight = _mm512_set1_epi8(8);
  for (int64_t q = 0; q < nq; ++q) {
    const char* b0 = a + 4 * q * kQ8BlockBytes;
    const int nblk = static_cast<int>(nb - 4 * q < 4 ? nb - 4 * q : 4);
    __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
    for (int i = 0; i < nblk; ++i) {
      const char* y = b0 + i * kQ8BlockBytes + 2;
      const __m128i l = _mm_loadu_si128(reinterpret_cast<const __m128i*>(y));
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(y + 16));
      switch (i) {
        case 0:
          lo = _mm512_inserti32x4(lo, l, 0);
          hi = _mm512_inserti32x4(hi, h, 0);
          break;
        case 1:
          lo = _mm512_inserti32x4(lo, l, 1);
          hi = _mm512_inserti32x4(hi, h, 1);
          break;
        case 2:
          lo = _mm512_inserti32x4(lo, l, 2);
          hi = _mm512_inserti32x4(hi, h, 2);
          break;
        default:
          lo = _mm512_inserti32x4(lo, l, 3);
          hi = _mm512_inserti32x4(hi, h, 3);
          break;
      }
    }
    const __m512i sums = _mm512_add_epi32(_mm512_madd_epi16(_mm512_maddubs_epi16(eight, lo), ones),
                                          _mm512_madd_epi16(_mm512_maddubs_epi16(eight, hi), ones));
    char* o = out + q * kQuadBytes;
    _mm512_store_si512(o, lo);
    _mm512_store_si512(o + 64, hi);
    _mm512_store_si512(o + 128, _mm512_sub_epi32(_mm512_setzero_si512(), sums));
    _mm512_store_ps(o + 192, QuadScales(b0, kQ8BlockBytes, nblk));
  }
}

template <bool kVnni>
struct KQ4_0 {
  static constexpr int kNR = 4, kNC = 3;
  static constexpr bool kPackA = true;
  static size_t WRowBytes(int64_t k) { return static_cast<size_t>(k / 32) * kQ4BlockBytes; }
  static size_t PackedBytes(int64_t k) { return static_cast<size_t>(NumQuads(k)) * kQuadBytes; }
  static void Pack(int64_t k, const char* a, char* out) { PackQ8RowQuads(k, a, out); }

  template <int NR, int NC, int kBlocks>
  static void Step(const char* w, size_t ws, const char* a, size_t as, __m512 (&acc)[NR][NC]) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __m512i wlo[NR], whi[NR];
    __m512 wd[NR];
    HERD_UNROLL for (int r = 0; r < NR; ++r) {
      const char* b0 = w + r * ws;
      __m512i z;
      if (kBlocks == 4) {
        const __m256i q01 =
            _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 2))),
                                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + kQ4BlockBytes + 2)), 1);
        const __m256i q23 = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 2 * kQ4BlockBytes + 2))),
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 3 * kQ4BlockBytes + 2)), 1);
        z = _mm512_inserti64x4(_mm512_castsi256_si512(q01), q23, 1);
      } else {
        z = _mm512_setzero_si512();
        z = _mm512_inserti32x4(z, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 2)), 0);
        if (kBlocks > 1)
          z = _mm512_inserti32x4(z, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + kQ4BlockBytes + 2)), 1);
        if (kBlocks > 2)
          z = _mm512_inserti32x4(z, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + 2 * kQ4BlockBytes + 2)), 2);
      }
      wlo[r] = _mm512_and_si512(z, low4);
      whi[r] = _mm512_and_si512(_mm512_srli_epi16(z, 4), low4);
      wd[r] = QuadScales(b0, kQ4BlockBytes, kBlocks);
    }
    HERD_UNROLL for (int c = 0; c < NC; ++c) {
      const char* pa = a + c * as;
      const __m512i alo = _mm512_load_si512(pa);
      const __m512i ahi = _mm512_load_si512(pa + 64);
      const __m512i nc = _mm512_load_si512(pa + 128);
      const __m512 ad = _mm512_load_ps(pa + 192);
      HERD_UNROLL for (int r = 0; r < NR; ++r) {
        __m512i dot;
        if (kVnni) {
          dot = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(nc, wlo[r], alo), whi[r], ahi);  // sum nib*y - 8 sum y
        } else {
          const __m512i ones = _mm512_set1_epi16(1);
          dot = _mm512_add_epi32(_mm512_add_epi32(_mm512_madd_epi16(_mm512_maddubs_epi16(wlo[r], alo), ones),
                                                  _mm512_madd_epi16(_mm512_maddubs_epi16(whi[r], ahi), ones)),
                                 nc);
        }
        acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(wd[r], ad), acc[r][c]);
      }
    }
  }

  // Decode: one quad of blocks (72 bytes) per row and step, gathered with two
  // overlapping loads and word permutes (quants: words 1-8, 10-17, 19-26, 28-35;
  // scales: words 0, 9, 18, 27), the same int32 lanes and float operations as Step.
  static constexpr int kGR = 8;
  static void GemvGroup(int64_t k, const char* w, size_t ws, size_t pfd, const char* a, float* d, size_t ds) {
    const char* pf = w + pfd;
    __m512 acc[kGR];
    HERD_UNROLL for (int r = 0; r < kGR; ++r) acc[r] = _mm512_setzero_ps();
    const int64_t nb = k / 32;
    const int64_t full = nb / 4;
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    // z0 = bytes 0-63 (words 0-31), z1 = bytes 8-71 (word 32 + m = quad word m + 4).
    const __m512i qidx = _mm512_set_epi16(32 + 31, 32 + 30, 32 + 29, 32 + 28, 31, 30, 29, 28, 26, 25, 24, 23, 22, 21,
                                          20, 19, 17, 16, 15, 14, 13, 12, 11, 10, 8, 7, 6, 5, 4, 3, 2, 1);
    const __m512i sidx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 27, 27, 27, 27, 18, 18, 18,
                                          18, 9, 9, 9, 9, 0, 0, 0, 0);
    for (int64_t q = 0; q < full; ++q) {
      const char* pa = a + q * kQuadBytes;
      const __m512i alo = _mm512_load_si512(pa);
      const __m512i ahi = _mm512_load_si512(pa + 64);
      const __m512i nc = _mm512_load_si512(pa + 128);
      const __m512 ad = _mm512_load_ps(pa + 192);
      HERD_UNROLL for (int r = 0; r < kGR; ++r) {
        const char* b = w + r * ws + q * 4 * kQ4BlockBytes;
        const char* pr = pf + r * ws + q * 4 * kQ4BlockBytes;
        _mm_prefetch(pr, _MM_HINT_T1);
        _mm_prefetch(pr + 64, _MM_HINT_T1);
        const __m512i z0 = _mm512_loadu_si512(b);
        const __m512i z1 = _mm512_loadu_si512(b + 8);
        const __m512i z = _mm512_permutex2var_epi16(z0, qidx, z1);
        const __m512 wd = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(sidx, z0)));
        const __m512i wlo = _mm512_and_si512(z, low4);
        const __m512i whi = _mm512_and_si512(_mm512_srli_epi16(z, 4), low4);
        __m512i dot;
        if (kVnni) {
          dot = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(nc, wlo, alo), whi, ahi);
        } else {
          const __m512i ones = _mm512_set1_epi16(1);
          dot = _mm512_add_epi32(_mm512_add_epi32(_mm512_madd_epi16(_mm512_maddubs_epi16(wlo, alo), ones),
                                                  _mm512_madd_epi16(_mm512_maddubs_epi16(whi, ahi), ones)),
                                 nc);
        }
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(wd, ad), acc[r]);
      }
    }
    __m512(&acc2)[kGR][1] = reinterpret_cast<__m512(&)[kGR][1]>(acc);
    const char* wt = w + full * 4 * kQ4BlockBytes;
    const char* at = a + full * kQuadBytes;
    switch (nb & 3) {
      case 1:
        Step<kGR, 1, 1>(wt, ws, at, 0, acc2);
        break;
      case 2:
        Step<kGR, 1, 2>(wt, ws, at, 0, acc2);
        break;
      case 3:
        Step<kGR, 1, 3>(wt, ws, at, 0, acc2);
        break;
      default:
        break;
    }
    Reduce8(acc, d, ds);
  }
  static void Gemv(int64_t k, const char* w, size_t ws, const char* a, float* d, int64_t i0, int64_t i1) {
    GemvRows<KQ4_0>(k, w, ws, a, d, i0, i1);
  }

  template <int NR, int NC>
  static void Micro(int64_t k, const char* w, size_t ws, const char* a, size_t as, float* d, size_t ds) {
    __m512 acc[NR][NC];
    HERD_UNROLL for (int r = 0; r < NR; ++r) HERD_UNROLL for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
    const int64_t nb = k / 32;
    const int64_t full = nb / 4;
    const NextRowsPrefetcher pf(w, ws, NR, full);
    for (int64_t q = 0; q < full; ++q) {
      pf.Step(q);
      Step<NR, NC, 4>(w + q * 4 * kQ4BlockBytes, ws, a + q * kQuadBytes, as, acc);
    }
    const char* wt = w + full * 4 * kQ4BlockBytes;
    const char* at = a + full * kQuadBytes;
    switch (nb & 3) {
      case 1:
        Step<NR, NC, 1>(wt, ws, at, as, acc);
        break;
      case 2:
        Step<NR, NC, 2>(wt, ws, at, as, acc);
        break;
      case 3:
        Step<NR, NC, 3>(wt, ws, at, as, acc);
        break;
      default:
        break;
    }
    HERD_UNROLL for (int c = 0; c < NC; ++c) HERD_UNROLL for (int r = 0; r < NR; ++r) {
      d[c * ds + r] = _mm512_reduce_add_ps(acc[r][c]);
    }
  }
};

#include "libs/kernels/cpu/quant_avx512.inc"
#include "libs/kernels/cpu/quant_block32.inc"

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

// ggml_v_expf, AVX512F+DQ branch (vec.h): max error 1.45358 + 0.5 ulp.
inline __m512 VExpf(__m512 x) {
  const __m512 r = _mm512_set1_ps(0x1.8p23f);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
  const __m512 n = _mm512_sub_ps(z, r);
  const __m512 b =
      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __mmask16 d = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 j = _mm512_fmadd_ps(
      _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                      _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
      u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
  const __m512 res = _mm512_scalef_ps(j, n);
  if (_mm512_kortestz(d, d)) return res;
  const __m512 zero = _mm512_setzero_ps();
  const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, zero, _CMP_LE_OQ), _mm512_set1_ps(INFINITY), zero);
  return _mm512_mask_blend_ps(d, res, alt);
}

// ggml_v_silu: x / (1 + exp(0 - x)).
inline __m512 VSilu(__m512 x) {
  const __m512 e = VExpf(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

constexpr int64_t W = 16;
inline __m512 Load(const float* p) { return _mm512_loadu_ps(p); }
inline void Store(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
inline __m512 Set1(float v) { return _mm512_set1_ps(v); }
inline __m512 Sub(__m512 a, __m512 b) { return _mm512_sub_ps(a, b); }
inline __m512 Mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
inline float HAdd(__m512 v) { return _mm512_reduce_add_ps(v); }
inline __m512 Add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
inline __m512 Max(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
inline float HMax(__m512 v) { return _mm512_reduce_max_ps(v); }

inline __m512 Fmadd(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
inline __m512 LoadHalf(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline void StoreHalf(uint16_t* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

#include "libs/kernels/cpu/row_ops.inc"

inline __m512 RoundHalf(__m512 x) { return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)); }

#include "libs/kernels/cpu/flash_attn_token.inc"
#include "libs/kernels/cpu/shared_attn_tile.inc"

// Q4_1 / Q5_1 in ggml's 8-lane order (quant_block32.inc): its AVX2 code is what AVX-512
// machines run for them.
using KQ4_1 = KBlock32<DecQ4_1, true>;
using KQ8_0 = KBlock32<DecQ8_0, false>;
using KQ5_0 = KBlock32<DecQ5_0, false>;
using KQ5_1 = KBlock32<DecQ5_1, true>;
using KIQ4_NL = KBlock32x2<DecIQ4_NL, false>;
using KQ2_K = KSuper512<DecQ2_K>;
using KQ3_K = KSuper512<DecQ3_K>;
using KQ4_K = KSuper512<DecQ45_K<false>>;
using KQ5_K = KSuper512<DecQ45_K<true>>;
using KIQ4_XS = KSuper512<DecIQ4_XS>;

// ggml_vec_dot_f16 (ggml-cpu/vec.cpp) as ggml's AVX-512 build runs it (no AVX512-FP16):
// GGML_F16_STEP 64, four accumulators of 16 lanes, GGML_F32Cx16_REDUCE into a double, the
// leftovers' float products added in double.
float DotF16Ggml(int64_t n, const uint16_t* x, const uint16_t* y) {
  const int64_t np = n & ~int64_t{63};
  __m512 sum[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int64_t i = 0; i < np; i += 64) {
    HERD_UNROLL for (int j = 0; j < 4; ++j) {
      sum[j] = _mm512_fmadd_ps(LoadHalf(x + i + 16 * j), LoadHalf(y + i + 16 * j), sum[j]);
    }
  }
  sum[0] = _mm512_add_ps(sum[0], sum[2]);
  sum[1] = _mm512_add_ps(sum[1], sum[3]);
  sum[0] = _mm512_add_ps(sum[0], sum[1]);
  double sumf = _mm512_reduce_add_ps(sum[0]);
  for (int64_t i = np; i < n; ++i) sumf += static_cast<double>(_cvtsh_ss(x[i]) * _cvtsh_ss(y[i]));
  return static_cast<float>(sumf);
}

template <bool kVnni>
constexpr IsaKernels kKernels = {
    {VecDot<KFloat<LoadF32, false>>, VecDot<KFloat<LoadF16, false>>, VecDot<KBf16>, VecDot<KQ8_0>, VecDot<KQ4_0<kVnni>>,
     VecDot<KQ4_1>, VecDot<KQ5_0>, VecDot<KQ5_1>, VecDot<KIQ4_NL>, VecDot<KQ2_K>, VecDot<KQ3_K>, VecDot<KQ4_K>,
     VecDot<KQ5_K>, VecDot<KQ6_K>, VecDot<KIQ4_XS>},
    {Tile<KFloat<LoadF32, false>>, Tile<KFloat<LoadF16, true>>, Tile<KBf16>, Tile<KQ8_0>, Tile<KQ4_0<kVnni>>,
     Tile<KQ4_1>, Tile<KQ5_0>, Tile<KQ5_1>, Tile<KIQ4_NL>, Tile<KQ2_K>, Tile<KQ3_K>, Tile<KQ4_K>, Tile<KQ5_K>,
     Tile<KQ6_K>, Tile<KIQ4_XS>},
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

const IsaKernels& Avx512Kernels(bool vnni) { return vnni ? kKernels<true> : kKernels<false>; }

void FlashAttnF16HeadsAvx512(const FlashAttnF16Token& a) { FlashAttnF16HeadsSimd(a); }
void SharedAttnTileAvx512(const SharedAttnTile& t) { SharedAttnTileSimd(t); }

}  // namespace herd::cpu::internal
