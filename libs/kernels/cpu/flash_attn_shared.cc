// Shared-prefix ("cascade") flash attention of the CPU backend: SharedPrefixAttention::Compute
// (graph_ops.h).
//
// A decode step of many sequences that share a prompt prefix (a system prompt, a tenant's
// header, the context of one sequence's draft tokens) attends every query token to the
// same KV cells: the prefix cache gives those sequences one copy of the prefix's K/V. The
// per-token path reads that copy once per token (16 sequences: 16 times the bytes), which
// makes decode KV-bandwidth-bound. Here the cells are grouped by the exact set of query
// tokens that see them (the mask says it: a cell's visibility bitmask over the batch's
// tokens); a group seen by several tokens is a shared block, attended once for all of
// them (queries x the block's K/V as small F32 GEMMs, ggml's tiled flash-attention step),
// every token's remaining cells on their own, and the partial results merged exactly by
// log-sum-exp: out = sum_i O_i e^(M_i - M) / sum_i L_i e^(M_i - M), M = max_i M_i, where
// O_i is a part's unnormalized softmax-weighted V sum, L_i its weight sum, M_i its max
// score (vLLM's cascade attention; FlashInfer's merge_state; Hydragen, Juravsky et al.
// 2024). Accumulation is F32 throughout, so results match the per-token path within
// float rounding (that path keeps llama.cpp's F16 V accumulator), not bit for bit.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "libs/kernels/cpu/flash_attn_token.h"
#include "libs/kernels/cpu/graph_ops.h"
#include "libs/kernels/cpu/kernels.h"
#include "libs/tensor/op_params.h"

