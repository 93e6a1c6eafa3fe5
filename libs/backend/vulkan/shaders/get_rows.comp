#version 450
// get_rows (ggml get_rows): dst[:, r] = float(src0[:, ids[r]]). One invocation per
// output element; src0 of any TYPE_* (dequant.glsl), ids I32, dst F32.
// An id outside [0, rows) sets ERR_GET_ROWS_INDEX and writes zeros.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer Ids { int ids[]; };
layout(std430, binding = 2) writeonly buffer D { float d[]; };

#include "dequant.glsl"

layout(push_constant) uniform Params {
  uint w_off;    // bytes
  uint w_nb1;    // bytes
  uint w_rows;   // src0 ne1
  uint ne0;      // row length
  uint n_ids;
  uint ids_off;  // elements
  uint d_off;    // floats
  uint d_nb1;    // floats
} p;

void main() {
  const uint chunks = (p.ne0 + 255u) / 256u;
  const uint g = group_index();
  const uint r = g / chunks;
  const uint i = (g % chunks) * 256u + gl_LocalInvocationID.x;
  if (r >= p.n_ids || i >= p.ne0) return;
  const int id = ids[p.ids_off + r];
  const uint o = p.d_off + r * p.d_nb1 + i;
  if (id < 0 || uint(id) >= p.w_rows) {
    if (i == 0u) atomicOr(err_flags[0], ERR_GET_ROWS_INDEX);
    d[o] = 0.0;
    return;
  }
  d[o] = dq(p.w_off + uint(id) * p.w_nb1, i);
}
