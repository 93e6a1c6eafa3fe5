#version 450
// RoPE (ggml_rope_ext, ggml-cpu rope_f32 with rope_yarn): src0 F32 [head_dim, n_head,
// n_tokens, ne3], positions I32 [n_tokens], optional freq factors F32 [n_dims / 2].
// One invocation per rotated pair (normal: (2i, 2i+1); NeoX: (i, i + n_dims/2)) or per
// pass-through element (dims >= n_dims). theta_i = pos * theta_scale^i is formed by
// repeated multiplication, in the CPU's order, so both backends see the same angle.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer Pos { int pos[]; };
layout(std430, binding = 2) readonly buffer FF { float ff[]; };
layout(std430, binding = 3) writeonly buffer D { float d[]; };

layout(push_constant) uniform Params {
  uint ne0, ne1, ne2, ne3;
  uint a_off, a_nb1, a_nb2, a_nb3;  // floats
  uint d_off, d_nb1, d_nb2, d_nb3;  // floats
  uint pos_off, ff_off, has_ff;     // elements
  uint n_dims, neox;
  float theta_scale;  // freq_base^(-2 / n_dims)
  float freq_scale, ext_factor;
  float mscale;       // attn_factor, times 1 + 0.1 ln(1 / freq_scale) when ext_factor != 0
  float corr0, corr1; // ggml_rope_yarn_corr_dims
} p;

void main() {
  const uint half_dims = p.n_dims / 2u;
  const uint slots = half_dims + (p.ne0 - p.n_dims);
  const uint idx = group_index() * 256u + gl_LocalInvocationID.x;
  if (idx >= slots * p.ne1 * p.ne2 * p.ne3) return;
  const uint s = idx % slots;
  const uint r = idx / slots;
  const uint i1 = r % p.ne1;
  const uint i2 = (r / p.ne1) % p.ne2;
  const uint i3 = r / (p.ne1 * p.ne2);
  const uint ab = p.a_off + i1 * p.a_nb1 + i2 * p.a_nb2 + i3 * p.a_nb3;
  const uint db = p.d_off + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3;
  if (s >= half_dims) {
    const uint i = p.n_dims + (s - half_dims);
    d[db + i] = a[ab + i];
    return;
  }
  precise float theta = float(pos[p.pos_off + i2]);
  for (uint k = 0u; k < s; ++k) theta = theta * p.theta_scale;
  const float factor = p.has_ff != 0u ? ff[p.ff_off + s] : 1.0;
  const float theta_extrap = theta / factor;
  const float theta_interp = p.freq_scale * theta_extrap;
  float th = theta_interp;
  if (p.ext_factor != 0.0) {
    const float y = (float(s) - p.corr0) / max(0.001, p.corr1 - p.corr0);
    const float ramp_mix = (1.0 - min(1.0, max(0.0, y))) * p.ext_factor;
    th = theta_interp * (1.0 - ramp_mix) + theta_extrap * ramp_mix;
  }
  float sn, cs;
  sincos_accurate(th, sn, cs);
  cs *= p.mscale;
  sn *= p.mscale;
  const uint ia = p.neox != 0u ? s : 2u * s;
  const uint ib = p.neox != 0u ? s + half_dims : 2u * s + 1u;
  const float x0 = a[ab + ia];
  const float x1 = a[ab + ib];
  d[db + ia] = x0 * cs - x1 * sn;
  d[db + ib] = x0 * sn + x1 * cs;
}
