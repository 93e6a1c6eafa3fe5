// The arguments of cpu::FlashAttnF16Heads (kernels.h): a plain struct, shared with the
// SIMD translation units (which include only C headers, <immintrin.h> and internal.h).
#pragma once
#include <cstddef>
#include <cstdint>

namespace herd::cpu {

/// One query token of llama.cpp's F16 one-chunk flash attention
/// (ggml_compute_forward_flash_attn_ext_f16_one_chunk) for `nh` query heads over the cells
/// the token sees. Every field but m_out and s_out must be set.
struct FlashAttnF16Token {
  int64_t hd;         // head size of K and V (elements)
  int64_t nh;         // query heads
  const uint16_t* q;  // nh rows of hd F16 values, hd apart: the query in F16 (ggml's Q conversion)
  const uint8_t* k;   // K (F16) of cell 0; cell c at k + c * k_stride bytes
  const uint8_t* v;   // V (F16) of cell 0; cell c at v + c * v_stride bytes
  size_t k_stride, v_stride;
  const size_t* head_off;  // nh: byte offset of head j's K row / V row within a cell
  const int32_t* idx;      // the visible cells, ascending
  int64_t n;               // how many
  const float* mask;       // the token's mask row indexed by cell, or nullptr (all 0)
  const float* slope;      // nh ALiBi slopes (the mask's factor per head)
  float scale;             // KQ scale
  float* out;              // head j's hd outputs at out + j * out_stride
  size_t out_stride;       // floats
  float* scores;           // scratch, nh * n floats; on return head j's scaled, masked KQ at scores + j * n
  uint16_t* vkq16;         // scratch: nh * hd halves
  // Optional (nullptr: not written), nh floats each: head j's running max score M and
  // weight sum S = sum_i e^(score i - M) as the kernel accumulated them (out = VKQ / S);
  // M = -inf and S = 0 where the head saw no cell. Shared-prefix attention merges a
  // token's own part with them.
  float* m_out = nullptr;
  float* s_out = nullptr;
};

/// One KV tile of a shared block of shared-prefix attention (flash_attn_shared.cc) for one
/// KV head: the online-softmax step of ggml's tiled flash attention
/// (ggml_compute_forward_flash_attn_ext_tiled) for `rows` query rows that all see all `nc`
/// cells with mask 0. Scores s[j][r] = scale * (K[j] . Q[r]); per row r:
///   M' = max(M[r], max_j s[j][r]), a = e^(M[r] - M'),
///   L[r] = a L[r] + sum_j e^(s[j][r] - M'),  O[r] = a O[r] + sum_j e^(s[j][r] - M') V[j].
/// F32 throughout (cpu::SharedAttnTileStep, kernels.h). Every field must be set.
struct SharedAttnTile {
  int64_t hd;        // head size of K, V and Q (elements)
  int64_t nc;        // cells in the tile, 1..64
  int64_t rows;      // query rows, 1..rp
  int64_t rp;        // rows padded to a multiple of 16: qt's row stride, the length of m and l
  const float* k;    // nc rows of hd floats, ldk floats apart
  const float* v;    // nc rows of hd floats, ldv floats apart (unused when v16 is set)
  int64_t ldk, ldv;  // floats
  // F16 V read where it lies (nullptr: v): row j at v16 + cells[j] * v16_stride bytes
  const uint8_t* v16 = nullptr;
  const int32_t* cells = nullptr;
  size_t v16_stride = 0;
  const float* qt;  // Q transposed: Q[r][d] at qt[d * rp + r] (rows >= `rows` are 0)
  float scale;      // KQ scale
  float* m;         // rp running maxima (-inf before the first tile)
  float* l;         // rp running weight sums (0 before the first tile)
  float* o;         // rows x hd unnormalized outputs, row r at o + r * hd (0 before the first tile)
  float* st;        // scratch: 64 * rp + rp floats
};

}  // namespace herd::cpu
