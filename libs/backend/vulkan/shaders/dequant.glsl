// Element access to a weight / source tensor of one type, chosen at compile time by
// TYPE_F32, TYPE_F16, TYPE_Q4_0, TYPE_Q8_0, TYPE_Q4_K or TYPE_Q6_K. The including
// shader declares the word array `w` (the tensor's binding) first.
//
// Block layouts are ggml's (libs/tensor/quants.h):
//   Q4_0 (18 bytes / 32): f16 d, 16 bytes of nibbles; element j < 16 is the low nibble
//        of byte j, element j + 16 its high nibble; value (q - 8) * d.
//   Q8_0 (34 bytes / 32): f16 d, 32 int8; value q * d.
//   Q4_K (144 bytes / 256): f16 d, f16 dmin, 12 bytes of packed 6-bit scales/mins,
//        128 bytes of nibbles: 64-element chunk c uses bytes 32c..32c+31, its first 32
//        elements the low nibbles (scale 2c), the next 32 the high ones (scale 2c+1);
//        value d * sc * q - dmin * m.
//   Q6_K (210 bytes / 256): 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits),
//        16 int8 scales, f16 d; two halves of 128, each four quarters of 32 elements;
//        value d * scale * (q - 32).

uint w_u8(uint b) { return (w[b >> 2] >> ((b & 3u) << 3)) & 0xFFu; }
int w_i8(uint b) { return int(w_u8(b) << 24) >> 24; }
// The half at byte b (b even).
float w_f16(uint b) { return unpackHalf2x16(w[b >> 2] >> ((b & 2u) << 3)).x; }

#if defined(TYPE_F32)
#define QK_ELEMS 1  // elements per block (a preprocessor value for #if)
const uint BLOCK_BYTES = 4u;
#elif defined(TYPE_F16)
#define QK_ELEMS 1
const uint BLOCK_BYTES = 2u;
#elif defined(TYPE_Q4_0)
#define QK_ELEMS 32
const uint BLOCK_BYTES = 18u;
#elif defined(TYPE_Q8_0)
#define QK_ELEMS 32
const uint BLOCK_BYTES = 34u;
#elif defined(TYPE_Q4_K)
#define QK_ELEMS 256
const uint BLOCK_BYTES = 144u;
#elif defined(TYPE_Q6_K)
#define QK_ELEMS 256
const uint BLOCK_BYTES = 210u;
#else
#error "dequant.glsl: define one TYPE_*"
#endif
const uint QK = uint(QK_ELEMS);

// Q4_K scale and min j (0..7) from the 12 packed bytes at byte sb (ggml get_scale_min_k4).
void q4k_scale_min(uint sb, uint j, out float sc, out float mn) {
  if (j < 4u) {
    sc = float(w_u8(sb + j) & 63u);
    mn = float(w_u8(sb + j + 4u) & 63u);
  } else {
    sc = float((w_u8(sb + j + 4u) & 0xFu) | ((w_u8(sb + j - 4u) >> 6) << 4));
    mn = float((w_u8(sb + j + 4u) >> 4) | ((w_u8(sb + j) >> 6) << 4));
  }
}

// Element e of the row starting at byte rb (rb a multiple of 4 for F32, of 2 for F16).
float dq(uint rb, uint e) {
#if defined(TYPE_F32)
  return uintBitsToFloat(w[(rb >> 2) + e]);
#elif defined(TYPE_F16)
  return w_f16(rb + 2u * e);
#elif defined(TYPE_Q4_0)
  const uint b = rb + (e >> 5) * BLOCK_BYTES;
  const uint j = e & 31u;
  const uint q = w_u8(b + 2u + (j & 15u));
  const uint n = j < 16u ? (q & 0xFu) : (q >> 4);
  return float(int(n) - 8) * w_f16(b);
#elif defined(TYPE_Q8_0)
  const uint b = rb + (e >> 5) * BLOCK_BYTES;
  return float(w_i8(b + 2u + (e & 31u))) * w_f16(b);
#elif defined(TYPE_Q4_K)
  const uint b = rb + (e >> 8) * BLOCK_BYTES;
  const uint r = e & 255u;
  const uint c = r >> 6;
  const uint l = r & 63u;
  const uint q = w_u8(b + 16u + c * 32u + (l & 31u));
  const uint n = l < 32u ? (q & 0xFu) : (q >> 4);
  float sc, mn;
  q4k_scale_min(b + 4u, 2u * c + (l >> 5), sc, mn);
  return w_f16(b) * sc * float(n) - w_f16(b + 2u) * mn;
#elif defined(TYPE_Q6_K)
  const uint b = rb + (e >> 8) * BLOCK_BYTES;
  const uint r = e & 255u;
  const uint h = r >> 7;           // half
  const uint g = (r & 127u) >> 5;  // quarter
  const uint l = r & 31u;
  const uint ql = w_u8(b + h * 64u + l + (g & 1u) * 32u);
  const uint qh = w_u8(b + 128u + h * 32u + l);
  const uint lo = g < 2u ? (ql & 0xFu) : (ql >> 4);
  const int q = int(lo | (((qh >> (2u * g)) & 3u) << 4)) - 32;
  const int sc = w_i8(b + 192u + h * 8u + (l >> 4) + 2u * g);
  return w_f16(b + 208u) * float(sc) * float(q);
#endif
}