namespace herd::cpu {
namespace {

constexpr int64_t kTileKv = 64;         // KV cells per tile of a shared block
constexpr int64_t kTileRows = 64;       // query rows (tokens x heads of one KV head) per block item
constexpr int64_t kMinBlock = 32;       // fewer shared cells: the tokens read them on their own
constexpr int64_t kMaxPlanTokens = 64;  // tokens of one plan (its token sets are 64-bit masks)

const float* Row(const Tensor* t, int64_t i1, int64_t i2 = 0) { return reinterpret_cast<const float*>(t->row(i1, i2)); }

// One part of a (token, head)'s attention: max score, weight sum, unnormalized output.
struct Part {
  float m;
  float l;
};

// 4 floats: this file builds for the baseline ISA, so the loops of the merge take SSE's
// width explicitly (the compiler's -O2 cost model leaves them scalar).
typedef float F4 __attribute__((vector_size(16)));
inline F4 LoadF4(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void StoreF4(float* p, F4 v) { std::memcpy(p, &v, sizeof(v)); }

// y = x * s over n floats.
void ScaleTo(const float* x, float s, float* y, int64_t n) {
  int64_t d = 0;
  for (; d + 4 <= n; d += 4) StoreF4(y + d, LoadF4(x + d) * s);
  for (; d < n; ++d) y[d] = x[d] * s;
}

}  // namespace

// How a batch's mask shares cells (the same for every layer of one graph): built once per
// graph (SharedPrefixAttention::NewGraph) and mask by BuildSharedAttnPlan.
struct SharedPrefixAttention::Plan {
  uint64_t epoch = 0;
  const void* mask_data = nullptr;
  int64_t n_kv = 0, n_tokens = 0;
  int64_t t_base = 0;  // the node's token of this plan's token 0 (a chunk of at most 64 tokens)
  bool use = false;    // enough sharing to pay
  struct Block {
    uint64_t tokens_mask = 0;
    bool zero_mask = false;  // every token's mask is 0 at every cell (no ALiBi distance to add)
    std::vector<int32_t> cells;
    std::vector<int32_t> tokens;
    size_t slot0 = 0;  // its parts: (slot0 + i) * n_head + h for tokens[i], head h
  };
  std::vector<Block> blocks;
  std::vector<std::vector<int32_t>> own;                             // each token's cells in no block
  std::vector<std::vector<std::pair<size_t, size_t>>> token_blocks;  // per token: (block, i)
  size_t n_slots = 0;  // token slots of parts: the tokens' own (0..n_tokens-1), then the blocks'
};

namespace {

void BuildSharedAttnPlan(const Tensor* mask, ThreadPool& pool, SharedPrefixAttention::Plan* plan) {
  const int64_t n_kv = plan->n_kv, n_tokens = plan->n_tokens;
  std::vector<std::vector<int32_t>> vis(static_cast<size_t>(n_tokens));
  pool.Run([&](int ith, int nth) {
    for (int64_t t = ith; t < n_tokens; t += nth)
      cpu::AppendVisibleCells(Row(mask, plan->t_base + t), n_kv, &vis[static_cast<size_t>(t)]);
  });
  // Which tokens see each cell.
  std::vector<uint64_t> seen_by(static_cast<size_t>(n_kv), 0);
  int64_t total = 0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    total += static_cast<int64_t>(vis[static_cast<size_t>(t)].size());
    for (int32_t c : vis[static_cast<size_t>(t)]) seen_by[static_cast<size_t>(c)] |= uint64_t{1} << t;
  }
  // Shared blocks: cells seen by the same set of at least two tokens, in cell order.
  std::vector<SharedPrefixAttention::Plan::Block>& blocks = plan->blocks;
  absl::flat_hash_map<uint64_t, size_t> by_mask;
  for (int32_t c : vis[0]) {  // cells token 0 sees, then those of the others it does not
    const uint64_t m = seen_by[static_cast<size_t>(c)];
    if ((m & (m - 1)) == 0) continue;
    auto [it, fresh] = by_mask.try_emplace(m, blocks.size());
    if (fresh) blocks.emplace_back().tokens_mask = m;
    blocks[it->second].cells.push_back(c);
  }
  for (int64_t t = 1; t < n_tokens; ++t) {
    const uint64_t earlier = (uint64_t{1} << t) - 1;
    for (int32_t c : vis[static_cast<size_t>(t)]) {
      const uint64_t m = seen_by[static_cast<size_t>(c)];
      if ((m & (m - 1)) == 0 || (m & earlier) != 0) continue;  // alone, or listed by an earlier token
      auto [it, fresh] = by_mask.try_emplace(m, blocks.size());
      if (fresh) blocks.emplace_back().tokens_mask = m;
      blocks[it->second].cells.push_back(c);
    }
  }
  blocks.erase(std::remove_if(blocks.begin(), blocks.end(),
                              [](const auto& b) { return static_cast<int64_t>(b.cells.size()) < kMinBlock; }),
               blocks.end());
  int64_t saved = 0;  // cell reads the blocks save
  for (const auto& b : blocks)
    saved += (__builtin_popcountll(b.tokens_mask) - 1) * static_cast<int64_t>(b.cells.size());
  plan->use = !blocks.empty() && 4 * saved >= total;
  if (!plan->use) return;
  // A block of several tiles becomes one sub-block per thread (whole tiles, cells in
  // order): each thread then streams its own run of cells with all their heads, one
  // sequential read, rather than every thread reading every cell's rows of its heads.
  // Their parts merge like those of any other block.
  const int64_t n_split = std::max(1, pool.size());
  std::vector<SharedPrefixAttention::Plan::Block> split;
  for (auto& b : blocks) {
    const int64_t n_tiles = (static_cast<int64_t>(b.cells.size()) + kTileKv - 1) / kTileKv;
    const int64_t per = (n_tiles + std::min(n_split, n_tiles) - 1) / std::min(n_split, n_tiles) * kTileKv;
    for (size_t c0 = 0; c0 < b.cells.size(); c0 += static_cast<size_t>(per)) {
      SharedPrefixAttention::Plan::Block& sb = split.emplace_back();
      sb.tokens_mask = b.tokens_mask;
      sb.cells.assign(
          b.cells.begin() + static_cast<ptrdiff_t>(c0),
          b.cells.begin() + static_cast<ptrdiff_t>(std::min(b.cells.size(), c0 + static_cast<size_t>(per))));
    }
  }
  blocks = std::move(split);
  std::vector<uint8_t> in_block(static_cast<size_t>(n_kv), 0);
  for (const auto& b : blocks) {
    for (int32_t c : b.cells) in_block[static_cast<size_t>(c)] = 1;
  }
  plan->own.assign(static_cast<size_t>(n_tokens), {});
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int32_t c : vis[static_cast<size_t>(t)]) {
      if (!in_block[static_cast<size_t>(c)]) plan->own[static_cast<size_t>(t)].push_back(c);
    }
  }
  for (auto& b : blocks) {
    b.zero_mask = true;
    for (int64_t t = 0; t < n_tokens && b.zero_mask; ++t) {
      if (((b.tokens_mask >> t) & 1) == 0) continue;
      const float* mrow = Row(mask, plan->t_base + t);
      for (int32_t c : b.cells) {
        if (mrow[c] != 0.0f) {
          b.zero_mask = false;
          break;
        }
      }
    }
  }
  plan->token_blocks.assign(static_cast<size_t>(n_tokens), {});
  plan->n_slots = static_cast<size_t>(n_tokens);
  for (size_t b = 0; b < blocks.size(); ++b) {
    auto& bl = blocks[b];
    for (int64_t t = 0; t < n_tokens; ++t) {
      if ((bl.tokens_mask >> t) & 1) {
        plan->token_blocks[static_cast<size_t>(t)].emplace_back(b, bl.tokens.size());
        bl.tokens.push_back(static_cast<int32_t>(t));
      }
    }
    bl.slot0 = plan->n_slots;
    plan->n_slots += bl.tokens.size();
  }
}

