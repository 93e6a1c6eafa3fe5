#version 450
// Element-wise ops of two F32 sources, one invocation per element: src1 is broadcast
// over rows (its row (i1 % ne1, i2 % ne2, i3 % ne3) pairs with src0's row (i1, i2, i3),
// ggml's repeat rule). The op is specialization constant 0:
//   0 add     a + b
//   1 mul     a * b
//   2 swiglu  silu(a) * b
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0u;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer D { float d[]; };

layout(push_constant) uniform Params {
  uint ne0, ne1, ne2, ne3;
  uint a_off, a_nb1, a_nb2, a_nb3;  // floats
  uint b_off, b_nb1, b_nb2, b_nb3;  // floats
  uint b_ne1, b_ne2, b_ne3;
  uint d_off, d_nb1, d_nb2, d_nb3;  // floats
} p;

void main() {
  const uint idx = group_index() * 256u + gl_LocalInvocationID.x;
  const uint n = p.ne0 * p.ne1 * p.ne2 * p.ne3;
  if (idx >= n) return;
  const uint i0 = idx % p.ne0;
  const uint r = idx / p.ne0;
  const uint i1 = r % p.ne1;
  const uint i2 = (r / p.ne1) % p.ne2;
  const uint i3 = r / (p.ne1 * p.ne2);
  const float x = a[p.a_off + i1 * p.a_nb1 + i2 * p.a_nb2 + i3 * p.a_nb3 + i0];
  const float y = b[p.b_off + (i1 % p.b_ne1) * p.b_nb1 + (i2 % p.b_ne2) * p.b_nb2 + (i3 % p.b_ne3) * p.b_nb3 + i0];
  float o;
  if (OP == 0u) {
    o = x + y;
  } else if (OP == 1u) {
    o = x * y;
  } else {
    o = x / (1.0 + safe_exp(-x)) * y;
  }
  d[p.d_off + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3 + i0] = o;
}
