// FLASH_ATTN_EXT of the CPU backend (graph_ops.h ComputeFlashAttn): llama.cpp's CPU flash
// attention paths (ggml_compute_forward_flash_attn_ext_f16's one-chunk and tiled variants)
// over the kernels of kernels.h, split over the thread pool. The shared-prefix path is
// flash_attn_shared.cc.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "libs/base/status_macros.h"
#include "libs/kernels/cpu/flash_attn_token.h"
#include "libs/kernels/cpu/graph_ops.h"
#include "libs/kernels/cpu/kernels.h"
#include "libs/tensor/op_params.h"
#include "libs/tensor/quants.h"

namespace herd::cpu {
namespace {

float* F32Row(const Tensor* t, int64_t i1, int64_t i2 = 0, int64_t i3 = 0) {
  return reinterpret_cast<float*>(t->row(i1, i2, i3));
}

// Tiled flash attention (FlashAttnTiled; ggml-cpu's GGML_FA_TILE_Q / GGML_FA_TILE_KV):
// batches of at least kFlashAttnTileTokens query tokens take it, with at most
// kFlashAttnTileRows query rows (tokens x heads of one KV head) and kFlashAttnTileKv KV
// cells per tile.
constexpr int64_t kFlashAttnTileTokens = 64;
constexpr int64_t kFlashAttnTileRows = 64;
constexpr int64_t kFlashAttnTileKv = 64;
// Most bytes of F32 K / V tiles a tiled flash attention converts once for all its query
// tiles (beyond: each query tile converts the tiles it reads itself).
constexpr size_t kFlashAttnSharedKvBytes = size_t{32} << 20;

// A FLASH_ATTN_EXT node's operands and sizes: q [hd, n_head, n_tokens] F32, k / v
// [hd, n_head_kv, n_kv], mask [n_kv, n_tokens] F32 or none; gqa = n_head / n_head_kv.
struct FlashAttnDims {
  const Tensor* q;
  const Tensor* k;
  const Tensor* v;
  const Tensor* mask;  // nullptr: every cell seen
  float scale, max_bias;
  int64_t hd, n_head, n_tokens, n_kv, n_head_kv, gqa;
  explicit FlashAttnDims(const Tensor* n)
      : q(n->src[0]),
        k(n->src[1]),
        v(n->src[2]),
        mask(n->src[3]),
        scale(FlashAttnParams::Of(*n).scale),
        max_bias(FlashAttnParams::Of(*n).max_bias),
        hd(q->ne[0]),
        n_head(q->ne[1]),
        n_tokens(q->ne[2]),
        n_kv(k->ne[2]),
        n_head_kv(k->ne[1]),
        gqa(n_head / n_head_kv) {}
};

// The cells a query token sees, in cell order, into *vis (cleared first): where its mask
// row (n_kv floats) is not -inf; every cell without a mask (mrow nullptr).
void VisibleCells(const float* mrow, int64_t n_kv, std::vector<int32_t>* vis) {
  vis->clear();
  if (mrow != nullptr) {
    cpu::AppendVisibleCells(mrow, n_kv, vis);
  } else {
    for (int64_t c = 0; c < n_kv; ++c) vis->push_back(static_cast<int32_t>(c));
  }
}

// One row of an F16 or F32 K/V tensor as F32.
void ToF32Row(const Tensor* t, const uint8_t* row, float* out, int64_t n) {
  if (t->type == GgmlType::F16) {
    cpu::F16ToF32(reinterpret_cast<const uint16_t*>(row), out, n);
  } else {
    std::memcpy(out, row, static_cast<size_t>(n) * 4);
  }
}

// The shapes of one tiled flash attention (FlashAttnTiled): query tiles of qt tokens
// (rows_max = qt * gqa query rows) x KV tiles of kt cells.
struct TiledAttn : FlashAttnDims {
  Tensor* out;
  static constexpr int64_t kt = kFlashAttnTileKv;
  int64_t qt, rows_max, n_qtiles, n_kvtiles;
  size_t tile_floats;  // floats of one K (or V) tile: hd * kt
  Isa isa;
  // kv_seen[qi * n_kvtiles + ct]: some token of query tile qi sees a cell of KV tile ct.
  std::vector<uint8_t> kv_seen;

