#version 450
// Row normalisation, one workgroup of 128 invocations per row with shared-memory
// reductions. Specialization constant 0 selects:
//   0 rms_norm  y = x / sqrt(mean(x^2) + eps)         (ggml_compute_forward_rms_norm_f32)
//   1 norm      y = (x - mean) / sqrt(var(x) + eps)   (ggml_compute_forward_norm_f32)
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 128) in;
layout(constant_id = 0) const uint MODE = 0u;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) writeonly buffer D { float d[]; };

layout(push_constant) uniform Params {
  uint ne0, ne1, ne2, nrows;
  uint a_off, a_nb1, a_nb2, a_nb3;  // floats
  uint d_off, d_nb1, d_nb2, d_nb3;  // floats
  float eps;
} p;

shared float red[128];

float reduce_sum(float v) {
  const uint tid = gl_LocalInvocationID.x;
  red[tid] = v;
  barrier();
  for (uint s = 64u; s > 0u; s >>= 1) {
    if (tid < s) red[tid] += red[tid + s];
    barrier();
  }
  const float r = red[0];
  barrier();
  return r;
}

void main() {
  const uint row = group_index();
  if (row >= p.nrows) return;  // uniform across the workgroup
  const uint i1 = row % p.ne1;
  const uint i2 = (row / p.ne1) % p.ne2;
  const uint i3 = row / (p.ne1 * p.ne2);
  const uint ab = p.a_off + i1 * p.a_nb1 + i2 * p.a_nb2 + i3 * p.a_nb3;
  const uint db = p.d_off + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3;
  const uint tid = gl_LocalInvocationID.x;
  const float n = float(p.ne0);
  if (MODE == 0u) {
    float s = 0.0;
    for (uint i = tid; i < p.ne0; i += 128u) s += a[ab + i] * a[ab + i];
    const float scale = 1.0 / sqrt(reduce_sum(s) / n + p.eps);
    for (uint i = tid; i < p.ne0; i += 128u) d[db + i] = a[ab + i] * scale;
  } else {
    float s = 0.0;
    for (uint i = tid; i < p.ne0; i += 128u) s += a[ab + i];
    const float mean = reduce_sum(s) / n;
    float s2 = 0.0;
    for (uint i = tid; i < p.ne0; i += 128u) {
      const float v = a[ab + i] - mean;
      s2 += v * v;
    }
    const float scale = 1.0 / sqrt(reduce_sum(s2) / n + p.eps);
    for (uint i = tid; i < p.ne0; i += 128u) d[db + i] = (a[ab + i] - mean) * scale;
  }
}
