#include "libs/backend/sched.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"
#include "libs/tensor/graph_alloc.h"

namespace herd {
namespace {

Tensor* Root(Tensor* t) { return t->view_src != nullptr ? t->view_src : t; }

// The buffer holding t's bytes (a view's root's), or nullptr for host memory outside
// any buffer (weights read straight from a file mapping).
const Buffer* BufferOf(const Tensor* t) {
  if (t->buffer != nullptr) return t->buffer;
  return t->view_src != nullptr ? t->view_src->buffer : nullptr;
}

constexpr size_t kAlign = 256;  // every backend's alignment divides this

size_t AlignUp(size_t n) { return (n + kAlign - 1) & ~(kAlign - 1); }

}  // namespace

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(std::vector<std::unique_ptr<Backend>> backends) {
  return Create(std::move(backends), 0);
}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(std::vector<std::unique_ptr<Backend>> backends,
                                                             size_t memory_backend) {
  if (backends.empty()) return absl::InvalidArgumentError("scheduler: no backends");
  if (memory_backend >= backends.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler: memory backend ", memory_backend, " of ", backends.size(), " backends"));
  }
  for (const auto& b : backends) {
    if (b == nullptr) return absl::InvalidArgumentError("scheduler: null backend");
    if (kAlign % b->default_buffer_type()->alignment() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("scheduler: backend ", b->name(), " needs alignment ", b->default_buffer_type()->alignment()));
    }
  }
  if (!backends.back()->default_buffer_type()->is_host()) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler: the last backend (", backends.back()->name(), ") must compute in host memory"));
  }
  std::unique_ptr<Scheduler> s(new Scheduler(std::move(backends), memory_backend));
  s->arenas_.resize(s->backends_.size());
  s->copies_.resize(s->backends_.size());
  return s;
}

std::string Scheduler::name() const { return backends_[0]->name(); }
DeviceInfo Scheduler::device() const { return backends_[0]->device(); }
BufferType* Scheduler::default_buffer_type() { return backends_[memory_]->default_buffer_type(); }

absl::Status Scheduler::SetLayerPlacement(std::vector<size_t> backend_of) {
  if (backend_of.size() < 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer placement: ", backend_of.size(), " entries; want n_layer + 2 (input, layers, output)"));
  }
  for (size_t i = 0; i < backend_of.size(); ++i) {
    if (backend_of[i] >= backends_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer placement: entry ", i, " names backend ", backend_of[i], " of ", backends_.size()));
    }
  }
  backend_of_ = std::move(backend_of);
  return absl::OkStatus();
}

BufferType* Scheduler::layer_buffer_type(int64_t il, int64_t n_layer) {
  if (backend_of_.empty() || n_layer + 2 != static_cast<int64_t>(backend_of_.size()) || il < -1 || il > n_layer) {
    return default_buffer_type();
  }
  return backends_[backend_of_[static_cast<size_t>(il + 1)]]->default_buffer_type();
}

bool Scheduler::Pins(const BufferType* buft) const {
  if (buft == nullptr) return false;
  if (!buft->is_host() || buft == backends_[memory_]->default_buffer_type()) return true;
  for (size_t b : backend_of_) {
    if (backends_[b]->default_buffer_type() == buft) return true;
  }
  return false;
}

absl::Status Scheduler::PrepareWeights(const std::vector<Tensor*>& weights) {
  // Each weight goes to the owner of its memory (the backend that computes with it),
  // when that backend can use it.
  std::vector<std::vector<Tensor*>> mine(backends_.size());
  for (Tensor* w : weights) {
    const Buffer* buf = BufferOf(w);
    if (buf == nullptr) continue;
    const size_t owner = OwnerOf(buf->type());
    if (backends_[owner]->CanUseBufferType(buf->type())) mine[owner].push_back(w);
  }
  // Each backend that holds some gets the whole list and prepares those in its memory: the
  // others still tell it about the model (the CPU packs token_embd for the logits only when
  // no output.weight exists anywhere, not when the output layer is on another backend).
  for (size_t b = 0; b < backends_.size(); ++b) {
    if (mine[b].empty()) continue;
    if (absl::Status s = backends_[b]->PrepareWeights(weights); !s.ok()) return s;
  }
  return absl::OkStatus();
}
bool Scheduler::CanUseBufferType(const BufferType* buft) const {
  for (const auto& b : backends_) {
    if (b->CanUseBufferType(buft)) return true;
  }
  return false;
}

size_t Scheduler::OwnerOf(const BufferType* buft) const {
  if (buft != nullptr) {
    for (size_t i = 0; i < backends_.size(); ++i) {
      if (backends_[i]->default_buffer_type() == buft) return i;
    }
  }
  return backends_.size() - 1;  // host memory: the CPU
}

