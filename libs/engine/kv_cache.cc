#include "libs/engine/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace herd::engine {

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const model::Hparams& hp, int64_t n_cells, GgmlType type,
                                                         BufferType* buft) {
  return Create(hp, n_cells, type, [buft](int64_t) { return buft; });
}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const model::Hparams& hp, int64_t n_cells, GgmlType type,
                                                         const std::function<BufferType*(int64_t il)>& buft_of) {
  if (type != GgmlType::F16 && type != GgmlType::F32) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache type ", GgmlTypeName(type), " is not supported (f16, f32)"));
  }
  if (n_cells < 1) return absl::InvalidArgumentError(absl::StrCat("n_ctx ", n_cells, " must be >= 1"));
  std::unique_ptr<KvCache> kv(new KvCache());
  kv->type_ = type;
  std::vector<BufferType*> layer_buft;  // per layer
  std::vector<BufferType*> types;       // distinct, in layer order
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    kv->k_.push_back(kv->tensors_.NewTensor(type, {hp.n_embd_k_gqa(), n_cells}, absl::StrCat("cache_k_l", il)));
    kv->v_.push_back(kv->tensors_.NewTensor(type, {hp.n_embd_v_gqa(), n_cells}, absl::StrCat("cache_v_l", il)));
    layer_buft.push_back(buft_of(il));
    if (std::find(types.begin(), types.end(), layer_buft.back()) == types.end()) types.push_back(layer_buft.back());
  }
  for (BufferType* buft : types) {
    const size_t align = buft->alignment();
    const auto padded = [align](const Tensor* t) { return (t->nbytes() + align - 1) / align * align; };
    size_t total = 0;
    for (size_t il = 0; il < layer_buft.size(); ++il) {
      if (layer_buft[il] == buft) total += padded(kv->k_[il]) + padded(kv->v_[il]);
    }
    auto buf = buft->Allocate(total);
    if (!buf.ok()) return buf.status();
    size_t off = 0;
    for (size_t il = 0; il < layer_buft.size(); ++il) {
      if (layer_buft[il] != buft) continue;
      for (Tensor* t : {kv->k_[il], kv->v_[il]}) {
        absl::Status s = PlaceTensor(t, buf->get(), off);
        if (!s.ok()) return s;
        off += padded(t);
      }
    }
    kv->buffers_.push_back(*std::move(buf));
  }
  kv->pos_.assign(static_cast<size_t>(n_cells), -1);
  kv->seqs_.resize(static_cast<size_t>(n_cells));
  return kv;
}

int64_t KvCache::n_kv() const {
  for (int64_t c = n_cells() - 1; c >= 0; --c) {
    if (pos_[static_cast<size_t>(c)] >= 0) return c + 1;
  }
  return 0;
}

size_t KvCache::bytes() const {
  size_t n = 0;
  for (const auto& b : buffers_) n += b->size();
  return n;
}

bool KvCache::Has(int64_t c, int32_t seq) const {
  const auto& s = seqs_[static_cast<size_t>(c)];
  return std::find(s.begin(), s.end(), seq) != s.end();
}

void KvCache::SetSeqRange(int32_t seq, int64_t begin, int64_t end) {
  if (seq < 0) return;
  if (static_cast<size_t>(seq) >= seq_range_.size()) seq_range_.resize(static_cast<size_t>(seq) + 1, {0, -1});
  begin = std::max<int64_t>(0, begin);
  end = std::min<int64_t>(n_cells(), end);
  seq_range_[static_cast<size_t>(seq)] =
      end > begin ? std::make_pair(begin, end) : std::make_pair<int64_t, int64_t>(0, -1);
}

int64_t KvCache::LastCell(int32_t seq) {
  if (seq < 0) return -1;
  if (static_cast<size_t>(seq) >= seq_last_.size()) seq_last_.resize(static_cast<size_t>(seq) + 1, -2);
  int64_t& last = seq_last_[static_cast<size_t>(seq)];
  if (last == -2) {
    last = -1;
    for (int64_t c = n_cells() - 1; c >= 0; --c) {
      if (pos_[static_cast<size_t>(c)] >= 0 && Has(c, seq)) {
        last = c;
        break;
      }
    }
  }
  return last;
}

