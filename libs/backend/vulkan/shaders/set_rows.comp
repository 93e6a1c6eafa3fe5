#version 450
// set_rows (ggml_set_rows): row r of src F32 [ne0, nrows] is converted into row
// idx[r] of the destination (DST_F32, or DST_F16 rounded to nearest even), whose rows
// are d_nb1 bytes apart. F16 halves are written with a compare-and-swap on their
// 32-bit word, so neighbouring halves written by other invocations are kept. An index
// outside [0, rows) sets ERR_SET_ROWS_INDEX and that row is skipped.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer S { float src[]; };
layout(std430, binding = 1) readonly buffer I { int idx[]; };
layout(std430, binding = 2) buffer D { uint dst[]; };

layout(push_constant) uniform Params {
  uint ne0, nrows;
  uint s_off, s_nb1;  // floats
  uint i_off;         // elements
  uint d_off, d_nb1;  // bytes
  uint d_rows;
} p;

void main() {
  const uint chunks = (p.ne0 + 255u) / 256u;
  const uint g = group_index();
  const uint r = g / chunks;
  const uint i = (g % chunks) * 256u + gl_LocalInvocationID.x;
  if (r >= p.nrows || i >= p.ne0) return;
  const int row = idx[p.i_off + r];
  if (row < 0 || uint(row) >= p.d_rows) {
    if (i == 0u) atomicOr(err_flags[0], ERR_SET_ROWS_INDEX);
    return;
  }
  const float v = src[p.s_off + r * p.s_nb1 + i];
#if defined(DST_F32)
  dst[(p.d_off + uint(row) * p.d_nb1) / 4u + i] = floatBitsToUint(v);
#elif defined(DST_F16)
  const uint byte_off = p.d_off + uint(row) * p.d_nb1 + 2u * i;
  const uint word = byte_off >> 2;
  const uint shift = (byte_off & 2u) << 3;
  const uint bits = float_to_half_bits(v) << shift;
  const uint keep = ~(0xFFFFu << shift);
  uint old = dst[word];
  for (;;) {
    const uint seen = atomicCompSwap(dst[word], old, (old & keep) | bits);
    if (seen == old) break;
    old = seen;
  }
#else
#error "set_rows.comp: define DST_F32 or DST_F16"
#endif
}