// One FLASH_ATTN_EXT node and where its parts go.
struct AttnArgs {
  const Tensor *q, *k, *v, *mask;
  int64_t hd, n_head, gqa;
  float scale, max_bias;
  Isa isa;
  cpu::VecDotFn dot;
  Part* parts;     // (slot * n_head + h)
  float* part_o;   // hd floats per part, normalized
  int64_t t_base;  // the node's token of the plan's token 0: q, mask and output rows t_base + t
};

// Per-thread scratch of OwnPart and BlockPart.
struct Scratch {
  std::vector<uint8_t> qconv;
  std::vector<float> scores, hslope;
  std::vector<size_t> head_off;
  std::vector<uint16_t> vkq16;
  std::vector<float> Qt, O, St, P, K, V, M, L, mtile, slope;
  std::vector<size_t> merge;  // a (token, head)'s part indices
};

// The part of token t over its own cells (slot t): llama.cpp's per-token kernel for every
// head, which also leaves each head's running max and weight sum.
void OwnPart(const AttnArgs& a, int64_t t, const std::vector<int32_t>& cells, Scratch* s) {
  const int64_t hd = a.hd, n_head = a.n_head, nc = static_cast<int64_t>(cells.size());
  const size_t q_row16 = GgmlRowSize(GgmlType::F16, hd);
  s->qconv.resize(static_cast<size_t>(n_head) * q_row16 + 64);
  s->scores.resize(static_cast<size_t>(n_head * nc));
  s->hslope.resize(static_cast<size_t>(n_head));
  s->head_off.resize(static_cast<size_t>(n_head));
  s->vkq16.resize(static_cast<size_t>(n_head * hd));
  s->M.resize(static_cast<size_t>(n_head));
  s->L.resize(static_cast<size_t>(n_head));
  for (int64_t h = 0; h < n_head; ++h) {
    s->head_off[static_cast<size_t>(h)] = static_cast<size_t>(h / a.gqa) * a.k->nb[1];
    cpu::FromFloat(GgmlType::F16, Row(a.q, h, a.t_base + t), s->qconv.data() + h * q_row16, hd, a.isa);
    s->hslope[static_cast<size_t>(h)] = AlibiSlope(static_cast<int>(h), static_cast<int>(n_head), a.max_bias);
  }
  cpu::FlashAttnF16Token fa;
  fa.hd = hd;
  fa.nh = n_head;
  fa.q = reinterpret_cast<const uint16_t*>(s->qconv.data());
  fa.k = static_cast<const uint8_t*>(a.k->data);
  fa.v = static_cast<const uint8_t*>(a.v->data);
  fa.k_stride = a.k->nb[2];
  fa.v_stride = a.v->nb[2];
  fa.head_off = s->head_off.data();
  fa.idx = cells.data();
  fa.n = nc;
  fa.mask = Row(a.mask, a.t_base + t);
  fa.slope = s->hslope.data();
  fa.scale = a.scale;
  fa.out = a.part_o + static_cast<size_t>(t * n_head) * static_cast<size_t>(hd);
  fa.out_stride = static_cast<size_t>(hd);
  fa.scores = s->scores.data();
  fa.vkq16 = s->vkq16.data();
  fa.m_out = s->M.data();
  fa.s_out = s->L.data();
  cpu::FlashAttnF16Heads(fa, a.dot);
  for (int64_t h = 0; h < n_head; ++h) {
    a.parts[static_cast<size_t>(t * n_head + h)] = Part{s->M[static_cast<size_t>(h)], s->L[static_cast<size_t>(h)]};
  }
}

