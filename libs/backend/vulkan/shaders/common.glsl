// Helpers shared by herd's Vulkan compute shaders (libs/backend/vulkan).
//
// Every tensor is bound as an array of 32-bit words: F32/I32 tensors are indexed in
// elements, F16 and block-quantized tensors in bytes (halves and bytes are extracted
// from the words), so no 8/16-bit storage extension is needed. Offsets and strides
// arrive in push constants; the host binds each tensor's buffer range from an offset
// rounded down to minStorageBufferOffsetAlignment and passes the remainder.
//
// Large grids are folded: the host dispatches (min(G, 65535), ceil(G / 65535), 1)
// workgroups for G logical ones, and group_index() gives the logical index (callers
// return when it is >= G).

// Error flags (binding 5): bits the host reads back after the fence.
layout(std430, binding = 5) buffer ErrFlags { uint err_flags[]; };
const uint ERR_GET_ROWS_INDEX = 1u;  // get_rows: an id outside [0, rows)
const uint ERR_SET_ROWS_INDEX = 2u;  // set_rows: an index outside [0, rows)

uint group_index() {
  return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
}

// IEEE half bits -> float (exact).
float half_bits_to_float(uint h) { return unpackHalf2x16(h & 0xFFFFu).x; }

// float -> IEEE half bits, round to nearest even (ggml_compute_fp32_to_fp16 / F16C);
// overflow gives infinity, NaN gives a quiet NaN. Written with integer operations
// because packHalf2x16's rounding is not specified.
uint float_to_half_bits(float f) {
  const uint x = floatBitsToUint(f);
  const uint sign = (x >> 16) & 0x8000u;
  const uint ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return sign | 0x7E00u;   // NaN
  if (ax >= 0x47800000u) return sign | 0x7C00u;  // >= 2^16 (and inf): infinity
  if (ax < 0x38800000u) {                        // below 2^-14: a half subnormal (or zero)
    if (ax < 0x33000000u) return sign;           // below 2^-25: rounds to zero
    const uint e = ax >> 23;
    const uint m = (ax & 0x7FFFFFu) | 0x800000u;
    const uint shift = 126u - e;  // 14..24
    uint h = m >> shift;
    const uint rem = m & ((1u << shift) - 1u);
    const uint halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (h & 1u) != 0u)) h += 1u;
    return sign | h;
  }
  uint h = (((ax >> 23) - 112u) << 10) | ((ax >> 13) & 0x3FFu);
  const uint rem = ax & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) h += 1u;  // may carry into infinity
  return sign | h;
}

// The float nearest to f that an F16 can hold (round to nearest even).
float round_to_half(float f) { return half_bits_to_float(float_to_half_bits(f)); }

// exp that saturates instead of producing NaN for large arguments.
float safe_exp(float x) { return exp(min(x, 88.0)); }

// tanh from exp, exact at the tails (1 - 2/(e^2x + 1)); the built-in may give NaN for
// large |x| on some drivers.
float tanh_stable(float x) {
  const float e = exp(min(2.0 * abs(x), 88.0));
  const float t = 1.0 - 2.0 / (e + 1.0);
  return x < 0.0 ? -t : t;
}

// erf with absolute error below 1.2e-7 (the Chebyshev fit of erfc in Numerical
// Recipes, "erfcc"): GLSL has no erf.
float erf_approx(float x) {
  const float z = abs(x);
  const float t = 1.0 / (1.0 + 0.5 * z);
  const float r = t * exp(-z * z - 1.26551223 +
                          t * (1.00002368 +
                          t * (0.37409196 +
                          t * (0.09678418 +
                          t * (-0.18628806 +
                          t * (0.27886807 +
                          t * (-1.13520398 +
                          t * (1.48851587 +
                          t * (-0.82215223 +
                          t * 0.17087277)))))))));
  return x >= 0.0 ? 1.0 - r : r - 1.0;
}

// sin and cos of x with a three-part Cody-Waite reduction by pi/2 (accurate to a few
// ulp for |x| < 1e5, the range of RoPE angles) and minimax polynomials on
// [-pi/4, pi/4] (Cephes sinf/cosf). Vulkan only requires 2^-11 absolute accuracy of
// the built-ins, on [-pi, pi].
void sincos_accurate(float x, out float s, out float c) {
  const float k = floor(x * 0.63661977236758134 + 0.5);  // round(x * 2/pi)
  precise float r = x - k * 1.5703125;
  r = r - k * 4.837512969970703125e-4;
  r = r - k * 7.54978995489188216e-8;
  const float z = r * r;
  const float sp = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
  const float cp = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z -
                   0.5 * z + 1.0;
  const int q = int(k) & 3;
  if (q == 0) { s = sp; c = cp; }
  else if (q == 1) { s = cp; c = -sp; }
  else if (q == 2) { s = -sp; c = -cp; }
  else { s = -cp; c = sp; }
}

// ALiBi slope of head h (ggml soft_max / flash_attn_ext; see AlibiSlope in
// libs/backend/cpu_backend.h): m0^(h+1) for the first n_head_log2 heads, then the
// interleaved m1 sequence.
float alibi_slope(uint h, uint n_head_log2, float m0, float m1) {
  return h < n_head_log2 ? pow(m0, float(h + 1u)) : pow(m1, float(2u * (h - n_head_log2) + 1u));
}
