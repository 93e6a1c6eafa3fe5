#version 450
// soft_max_ext per row (ggml_soft_max_ext): w = x * scale + slope(h) * mask[i1 % mask
// rows]; y = exp(w - max) / sum. One workgroup of 128 invocations per row; the head h
// is dimension 2 (ALiBi slope, 1 without max_bias). -inf mask entries give 0.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer M { float mask[]; };
layout(std430, binding = 2) buffer D { float d[]; };

layout(push_constant) uniform Params {
  uint ne0, ne1, ne2, nrows;
  uint a_off, a_nb1, a_nb2, a_nb3;  // floats
  uint d_off, d_nb1, d_nb2, d_nb3;  // floats
  uint m_off, m_nb1, m_ne1, has_mask;
  float scale;
  uint use_alibi, n_head_log2;
  float m0, m1;
} p;

shared float red[128];

void main() {
  const uint row = group_index();
  if (row >= p.nrows) return;  // uniform across the workgroup
  const uint i1 = row % p.ne1;
  const uint i2 = (row / p.ne1) % p.ne2;
  const uint i3 = row / (p.ne1 * p.ne2);
  const uint ab = p.a_off + i1 * p.a_nb1 + i2 * p.a_nb2 + i3 * p.a_nb3;
  const uint db = p.d_off + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3;
  const uint mb = p.m_off + (i1 % p.m_ne1) * p.m_nb1;
  const float slope = p.use_alibi != 0u ? alibi_slope(i2, p.n_head_log2, p.m0, p.m1) : 1.0;
  const uint tid = gl_LocalInvocationID.x;

  float mx = -1.0 / 0.0;
  for (uint i = tid; i < p.ne0; i += 128u) {
    float v = a[ab + i] * p.scale;
    if (p.has_mask != 0u) v += slope * mask[mb + i];
    d[db + i] = v;
    mx = max(mx, v);
  }
  red[tid] = mx;
  barrier();
  for (uint s = 64u; s > 0u; s >>= 1) {
    if (tid < s) red[tid] = max(red[tid], red[tid + s]);
    barrier();
  }
  mx = red[0];
  barrier();

  float sum = 0.0;
  for (uint i = tid; i < p.ne0; i += 128u) {
    const float e = exp(d[db + i] - mx);
    d[db + i] = e;
    sum += e;
  }
  red[tid] = sum;
  barrier();
  for (uint s = 64u; s > 0u; s >>= 1) {
    if (tid < s) red[tid] += red[tid + s];
    barrier();
  }
  const float inv = 1.0 / red[0];
  for (uint i = tid; i < p.ne0; i += 128u) d[db + i] *= inv;
}
