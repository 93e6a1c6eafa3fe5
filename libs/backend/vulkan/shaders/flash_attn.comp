#version 450
// flash_attn_ext (ggml_flash_attn_ext): out = softmax(scale * K^T q + slope(h) * mask) V
// for one query row (head h, token t) per workgroup of 64 invocations, streaming the KV
// cells in chunks of 128 with an online softmax (running max M and sum S, the
// accumulator rescaled by e^(M_old - M) when M grows; ggml-vulkan flash_attn.comp and
// ggml-cpu flash_attn_ext_f16 keep the same invariants).
// q F32 [hd, n_head, n_tokens] (strided); K, V [hd, n_head_kv, n_kv] of KV_F16 or KV_F32
// (strided views of the cache); q head h reads KV head h / gqa; mask F32 [n_kv,
// n_tokens] (row t); out F32 [hd, n_head, n_tokens]. With an F16 K, q is rounded to
// F16 first, as ggml converts it before ggml_vec_dot_f16. hd <= 256.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { uint kw[]; };
layout(std430, binding = 2) readonly buffer V { uint vw[]; };
layout(std430, binding = 3) readonly buffer Msk { float mask[]; };
layout(std430, binding = 4) writeonly buffer O { float o[]; };

layout(push_constant) uniform Params {
  uint q_off, q_nb1, q_nb2;  // floats
  uint k_off, k_nb1, k_nb2;  // bytes
  uint v_off, v_nb1, v_nb2;  // bytes
  uint m_off, m_nb1;         // floats
  uint o_off, o_nb1, o_nb2;  // floats
  uint hd, n_head, n_tokens, n_kv, gqa, has_mask;
  float scale;
  uint use_alibi, n_head_log2;
  float m0, m1;
} p;

const uint WG = 64u;
const uint CHUNK = 128u;
const float NEG_INF = -1.0 / 0.0;

shared float qs[256];
shared float acc[256];
shared float sc[CHUNK];
shared float red[WG];

#if defined(KV_F16)
float k_at(uint b) { return unpackHalf2x16(kw[b >> 2] >> ((b & 2u) << 3)).x; }
float v_at(uint b) { return unpackHalf2x16(vw[b >> 2] >> ((b & 2u) << 3)).x; }
const uint ESIZE = 2u;
#elif defined(KV_F32)
float k_at(uint b) { return uintBitsToFloat(kw[b >> 2]); }
float v_at(uint b) { return uintBitsToFloat(vw[b >> 2]); }
const uint ESIZE = 4u;
#else
#error "flash_attn.comp: define KV_F16 or KV_F32"
#endif

float reduce_max(float v) {
  const uint tid = gl_LocalInvocationID.x;
  red[tid] = v;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (tid < s) red[tid] = max(red[tid], red[tid + s]);
    barrier();
  }
  const float r = red[0];
  barrier();
  return r;
}

float reduce_sum(float v) {
  const uint tid = gl_LocalInvocationID.x;
  red[tid] = v;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (tid < s) red[tid] += red[tid + s];
    barrier();
  }
  const float r = red[0];
  barrier();
  return r;
}

void main() {
  const uint g = group_index();
  const uint h = g % p.n_head;
  const uint t = g / p.n_head;
  if (t >= p.n_tokens) return;  // uniform across the workgroup
  const uint tid = gl_LocalInvocationID.x;
  const uint hk = h / p.gqa;
  const float slope = p.use_alibi != 0u ? alibi_slope(h, p.n_head_log2, p.m0, p.m1) : 1.0;
  const uint qb = p.q_off + h * p.q_nb1 + t * p.q_nb2;
  for (uint i = tid; i < p.hd; i += WG) {
#if defined(KV_F16)
    qs[i] = round_to_half(q[qb + i]);
#else
    qs[i] = q[qb + i];
#endif
    acc[i] = 0.0;
  }
  barrier();
  const uint kb = p.k_off + hk * p.k_nb1;
  const uint vb = p.v_off + hk * p.v_nb1;
  const uint mb = p.m_off + t * p.m_nb1;
  float M = NEG_INF;
  float S = 0.0;
  for (uint c0 = 0u; c0 < p.n_kv; c0 += CHUNK) {
    const uint n = min(CHUNK, p.n_kv - c0);
    float local_max = NEG_INF;
    for (uint c = tid; c < n; c += WG) {
      const float mv = p.has_mask != 0u ? slope * mask[mb + c0 + c] : 0.0;
      float s = NEG_INF;
      if (mv != NEG_INF) {
        const uint rb = kb + (c0 + c) * p.k_nb2;
        float dot = 0.0;
        for (uint i = 0u; i < p.hd; ++i) dot += qs[i] * k_at(rb + ESIZE * i);
        s = dot * p.scale + mv;
      }
      sc[c] = s;
      local_max = max(local_max, s);
    }
    const float cm = reduce_max(local_max);  // its barriers also publish sc[]
    if (cm == NEG_INF) continue;               // every cell masked (uniform)
    const float new_m = max(M, cm);
    const float ms = M == NEG_INF ? 0.0 : exp(M - new_m);
    float local_sum = 0.0;
    for (uint c = tid; c < n; c += WG) {
      const float e = sc[c] == NEG_INF ? 0.0 : exp(sc[c] - new_m);
      sc[c] = e;
      local_sum += e;
    }
    const float cs = reduce_sum(local_sum);
    S = S * ms + cs;
    M = new_m;
    for (uint i = tid; i < p.hd; i += WG) {
      float a = acc[i] * ms;
      for (uint c = 0u; c < n; ++c) {
        const float e = sc[c];
        if (e != 0.0) a += e * v_at(vb + (c0 + c) * p.v_nb2 + ESIZE * i);
      }
      acc[i] = a;
    }
    barrier();
  }
  const float inv = S == 0.0 ? 0.0 : 1.0 / S;
  const uint ob = p.o_off + h * p.o_nb1 + t * p.o_nb2;
  for (uint i = tid; i < p.hd; i += WG) o[ob + i] = acc[i] * inv;
}
