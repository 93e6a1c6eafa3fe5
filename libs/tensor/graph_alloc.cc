#include "libs/tensor/graph_alloc.h"

#include <algorithm>
#include <unordered_map>

namespace herd {
namespace {

Tensor* Root(Tensor* t) { return t->view_src ? t->view_src : t; }

bool OwnsMemory(const Tensor* t) { return t->op != Op::kNone && t->view_src == nullptr; }

// First-fit free list with coalescing over [0, top).
class Arena {
 public:
  explicit Arena(size_t align) : align_(align) {}
  size_t Alloc(size_t size) {
    size = (size + align_ - 1) & ~(align_ - 1);
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].second >= size && (best == free_.size() || free_[i].second < free_[best].second)) best = i;
    }
    if (best != free_.size()) {
      size_t off = free_[best].first;
      free_[best].first += size;
      free_[best].second -= size;
      if (free_[best].second == 0) free_.erase(free_.begin() + static_cast<long>(best));
      return off;
    }
    // Grow: merge with a free block that ends at top.
    if (!free_.empty() && free_.back().first + free_.back().second == top_) {
      size_t off = free_.back().first;
      free_.pop_back();
      top_ = off + size;
      peak_ = std::max(peak_, top_);
      return off;
    }
    size_t off = top_;
    top_ += size;
    peak_ = std::max(peak_, top_);
    return off;
  }
  void Free(size_t off, size_t size) {
    size = (size + align_ - 1) & ~(align_ - 1);
    auto it = std::lower_bound(free_.begin(), free_.end(), std::make_pair(off, size_t{0}));
    it = free_.insert(it, {off, size});
    size_t i = static_cast<size_t>(it - free_.begin());
    if (i + 1 < free_.size() && free_[i].first + free_[i].second == free_[i + 1].first) {
      free_[i].second += free_[i + 1].second;
      free_.erase(free_.begin() + static_cast<long>(i) + 1);
    }
    if (i > 0 && free_[i - 1].first + free_[i - 1].second == free_[i].first) {
      free_[i - 1].second += free_[i].second;
      free_.erase(free_.begin() + static_cast<long>(i));
    }
  }
  size_t peak() const { return peak_; }

 private:
  size_t align_;
  size_t top_ = 0, peak_ = 0;
  std::vector<std::pair<size_t, size_t>> free_;  // sorted by offset
};

}  // namespace

GraphPlan PlanGraph(const Graph& ctx, size_t alignment) {
  GraphPlan plan;
  const std::vector<Tensor*>& nodes = ctx.nodes();
  // Remaining readers per memory-owning node (reads through views count for the root).
  std::unordered_map<Tensor*, int> readers;
  for (Tensor* n : nodes) {
    if (n->op == Op::kView) continue;
    for (Tensor* s : n->src) {
      if (s != nullptr) readers[Root(s)]++;
    }
  }
  Arena arena(alignment);
  std::unordered_map<Tensor*, size_t> offset;
  for (Tensor* n : nodes) {
    if (OwnsMemory(n)) {
      size_t off = arena.Alloc(n->nbytes());
      offset[n] = off;
      plan.tensors.push_back(n);
      plan.offsets.push_back(off);
    }
    if (n->op == Op::kView) continue;
    for (Tensor* s : n->src) {
      if (s == nullptr) continue;
      Tensor* r = Root(s);
      if (--readers[r] == 0 && OwnsMemory(r) && !r->is_output && offset.count(r)) {
        arena.Free(offset[r], r->nbytes());
      }
    }
    // A node nobody reads and that is not an output still needs its memory until now only.
    if (OwnsMemory(n) && readers[n] == 0 && !n->is_output) arena.Free(offset[n], n->nbytes());
  }
  plan.arena_size = arena.peak();
  return plan;
}

void ApplyPlan(const GraphPlan& plan, const Graph& ctx, void* base) {
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    plan.tensors[i]->data = static_cast<uint8_t*>(base) + plan.offsets[i];
  }
  for (Tensor* n : ctx.nodes()) {
    if (n->view_src != nullptr) n->data = static_cast<uint8_t*>(n->view_src->data) + n->view_offs;
  }
}

}  // namespace herd
