// Split-KV flash attention for decode: how the KV range is cut into chunks and how the
// chunks' partial results are merged. Plain C++ usable from nvcc / hipcc device code and
// from g++ host code (HERD_ATTN_HD is `__host__ __device__` under a GPU compiler, empty
// otherwise), so that the merge is checked on the host by attn_split_test.cc.
//
// A chunk s of one query row (head h, token t) over KV cells [c0, c1) yields
//   m_s   = max_c score_c                       (-inf when every cell is masked)
//   l_s   = sum_c e^(score_c - m_s)             (0 then)
//   acc_s = sum_c e^(score_c - m_s) V_c         (hd floats, unnormalized; 0 then)
// with score_c = scale * K_c . q + slope(h) * mask[c, t]. The full row is then, with
// M = max_s m_s and w_s = e^(m_s - M) (0 for a chunk with m_s = -inf),
//   O = sum_s w_s acc_s / sum_s w_s l_s,
// the log-sum-exp merge of ggml-cuda's flash_attn_combine_results (fattn-common.cuh).
// A row whose every cell is masked (M = -inf, so the denominator is 0) is 0, as the
// unsplit kernel writes it.
#pragma once
#include <math.h>

#include <cstddef>
#include <cstdint>

// The inline namespace keeps the definitions each compiler makes of these inline
// functions (device-callable under nvcc / hipcc, host-only under g++) apart when both GPU
// builds and host code link into one binary.
#if defined(__HIPCC__)
#define HERD_ATTN_HD __host__ __device__
#define HERD_ATTN_NS hip_dev
#elif defined(__CUDACC__)
#define HERD_ATTN_HD __host__ __device__
#define HERD_ATTN_NS cuda_dev
#else
#define HERD_ATTN_HD
#define HERD_ATTN_NS host
#endif

namespace herd::cuda::attn {
inline namespace HERD_ATTN_NS {

/// KV cells per step of the attention kernels' inner loop (kernels_attn.cu); a split's
/// range is a multiple of it.
inline constexpr int64_t kKvStep = 128;
/// Split only decode-like batches: at most this many query tokens.
inline constexpr int64_t kSplitMaxTokens = 8;
/// Every split covers at least this many KV cells (below, the merge costs more than the
/// parallelism gains).
inline constexpr int64_t kSplitMinCells = 256;
/// At most this many splits of one row.
inline constexpr int64_t kSplitMax = 64;
/// Blocks per SM the split aims for (the unsplit launch has n_head * n_tokens blocks).
inline constexpr int64_t kSplitBlocksPerSm = 2;

/// How a flash attention is cut over its KV range: n_split ranges of `cells` KV cells
/// each (the last one shorter); n_split == 1 is the unsplit kernel.
struct SplitPlan {
  int64_t n_split = 1;
  int64_t cells = 0;
};

/// The split of a flash attention with `rows` = n_head * n_tokens query rows over n_kv
/// cells on a device of sm_count SMs: none for more than kSplitMaxTokens tokens or when
/// the rows alone give kSplitBlocksPerSm blocks per SM; else enough splits to reach that,
/// each at least kSplitMinCells cells, rounded to kKvStep.
inline SplitPlan PlanSplit(int64_t n_tokens, int64_t rows, int64_t n_kv, int sm_count) {
  SplitPlan p;
  p.cells = n_kv;
  const int64_t target = kSplitBlocksPerSm * static_cast<int64_t>(sm_count);
  if (n_tokens > kSplitMaxTokens || rows <= 0 || n_kv <= 0 || rows >= target) return p;
  int64_t want = (target + rows - 1) / rows;
  const int64_t most = n_kv / kSplitMinCells;  // splits of >= kSplitMinCells cells
  if (want > most) want = most;
  if (want > kSplitMax) want = kSplitMax;
  if (want < 2) return p;
  int64_t cells = (n_kv + want - 1) / want;
  cells = (cells + kKvStep - 1) / kKvStep * kKvStep;
  p.n_split = (n_kv + cells - 1) / cells;
  p.cells = p.n_split > 1 ? cells : n_kv;
  return p;
}

/// Floats of the partial results of a split flash attention: per (row, split) hd
/// accumulator values and the pair (m, l).
inline size_t PartialFloats(int64_t hd, int64_t rows, int64_t n_split) {
  return static_cast<size_t>(rows * n_split * (hd + 2));
}

/// The weight e^(m_s - M) of a chunk with running max m_s in a row of maximum M; 0 for a
/// chunk whose every cell is masked (m_s = -inf).
HERD_ATTN_HD inline float ChunkWeight(float m_s, float M) { return m_s == -INFINITY ? 0.0f : expf(m_s - M); }

/// The largest of n chunk maxima ml[s * ml_stride] (-inf when n == 0 or all are -inf).
HERD_ATTN_HD inline float CombineMax(const float* ml, int64_t n, int64_t ml_stride) {
  float M = -INFINITY;
  for (int64_t s = 0; s < n; ++s) M = fmaxf(M, ml[s * ml_stride]);
  return M;
}

/// Output element i of a row from its n chunks: chunk s's (m, l) at ml[s * ml_stride]
/// and ml[s * ml_stride + 1], its accumulator at acc[s * acc_stride + i]. 0 when every
/// chunk is fully masked.
HERD_ATTN_HD inline float CombineElement(const float* ml, int64_t ml_stride, const float* acc, int64_t acc_stride,
                                         int64_t n, int64_t i) {
  const float M = CombineMax(ml, n, ml_stride);
  if (M == -INFINITY) return 0.0f;
  float num = 0.0f, den = 0.0f;
  for (int64_t s = 0; s < n; ++s) {
    const float w = ChunkWeight(ml[s * ml_stride], M);
    if (w == 0.0f) continue;
    num += w * acc[s * acc_stride + i];
    den += w * ml[s * ml_stride + 1];
  }
  return den == 0.0f ? 0.0f : num / den;
}

}  // namespace HERD_ATTN_NS
}  // namespace herd::cuda::attn