size_t Scheduler::OwnerOfTensor(const Tensor* t) const {
  const Buffer* b = BufferOf(t);
  return OwnerOf(b != nullptr ? b->type() : nullptr);
}

absl::Status Scheduler::SetTensor(Tensor* t, const void* data, size_t offset, size_t size) {
  return backends_[OwnerOfTensor(t)]->SetTensor(t, data, offset, size);
}

absl::Status Scheduler::GetTensor(const Tensor* t, void* data, size_t offset, size_t size) {
  return backends_[OwnerOfTensor(t)]->GetTensor(t, data, offset, size);
}

absl::Status Scheduler::CopyTensor(const Tensor* src, Tensor* dst) {
  const size_t a = OwnerOfTensor(src), b = OwnerOfTensor(dst);
  if (a == b) return backends_[a]->CopyTensor(src, dst);
  if (src->nbytes() != dst->nbytes() || src->type != dst->type) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot copy '", src->name, "' into '", dst->name, "': type or size differ"));
  }
  std::vector<uint8_t> host(src->nbytes());
  if (absl::Status s = backends_[a]->GetTensor(src, host.data(), 0, host.size()); !s.ok()) return s;
  if (absl::Status s = backends_[a]->Synchronize(); !s.ok()) return s;
  return backends_[b]->SetTensor(dst, host.data(), 0, host.size());
}

