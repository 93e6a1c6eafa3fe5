// F32 row / elementwise ops, written to follow ggml-cpu's ops.cpp / vec.h
// operation order. This file is compiled without -mavx* (no FMA contraction);
// Silu / Swiglu / SoftMax / Norm dispatch to the BestIsa() SIMD variants, which
// replicate ggml's AVX-512 / AVX2 code paths (ggml_v_expf, ggml_v_silu, per-vector
// float sums accumulated in double), so on the same CPU they reproduce what
// llama.cpp's CPU backend computes; HERD_ISA=scalar selects ggml's generic C.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "libs/base/fp16.h"
#include "libs/kernels/cpu/internal.h"
#include "libs/kernels/cpu/kernels.h"
#include "libs/tensor/op_params.h"

namespace herd::cpu {

namespace {
constexpr float kGeluCoefA = 0.044715f;
constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
constexpr float kSqrt2Inv = 0.70710678118654752440084436210484f;

inline float SiluF32(float x) { return x / (1.0f + std::exp(-x)); }
inline float GeluF32(float x) { return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kGeluCoefA * x * x))); }

const uint16_t* GeluTable() {
  static const std::vector<uint16_t>* table = [] {
    auto* t = new std::vector<uint16_t>(1 << 16);
    for (uint32_t i = 0; i < (1u << 16); ++i) {
      (*t)[i] = Fp32ToFp16(GeluF32(Fp16ToFp32(static_cast<uint16_t>(i))));
    }
    return t;
  }();
  return table->data();
}

float YarnRamp(float low, float high, int i0) {
  const float y = (i0 / 2 - low) / std::max(0.001f, high - low);
  return 1 - std::min(1.0f, std::max(0.0f, y));
}
}  // namespace

void RmsNorm(const float* x, float* y, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / n);
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
}

void Norm(const float* x, float* y, int64_t n, float eps) {
  double sum = 0.0;  // ggml_vec_sum_f32: double accumulator, stored as float
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]);
  const float mean = static_cast<float>(sum) / n;
  const internal::IsaKernels& k = internal::BestKernels();
  float variance;
  if (k.cvar != nullptr) {
    variance = static_cast<float>(k.cvar(x, y, n, mean));
  } else {
    double sum2 = 0.0;  // ggml_vec_cvar_f32, generic C
    for (int64_t i = 0; i < n; ++i) {
      float v = x[i] - mean;
      y[i] = v;
      v *= v;
      sum2 += static_cast<double>(v);
    }
    variance = static_cast<float>(sum2 / n);
  }
  const float scale = 1.0f / std::sqrt(variance + eps);
  for (int64_t i = 0; i < n; ++i) y[i] *= scale;
}

void SoftMax(const float* x, float* y, int64_t n, float scale, const float* mask, float slope) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  if (mask != nullptr) {
    for (int64_t i = 0; i < n; ++i) y[i] += slope * mask[i];
  }
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = max > y[i] ? max : y[i];  // ggml_vec_max_f32: MAX(max, x)
  const internal::IsaKernels& k = internal::BestKernels();
  double sum = 0.0;
  if (k.softmax_exp != nullptr) {
    sum = k.softmax_exp(y, y, n, max);
  } else {
    for (int64_t i = 0; i < n; ++i) {  // ggml_vec_soft_max_f32, generic C
      const float v = std::exp(y[i] - max);
      sum += static_cast<double>(v);
      y[i] = v;
    }
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

void RopeYarnCorrDims(int n_dims, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow, float dims[2]) {
  herd::YarnCorrDims(n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow, dims);  // the one shared definition
}

void RopeCache(const RopeParams& p, float pos, const float* freq_factors, float* cos_sin) {
  const float theta_scale = std::pow(p.freq_base, -2.0f / p.n_dims);
  float corr_dims[2];
  RopeYarnCorrDims(p.n_dims, p.n_ctx_orig, p.freq_base, p.beta_fast, p.beta_slow, corr_dims);
  float theta = pos;
  for (int i0 = 0; i0 + 1 < p.n_dims; i0 += 2) {
    const float ff = freq_factors != nullptr ? freq_factors[i0 / 2] : 1.0f;
    const float theta_extrap = theta / ff;
    // rope_yarn
    const float theta_interp = p.freq_scale * theta_extrap;
    float th = theta_interp;
    float mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
      const float ramp_mix = YarnRamp(corr_dims[0], corr_dims[1], i0) * p.ext_factor;
      th = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix;
      mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
    }
    cos_sin[i0 + 0] = std::cos(th) * mscale;
    cos_sin[i0 + 1] = std::sin(th) * mscale;
    theta *= theta_scale;
  }
}