// The parts of a shared block's tokens [t0, t0 + nt) x the gqa query heads of each KV head
// in [hk0, hk0 + nhk): per 64-cell tile S^T = K Q^T (K's F32 rows as they are, Q
// transposed once and padded to whole SIMD vectors so GemmF32 has no scalar column tail),
// P = scale * S + slope * mask, online softmax, O += P V (ggml's tiled flash-attention
// step). A tile's K and V rows are widened for the whole group of heads at once: a cell's
// rows of adjacent heads are adjacent in the cache, so the group reads one run of
// nhk x head bytes per cell rather than nhk runs a cell apart (strided 128-byte reads
// streamed at about half the rate in a 16-stream decode profile).
void BlockPart(const AttnArgs& a, const SharedPrefixAttention::Plan::Block& bl, int64_t hk0, int64_t nhk, int64_t t0,
               int64_t nt, Scratch* s) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t hd = a.hd, gqa = a.gqa, rows = nt * gqa, rp = (rows + 15) / 16 * 16;
  const size_t qt_size = static_cast<size_t>(hd * rp), o_size = static_cast<size_t>(rows * hd);
  const size_t kv_size = static_cast<size_t>(kTileKv * nhk * hd);
  s->Qt.resize(static_cast<size_t>(nhk) * qt_size);  // rows [rows, rp) zeroed below
  s->St.resize(static_cast<size_t>(kTileKv * rp + rp));
  s->P.resize(static_cast<size_t>(rows * kTileKv));
  s->K.resize(kv_size);
  s->V.resize(kv_size);
  s->O.assign(static_cast<size_t>(nhk) * o_size, 0.0f);
  s->M.assign(static_cast<size_t>(nhk * rp), ninf);  // head g's rows at g * rp
  s->L.assign(static_cast<size_t>(nhk * rp), 0.0f);
  s->mtile.resize(static_cast<size_t>(kTileKv));
  s->slope.resize(static_cast<size_t>(nhk * gqa));
  for (int64_t g = 0; g < nhk; ++g) {
    const int64_t hk = hk0 + g;
    for (int64_t j = 0; j < gqa; ++j) {
      s->slope[static_cast<size_t>(g * gqa + j)] =
          AlibiSlope(static_cast<int>(hk * gqa + j), static_cast<int>(a.n_head), a.max_bias);
    }
    float* qt = s->Qt.data() + static_cast<size_t>(g) * qt_size;
    for (int64_t r = 0; r < rows; ++r) {
      const float* qr = Row(a.q, hk * gqa + r % gqa, a.t_base + bl.tokens[static_cast<size_t>(t0 + r / gqa)]);
      for (int64_t d = 0; d < hd; ++d) qt[d * rp + r] = qr[d];
    }
    if (rows < rp) {
      for (int64_t d = 0; d < hd; ++d) std::fill(qt + d * rp + rows, qt + (d + 1) * rp, 0.0f);
    }
  }
  float *St = s->St.data(), *P = s->P.data();
  const int64_t n_cells = static_cast<int64_t>(bl.cells.size());
  const int64_t ld = nhk * hd;  // a tile's K and V rows: cell j's heads side by side
  // The group's heads of one cell are one run in the cache when the rows of adjacent heads
  // are adjacent (ggml's K/V views of a llama.cpp cache): one conversion per cell.
  const bool run = nhk == 1 || (a.k->nb[1] == static_cast<size_t>(hd) * 2 && a.v->nb[1] == static_cast<size_t>(hd) * 2);
  for (int64_t c0 = 0; c0 < n_cells; c0 += kTileKv) {
    const int64_t nc = std::min(kTileKv, n_cells - c0);
    float* Kt = s->K.data();
    float* Vt = s->V.data();
    for (int64_t j = 0; j < nc; ++j) {
      const int64_t c = bl.cells[static_cast<size_t>(c0 + j)];
      if (run) {
        cpu::F16ToF32(reinterpret_cast<const uint16_t*>(a.k->row(hk0, c)), Kt + j * ld, ld);
        // The tile step reads F16 V where it lies (one conversion per use, no copy).
        if (!bl.zero_mask) cpu::F16ToF32(reinterpret_cast<const uint16_t*>(a.v->row(hk0, c)), Vt + j * ld, ld);
        continue;
      }
      for (int64_t g = 0; g < nhk; ++g) {
        cpu::F16ToF32(reinterpret_cast<const uint16_t*>(a.k->row(hk0 + g, c)), Kt + j * ld + g * hd, hd);
        if (!bl.zero_mask) {
          cpu::F16ToF32(reinterpret_cast<const uint16_t*>(a.v->row(hk0 + g, c)), Vt + j * ld + g * hd, hd);
        }
      }
    }
    if (nc < kTileKv && !bl.zero_mask) {  // GemmF32 multiplies whole tiles
      std::fill(Kt + nc * ld, Kt + kTileKv * ld, 0.0f);
      std::fill(Vt + nc * ld, Vt + kTileKv * ld, 0.0f);
    }
    const float* mtile = nullptr;  // bl.zero_mask: no mask term
    for (int64_t g = 0; g < nhk; ++g) {
      float* O = s->O.data() + static_cast<size_t>(g) * o_size;
      float* M = s->M.data() + g * rp;
      float* L = s->L.data() + g * rp;
      if (bl.zero_mask) {  // every row sees every cell: the tile step for all rows at once
        SharedAttnTile tile;
        tile.hd = hd;
        tile.nc = nc;
        tile.rows = rows;
        tile.rp = rp;
        tile.k = Kt + g * hd;
        tile.v = nullptr;
        tile.ldk = tile.ldv = ld;
        tile.v16 = static_cast<const uint8_t*>(a.v->data) + static_cast<size_t>(hk0 + g) * a.v->nb[1];
        tile.cells = bl.cells.data() + c0;
        tile.v16_stride = a.v->nb[2];
        tile.qt = s->Qt.data() + static_cast<size_t>(g) * qt_size;
        tile.scale = a.scale;
        tile.m = M;
        tile.l = L;
        tile.o = O;
        tile.st = St;
        cpu::SharedAttnTileStep(tile, a.isa);
        continue;
      }
      std::fill(St, St + kTileKv * rp, 0.0f);
      cpu::GemmF32(Kt + g * hd, ld, s->Qt.data() + static_cast<size_t>(g) * qt_size, rp, St, rp, kTileKv, hd, rp,
                   a.isa);
      for (int64_t r = 0; r < rows; ++r) {
        float* pr = P + r * kTileKv;
        for (int64_t j = 0; j < nc; ++j) pr[j] = St[j * rp + r];
        if (!bl.zero_mask) {
          const float* mrow = Row(a.mask, a.t_base + bl.tokens[static_cast<size_t>(t0 + r / gqa)]);
          for (int64_t j = 0; j < nc; ++j) {
            s->mtile[static_cast<size_t>(j)] = mrow[bl.cells[static_cast<size_t>(c0 + j)]];
          }
          mtile = s->mtile.data();
        }
        const float mx =
            cpu::ScaleMaskMax(pr, mtile, a.scale, s->slope[static_cast<size_t>(g * gqa + r % gqa)], pr, nc, a.isa);
        std::fill(pr + nc, pr + kTileKv, ninf);
        if (mx == ninf) {
          std::fill(pr, pr + kTileKv, 0.0f);
          continue;
        }
        if (mx > M[r]) {
          const float ms = std::exp(M[r] - mx);
          for (int64_t d = 0; d < hd; ++d) O[r * hd + d] *= ms;
          L[r] *= ms;
          M[r] = mx;
        }
        L[r] += static_cast<float>(cpu::ExpSubMax(pr, pr, kTileKv, M[r]));
      }
      cpu::GemmF32(P, kTileKv, Vt + g * hd, ld, O, hd, rows, kTileKv, hd, a.isa);
    }
  }
  for (int64_t g = 0; g < nhk; ++g) {  // normalized, like the own parts
    const int64_t hk = hk0 + g;
    const float* O = s->O.data() + static_cast<size_t>(g) * o_size;
    for (int64_t r = 0; r < rows; ++r) {
      const size_t pi = (bl.slot0 + static_cast<size_t>(t0 + r / gqa)) * static_cast<size_t>(a.n_head) +
                        static_cast<size_t>(hk * gqa + r % gqa);
      const float Lr = s->L[static_cast<size_t>(g * rp + r)];
      a.parts[pi] = Part{s->M[static_cast<size_t>(g * rp + r)], Lr};
      ScaleTo(O + r * hd, Lr == 0.0f ? 0.0f : 1.0f / Lr, a.part_o + pi * static_cast<size_t>(hd), hd);
    }
  }
}

