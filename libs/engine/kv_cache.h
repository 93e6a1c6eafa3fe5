// The KV cache: n_cells rows per layer of K and V (F16 by default, F32 option),
// one pool shared by all sequences (llama.cpp's unified llama_kv_cache). Each cell
// holds one token's K/V for one position and the set of sequences it belongs to; a
// cell in several sequences is a shared prefix (llama_kv_cache seq_cp), stored once.
//
// Cell order. Attention visits a sequence's cells in index order (the CPU kernels skip
// masked cells exactly), so a sequence whose cells ascend with its positions gets the
// same sums as when it runs alone in cells 0, 1, 2, ... Allocate keeps that order: a
// token takes the lowest free cell after its sequence's last one, and only when none is
// free there the lowest free cell anywhere (still correct; sums may then round
// differently from a solo run).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/backend/backend.h"
#include "libs/model/model.h"
#include "libs/tensor/tensor.h"

namespace herd::engine {

class KvCache {
 public:
  /// Allocates n_cells cells per layer of `type` (F16 or F32) in `buft`.
  /// Errors: INVALID_ARGUMENT for another type or n_cells < 1; RESOURCE_EXHAUSTED.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const model::Hparams& hp, int64_t n_cells, GgmlType type,
                                                         BufferType* buft);
  /// Same with layer il's K and V in memory buft_of(il) (a layer split: e.g.
  /// backend->layer_buffer_type(il, n_layer)); one buffer per distinct buffer type.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const model::Hparams& hp, int64_t n_cells, GgmlType type,
                                                         const std::function<BufferType*(int64_t il)>& buft_of);

  int64_t n_cells() const { return static_cast<int64_t>(pos_.size()); }
  GgmlType type() const { return type_; }
  /// Cells holding at least one sequence.
  int64_t used() const { return used_; }
  /// One past the highest used cell (the attention window).
  int64_t n_kv() const;
  /// Bytes of all its buffers.
  size_t bytes() const;

  /// Cells holding no sequence.
  int64_t n_free() const { return n_cells() - used_; }

  /// Finds n free cells for tokens of (seq[i], pos[i]), in batch order: the lowest free
  /// cell after the sequence's highest cell, else the lowest free cell (within the
  /// sequence's range when one is set); marks them used and returns their indices.
  /// RESOURCE_EXHAUSTED when fewer than n cells are free (or a range is full; nothing is
  /// changed then).
  absl::StatusOr<std::vector<int32_t>> Allocate(const std::vector<int32_t>& seq, const std::vector<int32_t>& pos);

  /// Restricts the cells of sequence `seq` to [begin, end) (clamped to the cache);
  /// end <= begin lifts the restriction. With one region per sequence, and cells freed
  /// only from a sequence's end (draft rejections) or all at once, each sequence's cells
  /// stay in position order whatever the other sequences do, so attention visits its
  /// keys in the same order as when it runs alone: batched outputs equal solo outputs
  /// bit for bit. Kept across Clear().
  void SetSeqRange(int32_t seq, int64_t begin, int64_t end);

  /// Removes `seq` from cells with pos in [p0, p1) (p1 < 0 = to the end); frees cells
  /// left without sequences. seq < 0 removes every sequence.
  void SeqRemove(int32_t seq, int32_t p0, int32_t p1);
  /// Adds `dst` to every cell of `src` with pos in [p0, p1) (p1 < 0 = to the end): dst
  /// then shares those tokens' K/V with src (llama_kv_cache::seq_cp). No-op when src ==
  /// dst or either is negative.
  void SeqCopy(int32_t src, int32_t dst, int32_t p0, int32_t p1);
  /// Whether SeqCopy(src, dst, p0, p1) would keep dst's cells in position order: every
  /// cell of src with pos in [p0, p1) has a higher index than every cell of dst (true
  /// when dst has none). Attention sums a sequence's keys in cell order, so this keeps its
  /// outputs equal to a solo run's.
  bool SeqCopyKeepsOrder(int32_t src, int32_t dst, int32_t p0, int32_t p1) const;
  /// Cells of `seq`.
  int64_t SeqCells(int32_t seq) const;
  /// Used cells whose every sequence id is >= min_seq (e.g. held only by cached prefixes
  /// whose ids are allocated from min_seq up).
  int64_t CellsOnlyInSeqsFrom(int32_t min_seq) const;
  /// Highest position stored for `seq`, or -1.
  int32_t SeqPosMax(int32_t seq) const;
  void Clear();
  /// Frees the given cells (used to roll back a failed batch).
  void FreeCells(const std::vector<int32_t>& idx);

  /// Fills `mask` (F32 [n_kv, n_tokens], row t for token t) with 0 where token t of
  /// sequence seq[t] at position pos[t] may attend cell c (same sequence, cell pos <=
  /// pos[t]) and -inf elsewhere. With `alibi`, visible cells get -|pos[t] - cell pos|
  /// instead of 0 (llama_kv_cache::set_input_kq_mask; scaled per head by the ALiBi slope).
  void FillMask(const std::vector<int32_t>& seq, const std::vector<int32_t>& pos, int64_t n_kv, float* mask,
                bool alibi = false) const;

  Tensor* k(int64_t il) const { return k_[static_cast<size_t>(il)]; }
  Tensor* v(int64_t il) const { return v_[static_cast<size_t>(il)]; }
  const std::vector<Tensor*>& k_layers() const { return k_; }
  const std::vector<Tensor*>& v_layers() const { return v_; }

 private:
  KvCache() = default;
  bool Has(int64_t c, int32_t seq) const;
  /// Highest cell index of `seq` (-1: none), recomputed when marked stale.
  int64_t LastCell(int32_t seq);
  void MarkStale(int32_t seq);

  GgmlType type_ = GgmlType::F16;
  Graph tensors_;
  std::vector<std::unique_ptr<Buffer>> buffers_;  // one per memory kind
  std::vector<Tensor*> k_, v_;
  std::vector<int32_t> pos_;                            // -1 = empty
  std::vector<std::vector<int32_t>> seqs_;              // sequences of each cell
  std::vector<std::pair<int64_t, int64_t>> seq_range_;  // per sequence id; second < 0 = unrestricted
  std::vector<int64_t> seq_last_;                       // per sequence id: highest cell, -1 none, -2 stale
  int64_t used_ = 0;
};

}  // namespace herd::engine