absl::Status Scheduler::Synchronize() {
  for (const auto& b : backends_) {
    if (absl::Status s = b->Synchronize(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Scheduler::CheckDevice() {
  absl::Status first = absl::OkStatus();
  for (const auto& b : backends_) {
    absl::Status s = b->CheckDevice();
    if (absl::IsDataLoss(s) && !absl::IsDataLoss(first)) {
      first = s;
    } else if (!s.ok() && first.ok()) {
      first = s;
    }
  }
  return first;
}

bool Scheduler::SupportsOp(const Tensor& node) const {
  for (const auto& b : backends_) {
    if (b->SupportsOp(node)) return true;
  }
  return false;
}

absl::Status Scheduler::Grow(std::vector<std::unique_ptr<Buffer>>& bufs, size_t i, size_t bytes) {
  if (bytes == 0 || (bufs[i] != nullptr && bufs[i]->size() >= bytes)) return absl::OkStatus();
  bufs[i].reset();  // free first: device memory may not hold both
  absl::StatusOr<std::unique_ptr<Buffer>> b = backends_[i]->default_buffer_type()->Allocate(bytes);
  if (!b.ok()) return b.status();
  bufs[i] = *std::move(b);
  return absl::OkStatus();
}

// One GraphCompute call's working state, filled phase by phase.
struct Scheduler::GraphRun {
  // A maximal run of compute nodes on one backend.
  struct Split {
    size_t backend;
    std::vector<Tensor*> nodes;
  };
  // An input a split copies into its backend's memory.
  struct Copy {
    Tensor* src;
    Tensor header;  // the copy, in the split backend's memory
    size_t offset;
  };
  std::unordered_map<const Tensor*, size_t> where;  // compute node -> backend
  std::vector<Split> splits;
  std::vector<std::vector<Copy>> copies;  // per split
  std::vector<size_t> copy_bytes;         // per backend
  // Nodes read by another split, kept alive for the whole graph (never reused), with
  // their is_output before.
  std::vector<std::pair<Tensor*, bool>> kept;
};

size_t Scheduler::MemoryOf(const GraphRun& run, Tensor* t) const {
  Tensor* r = Root(t);
  auto it = run.where.find(r);
  return it != run.where.end() ? it->second : OwnerOfTensor(r);
}

absl::Status Scheduler::AssignBackends(const std::vector<Tensor*>& nodes, GraphRun& run) {
  const size_t nb = backends_.size();
  // The backend holding a weight (a leaf in a buffer, not a graph input) that n reads,
  // when it can compute n; nb if none.
  const auto weight_pin = [&](const Tensor* n) {
    for (const Tensor* s : n->src) {
      if (s == nullptr) continue;
      const Tensor* r = Root(const_cast<Tensor*>(s));
      const Buffer* buf = BufferOf(s);
      if (r->op != Op::kNone || r->is_input || buf == nullptr || !Pins(buf->type())) continue;
      const size_t owner = OwnerOf(buf->type());
      if (backends_[owner]->SupportsOp(*n)) return owner;
    }
    return nb;
  };
  // The backend of the last weight-pinned node; before the first, the first's.
  size_t last_pinned = nb;
  for (const Tensor* n : nodes) {
    if (n->op == Op::kView || n->op == Op::kSetRows) continue;
    if ((last_pinned = weight_pin(n)) != nb) break;
  }
  for (Tensor* n : nodes) {
    if (n->op == Op::kView) continue;
    size_t pick = nb;
    if (n->op == Op::kSetRows) {  // a write into a buffer: only its owner can do it
      pick = MemoryOf(run, n->src[0]);
      if (!backends_[pick]->SupportsOp(*n)) {
        return absl::UnimplementedError(absl::StrCat("scheduler: ", backends_[pick]->name(), " owns the buffer '",
                                                     n->src[0]->name, "' that ", OpName(n->op), " node '", n->name,
                                                     "' writes, but cannot compute it"));
      }
    }
    if (pick == nb && (pick = weight_pin(n)) != nb) last_pinned = pick;
    // Else where the last weight-pinned node ran (ggml_backend_sched's expansion): a
    // layer's unweighted ops (norms, rope, attention, activations) stay with its weights.
    if (pick == nb && last_pinned != nb && backends_[last_pinned]->SupportsOp(*n)) pick = last_pinned;
    for (size_t b = 0; pick == nb && b < nb; ++b) {
      if (backends_[b]->SupportsOp(*n)) pick = b;
    }
    if (pick == nb) {
      return absl::UnimplementedError(absl::StrCat("no backend supports ", OpName(n->op), " for node '", n->name, "'"));
    }
    run.where[n] = pick;
    stats_.nodes_per_backend[pick]++;
  }
  return absl::OkStatus();
}

void Scheduler::MakeSplits(const std::vector<Tensor*>& nodes, GraphRun& run) {
  for (Tensor* n : nodes) {
    if (n->op == Op::kView) continue;
    if (run.splits.empty() || run.splits.back().backend != run.where[n]) {
      run.splits.push_back(GraphRun::Split{run.where[n], {}});
    }
    run.splits.back().nodes.push_back(n);
  }
  stats_.n_splits = static_cast<int>(run.splits.size());
}

void Scheduler::FindCopies(GraphRun& run) {
  const size_t nb = backends_.size();
  run.copies.assign(run.splits.size(), {});
  run.copy_bytes.assign(nb, 0);
  for (size_t si = 0; si < run.splits.size(); ++si) {
    const GraphRun::Split& split = run.splits[si];
    const size_t b = split.backend;
    for (Tensor* n : split.nodes) {
      for (Tensor* s : n->src) {
        if (s == nullptr) continue;
        Tensor* r = Root(s);
        auto it = run.where.find(r);
        const bool other_split =
            it != run.where.end() &&
            (it->second != b || std::find(split.nodes.begin(), split.nodes.end(), r) == split.nodes.end());
        if (other_split && !r->is_output) {
          run.kept.emplace_back(r, r->is_output);
          r->is_output = true;
        }
        const size_t mem = MemoryOf(run, s);
        const Buffer* buf = it != run.where.end() ? nullptr : BufferOf(r);
        const BufferType* buft =
            it != run.where.end() ? backends_[mem]->default_buffer_type() : (buf != nullptr ? buf->type() : nullptr);
        const bool usable = buft == nullptr ? backends_[b]->CanUseBufferType(backends_[nb - 1]->default_buffer_type())
                                            : backends_[b]->CanUseBufferType(buft);
        if (usable) continue;
        bool seen = false;
        for (const GraphRun::Copy& c : run.copies[si]) seen |= c.src == s;
        if (seen) continue;
        GraphRun::Copy c{s, *s, run.copy_bytes[b]};
        run.copy_bytes[b] += AlignUp(s->nbytes());
        run.copies[si].push_back(c);
      }
    }
  }
}

absl::Status Scheduler::PlaceTensors(const std::vector<Tensor*>& nodes, GraphRun& run) {
  const size_t nb = backends_.size();
  absl::Status status = absl::OkStatus();
  for (size_t b = 0; b < nb && status.ok(); ++b) {
    std::vector<Tensor*> mine;
    for (Tensor* n : nodes) {
      if (n->op != Op::kView && run.where[n] == b) mine.push_back(n);
    }
    if (mine.empty()) continue;
    std::unique_ptr<Graph> sub = Graph::Placed(mine);
    GraphPlan plan = PlanGraph(*sub, kAlign);
    status = Grow(arenas_, b, plan.arena_size);
    if (!status.ok()) break;
    if (plan.arena_size == 0) continue;
    ApplyPlan(plan, *sub, arenas_[b]->base());
    for (Tensor* t : plan.tensors) t->buffer = arenas_[b].get();
  }
  for (auto& [t, was] : run.kept) t->is_output = was;
  if (!status.ok()) return status;
  for (Tensor* n : nodes) {
    if (n->view_src != nullptr) {
      n->data = static_cast<uint8_t*>(n->view_src->data) + n->view_offs;
      n->buffer = n->view_src->buffer;
    }
  }
  for (size_t b = 0; b < nb; ++b) {
    if (absl::Status s = Grow(copies_, b, run.copy_bytes[b]); !s.ok()) return s;
  }
  for (size_t si = 0; si < run.splits.size(); ++si) {
    const size_t b = run.splits[si].backend;
    for (GraphRun::Copy& c : run.copies[si]) {
      Tensor& h = c.header;
      h.op = Op::kNone;
      for (Tensor*& s : h.src) s = nullptr;
      h.view_src = nullptr;
      h.view_offs = 0;
      h.buffer = copies_[b].get();
      h.data = static_cast<uint8_t*>(copies_[b]->base()) + c.offset;
      h.name = absl::StrCat(c.src->name, "#", backends_[b]->name());
    }
  }
  return absl::OkStatus();
}

absl::Status Scheduler::RunSplits(GraphRun& run) {
  std::vector<uint8_t> host;
  for (size_t si = 0; si < run.splits.size(); ++si) {
    GraphRun::Split& sp = run.splits[si];
    Backend* be = backends_[sp.backend].get();
    for (GraphRun::Copy& c : run.copies[si]) {
      const size_t from = MemoryOf(run, c.src);
      const size_t bytes = c.src->nbytes();
      host.resize(bytes);
      // GetTensor waits for the work queued before it (the split that computed c.src).
      if (absl::Status s = backends_[from]->GetTensor(c.src, host.data(), 0, bytes); !s.ok()) return s;
      if (absl::Status s = be->SetTensor(&c.header, host.data(), 0, bytes); !s.ok()) return s;
      stats_.n_copies++;
      stats_.bytes_copied += bytes;
    }
    std::vector<std::pair<Tensor**, Tensor*>> rewired;
    for (Tensor* n : sp.nodes) {
      for (Tensor*& s : n->src) {
        for (GraphRun::Copy& c : run.copies[si]) {
          if (s == c.src) {
            rewired.emplace_back(&s, s);
            s = &c.header;
            break;
          }
        }
      }
    }
    std::unique_ptr<Graph> part = Graph::Placed(sp.nodes);
    absl::Status s = be->GraphCompute(*part);  // may only be queued: synchronized below
    for (auto& [slot, orig] : rewired) *slot = orig;
    if (!s.ok()) return s;
  }
  // Not synchronized here: the caller does (Backend::Synchronize; the engine after queuing
  // the read of its results), so a lazy backend (remote) sends its last split's inputs and
  // compute together with that read, in one round trip.
  return absl::OkStatus();
}

absl::Status Scheduler::GraphCompute(Graph& g) {
  if (g.placed()) return absl::InvalidArgumentError("scheduler: the graph is already placed");
  const std::vector<Tensor*>& nodes = g.nodes();
  stats_ = SchedStats();
  stats_.nodes_per_backend.assign(backends_.size(), 0);
  GraphRun run;
  HERD_RETURN_IF_ERROR(AssignBackends(nodes, run));
  MakeSplits(nodes, run);
  FindCopies(run);
  HERD_RETURN_IF_ERROR(PlaceTensors(nodes, run));
  return RunSplits(run);
}

std::vector<size_t> LayerPlacementFromSplit(int64_t n_layer, const std::vector<double>& proportions,
                                            const std::vector<size_t>& backend_index) {
  const size_t nd = backend_index.size();
  if (nd == 0 || n_layer < 0 || (!proportions.empty() && proportions.size() != nd)) return {};
  std::vector<double> cum(nd);
  double total = 0;
  for (size_t i = 0; i < nd; ++i) {
    const double p = proportions.empty() ? 1.0 : proportions[i];
    if (!(p >= 0)) return {};
    total += p;
    cum[i] = total;
  }
  if (!(total > 0)) return {};
  for (double& c : cum) c /= total;
  std::vector<size_t> out;
  out.reserve(static_cast<size_t>(n_layer) + 2);
  out.push_back(backend_index.front());
  for (int64_t il = 0; il < n_layer; ++il) {
    // llama.cpp (llama_model::load_tensors): the first device whose cumulative share
    // exceeds il / n_layer.
    const double at = static_cast<double>(il) / static_cast<double>(n_layer);
    const size_t d = static_cast<size_t>(std::upper_bound(cum.begin(), cum.end(), at) - cum.begin());
    out.push_back(backend_index[std::min(d, nd - 1)]);
  }
  out.push_back(backend_index.back());
  return out;
}

}  // namespace herd