// out = sum_i w_i O_i / sum_i w_i over the parts ps[0..np) of one (token, head), w_i = L_i
// e^(M_i - M), M = max_i M_i; 0 where no part saw a cell.
void MergeParts(const AttnArgs& a, const size_t* ps, size_t np, float* out) {
  const float ninf = -std::numeric_limits<float>::infinity();
  float mx = ninf;
  for (size_t i = 0; i < np; ++i) mx = std::max(mx, a.parts[ps[i]].m);
  const int64_t hd = a.hd, hd4 = hd / 4 * 4;
  std::fill(out, out + hd, 0.0f);
  if (mx == ninf) return;
  float l = 0.0f;
  for (size_t i = 0; i < np; ++i) {
    const Part& p = a.parts[ps[i]];
    if (p.m == ninf || p.l == 0.0f) continue;
    const float wgt = p.l * std::exp(p.m - mx);
    l += wgt;
    const float* o = a.part_o + ps[i] * static_cast<size_t>(hd);
    for (int64_t d = 0; d < hd4; d += 4) StoreF4(out + d, LoadF4(out + d) + LoadF4(o + d) * wgt);
    for (int64_t d = hd4; d < hd; ++d) out[d] += o[d] * wgt;
  }
  ScaleTo(out, l == 0.0f ? 0.0f : 1.0f / l, out, hd);
}

}  // namespace