  TiledAttn(Tensor* n, Isa isa_) : FlashAttnDims(n), out(n), isa(isa_) {
    qt = std::max<int64_t>(1, kFlashAttnTileRows / gqa);
    rows_max = qt * gqa;
    n_qtiles = (n_tokens + qt - 1) / qt;
    n_kvtiles = (n_kv + kt - 1) / kt;
    tile_floats = static_cast<size_t>(hd * kt);
    kv_seen.assign(static_cast<size_t>(n_qtiles * n_kvtiles), mask == nullptr ? 1 : 0);
  }
  bool seen(int64_t qi, int64_t ct) const { return kv_seen[static_cast<size_t>(qi * n_kvtiles + ct)] != 0; }
};

// Fills a.kv_seen from the mask and returns, per query tile, whether tiling pays: a batch
// of many sequences (decode tokens, several prompts) puts tokens of different sequences in
// one query tile, whose union of cells is far more than what each token sees; those tiles'
// tokens take the one-chunk path over their own cells instead.
std::vector<uint8_t> PlanQueryTiles(ThreadPool& pool, TiledAttn& a) {
  std::vector<uint8_t> tiled(static_cast<size_t>(a.n_qtiles), 1);
  if (a.mask == nullptr) return tiled;
  constexpr int64_t kt = TiledAttn::kt;
  pool.Run([&](int ith, int nth) {
    std::vector<int32_t> vis;
    for (int64_t qi = ith; qi < a.n_qtiles; qi += nth) {
      const int64_t t0 = qi * a.qt, nt = std::min(a.qt, a.n_tokens - t0);
      int64_t exact = 0, tiles = 0;
      for (int64_t tt = 0; tt < nt; ++tt) {
        vis.clear();
        cpu::AppendVisibleCells(F32Row(a.mask, t0 + tt), a.n_kv, &vis);
        exact += static_cast<int64_t>(vis.size());
        for (int32_t c : vis) a.kv_seen[static_cast<size_t>(qi * a.n_kvtiles + c / kt)] = 1;
      }
      for (int64_t ct = 0; ct < a.n_kvtiles; ++ct) tiles += a.kv_seen[static_cast<size_t>(qi * a.n_kvtiles + ct)];
      // A causal prompt tile computes about twice the cells its tokens see.
      tiled[static_cast<size_t>(qi)] = tiles * kt * nt <= 3 * exact + 2 * kt * nt;
    }
  });
  return tiled;
}

// One KV tile of KV head hk from cell c0 in F32: K transposed (Kt[d * kt + c]) and V
// (V[c * hd + d]), cells past n_kv zero. krow: hd floats of scratch.
void FillKvTile(const TiledAttn& a, int64_t hk, int64_t c0, float* Kt, float* V, float* krow) {
  constexpr int64_t kt = TiledAttn::kt;
  const int64_t hd = a.hd;
  const int64_t nc = std::min(kt, a.n_kv - c0);
  for (int64_t c = 0; c < kt; ++c) {
    if (c < nc) {
      ToF32Row(a.k, a.k->row(hk, c0 + c), krow, hd);
      for (int64_t d = 0; d < hd; ++d) Kt[d * kt + c] = krow[d];
      ToF32Row(a.v, a.v->row(hk, c0 + c), V + c * hd, hd);
    } else {
      for (int64_t d = 0; d < hd; ++d) Kt[d * kt + c] = 0.0f;
      std::fill(V + c * hd, V + (c + 1) * hd, 0.0f);
    }
  }
}

// Every query tile of a prompt reads the KV tiles before it: converted once per call for
// all of them (within kFlashAttnSharedKvBytes) instead of once per query tile (llama-110m
// F16 pp512: 8 query tiles per KV head). Returns the tiles (K then V of KV tile
// hk * n_kvtiles + ct at 2 * that * tile_floats), or nothing when not worth it or too big.
std::vector<float> SharedKvTiles(ThreadPool& pool, const TiledAttn& a, const std::vector<int64_t>& work) {
  std::vector<uint8_t> kv_used(static_cast<size_t>(a.n_kvtiles), 0);
  for (int64_t w : work) {
    const int64_t qi = w / a.n_head_kv;
    for (int64_t ct = 0; ct < a.n_kvtiles; ++ct) kv_used[static_cast<size_t>(ct)] |= a.seen(qi, ct) ? 1 : 0;
  }
  const bool shared_kv = a.n_qtiles > 1 && 2 * static_cast<size_t>(a.n_head_kv * a.n_kvtiles) * a.tile_floats * 4 <=
                                               kFlashAttnSharedKvBytes;
  std::vector<float> kv32(shared_kv ? 2 * static_cast<size_t>(a.n_head_kv * a.n_kvtiles) * a.tile_floats : 0);
  if (shared_kv) {
    pool.Run([&](int ith, int nth) {
      std::vector<float> krow(static_cast<size_t>(a.hd));
      for (int64_t w = ith; w < a.n_head_kv * a.n_kvtiles; w += nth) {
        if (!kv_used[static_cast<size_t>(w % a.n_kvtiles)]) continue;
        float* kt32 = kv32.data() + 2 * static_cast<size_t>(w) * a.tile_floats;
        FillKvTile(a, w / a.n_kvtiles, (w % a.n_kvtiles) * TiledAttn::kt, kt32, kt32 + a.tile_floats, krow.data());
      }
    });
  }
  return kv32;
}

// One thread's scratch for AttendTile.
struct TileScratch {
  std::vector<float> Q, O, P, Kt, V, krow, M, L, slope;
  explicit TileScratch(const TiledAttn& a)
      : Q(static_cast<size_t>(a.rows_max * a.hd)),
        O(static_cast<size_t>(a.rows_max * a.hd)),
        P(static_cast<size_t>(a.rows_max * TiledAttn::kt)),
        Kt(static_cast<size_t>(a.hd * TiledAttn::kt)),
        V(static_cast<size_t>(TiledAttn::kt * a.hd)),
        krow(static_cast<size_t>(a.hd)),
        M(static_cast<size_t>(a.rows_max)),
        L(static_cast<size_t>(a.rows_max)),
        slope(static_cast<size_t>(a.gqa)) {}
};

// The rows of query tile qi x KV head hk against the KV tiles they see (the online
// softmax of FlashAttnTiled), written to a.out. kv32: SharedKvTiles's tiles, or empty
// (each tile converted here).
void AttendTile(const TiledAttn& a, int64_t qi, int64_t hk, const std::vector<float>& kv32, TileScratch& s) {
  constexpr int64_t kt = TiledAttn::kt;
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t hd = a.hd, gqa = a.gqa;
  const int64_t t0 = qi * a.qt;
  const int64_t nt = std::min(a.qt, a.n_tokens - t0), rows = nt * gqa;
  for (int64_t j = 0; j < gqa; ++j) {
    s.slope[static_cast<size_t>(j)] =
        AlibiSlope(static_cast<int>(hk * gqa + j), static_cast<int>(a.n_head), a.max_bias);
  }
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(s.Q.data() + r * hd, F32Row(a.q, hk * gqa + r % gqa, t0 + r / gqa), static_cast<size_t>(hd) * 4);
  }
  std::fill(s.M.begin(), s.M.end(), ninf);
  std::fill(s.L.begin(), s.L.end(), 0.0f);
  std::fill(s.O.begin(), s.O.end(), 0.0f);
  for (int64_t c0 = 0; c0 < a.n_kv; c0 += kt) {
    const int64_t nc = std::min(kt, a.n_kv - c0);
    if (!a.seen(qi, c0 / kt)) continue;  // every row masks it
    const float* ktile = s.Kt.data();
    const float* vtile = s.V.data();
    if (!kv32.empty()) {
      ktile = kv32.data() + 2 * static_cast<size_t>(hk * a.n_kvtiles + c0 / kt) * a.tile_floats;
      vtile = ktile + a.tile_floats;
    } else {
      FillKvTile(a, hk, c0, s.Kt.data(), s.V.data(), s.krow.data());
    }
    std::fill(s.P.begin(), s.P.begin() + rows * kt, 0.0f);
    cpu::GemmF32(s.Q.data(), hd, ktile, kt, s.P.data(), kt, rows, hd, kt, a.isa);
    for (int64_t r = 0; r < rows; ++r) {
      float* pr = s.P.data() + r * kt;
      const float* mrow = a.mask != nullptr ? F32Row(a.mask, t0 + r / gqa) + c0 : nullptr;
      const float sl = s.slope[static_cast<size_t>(r % gqa)];
      const float mx = cpu::ScaleMaskMax(pr, mrow, a.scale, sl, pr, nc, a.isa);
      std::fill(pr + nc, pr + kt, ninf);
      if (mx == ninf) {  // nothing seen in this tile: no contribution
        std::fill(pr, pr + kt, 0.0f);
        continue;
      }
      float& Mr = s.M[static_cast<size_t>(r)];
      if (mx > Mr) {
        const float ms = std::exp(Mr - mx);
        float* orow = s.O.data() + r * hd;
        for (int64_t d = 0; d < hd; ++d) orow[d] *= ms;
        s.L[static_cast<size_t>(r)] *= ms;
        Mr = mx;
      }
      s.L[static_cast<size_t>(r)] += static_cast<float>(cpu::ExpSubMax(pr, pr, kt, Mr));
    }
    cpu::GemmF32(s.P.data(), kt, vtile, hd, s.O.data(), hd, rows, kt, hd, a.isa);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float Lr = s.L[static_cast<size_t>(r)];
    const float inv = Lr == 0.0f ? 0.0f : 1.0f / Lr;
    float* out = F32Row(a.out, hk * gqa + r % gqa, t0 + r / gqa);
    const float* orow = s.O.data() + r * hd;
    for (int64_t d = 0; d < hd; ++d) out[d] = orow[d] * inv;
  }
}

// F16 K and V (the KV cache's default), llama.cpp's F16 one_chunk numerics: token-major.
// A work item is one token and a group of KV heads: cpu::FlashAttnF16Heads over the
// token's visible cells for all heads of the group (fused on AVX2: the cells' K / V runs
// of those heads read together, several cells' dots at once). For every head the
// operations and their order are those of FlashAttnF16VRowIdx over the same cells:
// results are bit-identical.
absl::Status FlashAttnF16(ThreadPool& pool, Tensor* n, VecDotFn dot, Isa isa, const std::vector<int64_t>* tokens) {
  const FlashAttnDims fd(n);
  const size_t q_row = GgmlRowSize(GgmlType::F16, fd.hd);
  // Enough work items for every thread even for one token (groups of KV heads).
  const int64_t nth_pool = pool.size();
  const int64_t n_groups =
      std::min<int64_t>(fd.n_head_kv, std::max<int64_t>(1, (4 * nth_pool + fd.n_tokens - 1) / fd.n_tokens));
  const int64_t n_work = (tokens != nullptr ? static_cast<int64_t>(tokens->size()) : fd.n_tokens) * n_groups;
  pool.Run([&](int ith, int nth) {
    std::vector<int32_t> vis;
    vis.reserve(static_cast<size_t>(fd.n_kv));
    int64_t vis_t = -1;
    std::vector<uint8_t> qconv;
    std::vector<float> scores, slope;
    std::vector<size_t> kv_row;  // byte offset of head j's KV head within a cell
    std::vector<uint16_t> vkq16;
    // Tokens dealt round-robin: under a causal mask later tokens see more cells, so
    // contiguous ranges would leave the first threads idle while the last ones work.
    for (int64_t w = ith; w < n_work; w += nth) {
      const int64_t t = tokens != nullptr ? (*tokens)[static_cast<size_t>(w / n_groups)] : w / n_groups;
      const int64_t g = w % n_groups;
      const int64_t hk0 = g * fd.n_head_kv / n_groups, hk1 = (g + 1) * fd.n_head_kv / n_groups;
      const int64_t h0 = hk0 * fd.gqa, nh = (hk1 - hk0) * fd.gqa;
      const float* mrow = fd.mask ? F32Row(fd.mask, t) : nullptr;
      if (t != vis_t) {
        VisibleCells(mrow, fd.n_kv, &vis);
        vis_t = t;
      }
      const int64_t n_vis = static_cast<int64_t>(vis.size());
      qconv.resize(static_cast<size_t>(nh) * q_row + 64);
      scores.resize(static_cast<size_t>(nh * std::max<int64_t>(1, n_vis)));
      slope.resize(static_cast<size_t>(nh));
      kv_row.resize(static_cast<size_t>(nh));
      vkq16.resize(static_cast<size_t>(nh * fd.hd));
      for (int64_t j = 0; j < nh; ++j) {
        kv_row[static_cast<size_t>(j)] = static_cast<size_t>((h0 + j) / fd.gqa) * fd.k->nb[1];  // no division per cell
        cpu::FromFloat(GgmlType::F16, F32Row(fd.q, h0 + j, t), qconv.data() + j * q_row, fd.hd, isa);
        slope[static_cast<size_t>(j)] = AlibiSlope(static_cast<int>(h0 + j), static_cast<int>(fd.n_head), fd.max_bias);
      }
      cpu::FlashAttnF16Token fa;
      fa.hd = fd.hd;
      fa.nh = nh;
      fa.q = reinterpret_cast<const uint16_t*>(qconv.data());
      fa.k = static_cast<const uint8_t*>(fd.k->data);
      fa.v = static_cast<const uint8_t*>(fd.v->data);
      fa.k_stride = fd.k->nb[2];
      fa.v_stride = fd.v->nb[2];
      fa.head_off = kv_row.data();
      fa.idx = vis.data();
      fa.n = n_vis;
      fa.mask = mrow;
      fa.slope = slope.data();
      fa.scale = fd.scale;
      fa.out = F32Row(n, h0, t);
      fa.out_stride = n->nb[1] / sizeof(float);
      fa.scores = scores.data();
      fa.vkq16 = vkq16.data();
      cpu::FlashAttnF16Heads(fa, dot);
    }
  });
  return absl::OkStatus();
}

// ggml's tiled flash attention (ggml_compute_forward_flash_attn_ext_tiled), per work item
// = (tile of query tokens, KV head): the rows are those tokens x the KV head's gqa query
// heads (at most kFlashAttnTileRows), Q kept in F32. For each tile of kFlashAttnTileKv KV
// cells that some row sees: S = Q K^T (GemmF32 over the tile's K, converted to F32 and
// transposed), S = S * scale + slope * mask, per row the tile max M', if M' > M: O *= expf(M
// - M'), L *= that, M = M'; P = exp(S - M) (ExpSubMax), L += sum P; then O += P V
// (GemmF32). Out = O / L (0 where L is 0). Accumulation in F32 throughout, as llama.cpp's
// tiled path does (its one-chunk path, FlashAttnF16, keeps V in F16).
absl::Status FlashAttnTiled(ThreadPool& pool, Tensor* n, VecDotFn dot, Isa isa) {
  TiledAttn a(n, isa);
  // Which KV tiles each query tile sees, and whether tiling pays.
  const std::vector<uint8_t> tiled = PlanQueryTiles(pool, a);
  std::vector<int64_t> one_chunk;  // tokens of the query tiles that do not tile
  std::vector<int64_t> work;       // query tile x KV head items
  for (int64_t qi = 0; qi < a.n_qtiles; ++qi) {
    if (tiled[static_cast<size_t>(qi)]) {
      for (int64_t hk = 0; hk < a.n_head_kv; ++hk) work.push_back(qi * a.n_head_kv + hk);
    } else {
      for (int64_t t = qi * a.qt; t < std::min(a.n_tokens, (qi + 1) * a.qt); ++t) one_chunk.push_back(t);
    }
  }
  if (!one_chunk.empty()) HERD_RETURN_IF_ERROR(FlashAttnF16(pool, n, dot, isa, &one_chunk));
  const std::vector<float> kv32 = SharedKvTiles(pool, a, work);
  const int64_t n_work = static_cast<int64_t>(work.size());
  pool.Run([&](int ith, int nth) {
    TileScratch scratch(a);
    // Items dealt round-robin: under a causal mask later token tiles see more cells.
    for (int64_t w = ith; w < n_work; w += nth) {
      const int64_t item = work[static_cast<size_t>(w)];
      AttendTile(a, item / a.n_head_kv, item % a.n_head_kv, kv32, scratch);
    }
  });
  return absl::OkStatus();
}

}  // namespace

