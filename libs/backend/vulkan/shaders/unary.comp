#version 450
// Element-wise ops of one F32 source, one invocation per element, any strides
// (rows of contiguous floats). The op is specialization constant 0:
//   0 scale     x * f0
//   1 silu      x / (1 + e^-x)
//   2 gelu      ggml's CPU GELU: x <= -10 -> 0, x >= 10 -> x, otherwise the F16 table
//               value fp16(gelu_tanh(fp16(x))) (ggml-cpu vec.h, GGML_GELU_FP16)
//   3 gelu_erf  0.5 x (1 + erf(x / sqrt 2))
//   4 clamp     MAX(MIN(x, f1), f0) (ggml_clamp)
//   5 copy      x (ggml_cont)
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0u;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) writeonly buffer D { float d[]; };

layout(push_constant) uniform Params {
  uint ne0, ne1, ne2, ne3;
  uint a_off, a_nb1, a_nb2, a_nb3;  // floats
  uint d_off, d_nb1, d_nb2, d_nb3;  // floats
  float f0, f1;
} p;

float gelu_tanh(float v) {
  const float kSqrt2OverPi = 0.79788456080286535587989211986876;
  return 0.5 * v * (1.0 + tanh_stable(kSqrt2OverPi * v * (1.0 + 0.044715 * v * v)));
}

void main() {
  const uint idx = group_index() * 256u + gl_LocalInvocationID.x;
  const uint n = p.ne0 * p.ne1 * p.ne2 * p.ne3;
  if (idx >= n) return;
  const uint i0 = idx % p.ne0;
  const uint r = idx / p.ne0;
  const uint i1 = r % p.ne1;
  const uint i2 = (r / p.ne1) % p.ne2;
  const uint i3 = r / (p.ne1 * p.ne2);
  const float v = a[p.a_off + i1 * p.a_nb1 + i2 * p.a_nb2 + i3 * p.a_nb3 + i0];
  float y;
  if (OP == 0u) {
    y = v * p.f0;
  } else if (OP == 1u) {
    y = v / (1.0 + safe_exp(-v));
  } else if (OP == 2u) {
    if (v <= -10.0) {
      y = 0.0;
    } else if (v >= 10.0) {
      y = v;
    } else {
      y = round_to_half(gelu_tanh(round_to_half(v)));
    }
  } else if (OP == 3u) {
    y = 0.5 * v * (1.0 + erf_approx(v * 0.70710678118654752440084436210484));
  } else if (OP == 4u) {
    const float m = v < p.f1 ? v : p.f1;
    y = m > p.f0 ? m : p.f0;
  } else {
    y = v;
  }
  d[p.d_off + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3 + i0] = y;
}