void KvCache::MarkStale(int32_t seq) {
  if (seq < 0) {
    std::fill(seq_last_.begin(), seq_last_.end(), -2);
  } else if (static_cast<size_t>(seq) < seq_last_.size()) {
    seq_last_[static_cast<size_t>(seq)] = -2;
  }
}

absl::StatusOr<std::vector<int32_t>> KvCache::Allocate(const std::vector<int32_t>& seq,
                                                       const std::vector<int32_t>& pos) {
  const size_t n = seq.size();
  if (static_cast<int64_t>(n) > n_cells() - used_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache full: ", n, " tokens need cells, ", n_cells() - used_, " of ", n_cells(), " free"));
  }
  // Token i takes the lowest free cell after its sequence's highest cell (so that the
  // sequence's cells ascend with its positions), else the lowest free cell, within the
  // sequence's range (the whole cache when none is set), in batch order. Cells are marked
  // as they are taken (and released again if a range runs out).
  std::vector<int32_t> idx;
  idx.reserve(n);
  std::vector<int32_t> touched;
  const auto rollback = [&] {
    for (int32_t t : idx) {
      pos_[static_cast<size_t>(t)] = -1;
      seqs_[static_cast<size_t>(t)].clear();
    }
    for (int32_t s : touched) MarkStale(s);
  };
  for (size_t i = 0; i < n; ++i) {
    std::pair<int64_t, int64_t> range(0, n_cells());
    if (seq[i] >= 0 && static_cast<size_t>(seq[i]) < seq_range_.size() &&
        seq_range_[static_cast<size_t>(seq[i])].second >= 0) {
      range = seq_range_[static_cast<size_t>(seq[i])];
    }
    const int64_t last = LastCell(seq[i]);
    int64_t c = std::max(range.first, last + 1);
    while (c < range.second && pos_[static_cast<size_t>(c)] >= 0) ++c;
    if (c >= range.second) {  // nothing free after the sequence's cells: any free cell
      c = range.first;
      while (c < range.second && pos_[static_cast<size_t>(c)] >= 0) ++c;
    }
    if (c >= range.second) {
      rollback();
      return absl::ResourceExhaustedError(absl::StrCat("KV cache full: no free cell for sequence ", seq[i],
                                                       " in its cells [", range.first, ", ", range.second, ")"));
    }
    pos_[static_cast<size_t>(c)] = pos[i];
    seqs_[static_cast<size_t>(c)] = {seq[i]};
    idx.push_back(static_cast<int32_t>(c));
    if (seq[i] >= 0) {
      touched.push_back(seq[i]);
      seq_last_[static_cast<size_t>(seq[i])] = std::max(last, c);
    }
  }
  used_ += static_cast<int64_t>(n);
  return idx;
}

void KvCache::SeqCopy(int32_t src, int32_t dst, int32_t p0, int32_t p1) {
  if (src < 0 || dst < 0 || src == dst) return;
  if (p1 < 0) p1 = std::numeric_limits<int32_t>::max();
  for (int64_t c = 0; c < n_cells(); ++c) {
    const size_t ci = static_cast<size_t>(c);
    if (pos_[ci] < p0 || pos_[ci] >= p1 || !Has(c, src) || Has(c, dst)) continue;
    seqs_[ci].push_back(dst);
  }
  MarkStale(dst);
}

bool KvCache::SeqCopyKeepsOrder(int32_t src, int32_t dst, int32_t p0, int32_t p1) const {
  if (p1 < 0) p1 = std::numeric_limits<int32_t>::max();
  int64_t last_dst = -1, first_src = n_cells();
  for (int64_t c = 0; c < n_cells(); ++c) {
    const size_t ci = static_cast<size_t>(c);
    if (pos_[ci] < 0) continue;
    if (Has(c, dst)) last_dst = c;
    if (first_src == n_cells() && pos_[ci] >= p0 && pos_[ci] < p1 && Has(c, src)) first_src = c;
  }
  return first_src > last_dst;
}

int64_t KvCache::SeqCells(int32_t seq) const {
  int64_t n = 0;
  for (int64_t c = 0; c < n_cells(); ++c) n += pos_[static_cast<size_t>(c)] >= 0 && Has(c, seq);
  return n;
}