absl::Status ComputeFlashAttn(ThreadPool& pool, const GraphOpContext& ctx, Tensor* n) {
  const Isa isa = ctx.isa;
  const FlashAttnDims fd(n);
  const GgmlType kt = fd.k->type;
  // ggml computes KQ with ggml_vec_dot_f16 on F16 K; for head sizes below 64 that is its
  // scalar (double-accumulating) loop, which the scalar kernel reproduces.
  cpu::VecDotFn dot = cpu::GetVecDot(kt, (kt == GgmlType::F16 && fd.q->ne[0] < 64) ? Isa::kScalar : isa);
  if (dot == nullptr) return absl::UnimplementedError("flash_attn_ext: no vec_dot for K type");
  const size_t q_row = GgmlRowSize(kt, fd.hd);
  // F16 K/V (the KV cache's type). Prompt-sized batches: llama.cpp's tiled path (its
  // condition: >= 64 query rows, F16 or F32 K and V of one type, head size a multiple of
  // the SIMD width: 8 floats on AVX2, 16 on AVX-512; herd takes 16 on every CPU, so which
  // path runs never depends on the CPU).
  if (kt == GgmlType::F16 && fd.v->type == GgmlType::F16 && fd.k->nb[1] == q_row && fd.v->nb[1] == q_row) {
    // With shared-prefix attention on, batches of any size whose tokens share prefixes
    // take it (prompt chunks of several streams over a cached header as well as decode
    // steps); the others fall through.
    if (ctx.shared_attention != nullptr) {
      absl::StatusOr<bool> shared = ctx.shared_attention->Compute(pool, n, dot, isa);
      if (!shared.ok()) return shared.status();
      if (*shared) return absl::OkStatus();
    }
    if (fd.n_tokens >= kFlashAttnTileTokens && fd.hd % 16 == 0 && fd.v->ne[0] == fd.hd && fd.q->type == GgmlType::F32 &&
        n->type == GgmlType::F32) {
      return FlashAttnTiled(pool, n, dot, isa);
    }
    return FlashAttnF16(pool, n, dot, isa, nullptr);
  }
  const int64_t n_work = fd.n_tokens * fd.n_head;
  pool.Run([&](int ith, int nth) {
    std::vector<float> scores(static_cast<size_t>(fd.n_kv));
    // The cells token t may see (mask != -inf), shared by its heads: a batch of many
    // sequences in a large pool masks most cells, so each (token, head) visits only its
    // own (in cell order, as the full scan did).
    std::vector<int32_t> vis;
    vis.reserve(static_cast<size_t>(fd.n_kv));
    int64_t vis_t = -1;
    std::vector<uint8_t> qconv(q_row + 64);
    std::vector<float> acc(static_cast<size_t>(fd.hd));
    std::vector<float> vrow(static_cast<size_t>(fd.hd));
    std::vector<uint16_t> vkq16(static_cast<size_t>(fd.hd));
    // Round-robin, as in FlashAttnF16 (causal masks make later tokens dearer).
    for (int64_t w = ith; w < n_work; w += nth) {
      const int64_t t = w / fd.n_head;
      const int64_t h = w % fd.n_head;
      const int64_t hk = h / fd.gqa;
      const float slope = AlibiSlope(static_cast<int>(h), static_cast<int>(fd.n_head), fd.max_bias);
      const float* qv = F32Row(fd.q, h, t);
      cpu::FromFloat(kt, qv, qconv.data(), fd.hd, isa);
      const float* mrow = fd.mask ? F32Row(fd.mask, t) : nullptr;
      if (t != vis_t) {
        // slope > 0, so slope * mask is -inf exactly where the mask is.
        VisibleCells(mrow, fd.n_kv, &vis);
        vis_t = t;
      }
      const int64_t n_vis = static_cast<int64_t>(vis.size());
      float mx = -std::numeric_limits<float>::infinity();
      // K rows are nb[2] apart and in decode mostly not cached: request them ahead.
      const size_t k_row_bytes = GgmlRowSize(kt, fd.hd);
      // Far enough ahead to cover a DRAM miss (a decode's K/V rows are rarely cached).
      constexpr int64_t kAheadK = 24;
      const auto prefetch_k = [&](int64_t i) {
        const uint8_t* p = fd.k->row(hk, vis[static_cast<size_t>(i)]);
        for (size_t b = 0; b < k_row_bytes; b += 64) __builtin_prefetch(p + b);
      };
      for (int64_t i = 0; i < kAheadK && i < n_vis; ++i) prefetch_k(i);
      for (int64_t i = 0; i < n_vis; ++i) {
        if (i + kAheadK < n_vis) prefetch_k(i + kAheadK);
        const int64_t c = vis[static_cast<size_t>(i)];
        const float mv = mrow ? slope * mrow[c] : 0.0f;
        float s;
        dot(fd.hd, &s, fd.k->row(hk, c), qconv.data());
        s = s * fd.scale + mv;
        scores[i] = s;
        if (s > mx) mx = s;
      }
      float* out = F32Row(n, h, t);
      if (fd.v->type == GgmlType::F16) {
        // llama.cpp's path for an F16 V: online softmax with the accumulator in F16.
        cpu::FlashAttnF16VRowIdx(scores.data(), vis.data(), n_vis, fd.v->row(hk, 0), fd.v->nb[2], fd.hd, vkq16.data(),
                                 out);
        continue;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      double sum = 0.0;
      if (mx == -std::numeric_limits<float>::infinity()) {
        std::fill(out, out + fd.hd, 0.0f);
        continue;
      }
      for (int64_t i = 0; i < n_vis; ++i) {
        if (scores[i] == -std::numeric_limits<float>::infinity()) continue;
        const float p = std::exp(scores[i] - mx);
        sum += p;
        const uint8_t* vr = fd.v->row(hk, vis[static_cast<size_t>(i)]);
        if (fd.v->type == GgmlType::F32) {
          const float* vf = reinterpret_cast<const float*>(vr);
          for (int64_t d = 0; d < fd.hd; ++d) acc[d] += p * vf[d];
        } else {
          DequantizeRow(fd.v->type, vr, vrow.data(), fd.hd);
          for (int64_t d = 0; d < fd.hd; ++d) acc[d] += p * vrow[d];
        }
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t d = 0; d < fd.hd; ++d) out[d] = acc[d] * inv;
    }
  });
  return absl::OkStatus();
}

}  // namespace herd::cpu