void RopeApply(const RopeParams& p, const float* cos_sin, const float* x, float* y, int64_t head_dim) {
  const int n_dims = p.n_dims;
  for (int i0 = 0; i0 + 1 < n_dims; i0 += 2) {
    const float c = cos_sin[i0];
    const float s = cos_sin[i0 + 1];
    const int a = p.neox ? i0 / 2 : i0;
    const int b = p.neox ? i0 / 2 + n_dims / 2 : i0 + 1;
    const float x0 = x[a];
    const float x1 = x[b];
    // ggml's CPU build (GCC, -march=native, GNU dialect: -ffp-contract=fast) fuses each
    // rotated pair into one FMA: x0*cos - x1*sin as fma(x0, cos, -(x1*sin)) and
    // x0*sin + x1*cos as fma(x0, sin, x1*cos). This file is built with contraction off,
    // so the fused steps are written out; the plain products round differently in about
    // one pair in five, and that ulp is enough to flip a later int8 activation rounding.
    y[a] = std::fma(x0, c, -(x1 * s));
    y[b] = std::fma(x0, s, x1 * c);
  }
  if (y != x) {
    for (int64_t i = n_dims; i < head_dim; ++i) y[i] = x[i];
  }
}

void Silu(const float* x, float* y, int64_t n) {
  const internal::IsaKernels& k = internal::BestKernels();
  if (k.silu != nullptr) return k.silu(x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = SiluF32(x[i]);
}

void Gelu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = GeluF32(x[i]);
}

void GeluGgmlTable(const float* x, float* y, int64_t n) {
  const uint16_t* table = GeluTable();
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (v <= -10.0f) {
      y[i] = 0.0f;
    } else if (v >= 10.0f) {
      y[i] = v;
    } else {
      y[i] = Fp16ToFp32(table[Fp32ToFp16(v)]);
    }
  }
}

void GeluErf(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + std::erf(v * kSqrt2Inv));
  }
}

