#version 450
// mul_mat, matrix x vector (decode): dst[i, c] = dot(src0 row i, src1 column c) for a
// few activation columns c. One workgroup of 64 invocations per (row, column): each
// invocation accumulates whole 32-element sub-blocks (elements for F32/F16), then a
// shared-memory tree reduction (the scheme of ggml-vulkan mul_mat_vec).
// src0 any TYPE_* [K, M] with rows w_nb1 bytes apart; src1 F32 [K, ne1, ne2, ne3]
// (rows strided); dst F32 [M, ne1, ne2, ne3] (strided).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer D { float d[]; };

#include "dequant.glsl"

layout(push_constant) uniform Params {
  uint w_off, w_nb1;  // bytes
  uint K, M;
  uint x_off, x_nb1, x_nb2, x_nb3;  // floats
  uint x_ne1, x_ne2;
  uint d_off, d_nb1, d_nb2, d_nb3;  // floats
  uint ncols;  // x_ne1 * x_ne2 * x_ne3
} p;

shared float red[64];

#if QK_ELEMS > 1
// dot of the 32-element unit u of row rb with x[xb .. xb + 31].
float unit_dot(uint rb, uint u, uint xb) {
#if defined(TYPE_Q4_0)
  const uint b = rb + u * BLOCK_BYTES;
  float s = 0.0;
  for (uint j = 0u; j < 16u; ++j) {
    const uint q = w_u8(b + 2u + j);
    s += float(int(q & 0xFu) - 8) * x[xb + j] + float(int(q >> 4) - 8) * x[xb + j + 16u];
  }
  return s * w_f16(b);
#elif defined(TYPE_Q8_0)
  const uint b = rb + u * BLOCK_BYTES;
  float s = 0.0;
  for (uint j = 0u; j < 32u; ++j) s += float(w_i8(b + 2u + j)) * x[xb + j];
  return s * w_f16(b);
#elif defined(TYPE_Q4_K)
  const uint b = rb + (u >> 3) * BLOCK_BYTES;
  const uint sub = u & 7u;  // scale index: chunk sub/2, high nibbles when odd
  float sc, mn;
  q4k_scale_min(b + 4u, sub, sc, mn);
  const uint qb = b + 16u + (sub >> 1) * 32u;
  const uint shift = (sub & 1u) * 4u;
  float sq = 0.0, sx = 0.0;
  for (uint l = 0u; l < 32u; ++l) {
    const float xv = x[xb + l];
    sq += float((w_u8(qb + l) >> shift) & 0xFu) * xv;
    sx += xv;
  }
  return w_f16(b) * sc * sq - w_f16(b + 2u) * mn * sx;
#elif defined(TYPE_Q6_K)
  const uint b = rb + (u >> 3) * BLOCK_BYTES;
  const uint h = (u & 7u) >> 2;
  const uint g = u & 3u;
  const uint qlb = b + h * 64u + (g & 1u) * 32u;
  const uint qhb = b + 128u + h * 32u;
  const uint lshift = g < 2u ? 0u : 4u;
  float s0 = 0.0, s1 = 0.0;
  for (uint l = 0u; l < 32u; ++l) {
    const uint lo = (w_u8(qlb + l) >> lshift) & 0xFu;
    const int q = int(lo | (((w_u8(qhb + l) >> (2u * g)) & 3u) << 4)) - 32;
    if (l < 16u) {
      s0 += float(q) * x[xb + l];
    } else {
      s1 += float(q) * x[xb + l];
    }
  }
  const uint sb = b + 192u + h * 8u + 2u * g;
  return w_f16(b + 208u) * (float(w_i8(sb)) * s0 + float(w_i8(sb + 1u)) * s1);
#endif
}
#endif

void main() {
  const uint g = group_index();
  const uint row = g % p.M;
  const uint col = g / p.M;
  if (col >= p.ncols) return;  // uniform across the workgroup
  const uint i1 = col % p.x_ne1;
  const uint i2 = (col / p.x_ne1) % p.x_ne2;
  const uint i3 = col / (p.x_ne1 * p.x_ne2);
  const uint xb = p.x_off + i1 * p.x_nb1 + i2 * p.x_nb2 + i3 * p.x_nb3;
  const uint rb = p.w_off + row * p.w_nb1;
  const uint tid = gl_LocalInvocationID.x;
  float acc = 0.0;
#if QK_ELEMS == 1
  for (uint k = tid; k < p.K; k += 64u) acc += dq(rb, k) * x[xb + k];
#else
  const uint units = p.K / 32u;
  for (uint u = tid; u < units; u += 64u) acc += unit_dot(rb, u, xb + u * 32u);
#endif
  red[tid] = acc;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (tid < s) red[tid] += red[tid + s];
    barrier();
  }
  if (tid == 0u) d[p.d_off + row + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3] = red[0];
}