int64_t KvCache::CellsOnlyInSeqsFrom(int32_t min_seq) const {
  int64_t n = 0;
  for (int64_t c = 0; c < n_cells(); ++c) {
    const size_t ci = static_cast<size_t>(c);
    if (pos_[ci] < 0) continue;
    n += std::all_of(seqs_[ci].begin(), seqs_[ci].end(), [&](int32_t s) { return s >= min_seq; });
  }
  return n;
}

void KvCache::SeqRemove(int32_t seq, int32_t p0, int32_t p1) {
  if (p1 < 0) p1 = std::numeric_limits<int32_t>::max();
  for (int64_t c = 0; c < n_cells(); ++c) {
    const size_t ci = static_cast<size_t>(c);
    if (pos_[ci] < 0 || pos_[ci] < p0 || pos_[ci] >= p1) continue;
    auto& s = seqs_[ci];
    if (seq < 0) {
      s.clear();
    } else {
      s.erase(std::remove(s.begin(), s.end(), seq), s.end());
    }
    if (s.empty()) {
      pos_[ci] = -1;
      --used_;
    }
  }
  MarkStale(seq);
}

int32_t KvCache::SeqPosMax(int32_t seq) const {
  int32_t m = -1;
  for (int64_t c = 0; c < n_cells(); ++c) {
    if (pos_[static_cast<size_t>(c)] >= 0 && Has(c, seq)) m = std::max(m, pos_[static_cast<size_t>(c)]);
  }
  return m;
}

void KvCache::Clear() {
  std::fill(pos_.begin(), pos_.end(), -1);
  for (auto& s : seqs_) s.clear();
  std::fill(seq_last_.begin(), seq_last_.end(), -1);
  used_ = 0;
}

void KvCache::FreeCells(const std::vector<int32_t>& idx) {
  for (int32_t c : idx) {
    const size_t ci = static_cast<size_t>(c);
    if (c < 0 || c >= n_cells() || pos_[ci] < 0) continue;
    pos_[ci] = -1;
    seqs_[ci].clear();
    --used_;
  }
  MarkStale(-1);
}

void KvCache::FillMask(const std::vector<int32_t>& seq, const std::vector<int32_t>& pos, int64_t n_kv, float* mask,
                       bool alibi) const {
  const float ninf = -std::numeric_limits<float>::infinity();
  // The tokens of one sequence (a prompt chunk) differ only in position: the cells of
  // every sequence of the batch are collected in one pass over the cells (a cell of a
  // prefix that many sequences share lists them all), not one pass per sequence.
  // Sequence ids are small (slots and cached prefixes), so a dense table finds a batch
  // sequence's list.
  int32_t max_seq = -1;
  for (int32_t s : seq) max_seq = std::max(max_seq, s);
  std::vector<int32_t> list_of(static_cast<size_t>(max_seq + 1), -1);
  std::vector<std::vector<int32_t>> cells_of;
  for (int32_t s : seq) {
    if (s >= 0 && list_of[static_cast<size_t>(s)] < 0) {
      list_of[static_cast<size_t>(s)] = static_cast<int32_t>(cells_of.size());
      cells_of.emplace_back();
    }
  }
  for (int64_t c = 0; c < n_kv; ++c) {
    const size_t ci = static_cast<size_t>(c);
    if (pos_[ci] < 0) continue;
    for (int32_t s : seqs_[ci]) {
      if (s >= 0 && s <= max_seq && list_of[static_cast<size_t>(s)] >= 0) {
        cells_of[static_cast<size_t>(list_of[static_cast<size_t>(s)])].push_back(static_cast<int32_t>(c));
      }
    }
  }
  const std::vector<int32_t> none;
  for (size_t t = 0; t < seq.size(); ++t) {
    const std::vector<int32_t>& cells =
        seq[t] >= 0 ? cells_of[static_cast<size_t>(list_of[static_cast<size_t>(seq[t])])] : none;
    float* row = mask + t * static_cast<size_t>(n_kv);
    std::fill(row, row + n_kv, ninf);
    for (int32_t c : cells) {
      const int32_t p = pos_[static_cast<size_t>(c)];
      if (p <= pos[t]) row[c] = alibi ? -std::fabs(static_cast<float>(pos[t] - p)) : 0.0f;
    }
  }
}

}  // namespace herd::engine
