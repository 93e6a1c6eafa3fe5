#version 450
// mul_mat, tiled (batches): dst[i, c] = dot(src0 row i, src1 column c) with 64x64
// output tiles per workgroup of 256 invocations (4x4 outputs each) and 32-deep K
// steps staged in shared memory; src0 is dequantized to F32 while staging (the
// structure of ggml-vulkan mul_mm without its cooperative-matrix paths).
// Same tensors and push constants as mul_mat_vec.comp.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;
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
  uint ncols;
} p;

const uint BM = 64u;
const uint BN = 64u;
const uint BK = 32u;

shared float As[BM * (BK + 1u)];  // [row][k], padded
shared float Bs[BN * (BK + 1u)];  // [column][k], padded

uint col_base(uint c) {
  const uint i1 = c % p.x_ne1;
  const uint i2 = (c / p.x_ne1) % p.x_ne2;
  const uint i3 = c / (p.x_ne1 * p.x_ne2);
  return p.x_off + i1 * p.x_nb1 + i2 * p.x_nb2 + i3 * p.x_nb3;
}

void main() {
  const uint tiles_m = (p.M + BM - 1u) / BM;
  const uint g = group_index();
  const uint m0 = (g % tiles_m) * BM;
  const uint n0 = (g / tiles_m) * BN;
  if (n0 >= p.ncols) return;  // uniform across the workgroup
  const uint tid = gl_LocalInvocationID.x;
  const uint tx = tid % 16u;
  const uint ty = tid / 16u;
  // Staging: this invocation loads k column `lk` of tile rows / columns lr + 8l.
  const uint lk = tid % BK;
  const uint lr = tid / BK;
  uint wrow[8];
  uint xcol[8];
  bool wok[8];
  bool xok[8];
  for (uint l = 0u; l < 8u; ++l) {
    const uint r = m0 + lr + 8u * l;
    wok[l] = r < p.M;
    wrow[l] = p.w_off + (wok[l] ? r : 0u) * p.w_nb1;
    const uint c = n0 + lr + 8u * l;
    xok[l] = c < p.ncols;
    xcol[l] = xok[l] ? col_base(c) : 0u;
  }
  float acc[4][4];
  for (uint i = 0u; i < 4u; ++i) {
    for (uint j = 0u; j < 4u; ++j) acc[i][j] = 0.0;
  }
  for (uint k0 = 0u; k0 < p.K; k0 += BK) {
    const uint k = k0 + lk;
    const bool kok = k < p.K;
    for (uint l = 0u; l < 8u; ++l) {
      const uint t = (lr + 8u * l) * (BK + 1u) + lk;
      As[t] = (wok[l] && kok) ? dq(wrow[l], k) : 0.0;
      Bs[t] = (xok[l] && kok) ? x[xcol[l] + k] : 0.0;
    }
    barrier();
    for (uint kk = 0u; kk < BK; ++kk) {
      float a[4];
      float b[4];
      for (uint i = 0u; i < 4u; ++i) a[i] = As[(tx + 16u * i) * (BK + 1u) + kk];
      for (uint j = 0u; j < 4u; ++j) b[j] = Bs[(ty + 16u * j) * (BK + 1u) + kk];
      for (uint i = 0u; i < 4u; ++i) {
        for (uint j = 0u; j < 4u; ++j) acc[i][j] += a[i] * b[j];
      }
    }
    barrier();
  }
  for (uint j = 0u; j < 4u; ++j) {
    const uint c = n0 + ty + 16u * j;
    if (c >= p.ncols) continue;
    const uint i1 = c % p.x_ne1;
    const uint i2 = (c / p.x_ne1) % p.x_ne2;
    const uint i3 = c / (p.x_ne1 * p.x_ne2);
    const uint ob = p.d_off + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3;
    for (uint i = 0u; i < 4u; ++i) {
      const uint r = m0 + tx + 16u * i;
      if (r < p.M) d[ob + r] = acc[i][j];
    }
  }
}