void Swiglu(const float* a, const float* b, float* y, int64_t n) {
  const internal::IsaKernels& k = internal::BestKernels();
  if (k.swiglu != nullptr) return k.swiglu(a, b, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = SiluF32(a[i]) * b[i];
}

void Add(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void Mul(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

void Scale(const float* x, float s, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
}

void MadF16(const uint16_t* x, float v, uint16_t* y, int64_t n) {
  const internal::IsaKernels& k = internal::BestKernels();
  if (k.mad_f16 != nullptr) return k.mad_f16(x, v, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = Fp32ToFp16(std::fma(Fp16ToFp32(x[i]), v, Fp16ToFp32(y[i])));
}

void GemmF32(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t k,
             int64_t n, Isa isa) {
  const internal::IsaKernels& kern = isa == Isa::kScalar ? internal::ScalarKernels() : internal::BestKernels();
  if (kern.gemm_f32 != nullptr) return kern.gemm_f32(a, lda, b, ldb, c, ldc, m, k, n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float s = c[i * ldc + j];
      for (int64_t l = 0; l < k; ++l) s = std::fma(a[i * lda + l], b[l * ldb + j], s);
      c[i * ldc + j] = s;
    }
  }
}

float ScaleMaskMax(const float* x, const float* mask, float scale, float slope, float* y, int64_t n, Isa isa) {
  const internal::IsaKernels& k = isa == Isa::kScalar ? internal::ScalarKernels() : internal::BestKernels();
  if (k.scale_mask_max != nullptr) return k.scale_mask_max(x, mask, scale, slope, y, n);
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] * scale;
    if (mask != nullptr) v += slope * mask[i];
    y[i] = v;
    m = std::max(m, v);
  }
  return m;
}

void RoundF16(const float* x, float* y, int64_t n, Isa isa) {
  const internal::IsaKernels& k = isa == Isa::kScalar ? internal::ScalarKernels() : internal::BestKernels();
  if (k.round_f16 != nullptr) return k.round_f16(x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = Fp16ToFp32(Fp32ToFp16(x[i]));
}

void F16ToF32(const uint16_t* x, float* y, int64_t n) {
  const internal::IsaKernels& k = internal::BestKernels();
  if (k.f16_to_f32 != nullptr) return k.f16_to_f32(x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = Fp16ToFp32(x[i]);
}

double ExpSubMax(const float* x, float* y, int64_t n, float max) {
  const internal::IsaKernels& k = internal::BestKernels();
  if (k.softmax_exp != nullptr) return k.softmax_exp(x, y, n, max);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {  // ggml_vec_soft_max_f32, generic C
    const float v = std::exp(x[i] - max);
    sum += static_cast<double>(v);
    y[i] = v;
  }
  return sum;
}

void ScaleF16(uint16_t* y, float v, int64_t n) {
  const internal::IsaKernels& k = internal::BestKernels();
  if (k.scale_f16 != nullptr) return k.scale_f16(y, v, n);
  for (int64_t i = 0; i < n; ++i) y[i] = Fp32ToFp16(Fp16ToFp32(y[i]) * v);
}

namespace {
// FlashAttnF16VRow's online softmax over n cells, cell i's V row at row_of(i): scores[i]
// (-inf: skipped), the accumulator in F16 (ggml's one_chunk order).
template <typename RowOf>
void FlashAttnF16VAccumulate(const float* scores, int64_t n, RowOf row_of, const uint8_t* v, size_t v_stride,
                             int64_t hd, uint16_t* vkq16, float* out) {
  for (int64_t d = 0; d < hd; ++d) vkq16[d] = 0;
  float S = 0.0f;
  float M = -std::numeric_limits<float>::infinity();
  // V rows are v_stride apart and (in decode) rarely still cached: request them a few
  // rows ahead so their misses overlap instead of serialising the F16 accumulator chain.
  constexpr int64_t kAhead = 24;
  const size_t row_bytes = static_cast<size_t>(hd) * 2;
  const auto prefetch_row = [&](int64_t i) {
    const uint8_t* p = v + static_cast<size_t>(row_of(i)) * v_stride;
    for (size_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(p + b);
  };
  for (int64_t i = 0; i < kAhead && i < n; ++i) prefetch_row(i);
  for (int64_t i = 0; i < n; ++i) {
    if (i + kAhead < n) prefetch_row(i + kAhead);
    const float s = scores[i];
    if (s == -std::numeric_limits<float>::infinity()) continue;
    const float Mold = M;
    float ms = 1.0f, vs = 1.0f;
    if (s > M) {
      M = s;
      ms = std::exp(Mold - M);
      ScaleF16(vkq16, ms, hd);
    } else {
      vs = std::exp(s - M);
    }
    MadF16(reinterpret_cast<const uint16_t*>(v + static_cast<size_t>(row_of(i)) * v_stride), vs, vkq16, hd);
    S = std::fma(S, ms, vs);  // ggml-cpu is built with FP contraction: S*ms + vs is one fma
  }
  const float s_inv = S == 0.0f ? 0.0f : 1.0f / S;
  for (int64_t d = 0; d < hd; ++d) out[d] = Fp16ToFp32(vkq16[d]) * s_inv;
}
}  // namespace

void FlashAttnF16VRow(const float* scores, int64_t n_kv, const uint8_t* v, size_t v_stride, int64_t hd, uint16_t* vkq16,
                      float* out) {
  FlashAttnF16VAccumulate(
      scores, n_kv, [](int64_t c) { return c; }, v, v_stride, hd, vkq16, out);
}

void FlashAttnF16VRowIdx(const float* scores, const int32_t* idx, int64_t n, const uint8_t* v, size_t v_stride,
                         int64_t hd, uint16_t* vkq16, float* out) {
  FlashAttnF16VAccumulate(
      scores, n, [idx](int64_t i) { return idx[i]; }, v, v_stride, hd, vkq16, out);
}

void AppendVisibleCells(const float* mrow, int64_t n, std::vector<int32_t>* vis) {
  constexpr uint64_t kNinf2 = 0xff800000ff800000ull;
  const float ninf = -std::numeric_limits<float>::infinity();
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    uint64_t w[4];
    std::memcpy(w, mrow + c, sizeof(w));
    if (((w[0] ^ kNinf2) | (w[1] ^ kNinf2) | (w[2] ^ kNinf2) | (w[3] ^ kNinf2)) == 0) continue;
    for (int64_t i = c; i < c + 8; ++i) {
      if (mrow[i] != ninf) vis->push_back(static_cast<int32_t>(i));
    }
  }
  for (; c < n; ++c) {
    if (mrow[c] != ninf) vis->push_back(static_cast<int32_t>(c));
  }
}

namespace internal {

void FlashAttnF16HeadsGeneric(const FlashAttnF16Token& a, VecDotFn dot) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const size_t q_row = static_cast<size_t>(a.hd) * 2;
  for (int64_t j = 0; j < a.nh; ++j) {
    const uint8_t* q = reinterpret_cast<const uint8_t*>(a.q) + static_cast<size_t>(j) * q_row;
    float* sc = a.scores + j * a.n;
    for (int64_t i = 0; i < a.n; ++i) {
      const int64_t c = a.idx[i];
      float s;
      dot(a.hd, &s, a.k + static_cast<size_t>(c) * a.k_stride + a.head_off[j], q);
      const float mv = a.mask != nullptr ? a.slope[j] * a.mask[c] : 0.0f;
      sc[i] = s * a.scale + mv;
    }
  }
  for (int64_t j = 0; j < a.nh; ++j) {
    const float* sc = a.scores + j * a.n;
    uint16_t* acc = a.vkq16 + j * a.hd;
    for (int64_t d = 0; d < a.hd; ++d) acc[d] = 0;
    float M = ninf, S = 0.0f;
    for (int64_t i = 0; i < a.n; ++i) {
      const float s = sc[i];
      if (s == ninf) continue;
      const float Mold = M;
      float ms = 1.0f, vs = 1.0f;
      if (s > M) {
        M = s;
        ms = std::exp(Mold - M);
        ScaleF16(acc, ms, a.hd);
      } else {
        vs = std::exp(s - M);
      }
      MadF16(reinterpret_cast<const uint16_t*>(a.v + static_cast<size_t>(a.idx[i]) * a.v_stride + a.head_off[j]), vs,
             acc, a.hd);
      S = std::fma(S, ms, vs);
    }
    const float s_inv = S == 0.0f ? 0.0f : 1.0f / S;
    float* out = a.out + static_cast<size_t>(j) * a.out_stride;
    for (int64_t d = 0; d < a.hd; ++d) out[d] = Fp16ToFp32(acc[d]) * s_inv;
    if (a.m_out != nullptr) a.m_out[j] = M;
    if (a.s_out != nullptr) a.s_out[j] = S;
  }
}

void SharedAttnTileRef(const SharedAttnTile& t) {
  const int64_t nc = t.nc, rp = t.rp, hd = t.hd;
  float* alpha = t.st + 64 * rp;
  for (int64_t r = 0; r < t.rows; ++r) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < nc; ++j) {
      float s = 0.0f;
      for (int64_t d = 0; d < hd; ++d) s = std::fmaf(t.k[j * t.ldk + d], t.qt[d * rp + r], s);
      s *= t.scale;
      t.st[j * rp + r] = s;
      mx = std::max(mx, s);
    }
    const float m_old = std::max(t.m[r], -1e30f);
    const float m_new = std::max(m_old, mx);
    float sum = 0.0f;
    for (int64_t j = 0; j < nc; ++j) {
      const float p = std::exp(t.st[j * rp + r] - m_new);
      t.st[j * rp + r] = p;
      sum += p;
    }
    alpha[r] = std::exp(m_old - m_new);
    t.l[r] = t.l[r] * alpha[r] + sum;
    t.m[r] = m_new;
    for (int64_t d = 0; d < hd; ++d) {
      float acc = t.o[r * hd + d] * alpha[r];
      for (int64_t j = 0; j < nc; ++j) {
        const float v = t.v16 != nullptr ? Fp16ToFp32(reinterpret_cast<const uint16_t*>(
                                               t.v16 + static_cast<size_t>(t.cells[j]) * t.v16_stride)[d])
                                         : t.v[j * t.ldv + d];
        acc = std::fmaf(t.st[j * rp + r], v, acc);
      }
      t.o[r * hd + d] = acc;
    }
  }
}

}  // namespace internal