struct SharedPrefixAttention::Buffers {
  std::vector<Part> parts;
  std::vector<float> part_o;
  std::vector<Scratch> scratch;  // one per pool thread
};

namespace {

// The node's tokens [plan.t_base, plan.t_base + plan.n_tokens): block and own parts, each
// token's heads merged into the output by the thread that finishes its last part.
void ComputeChunk(ThreadPool& pool, Tensor* n, VecDotFn dot, Isa isa, const SharedPrefixAttention::Plan& plan,
                  SharedPrefixAttention::Buffers* buf) {
  const Tensor* q = n->src[0];
  const Tensor* k = n->src[1];
  const int64_t hd = q->ne[0], n_head = q->ne[1], n_tokens = plan.n_tokens, n_head_kv = k->ne[1];
  const std::vector<SharedPrefixAttention::Plan::Block>& blocks = plan.blocks;
  const size_t n_parts = plan.n_slots * static_cast<size_t>(n_head);
  // Kept between calls: fresh vectors this size are fresh pages, faulted in every layer.
  std::vector<Part>& parts = buf->parts;
  std::vector<float>& part_o = buf->part_o;
  parts.assign(n_parts, Part{-std::numeric_limits<float>::infinity(), 0.0f});
  part_o.resize(n_parts * static_cast<size_t>(hd));  // a part's row is read only once written (l > 0)
  const AttnArgs args{q,
                      k,
                      n->src[2],
                      n->src[3],
                      hd,
                      n_head,
                      n_head / n_head_kv,
                      FlashAttnParams::Of(*n).scale,
                      FlashAttnParams::Of(*n).max_bias,
                      isa,
                      dot,
                      parts.data(),
                      part_o.data(),
                      plan.t_base};

  // Work: (block, chunk of its tokens) items with all KV heads (the plan split the blocks
  // by cells, one per thread, so each thread streams its own cells), then one item per
  // token with own cells (all its heads); each item to the first thread free.
  const int64_t qt = std::max<int64_t>(1, kTileRows / args.gqa);  // tokens per block item
  struct Item {
    int32_t block;  // -1: the own cells of token t0
    int64_t t0;
  };
  std::vector<Item> items;
  for (size_t bi = 0; bi < blocks.size(); ++bi) {
    for (int64_t t0 = 0; t0 < static_cast<int64_t>(blocks[bi].tokens.size()); t0 += qt) {
      items.push_back(Item{static_cast<int32_t>(bi), t0});
    }
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    if (!plan.own[static_cast<size_t>(t)].empty()) items.push_back(Item{-1, t});
  }
  // A token's output is merged by the thread that finishes the last of its parts (no
  // second pass over the pool): pending[t] counts its items not yet done.
  std::atomic<int32_t> pending[kMaxPlanTokens];
  for (int64_t t = 0; t < n_tokens; ++t) {
    const size_t ti = static_cast<size_t>(t);
    const int32_t n = (plan.own[ti].empty() ? 0 : 1) + static_cast<int32_t>(plan.token_blocks[ti].size());
    pending[t].store(n, std::memory_order_relaxed);
  }
  const auto merge_token = [&](int64_t t, std::vector<size_t>* ps) {
    for (int64_t h = 0; h < n_head; ++h) {
      ps->assign(1, static_cast<size_t>(t * n_head + h));
      for (const auto& [b, i] : plan.token_blocks[static_cast<size_t>(t)]) {
        ps->push_back((blocks[b].slot0 + i) * static_cast<size_t>(n_head) + static_cast<size_t>(h));
      }
      MergeParts(args, ps->data(), ps->size(), reinterpret_cast<float*>(n->row(h, plan.t_base + t)));
    }
  };
  {
    std::vector<size_t> ps;
    for (int64_t t = 0; t < n_tokens; ++t) {
      if (pending[t].load(std::memory_order_relaxed) == 0) merge_token(t, &ps);  // sees no cell: zeros
    }
  }
  const auto done = [&](int64_t t, std::vector<size_t>* ps) {
    if (pending[t].fetch_sub(1, std::memory_order_acq_rel) == 1) merge_token(t, ps);
  };
  std::atomic<size_t> next{0};  // in order, blocks (the larger items) first
  pool.Run([&](int ith, int) {
    Scratch* scratch = &buf->scratch[static_cast<size_t>(ith)];
    std::vector<size_t>& ps = scratch->merge;
    for (size_t w = next.fetch_add(1, std::memory_order_relaxed); w < items.size();
         w = next.fetch_add(1, std::memory_order_relaxed)) {
      const Item& it = items[w];
      if (it.block < 0) {
        OwnPart(args, it.t0, plan.own[static_cast<size_t>(it.t0)], scratch);
        done(it.t0, &ps);
      } else {
        const SharedPrefixAttention::Plan::Block& bl = blocks[static_cast<size_t>(it.block)];
        const int64_t nt = std::min<int64_t>(qt, static_cast<int64_t>(bl.tokens.size()) - it.t0);
        BlockPart(args, bl, 0, n_head_kv, it.t0, nt, scratch);
        for (int64_t i = it.t0; i < it.t0 + nt; ++i) done(bl.tokens[static_cast<size_t>(i)], &ps);
      }
    }
  });
}

}  // namespace