void SharedAttnTileStep(const SharedAttnTile& t, Isa isa) {
  if (isa != Isa::kScalar) {
    const internal::IsaKernels* best = &internal::BestKernels();
    if (t.hd % 16 == 0 && t.rp % 16 == 0 &&
        (best == &internal::Avx512Kernels(false) || best == &internal::Avx512Kernels(true))) {
      return internal::SharedAttnTileAvx512(t);
    }
    if (t.hd % 8 == 0 && t.rp % 8 == 0 && best == &internal::Avx2Kernels()) return internal::SharedAttnTileAvx2(t);
  }
  internal::SharedAttnTileRef(t);
}

void FlashAttnF16Heads(const FlashAttnF16Token& a, VecDotFn dot) {
  if (a.hd > 0 && a.nh <= 256) {
    const internal::IsaKernels* best = &internal::BestKernels();
    if (a.hd % 8 == 0 && dot == GetVecDot(GgmlType::F16, Isa::kAvx2) && best == &internal::Avx2Kernels()) {
      return internal::FlashAttnF16HeadsAvx2(a);
    }
    if (a.hd % 16 == 0 && dot == GetVecDot(GgmlType::F16, Isa::kAvx512) &&
        (best == &internal::Avx512Kernels(false) || best == &internal::Avx512Kernels(true))) {
      return internal::FlashAttnF16HeadsAvx512(a);
    }
  }
  internal::FlashAttnF16HeadsGeneric(a, dot);
}

}  // namespace herd::cpu