SharedPrefixAttention::SharedPrefixAttention() = default;
SharedPrefixAttention::~SharedPrefixAttention() = default;

absl::StatusOr<bool> SharedPrefixAttention::Compute(ThreadPool& pool, Tensor* n, VecDotFn dot, Isa isa) {
  Tensor* q = n->src[0];
  Tensor* k = n->src[1];
  Tensor* v = n->src[2];
  Tensor* mask = n->src[3];
  const int64_t hd = q->ne[0], n_tokens = q->ne[2], n_kv = k->ne[2];
  if (mask == nullptr || n_tokens < 2 || v->ne[0] != hd || q->type != GgmlType::F32 || n->type != GgmlType::F32 ||
      k->type != GgmlType::F16 || v->type != GgmlType::F16) {
    return false;
  }
  // Chunks of at most 64 tokens (a plan's token sets are 64-bit masks), each with its plan:
  // a step of many prompt chunks (16 streams starting at once) reads a shared prefix once
  // per 64 tokens rather than once per token.
  const int64_t n_chunks = (n_tokens + kMaxPlanTokens - 1) / kMaxPlanTokens;
  if (plans_.size() != static_cast<size_t>(n_chunks) || plans_[0]->epoch != epoch_ ||
      plans_[0]->mask_data != mask->data || plans_[0]->n_kv != n_kv) {
    plans_.assign(static_cast<size_t>(n_chunks), nullptr);
    for (int64_t c = 0; c < n_chunks; ++c) {
      auto plan = std::make_shared<Plan>();
      plan->epoch = epoch_;
      plan->mask_data = mask->data;
      plan->n_kv = n_kv;
      plan->t_base = c * kMaxPlanTokens;
      plan->n_tokens = std::min(kMaxPlanTokens, n_tokens - plan->t_base);
      BuildSharedAttnPlan(mask, pool, plan.get());
      plans_[static_cast<size_t>(c)] = std::move(plan);
    }
  }
  // Every chunk must share enough; otherwise the caller's path takes the whole node (for
  // a long prompt of its own, the tiled path).
  for (const auto& plan : plans_) {
    if (!plan->use) return false;
  }
  if (buffers_ == nullptr) buffers_ = std::make_unique<Buffers>();
  buffers_->scratch.resize(static_cast<size_t>(std::max(1, pool.size())));
  for (const auto& plan : plans_) ComputeChunk(pool, n, dot, isa, *plan, buffers_.get());
  runs_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace herd::cpu
